#!/bin/bash
# v45 run M: a one-node decode dispatch's counts, flags and metadata stored by its step kernel
# right after the verdict (next-meta-in-step.patch, tree M), not by ll_send after its wait for
# the step kernel. Run P's points (one token, fp8): the send's wait returned 0.9 us after the
# step kernel's last exit, its error check 0.9 us later, and its counts and metadata (a reload of
# the slot ranks, then the stores) took 2.4 us more before its done word; at 128 tokens 2.0 us.
# In the step kernel they follow the verdict with the ranks just written by the same block.
# Predicted: 1-2 us off the one-token dispatch, 0-1 us at 32-256 tokens (the step kernel's one
# block stores what the send's blocks stored in parallel). ptxas: no spills, the send kernels
# 3-8 registers fewer (no first metadata item held), the step kernel at 64 as before.
# 1. The decode bench, main / M alternating, 3 rounds. 2. M's decode tests (W = 1 and the
# one-GPU world's W = 2/4/8, graphs, hooks, nodes, late rank, timeouts).
#   bash docs/results/v45-one-h200/runM.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
TESTS="test_gpu_low_latency test_gpu_low_latency_shapes test_gpu_agreement test_gpu_world test_gpu_late_rank test_gpu_low_latency_nodes test_gpu_timeouts"
rm -rf tmp-gpu && mkdir -p tmp-gpu/M && tar -c $SRC | tar -x -C tmp-gpu/M
(cd tmp-gpu/M && patch -p1 -s < ../../docs/results/v45-one-h200/next-meta-in-step.patch) || exit 1
(cd tmp-gpu/M && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j11 --target moe-ep $TESTS > ../build-M.log 2>&1 || echo "build M failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j5 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
tail -n 3 tmp-gpu/build-M.log >> $OUT/build.log
grep -B2 -A6 "error" tmp-gpu/build-M.log | head -30
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --combine-dtype bf16 --dispatch-dtype all"
for r in 1 2 3; do for v in . tmp-gpu/M; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
for b in $TESTS; do
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 20 ] && { echo "$b: no time left"; continue; }
  BT=$(find tmp-gpu/M/build/gpu -name $b -type f | head -1)
  echo "== $b" >> $OUT/tests.log
  MOE_EP_TIMEOUT_S=10 timeout $left $BT >> $OUT/tests.log 2>&1; echo "$b rc $?"
done
grep -E "^== |^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log | head -40
t end
