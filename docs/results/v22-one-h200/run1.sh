#!/bin/bash
# run 1 (session 28): wip/lean-steps (int8 lean encode, bf16 slice stores, warp notify, review
# mends) against main (alt tree = branch with tmp-gpu/lean.patch reverted). Bench, ncu, ctest.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
nvidia-smi -L
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
mkdir -p tmp-gpu/alt && cp -r CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tmp-gpu/alt/ 2>/dev/null
(cd tmp-gpu/alt && patch -R -p1 -s < ../lean.patch) || { echo "patch failed"; exit 1; }
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS=-lineinfo > /dev/null 2>&1
cmake -S tmp-gpu/alt -B tmp-gpu/alt/build $CFG -DMOE_EP_BUILD_TESTS=OFF > $OUT/build-alt.log 2>&1
cmake --build build/gpu -j11 > $OUT/build.log 2>&1 &
P1=$!
cmake --build tmp-gpu/alt/build -j5 --target moe-ep >> $OUT/build-alt.log 2>&1 &
P2=$!
wait $P1 || { tail -40 $OUT/build.log; exit 1; }
wait $P2 || { tail -40 $OUT/build-alt.log; exit 1; }
grep -iE "spill|warning" $OUT/build.log | sort | uniq -c | head -20
t build done
M=build/gpu/tools/moe-ep; A=tmp-gpu/alt/build/tools/moe-ep
{
N="--backend cuda --ranks 1 --tokens 128,4096 --num-sms 32,132 --dispatch-dtype all --combine-dtype bf16 --iters 20 --warmup 3"
echo "== new, dispatch all"; $M bench $N
echo "== alt, dispatch all"; $A bench $N
C="--backend cuda --ranks 1 --tokens 4096 --num-sms 32,132 --dispatch-dtype bf16 --combine-dtype all --iters 50 --warmup 5"
echo "== new, combine all"; $M bench $C
echo "== alt, combine all"; $A bench $C
echo "== new, combine all (again)"; $M bench $C
K="--backend cuda --ranks 1 --tokens 4096 --num-sms 32 --topk 16 --dispatch-dtype bf16 --combine-dtype bf16 --iters 5 --warmup 1"
echo "== new, top-k 16"; $M bench $K
echo "== alt, top-k 16"; $A bench $K
D="--mode decode --backend cuda --ranks 1 --tokens 1,128 --dispatch-dtype fp8 --iters 50 --warmup 10"
echo "== new, decode"; $M bench $D
echo "== alt, decode"; $A bench $D
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong" $OUT/bench.log
t bench done
B="bench --backend cuda --ranks 1 --tokens 4096 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype bf16 --combine-dtype bf16"
{
echo "== new, per kernel"; ncu --print-summary per-kernel $M $B
echo "== alt, per kernel"; ncu --print-summary per-kernel $A $B
echo "== new, notify full"; ncu --set full --import-source yes -k regex:notify_kernel --launch-skip 2 --launch-count 1 $M $B
echo "== new, dispatch_kernel full"; ncu --set full -k regex:dispatch_kernel --launch-skip 2 --launch-count 1 $M $B
} > $OUT/ncu.log 2>&1
grep -E "^==|^  [a-z_]+.*\(|Duration" $OUT/ncu.log | grep -E "^==|Duration|\(" | head -60
t ncu done
REM=$(( 580 - ($(date +%s) - T0) ))
t "ctest -L gpu with ${REM} s"
MOE_EP_TIMEOUT_S=10 timeout $REM ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 90 > $OUT/ctest.log 2>&1
grep -E "tests passed|Total Test time|\*\*\*" $OUT/ctest.log | head -30
tail -3 $OUT/ctest.log
t end
