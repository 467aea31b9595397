#!/bin/bash
# run D (session 29, the budget's last 259 s): wip/grid-end's kernels under ncu, against run B/C's
# figures for main (ncu locks the clocks); a checked bench of every pair at 128 tokens.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
t build done
M=build/gpu/tools/moe-ep
B="bench --backend cuda --ranks 1 --num-sms 32 --iters 3 --warmup 1 --no-check --dispatch-dtype bf16 --combine-dtype bf16"
S="--print-summary per-kernel"
timeout 30 ncu $S $M $B --tokens 128 > $OUT/ncu-normal128.log 2>&1
grep -E "^  [a-zA-Z_v].*\(|    Duration" $OUT/ncu-normal128.log; t normal done
timeout 30 ncu $S $M $B --mode decode --tokens 1 > $OUT/ncu-decode1.log 2>&1
grep -E "^  [a-zA-Z_v].*\(|    Duration" $OUT/ncu-decode1.log; t decode done
timeout 25 ncu $S -k regex:dispatch_kernel $M ${B/dispatch-dtype bf16/dispatch-dtype fp8} --tokens 4096 > $OUT/ncu-fp8-4096.log 2>&1
grep -E "^  [a-zA-Z_v].*\(|    Duration" $OUT/ncu-fp8-4096.log; t fp8 done
timeout 25 $M bench --backend cuda --ranks 1 --tokens 128 --num-sms 32 --dispatch-dtype all --combine-dtype all --iters 3 --warmup 1 > $OUT/bench-check.log 2>&1
grep -E "wrong" $OUT/bench-check.log; t end
