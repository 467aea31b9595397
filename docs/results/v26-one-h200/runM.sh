#!/bin/bash
# v26 run M (one H200): main with the whole-slice dispatch merged. The new special-block tests
# (zero, subnormal, largest-finite, Inf and NaN blocks, validated and unvalidated), the bench of
# every pair at 128 and 4096 tokens at 32 SMs twice, the decode bench, and the one-GPU world's W8
# decode test repeated (the known stall; its timeout log now shows decode step tags).
# Usage: bash docs/results/v26-one-h200/runM.sh (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep test_gpu_backend test_gpu_low_latency > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
MOE_EP_TIMEOUT_S=10 ctest --test-dir build/gpu -R 'SpecialBlocks|FiniteBlocks' --output-on-failure --timeout 120 > $OUT/ctest.log 2>&1
grep -E "Test +#|tests passed|Failed|\*\*\*" $OUT/ctest.log
t tests
B=build/gpu/tools/moe-ep
{
for i in 1 2; do
  echo "== round $i normal"
  timeout 120 $B bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype all --combine-dtype all --iters 50 --warmup 5
done
echo "== decode"
timeout 60 $B bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 580 - $(date +%s) + T0 )) ctest --test-dir build/gpu -R 'Ranks/GpuLowLatency.AllDtypePairsEqualTheReference/W8' --repeat until-fail:15 --output-on-failure --timeout 60 > $OUT/repeat.log 2>&1
grep -E "Test +#|tests passed|Failed|\*\*\*|decode step tags" $OUT/repeat.log | cut -c1-400 | head -40
t end
