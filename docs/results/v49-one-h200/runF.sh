#!/bin/bash
# v49 run F (one H200, about 6 minutes): two cuts of round trips from a decode dispatch's chain.
#   A (next-done-word-beside.patch): the expand loads each source's done word beside every poll
#     of its done count; the load beside the complete count is used when its tag is the step
#     (one L2 round trip fewer after the send's release).
#   AB (next-send-loads-together.patch, A plus): the send's loads after its wait for the step
#     kernel issued together before the block's barrier (the call that ran, its step, the first
#     metadata token's slot ranks, block 0's first count): two round trips fewer.
# ptxas: no new spills (send 0, expand 12 B as main). Predicted: each 0.2-0.5 us off every
# decode dispatch. 1. Decode bench main / A / AB, 3 rounds, every dispatch dtype, bf16 combine.
# 2. The decode tests on AB.
#   bash docs/results/v49-one-h200/next-runF.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v49-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/A tmp-gpu/AB
for v in A AB; do tar -c $SRC | tar -x -C tmp-gpu/$v; done
(cd tmp-gpu/A && patch -p1 -s < ../../$R/next-done-word-beside.patch) || exit 1
(cd tmp-gpu/AB && patch -p1 -s < ../../$R/next-send-loads-together.patch) || exit 1
(cd tmp-gpu/AB && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j8 > ../build-AB.log 2>&1 || echo "build AB failed") &
(cd tmp-gpu/A && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > ../build-A.log 2>&1 || echo "build A failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j4 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
tail -n 2 tmp-gpu/build-A.log tmp-gpu/build-AB.log >> $OUT/build.log
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype all --combine-dtype bf16"
for r in 1 2 3; do for v in . tmp-gpu/A tmp-gpu/AB; do
  echo "== $v round $r"; timeout 100 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $((590 - $(date +%s) + T0)) ctest --test-dir tmp-gpu/AB/build/gpu -L gpu \
  -R 'LowLatency|LateRank|python_gpu' --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/tests.log | head -30
t end
