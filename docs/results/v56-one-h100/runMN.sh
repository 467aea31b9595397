#!/bin/bash
# v56: v55's next-runM.sh and next-runN.sh in one device call (machines were scarce: one start
# for both). Three trees: main ("."), B = main + v55's next-step-count.patch, C = B +
# v55's next-combine-early.patch.
# 1. ctest on B: -L gpu -R "$TESTS" (default 'LowLatency|LateRank|OpMemory|GpuCapture|python_gpu').
# 2. Decode bench main / B / C alternating, fp8 dispatch with a bf16 combine, rounds until
#    DEADLINE - TESTS_C_S (default 3 rounds at most).
# 3. With the time left: ctest on C, -R 'LowLatency|GpuCapture' (C changes the world-size-1 combine).
#   DEADLINE=<seconds> bash docs/results/v56-one-h100/runMN.sh     (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-560}
TESTS=${TESTS:-LowLatency|LateRank|OpMemory|GpuCapture|python_gpu}
DTYPES=${DTYPES:---dispatch-dtype fp8 --combine-dtype bf16}
TESTS_C_S=${TESTS_C_S:-110}
V55=docs/results/v55-one-h200
left() { echo $((DEADLINE - $(date +%s) + T0)); }
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/B tmp-gpu/C
tar -c $SRC | tar -x -C tmp-gpu/B && tar -c $SRC | tar -x -C tmp-gpu/C
(cd tmp-gpu/B && patch -p1 -s < ../../$V55/next-step-count.patch) || exit 1
(cd tmp-gpu/C && patch -p1 -s < ../../$V55/next-step-count.patch &&
  patch -p1 -s < ../../$V55/next-combine-early.patch) || exit 1
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j3 --target moe-ep > $OUT/build-main.log 2>&1 || echo "build main failed") &
(cd tmp-gpu/C && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j5 > $OUT/build-C.log 2>&1 || echo "build C failed") &
(cd tmp-gpu/B && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j8 > $OUT/build-B.log 2>&1) || { tail -40 $OUT/build-B.log; exit 1; }
wait
tail -n 1 $OUT/build-main.log $OUT/build-B.log $OUT/build-C.log
t built
MOE_EP_TIMEOUT_S=10 timeout $(( $(left) - 100 )) ctest --test-dir tmp-gpu/B/build/gpu -L gpu \
  -R "$TESTS" --output-on-failure --timeout 120 > $OUT/tests-B.log 2>&1
echo "ctest B rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/tests-B.log | head -30
t tests B
BENCH="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round $DTYPES"
for r in 1 2 3; do for v in . tmp-gpu/B tmp-gpu/C; do
  [ "$(left)" -lt $((TESTS_C_S + 20)) ] && break 2
  echo "== $v round $r"; timeout 40 $v/build/gpu/tools/moe-ep $BENCH
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
if [ "$(left)" -gt 40 ]; then
  MOE_EP_TIMEOUT_S=10 timeout $(( $(left) - 10 )) ctest --test-dir tmp-gpu/C/build/gpu -L gpu \
    -R 'LowLatency|GpuCapture' --output-on-failure --timeout 60 > $OUT/tests-C.log 2>&1
  echo "ctest C rc $?"
  grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/tests-C.log | head -30
fi
t end
