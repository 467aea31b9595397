#!/bin/bash
# v56, run in v57 (docs/results/v57-one-gpu/suite/, one H200; DEADLINE seconds, 560 by default): the
# whole GPU suite on main since
# the data kernels' 256-thread blocks (d3a41c6). Run D's tests covered decode mode only
# (test_gpu_low_latency, _hooks, test_gpu_capture, on the experiment's tree with the old world
# rule); this is the first run of normal mode's GPU tests, the one-GPU world's late-rank and busy
# tests (the world's budgets now 16 / 5 / 2 SMs at W = 2 / 4 / 8), Python, nodes and the copy
# engine with these blocks. About 420 s of tests in v54's runs I2 and J.
# 1. ctest -L gpu, everything (--timeout 120).
# 2. The decode bench, one round, fp8 dispatch with a bf16 combine (main's figures on this GPU).
#   DEADLINE=<seconds> bash docs/results/v56-one-h100/next-suite.sh      (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-560}
left() { echo $((DEADLINE - $(date +%s) + T0)); }
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j14 > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
tail -n 1 $OUT/build.log
t built
MOE_EP_TIMEOUT_S=10 timeout $(( $(left) - 45 )) ctest --test-dir build/gpu -L gpu \
  --output-on-failure --timeout 120 > $OUT/suite.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)|Total Test" $OUT/suite.log | head -30
t suite
C="bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 --decode-graph round --dispatch-dtype fp8 --combine-dtype bf16"
[ "$(left)" -gt 30 ] && timeout $(( $(left) - 5 )) ./build/gpu/tools/moe-ep $C > $OUT/decode.log 2>&1
cat $OUT/decode.log 2>/dev/null | tail -8
t end
