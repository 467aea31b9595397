#!/bin/bash
# Prepared in v40 for the next session, NOT RUN YET. V = main + next-done-counts.patch: one
# node's SM-path dispatch ends without a last block. Each block, after its system fence, adds
# 1 | G << 32 (G its grid's blocks) into this rank's done count in every rank (red.relaxed.sys,
# a word per source and call parity, a new layout region); dispatch_wait_kernel waits until a
# count reads c | c * c << 32 (all G blocks in, whatever G is on each rank) and clears it for the
# call after next of that parity. The copy-engine path and several nodes keep the done words.
# v40 run L: the grid's end is 3.2-4.9 us, of which the counter round trip, the last block's
# fence and its release stores are 1.1-2.2. ptxas: every dispatch instantiation as on main.
# Predicted: 1-2 us off every one-node dispatch (128 / 1024 / 4096 tokens), nothing on decode.
# Bench main / V alternating, 3 rounds, 32 SMs; then V's GPU tests that run the dispatch on one
# node, W = 1 and the one-GPU world's W = 2/4/8 (backend, copy engine, world, timeouts, late
# rank), within the call's 600 s. If V wins, merge it and run the whole GPU suite on the tree.
#   bash docs/results/v40-one-h200/next-runV.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/V && tar -c $SRC | tar -x -C tmp-gpu/V
(cd tmp-gpu/V && patch -p1 -s < ../../docs/results/v40-one-h200/next-done-counts.patch &&
  cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 --target moe-ep test_layout test_gpu_backend test_gpu_copy_engine test_gpu_world \
    test_gpu_timeouts test_gpu_late_rank > $OUT/build-V.log 2>&1 || echo "build V failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j6 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
cat $OUT/build-V.log >> $OUT/build.log; rm -f $OUT/build-V.log
t built
B="bench --backend cuda --ranks 1 --tokens 128,1024,4096 --num-sms 32 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 20 --warmup 3"
for r in 1 2 3; do for v in . tmp-gpu/V; do
  echo "== $v round $r"; timeout 60 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log | cut -c1-60
t bench
for b in test_layout test_gpu_backend test_gpu_copy_engine test_gpu_world test_gpu_timeouts test_gpu_late_rank; do
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 20 ] && { echo "$b: no time left"; continue; }
  BT=$(find tmp-gpu/V/build/gpu -name $b -type f | head -1)
  MOE_EP_VALIDATE=1 MOE_EP_TIMEOUT_S=10 timeout $left $BT >> $OUT/tests-V.log 2>&1; echo "$b rc $?"
done
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests-V.log | head -20
t end
