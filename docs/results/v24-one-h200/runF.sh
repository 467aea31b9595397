#!/bin/bash
# run F (session 30, the budget's last run): wip/grid-end less the two dropped changes, with the
# decode combine's slot groups of 8 (./), against the same without them (tmp-gpu/g4, groups of 4):
# the decode combine under ncu and the decode bench, then ctest -L gpu on ./.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
(cd tmp-gpu/g4 && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 && cmake --build build/gpu -j6 --target moe-ep > build.log 2>&1 || tail -30 build.log) &
G4=$!
cmake --build build/gpu -j10 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
wait $G4
t moe-ep built
# the tests build while the measurements run (CPU only)
cmake --build build/gpu -j12 >> $OUT/build.log 2>&1 &
BUILD=$!
A=tmp-gpu/g4/build/gpu/tools/moe-ep
B=build/gpu/tools/moe-ep
G="bench --backend cuda --ranks 1 --mode decode --iters 3 --warmup 1 --no-check --dispatch-dtype fp8"
{
for c in bf16 fp8; do for n in 1 128; do for v in $A $B; do
  echo "== $v combine $c $n tokens"; timeout 30 ncu --print-summary per-kernel -k regex:ll_combine $v $G --combine-dtype $c --tokens $n
done; done; done
} > $OUT/ncu.log 2>&1
grep -E "^==|    Duration" $OUT/ncu.log
t ncu done
{
for v in $A $B $A $B; do
  echo "== $v decode"; timeout 30 $v bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --dispatch-dtype fp8 --combine-dtype bf16 --iters 200 --warmup 20
  echo "== $v decode fp8"; timeout 30 $v bench --backend cuda --ranks 1 --mode decode --tokens 1,128 --dispatch-dtype fp8 --combine-dtype fp8 --iters 200 --warmup 20
done
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench done
wait $BUILD || { tail -40 $OUT/build.log; exit 1; }
t tests built
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
grep -E "tests passed|Total Test time|\*\*\*|Failed" $OUT/ctest.log | head -30
tail -3 $OUT/ctest.log
t end
