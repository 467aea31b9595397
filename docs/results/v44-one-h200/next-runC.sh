#!/bin/bash
# Prepared in v44, NOT RUN YET (run it after next-runP.sh, if that shows the send's fence, points
# 3 -> 5, above about 0.5 us): a block's end without every thread's system fence
# (next-release-adds.patch, tree C). count_block_done (one node's dispatch and decode send) has
# every thread fence its stores at system scope, then the barrier, then the adds; C has the barrier,
# then each add a release at system scope (red.release.sys), which by cumulativity releases what
# the barrier ordered before it, as NCCL's device-side barriers do (a block sync, then one release a
# peer). Predicted: if 16 warps' concurrent system fences cost more than one, 0.3-1 us off every
# one-node dispatch and decode dispatch; otherwise nothing. The tests below check the bits, not the
# memory model: a missing order would show as rows read before they land, rarely.
# 1. Decode bench main / C alternating (3 rounds), 2. normal mode at 128 and 4096 tokens, 32 SMs,
# 3. C's tests: decode binaries, test_gpu_backend and test_gpu_world (W = 2/4/8 on one GPU).
#   bash docs/results/v44-one-h200/next-runC.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
TESTS="test_gpu_low_latency test_gpu_low_latency_shapes test_gpu_agreement test_gpu_backend test_gpu_world"
rm -rf tmp-gpu && mkdir -p tmp-gpu/C && tar -c $SRC | tar -x -C tmp-gpu/C
(cd tmp-gpu/C && patch -p1 -s < ../../docs/results/v44-one-h200/next-release-adds.patch) || exit 1
(cd tmp-gpu/C && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 --target moe-ep $TESTS > ../build-C.log 2>&1 || echo "build C failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j6 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
tail -3 tmp-gpu/build-C.log >> $OUT/build.log
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --combine-dtype bf16 --dispatch-dtype all"
N="bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 100 --warmup 10"
for r in 1 2 3; do for v in . tmp-gpu/C; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
for r in 1 2; do for v in . tmp-gpu/C; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $N
done; done > $OUT/normal.log 2>&1
grep -E "wrong|rror" $OUT/decode.log $OUT/normal.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log; python3 tools/bench_compare.py $OUT/normal.log
t bench
for b in $TESTS; do
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 20 ] && { echo "$b: no time left"; continue; }
  BT=$(find tmp-gpu/C/build/gpu -name $b -type f | head -1)
  echo "== $b" >> $OUT/tests.log
  MOE_EP_TIMEOUT_S=10 timeout $left $BT >> $OUT/tests.log 2>&1; echo "$b rc $?"
done
grep -E "^== |^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log | head -30
t end
