#!/bin/bash
# v59 run 4 (one GPU, DEADLINE seconds, 420 by default): R = the working tree with
# receiver-early.patch applied (count_kernel's receiver gathers the senders' words beside the
# step, then waits for the step's word and stores; before, it waited for the step first);
# M = the same tree with the patch reversed (main since the notify-parts change).
# 1. Normal mode at 32 SMs, 128 and 4096 tokens, bf16 and fp8 dispatch with a bf16 combine,
#    M / R alternating, 3 rounds (tools/bench_compare.py).
# 2. R's GPU tests of normal mode and of its failures (agreement, timeouts, the one-GPU world,
#    late ranks), in what is left.
#   DEADLINE=<seconds> bash docs/results/v59-one-gpu/run4.sh      (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-420}
left() { echo $((DEADLINE - $(date +%s) + T0)); }
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/M && tar -c $SRC | tar -x -C tmp-gpu/M
(cd tmp-gpu/M && patch -R -p1 -s < ../../docs/results/v59-one-gpu/receiver-early.patch) || exit 1
(cd tmp-gpu/M && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j5 --target moe-ep > $OUT/build-M.log 2>&1 || echo "build M failed") &
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j11 > $OUT/build-R.log 2>&1) || { tail -40 $OUT/build-R.log; exit 1; }
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --iters 50 --warmup 10 --dispatch-dtype bf16,fp8 --combine-dtype bf16"
for r in 1 2 3; do for v in tmp-gpu/M .; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( $(left) - 5 )) ctest --test-dir build/gpu -L gpu \
  -R 'GpuAgreement|GpuBackend|GpuCopyEngine|SingleGpuWorld|GpuLateRank|GpuTimeout' \
  --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)|Total Test" $OUT/tests.log | head -20
tail -3 $OUT/tests.log
t end
