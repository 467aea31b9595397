#!/bin/bash
# v65 run 4, one GPU, about 5 minutes: run 3 again (M, SC) with SC2 and SC3.
# SC = step-in-combine.patch (one node's combine runs its step agreement inside the combine kernel: one host launch and one kernel
# boundary fewer). Run 2's host points: the step kernel's launch call took 3.1-4.9 us of host
# time and the combine kernel's 2.6-3.9 more, so at 128 tokens the combine waits for the second
# launch. Predicted: 2-3 us off the 128-token combine, 0.5-1.5 (the boundary) at 1024 and 4096.
# Run 3 (one H100): SC lost 0.5-1.3 us at 1024 and 4096 tokens and gained nothing clear at 128.
# A guess: every block's thread polls the step word with acquire loads (count_kernel: one
# thread). SC2 = step-in-combine-relaxed.patch (relaxed polls, one fence once the word is in),
# SC3 = step-in-combine-sleep.patch (SC2 with a 100 ns sleep between polls).
# Normal mode at 32 SMs, 128 / 1024 / 4096 tokens, bf16 dispatch with a bf16 combine and fp8
# with fp8, alternating, ROUNDS rounds (default 2).
#   bash docs/results/v65-one-gpu/run4.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
V=docs/results/v65-one-gpu
rm -rf tmp-gpu
for v in SC SC2 SC3; do mkdir -p tmp-gpu/$v && tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/SC && patch -p1 -s < ../../$V/step-in-combine.patch) || exit 1
(cd tmp-gpu/SC2 && patch -p1 -s < ../../$V/step-in-combine-relaxed.patch) || exit 1
(cd tmp-gpu/SC3 && patch -p1 -s < ../../$V/step-in-combine-sleep.patch) || exit 1
for v in M SC SC2 SC3; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  (cd $b && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
    cmake --build build/gpu -j4 --target moe-ep > $OUT/build-$v.log 2>&1 &&
    rm $OUT/build-$v.log) || echo "build $v failed" &
done
wait
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --iters 50 --warmup 10"
for r in $(seq ${ROUNDS:-2}); do for v in M SC SC2 SC3; do
  b=tmp-gpu/$v; [ $v = M ] && b=.
  echo "== $v round $r"
  timeout 60 $b/build/gpu/tools/moe-ep $B --dispatch-dtype bf16 --combine-dtype bf16
  timeout 60 $b/build/gpu/tools/moe-ep $B --dispatch-dtype fp8 --combine-dtype fp8
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/normal.log | tee $OUT/run.txt
t end
