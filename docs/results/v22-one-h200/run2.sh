#!/bin/bash
# run 2 (session 28): wip/lean-steps with notify's shuffle dedupe + early exit, against main.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
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
t build done
M=build/gpu/tools/moe-ep; A=tmp-gpu/alt/build/tools/moe-ep
{
N="--backend cuda --ranks 1 --tokens 128,4096 --num-sms 32,132 --dispatch-dtype all --combine-dtype bf16 --iters 20 --warmup 3"
echo "== new, dispatch all"; $M bench $N
echo "== alt, dispatch all"; $A bench $N
echo "== new, dispatch all (again)"; $M bench $N
K="--backend cuda --ranks 1 --tokens 4096 --num-sms 32 --topk 16 --dispatch-dtype bf16 --combine-dtype bf16 --iters 5 --warmup 1"
echo "== new, top-k 16"; $M bench $K
echo "== alt, top-k 16"; $A bench $K
C="--backend cuda --ranks 1 --tokens 4096 --num-sms 32 --dispatch-dtype bf16 --combine-dtype all --iters 50 --warmup 5"
echo "== new, combine all"; $M bench $C
} > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]|wrong" $OUT/bench.log
t bench done
B="bench --backend cuda --ranks 1 --tokens 4096 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype bf16 --combine-dtype bf16"
{
echo "== new, notify + dispatch"; ncu -k regex:"notify_kernel|dispatch_kernel" --print-summary per-kernel $M $B
echo "== new, notify full"; ncu --set full --import-source yes -k regex:notify_kernel --launch-skip 2 --launch-count 1 $M $B
} > $OUT/ncu.log 2>&1
grep -E "^==|^  [a-z_v].*\(|    Duration|Warp Cycles Per Issued|Issued Instructions  |SM Active" $OUT/ncu.log | head -30
t ncu done
REM=$(( 500 - ($(date +%s) - T0) ))
t "ctest -L gpu with ${REM} s"
MOE_EP_TIMEOUT_S=10 timeout $REM ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 90 > $OUT/ctest.log 2>&1
grep -E "tests passed|Total Test time|\*\*\*" $OUT/ctest.log | head -30
tail -3 $OUT/ctest.log
t "nodes repeat"
REM=$(( 585 - ($(date +%s) - T0) ))
MOE_EP_TIMEOUT_S=10 timeout $REM ctest --test-dir build/gpu -R 'GpuLowLatencyNodes.DispatchOfEveryDtype' --repeat until-fail:5 --timeout 60 > $OUT/ctest-repeat.log 2>&1
grep -E "tests passed|Total Test time|\*\*\*|Failed" $OUT/ctest-repeat.log | tail -8
t end
