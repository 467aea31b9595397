#!/bin/bash
# run A (v48): the decode combine's slots from a shared-memory table, and bf16's round trip as
# three integer operations a pair (slot-table.patch, the working tree), against main (the tree
# without the patch). ncu (v47 run E): ll_combine<bf16> at 128 tokens runs 2.13 M warp
# instructions, 2377 an item, against 768 for its products, sums and conversions; pre-v47 SASS
# counts (run P) put about 27 instructions a slot and warp step into the slot's row and weight
# (shuffles, tests, a 64-bit product) and about 70 a step into the bf16 round trip. Predicted:
# 1.3-1.5 M instructions; the combines 1-2 us faster at 128 tokens, 2-4 at 256 (ll_combine
# issues in half its cycles); dispatches level. Then the decode tests and the new format test.
#   bash docs/results/v48-one-h200/runA.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v48-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/main && tar -c $SRC | tar -x -C tmp-gpu/main
(cd tmp-gpu/main && patch -R -p1 -s < ../../$R/slot-table.patch) || exit 1
(cd tmp-gpu/main && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j5 --target moe-ep > ../build-main.log 2>&1 || echo "build main failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j11 > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype all"
for r in 1 2 3; do for v in tmp-gpu/main .; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
# ll_combine alone at 128 tokens (the 9th launch: steady state), each tree, bf16 and fp8 blockwise.
S="--section LaunchStats --section SpeedOfLight --section InstructionStats --section SchedulerStats --clock-control none --cache-control none -k regex:ll_combine_kernel -s 8 -c 1"
for v in tmp-gpu/main .; do for c in bf16 fp8; do
  echo "== $v $c"
  timeout 60 ncu $S $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 128 \
    --iters 10 --warmup 2 --decode-graph round --dispatch-dtype fp8 --combine-dtype $c 2>&1 |
    grep -E "  Duration|Executed Instructions  |Issue Slots Busy|Registers Per|Grid Size|Shared Memory Configuration Size|Static Shared"
done; done > $OUT/ncu.log 2>&1
cat $OUT/ncu.log
t ncu
MOE_EP_TIMEOUT_S=10 timeout $((590 - $(date +%s) + T0)) ctest --test-dir build/gpu -L gpu \
  -R 'LowLatency|LateRank|python_gpu|Bf16PlusZero' --output-on-failure --timeout 90 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/tests.log | head -30
t end
