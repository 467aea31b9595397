#!/bin/bash
# v43 run G2 (one H200): main against G, with the fix below; F and H measured in run G. Trees, built side by side:
#   .  main (v42)
#   F  + v42's next-ll-early-rows.patch: the send stores its rows before the step's verdict into
#      the stage of the call's parity; the step kernel stores the call number and fences it
#      before letting the send launch (run F: 0.4-1.2 us slower at 1-128 tokens, 1-2.7 faster at
#      256)
#   G  + next-ll-early-rows-own-call.patch: F without the step kernel's store and fence; each
#      send block takes the call number from what the same block of the previous send stored
#      after its step kernel (LowLatencyParams::sent_calls)
#   H  + next-probe-step-fence.patch: main with F's store and fence in the step kernel only
#      (a probe: is that what F's small calls pay?)
# Run G found G wrong (got 0 in slab rows, counts that changed between runs of the same inputs):
# every thread read its block's slot before its wait, but thread 0 stored the next value after
# its own wait, so a warp that reached its read late took the new value and stored its rows
# into the other parity, and only thread 0 compared the number. Fixed: the store follows
# block_sees_error's barrier, and the slot is read with a volatile load.
# Bench 3 rounds alternating; world_decode_time.py main / G at W = 2; then G's decode tests.
#   bash docs/results/v43-one-h200/runG.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
TESTS="test_layout test_gpu_low_latency test_gpu_agreement test_gpu_low_latency_shapes test_gpu_late_rank test_gpu_timeouts test_gpu_low_latency_nodes"
R=docs/results
rm -rf tmp-gpu && mkdir -p tmp-gpu
build() {  # tree patch targets jobs
  mkdir -p tmp-gpu/$1 && tar -c $SRC | tar -x -C tmp-gpu/$1
  (cd tmp-gpu/$1 && patch -p1 -s < ../../$2 && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
    cmake --build build/gpu -j$4 --target $3 > ../build-$1.log 2>&1 || echo "build $1 failed")
}
build G $R/v43-one-h200/next-ll-early-rows-own-call.patch "moe-ep moe_ep_python $TESTS" 10 &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j4 --target moe-ep moe_ep_python > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
for v in G; do echo "== $v" >> $OUT/build.log; tail -3 tmp-gpu/build-$v.log >> $OUT/build.log; grep -B2 -A12 "error" tmp-gpu/build-$v.log | head -40 >> $OUT/build.log; done
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --combine-dtype bf16"
for r in 1 2 3; do for v in . tmp-gpu/G; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B --dispatch-dtype all
done; done > $OUT/decode.log 2>&1
grep -E "^==|wrong|rror" $OUT/decode.log | paste - - | head -20
t bench
for r in 1 2; do for v in . tmp-gpu/G; do
  echo "== $v round $r"
  PYTHONPATH=$v/build/gpu/python timeout 60 python3 $R/v42-one-h200/world_decode_time.py --ranks 2 --tokens 128
done; done > $OUT/world.log 2>&1
grep -E "^==|us a call|failed|Error" $OUT/world.log
t world
for b in $TESTS; do
  left=$(( 585 - $(date +%s) + T0 )); [ $left -lt 20 ] && { echo "$b: no time left"; continue; }
  BT=$(find tmp-gpu/G/build/gpu -name $b -type f | head -1)
  MOE_EP_TIMEOUT_S=10 timeout $left $BT >> $OUT/tests-G.log 2>&1; echo "$b rc $?"
done
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests-G.log | head -20
t end
