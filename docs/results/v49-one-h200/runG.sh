#!/bin/bash
# v49 run G (one H200, about 8 minutes): C (next-state-beside-flag.patch) against main (run F's
# AB, merged): the expand and the decode combine load their state words (the steps, the call's
# parity) before block_sees_error, beside its load of the error flag: one round trip before each
# kernel's work, not two. ptxas: in-place ll_combine and ll_expand spills as main; the two
# hooked/multi-rank ll_combine instantiations that spilled (fp8 blockwise, int8) spill 4 B more.
# Predicted: 0.1-0.4 us off each leg. 1. Decode bench main / C, 3 rounds, fp8 dispatch, bf16 and
# fp8 combines. 2. The decode tests on C, then as much of the rest of the GPU suite as fits (it
# covers main's run F change outside decode mode: wait_field's new default argument).
#   bash docs/results/v49-one-h200/next-runG.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
R=docs/results/v49-one-h200
rm -rf tmp-gpu && mkdir -p tmp-gpu/C && tar -c $SRC | tar -x -C tmp-gpu/C
(cd tmp-gpu/C && patch -p1 -s < ../../$R/next-state-beside-flag.patch) || exit 1
(cd tmp-gpu/C && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j12 > ../build-C.log 2>&1 || echo "build C failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1
cmake --build build/gpu -j4 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
tail -n 2 tmp-gpu/build-C.log >> $OUT/build.log
t built
B="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16,fp8"
for r in 1 2 3; do for v in . tmp-gpu/C; do
  echo "== $v round $r"; timeout 60 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/decode.log 2>&1
grep -E "wrong|rror" $OUT/decode.log | sort | uniq -c
python3 tools/bench_compare.py $OUT/decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $((480 - $(date +%s) + T0)) ctest --test-dir tmp-gpu/C/build/gpu -L gpu \
  -R 'LowLatency|LateRank|python_gpu' --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest decode rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/tests.log | head -30
t decode tests
# The rest of the suite in what is left of about 490 s (the session's device time): cut short,
# its log says how far it got.
MOE_EP_TIMEOUT_S=10 timeout $((490 - $(date +%s) + T0)) ctest --test-dir tmp-gpu/C/build/gpu -L gpu \
  -E 'LowLatency|LateRank|python_gpu' --output-on-failure --timeout 120 > $OUT/suite.log 2>&1
echo "ctest rest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/suite.log | head -30
grep -cE "Test +#" $OUT/suite.log
t end
