#!/bin/bash
# Prepared in session 39 for the next session; it ran in session 40 as v34 run E (logs in docs/results/v34-one-h200/runE-*; P lost):
# own rows straight from ll_send into its slabs (next-rank0-own-rows.patch, against main
# 104c195), against main. Rank 0's rows come first in every slab, so its own slot ranks place
# them without a peer's counts, and its send keeps the first slice's load and encode overlapping
# the step kernel; at world size 1 the expand is left with the fills. Prediction (v32's trace,
# fp8, 128 tokens): the stage store and the expand's 7.3 MB copy after the grid end (about 5.5
# us) become the send's own 7.3 MB of slab stores (about 4.4 us at the 32-SM copy floor) before
# the grid end, so about 3 us off at world size 1 (18 -> 15 us), about 1 us at one token.
#   bash docs/results/v33-one-h200/runE.sh      (logs to $OUT)
# Trees: M = ./ (moe-ep only); P = ./ with the patch (built with the tests). Bench M P M P (bf16,
# fp8 and mxfp4 dispatch), then the decode, scan, agreement, validation and timeout tests on P.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/P && tar -c $SRC | tar -x -C tmp-gpu/P
(cd tmp-gpu/P && patch -p1 -s < ../../docs/results/v33-one-h200/next-rank0-own-rows.patch) || echo "patch did not apply"
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > $OUT/build-M.log 2>&1 || { echo "build of M failed"; tail -30 $OUT/build-M.log; }) &
(cd tmp-gpu/P && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j12 > $OUT/build-P.log 2>&1 || { echo "build of P failed"; grep -B2 -A10 error $OUT/build-P.log | head -60; }) &
wait
t built
for round in 1 2; do
  for v in . tmp-gpu/P; do
    echo "== $v"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 200 --warmup 20
  done
done > $OUT/bench-decode.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 575 - $(date +%s) + T0 )) ctest --test-dir tmp-gpu/P/build/gpu -L gpu --output-on-failure --timeout 60 \
  -R 'LowLatency|Scan|Validat|Agreement|Timeout|AllPairs|WorldSizeOne|SingleGpuWorld' > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout|Test +#.*(Shapes|Scan|Prequant|W1)" $OUT/ctest.log | head -40
t end
