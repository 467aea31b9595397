#!/bin/bash
# v33 run A (one H200): the decode dispatch's tokens land one by one (flag and landed words per
# token and slice, done words from the send's block 0) and the expand copies each token as soon
# as it has landed, against main before it (3170f2b, the session's first commit: `git archive
# HEAD` on the device).
#   bash docs/results/v33-one-h200/runA.sh      (logs to $OUT)
# Trees: M = 3170f2b (moe-ep only); N = ./ (built with the tests).
# Bench M N M N, then the decode, scan, agreement, validation and timeout tests on N.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
rm -rf tmp-gpu && mkdir -p tmp-gpu/M && git archive HEAD | tar -x -C tmp-gpu/M
git -C . log --oneline -1 HEAD
(cd tmp-gpu/M && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > build-o.log 2>&1 || { echo "build of M failed"; tail -30 build-o.log; }) &
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j12 > $OUT/build-N.log 2>&1 || { echo "build of N failed"; grep -B2 -A10 error $OUT/build-N.log | head -60; }) &
wait
t built
for round in 1 2; do
  for v in tmp-gpu/M .; do
    echo "== $v"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype bf16,fp8 --combine-dtype bf16 --iters 200 --warmup 20
  done
done > $OUT/bench-decode.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 575 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 \
  -R 'LowLatency|Scan|Validat|Agreement|Timeout|AllPairs|WorldSizeOne|SingleGpuWorld' > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout|Test +#.*(Shapes|Scan)" $OUT/ctest.log | head -40
t end
