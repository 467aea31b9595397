#!/bin/bash
# Prepared in v39 for the next session, NOT RUN YET. K = main + next-decode-combine-l1-prefetch.patch:
# a decode combine item (a slice of a token's row, 4 warp steps at 128-256 tokens) asks L1 for the
# lines of its first 8 slots' rows of y past its first step before it sums them a step at a time
# (the own part's reduce and the sends alike). v25 run G: each item's 4 steps wait for HBM in
# turn (long scoreboard 44%); v25 run J's L2 prefetch of the slice gained nothing, but so did the
# dispatch's L2 prefetch before its L1 one gained 2-7 us (v39). ptxas: no new spill but the
# in-place direct-cast instantiation (0 -> 24 bytes). Predicted: the bf16 decode combine at 128
# tokens 15.5-16.6 -> 13-15 us, at 256 26-27 -> 23-26; nothing at 1 and 32 tokens (an item is one
# warp step there). Decode bench of M and K, every combine after an fp8 dispatch, two rounds, then
# K's decode tests (test_gpu_low_latency*, every pair bit-exact, graph replays). About 6 minutes.
#   bash docs/results/v39-one-h200/next-runJ.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/K && tar -c $SRC | tar -x -C tmp-gpu/K
(cd tmp-gpu/K && patch -p1 -s < ../../docs/results/v39-one-h200/next-decode-combine-l1-prefetch.patch &&
  cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j10 --target moe-ep test_gpu_low_latency test_gpu_low_latency_shapes \
    test_gpu_low_latency_nodes > $OUT/build-K.log 2>&1 || echo "build K failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j6 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
cat $OUT/build-K.log >> $OUT/build.log; rm -f $OUT/build-K.log
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype all --iters 200 --warmup 20"
for r in 1 2; do for v in . tmp-gpu/K; do
  echo "== $v round $r"; timeout 60 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log | cut -c1-60
t bench
for b in test_gpu_low_latency test_gpu_low_latency_shapes test_gpu_low_latency_nodes; do
  BT=$(find tmp-gpu/K/build/gpu -name $b -type f | head -1)
  MOE_EP_VALIDATE=1 MOE_EP_TIMEOUT_S=10 timeout 120 $BT >> $OUT/tests-K.log 2>&1; echo "$b rc $?"
done
grep -E "PASSED|FAILED" $OUT/tests-K.log | head
t end
