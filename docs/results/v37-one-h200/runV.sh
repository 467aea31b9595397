#!/bin/bash
# v37 run V: W = the working tree (9ebc70e: the prefetch rule and the NaN-free packs); V = W with
# whole-steps-4.patch (fp8 blockwise and int8_e3m4 own-only whole rows load 4 warp steps
# together instead of 2: ptxas, fp8 64 registers and 20 bytes of spill stores, 16 of loads, as
# with 2 before run U's change; int8 36 / 48 bytes as with 2). Run U's ncu: the fp8 combine
# kernel's issue slots 48% active after the change, so its warps now wait more than they issue.
# Predicted: V's fp8 combine at 4096 tokens and 32 SMs 53.4 -> 50-52 us, int8_e3m4 65.2 -> 62-64.
#   1. combine fp8 / int8_e3m4 at 4096 tokens, 32 SMs, W and V alternated twice;
#   2. the whole GPU suite on W.
#   bash docs/results/v37-one-h200/runV.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
R=docs/results/v37-one-h200
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples"
rm -rf tmp-gpu && mkdir -p tmp-gpu/V && tar -c $SRC | tar -x -C tmp-gpu/V
(cd tmp-gpu/V && patch -p1 -s < ../../$R/whole-steps-4.patch && cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=OFF > /dev/null 2>&1 &&
  cmake --build build/gpu -j4 --target moe-ep > $OUT/build-V.log 2>&1 || echo "build V failed") &
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j12 > $OUT/build-W.log 2>&1 || { echo "build W failed"; grep -B2 -A10 error $OUT/build-W.log | head -40; }
wait
t built
B="bench --backend cuda --ranks 1 --tokens 4096 --num-sms 32 --dispatch-dtype bf16 --combine-dtype fp8,int8_e3m4 --iters 20 --warmup 3"
for r in 1 2; do for v in . tmp-gpu/V; do
  echo "== $v combine $r"; timeout 30 $v/build/gpu/tools/moe-ep $B
done; done > $OUT/bench.log 2>&1
grep -E "^==|^ +[0-9]+ +|wrong|rror" $OUT/bench.log
t bench
MOE_EP_TIMEOUT_S=10 timeout $(( 585 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
echo "ctest rc $?"; grep -E "tests passed|Failed|\*\*\*Timeout|\*\*\*Failed|Total Test" $OUT/ctest.log | head -20
t end
