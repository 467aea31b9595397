#!/bin/bash
# run H (session 31): the dispatch kernel reads ahead through shared memory (cp.async, 2 stages)
# (./) against main (tmp-gpu/base): ncu per kernel on the dispatch kernel at 4096 and 128 tokens,
# the normal bench alternated, then the GPU tests that run the normal dispatch.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
(cd tmp-gpu/base && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 && cmake --build build/gpu -j6 --target moe-ep > build.log 2>&1 || tail -30 build.log) &
BASE=$!
cmake --build build/gpu -j10 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait $BASE
t moe-ep built
cmake --build build/gpu -j12 >> $OUT/build.log 2>&1 &
BUILD=$!
A=tmp-gpu/base/build/gpu/tools/moe-ep
B=build/gpu/tools/moe-ep
N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --combine-dtype bf16"
{
for n in 4096 128; do for d in bf16 fp8 fp4; do for v in $A $B; do
  echo "== $v dispatch $d $n tokens"; timeout 40 ncu --print-summary per-kernel -k regex:dispatch_kernel $v $N --tokens $n --dispatch-dtype $d
done; done; done
} > $OUT/ncu.log 2>&1
grep -E "^==|    Duration|Registers|rror" $OUT/ncu.log
t ncu done
{
for v in $A $B $A $B; do
  echo "== $v normal"; timeout 60 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32,132 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16 --iters 50 --warmup 5
done
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench done
wait $BUILD || { tail -40 $OUT/build.log; exit 1; }
t tests built
R='^GpuBackend\.|SingleGpuWorld|GpuCopyEngine|Ranks/GpuNodes\.|GpuNodesErrors|GpuAgreement'
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) ctest --test-dir build/gpu -R "$R" --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
grep -E "tests passed|Total Test time|\*\*\*|Failed" $OUT/ctest.log | head -30
tail -3 $OUT/ctest.log
t end
