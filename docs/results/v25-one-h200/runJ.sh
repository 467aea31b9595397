#!/bin/bash
# run J (session 31): rows prefetched into L2 by one bulk-prefetch instruction (./) against main
# (tmp-gpu/base): the dispatch kernel's whole rows and the warp's next row, the combine's own rows
# (world size 1), the decode combine's slot rows. ncu per kernel, the benches alternated, then
# the normal and decode GPU tests on ./.
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
N="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check"
D="bench --backend cuda --ranks 1 --mode decode --iters 3 --warmup 1 --no-check --dispatch-dtype fp8 --tokens 128"
{
for d in bf16 fp8 fp4; do for v in $A $B; do
  echo "== $v dispatch $d 4096"; timeout 40 ncu --print-summary per-kernel -k regex:dispatch_kernel $v $N --tokens 4096 --dispatch-dtype $d --combine-dtype bf16
done; done
for c in fp8 fp8_direct_cast; do for v in $A $B; do
  echo "== $v combine $c 4096"; timeout 40 ncu --print-summary per-kernel -k regex:combine_kernel $v $N --tokens 4096 --dispatch-dtype bf16 --combine-dtype $c
done; done
for c in bf16 fp8; do for v in $A $B; do
  echo "== $v decode combine $c 128"; timeout 40 ncu --print-summary per-kernel -k regex:ll_combine $v $D --combine-dtype $c
done; done
} > $OUT/ncu.log 2>&1
grep -E "^==|    Duration|rror" $OUT/ncu.log
t ncu done
{
for v in $A $B $A $B; do
  echo "== $v normal"; timeout 60 $v bench --backend cuda --ranks 1 --tokens 128,4096 --num-sms 32 --dispatch-dtype bf16,fp8,fp4 --combine-dtype bf16,fp8,fp8_direct_cast --iters 50 --warmup 5
  echo "== $v decode"; timeout 40 $v bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16,fp8 --iters 200 --warmup 20
done
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench done
wait $BUILD || { tail -40 $OUT/build.log; exit 1; }
t tests built
R='^GpuBackend\.|Ranks/SingleGpuWorld\.|Ranks/GpuLowLatency\.|GpuLowLatencyGraph|GpuLowLatencyHooks|GpuLowLatencyShapes|GpuLowLatencyOdd|Ranks/GpuCopyEngine\.AllDtype|Ranks/GpuNodes\.AllDtypePairsEqualTheReference/W4_L2$|python_gpu'
MOE_EP_TIMEOUT_S=10 timeout $(( 540 - $(date +%s) + T0 )) ctest --test-dir build/gpu -R "$R" --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
grep -E "tests passed|Total Test time|\*\*\*|Failed" $OUT/ctest.log | head -30
t end
