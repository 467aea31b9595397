#!/bin/bash
# v64 (prepared in v63), one GPU, about 6 minutes:
#   M  = main (NP and the fence's removal merged)
#   S  = main + step-gpu-scope.patch: count_kernel's scan shares counted by an acquire-release add
#        after the barrier (no fence on every thread, none after the count), and the step word,
#        read only by this GPU's receiver, stored as a release at GPU scope (no __threadfence()
#        before a system-scope release). v63's count points (before NP): the step stored 2.9 us
#        after the last share's scan at 128 tokens, 0.5 us after the senders published.
#        Predicted: up to 0.5 us off at 128 tokens (the senders' publish then bounds the
#        receiver), nothing at 4096 (the step is already 3 us ahead of the publish there).
#   W  = main + wait-first.patch: the wait kernel (one node's SM path) polls the done counts
#        before its wait for the data kernel's end, not after. v63's points (before NP): the
#        wait kernel passed its wait 1.4 us after the data kernel's last block left and ended
#        1.0 us later. Predicted: 0.5-1 us off every dispatch (the counts' round trip after the
#        data kernel's end); a loss would point at the polls slowing the data kernel's stores.
#   W2 = main + wait-only.patch: W without the wait for the data kernel's end at all (decode's
#        expand does not wait for ll_send's end either). Predicted: 1-2 us off every dispatch.
#   C  = main + count-trace.patch (v59's count points ported to today's notify_send), and
#   CS = C + S (count-trace-step.patch, the two together): where the step's and the receiver's
#        time goes now, with and without S.
# 1. M against S, W and W2: normal mode at 32 SMs, 128 / 1024 / 4096 tokens, bf16 and fp8
#    dispatch with a bf16 combine, alternating, ROUNDS rounds (default 3).
# 2. C and CS: fp8 dispatch with a bf16 combine at 128 and 4096 tokens, 2 rounds, read by
#    v59's count_points.py (points: the script's docstring; p5 is now d's top part's publish).
#   bash docs/results/v64-one-gpu/run1.sh   (logs: $OUT)
# Then the tests of what won (one patch or several, applied in order):
#   bash docs/results/v64-one-gpu/test-patch.sh step-gpu-scope.patch wait-first.patch
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v64-one-gpu
rm -rf tmp-gpu && mkdir -p tmp-gpu
for v in S W W2 C CS; do mkdir -p tmp-gpu/$v && tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/S && patch -p1 -s < ../../$V/step-gpu-scope.patch) || exit 1
(cd tmp-gpu/W && patch -p1 -s < ../../$V/wait-first.patch) || exit 1
(cd tmp-gpu/W2 && patch -p1 -s < ../../$V/wait-only.patch) || exit 1
(cd tmp-gpu/C && patch -p1 -s < ../../$V/count-trace.patch) || exit 1
(cd tmp-gpu/CS && patch -p1 -s < ../../$V/count-trace-step.patch) || exit 1
for v in M S W W2 C CS; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j4 --target moe-ep > $OUT/build-$v.log 2>&1 &&
    rm $OUT/build-$v.log) || echo "build $v failed" &
done
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype bf16,fp8 --combine-dtype bf16"
for r in $(seq ${ROUNDS:-3}); do for v in M S W W2; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"; timeout 60 $b/build/gpu/tools/moe-ep $B
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t bench
for v in C CS; do for r in 1 2; do for tok in 128 4096; do
  echo "== $v $tok fp8 round $r"
  timeout 60 tmp-gpu/$v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --tokens $tok \
    --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype fp8 --combine-dtype bf16
done; done; done > $OUT/trace.log 2>&1
grep -E "wrong|rror" $OUT/trace.log | sort | uniq -c
python3 docs/results/v59-one-gpu/count_points.py $OUT/trace.log | tee $OUT/points.txt
t end
