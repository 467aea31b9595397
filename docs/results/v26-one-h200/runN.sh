#!/bin/bash
# v26 run N (one H200): mxfp4 encode by integer steps (e2m1x8_by_steps) against 22b3dbd
# (tmp-gpu/A, `git archive 22b3dbd` of the source). The exhaustive codec tests (encode_lane and
# encode_lanes), the GPU dispatch tests that send mxfp4, ncu (instructions, duration) on the
# mxfp4 dispatch kernel at 4096 tokens and on the decode send at 128, the bench alternated.
# Usage: bash docs/results/v26-one-h200/runN.sh (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
(cd tmp-gpu/A && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j6 --target moe-ep > build.log 2>&1 || { echo "build of A failed"; tail -30 build.log; }) &
cmake --build build/gpu -j10 > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait
t built
MOE_EP_TIMEOUT_S=10 ctest --test-dir build/gpu -R 'GpuFastCodecs|GpuFormats|FiniteBlocks|AllPairsDeepSeek|WorldSizeOne|PrequantizedInputEqualsCpu|GpuLowLatency.*W2|GpuLowLatencyGraph' --output-on-failure --timeout 120 > $OUT/ctest.log 2>&1
grep -E "tests passed|Failed|\*\*\*|compared" $OUT/ctest.log | head -30
t tests
A=tmp-gpu/A/build/gpu/tools/moe-ep; B=build/gpu/tools/moe-ep
M="--metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread"
N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --combine-dtype bf16 --dispatch-dtype fp4"
{
for v in $A $B; do
  echo "== $v dispatch fp4 4096"; timeout 40 ncu $M -k regex:dispatch_kernel -s 2 -c 3 $v $N --tokens 4096
  echo "== $v decode send fp4 128"; timeout 40 ncu $M -k regex:ll_send -s 2 -c 3 $v $N --mode decode --tokens 128
done
} 2>&1 | grep -v "^==PROF==" > $OUT/ncu.log
grep -E "^==|gpu__time|inst_executed|registers" $OUT/ncu.log
t ncu
{
for v in $A $B $A $B; do
  echo "== $v normal"; timeout 60 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype fp4 --combine-dtype bf16 --iters 50 --warmup 5
  echo "== $v decode"; timeout 40 $v bench --backend cuda --ranks 1 --mode decode --tokens 1,128,256 --dispatch-dtype fp4 --combine-dtype bf16 --iters 200 --warmup 20
done
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t end
