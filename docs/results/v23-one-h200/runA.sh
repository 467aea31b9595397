#!/bin/bash
# run A (session 29): wip/notify-parts (notify in parts + round-robin passes, quantized slice
# stores, combine own rows without tickets, decode grids) against main and wip/next-run.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
for a in main nextrun; do
  mkdir -p tmp-gpu/$a && cp -r CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tmp-gpu/$a/ 2>/dev/null
  (cd tmp-gpu/$a && patch -R -p1 -s < ../$a.patch) || { echo "patch $a failed"; exit 1; }
  cmake -S tmp-gpu/$a -B tmp-gpu/$a/build $CFG -DMOE_EP_BUILD_TESTS=OFF > $OUT/build-$a.log 2>&1
done
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j10 > $OUT/build.log 2>&1 &
P1=$!
cmake --build tmp-gpu/main/build -j3 --target moe-ep >> $OUT/build-main.log 2>&1 &
P2=$!
cmake --build tmp-gpu/nextrun/build -j3 --target moe-ep >> $OUT/build-nextrun.log 2>&1 &
P3=$!
wait $P1 || { tail -40 $OUT/build.log; exit 1; }
wait $P2 || { tail -40 $OUT/build-main.log; }
wait $P3 || { tail -40 $OUT/build-nextrun.log; }
t build done
R='unvalidated|^GpuBackend\.|^SingleGpuWorld\.'
MOE_EP_TIMEOUT_S=10 timeout 120 ctest --test-dir build/gpu -R "$R" --output-on-failure --timeout 60 > $OUT/ctest-first.log 2>&1
grep -E "tests passed|Total Test time|\*\*\*|Failed|unvalidated" $OUT/ctest-first.log | head -20
t first tests done
M=build/gpu/tools/moe-ep; A=tmp-gpu/main/build/tools/moe-ep; X=tmp-gpu/nextrun/build/tools/moe-ep
{
N="--backend cuda --ranks 1 --tokens 128,4096 --num-sms 32,132 --dispatch-dtype all --combine-dtype bf16 --iters 20 --warmup 3"
for b in new:$M main:$A nextrun:$X; do echo "== ${b%%:*}, dispatch all"; timeout 60 ${b#*:} bench $N; done
C="--backend cuda --ranks 1 --tokens 128,4096 --num-sms 32,132 --dispatch-dtype bf16 --combine-dtype all --iters 50 --warmup 5"
for b in new:$M main:$A; do echo "== ${b%%:*}, combine all"; timeout 60 ${b#*:} bench $C; done
D="--backend cuda --ranks 1 --mode decode --tokens 1,128 --dispatch-dtype fp8 --combine-dtype bf16 --iters 50 --warmup 10"
for b in new:$M main:$A; do echo "== ${b%%:*}, decode"; timeout 60 ${b#*:} bench $D; done
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong|rror" $OUT/bench.log
t bench done
B="bench --backend cuda --ranks 1 --tokens 4096 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype bf16 --combine-dtype bf16"
{
echo "== new"; timeout 60 ncu -k regex:"notify_kernel|dispatch_kernel|combine_kernel" --print-summary per-kernel $M $B
echo "== new, fp8"; timeout 60 ncu -k regex:"dispatch_kernel" --print-summary per-kernel $M ${B/dispatch-dtype bf16/dispatch-dtype fp8}
echo "== new, 128 tokens"; timeout 60 ncu -k regex:"notify_kernel|dispatch_kernel|combine_kernel" --print-summary per-kernel $M ${B/4096/128}
echo "== main"; timeout 60 ncu -k regex:"notify_kernel|dispatch_kernel|combine_kernel" --print-summary per-kernel $A $B
echo "== main, 128 tokens"; timeout 60 ncu -k regex:"notify_kernel|dispatch_kernel|combine_kernel" --print-summary per-kernel $A ${B/4096/128}
} > $OUT/ncu.log 2>&1
grep -E "^==|^  [a-z_v].*\(|    Duration" $OUT/ncu.log | head -60
t ncu done
REM=$(( 560 - ($(date +%s) - T0) ))
t "rest of ctest -L gpu with ${REM} s"
MOE_EP_TIMEOUT_S=10 timeout $REM ctest --test-dir build/gpu -L gpu -E "$R" --output-on-failure --timeout 60 > $OUT/ctest-rest.log 2>&1
grep -E "tests passed|Total Test time|\*\*\*|Failed" $OUT/ctest-rest.log | head -30
tail -3 $OUT/ctest-rest.log
t end
