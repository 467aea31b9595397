#!/bin/bash
# v33 run D (one H200): the final tree (run C's N: tokens land one by one, the done words from
# the send's last warp, a one-launch dispatch's own rows encoded by the expand from x straight
# into the slabs) against main before it (3170f2b, the session's first commit: `git archive
# HEAD` on the device), then the whole GPU suite on the final tree.
#   bash docs/results/v33-one-h200/runD.sh      (logs to $OUT)
# Trees: M = 3170f2b (moe-ep only); N = ./ (built with the tests). Bench M N M N (bf16, fp8 and
# mxfp4 dispatch), then `ctest -L gpu`.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
rm -rf tmp-gpu && mkdir -p tmp-gpu/M && git archive HEAD | tar -x -C tmp-gpu/M
(cd tmp-gpu/M && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > build-o.log 2>&1 || { echo "build of M failed"; tail -30 build-o.log; }) &
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j12 > $OUT/build-N.log 2>&1 || { echo "build of N failed"; grep -B2 -A10 error $OUT/build-N.log | head -60; }) &
wait
t built
for round in 1 2; do
  for v in tmp-gpu/M .; do
    echo "== $v"; timeout 60 $v/build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 200 --warmup 20
  done
done > $OUT/bench-decode.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench-decode.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 585 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 > $OUT/ctest-gpu.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|Failed|\*\*\*|Timeout" $OUT/ctest-gpu.log | head -40
t end
