#!/bin/bash
# v53: v50's next-runI.sh reordered for a short device budget (this session lost most of its
# time to machines that would not start): the GPU tests first, then the benches in what is left.
# B = main + v50's next-by-warp.patch (the world-size-1 decode combine's items by warp index).
# 1. ctest on B: -L gpu -R 'LowLatency|LateRank|OpMemory|GpuCapture|python_gpu' (the first GPU
#    run of v50-v53's work: column-major scales, op memory, capture, world-size-1 decode tests).
# 2. Decode bench main / B, fp8 dispatch with bf16 and fp8 combines, rounds until the deadline.
#   DEADLINE=<seconds from start> bash docs/results/v53-one-h200/runI2.sh     (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-560}
# B_PATCH, TESTS, DTYPES: B's patch, the ctest -R of step 1 and the bench's dtype arguments
# (v54's next-runL.sh sets them for another patch).
B_PATCH=${B_PATCH:-docs/results/v50-one-h200/next-by-warp.patch}
TESTS=${TESTS:-LowLatency|LateRank|OpMemory|GpuCapture|python_gpu}
DTYPES=${DTYPES:---dispatch-dtype fp8 --combine-dtype bf16,fp8}
left() { echo $((DEADLINE - $(date +%s) + T0)); }
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/B && tar -c $SRC | tar -x -C tmp-gpu/B
(cd tmp-gpu/B && patch -p1 -s < ../../$B_PATCH) || exit 1
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > $OUT/build-main.log 2>&1 || echo "build main failed") &
(cd tmp-gpu/B && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j12 > $OUT/build-B.log 2>&1) || { tail -40 $OUT/build-B.log; exit 1; }
wait
tail -n 1 $OUT/build-main.log $OUT/build-B.log
t built
MOE_EP_TIMEOUT_S=10 timeout $(( $(left) - 100 )) ctest --test-dir tmp-gpu/B/build/gpu -L gpu \
  -R "$TESTS" --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/tests.log | head -30
t tests
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round $DTYPES"
for r in 1 2 3; do for v in . tmp-gpu/B; do
  [ "$(left)" -lt 45 ] && break 2
  echo "== $v round $r"; timeout 40 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t end
