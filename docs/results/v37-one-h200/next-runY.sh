#!/bin/bash
# Prepared in session 43 (v37), NOT RUN YET: issue 12's sweep table and issue 13's decode table
# again after v37's combine changes, with v36 run P's commands (every pair, the bench's default):
# `--num-sms 8,16,32,64,132` at 4096 tokens, then the decode bench at 1 / 32 / 128 / 256 tokens.
# Run after next-runX.sh (merge what it shows first), on the session's main.
#   bash docs/results/v37-one-h200/next-runY.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j15 --target moe-ep > $OUT/build.log 2>&1 || { echo "build failed"; grep -B2 -A10 error $OUT/build.log | head -40; }
t built
M=build/gpu/tools/moe-ep
timeout 240 $M bench --backend cuda --ranks 1 --tokens 4096 --num-sms 8,16,32,64,132 --iters 20 --warmup 3 > $OUT/sweep.log 2>&1
grep -E "^ +[0-9]+ +|wrong|rror" $OUT/sweep.log
t sweep
timeout 90 $M bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 > $OUT/decode.log 2>&1
grep -E "^ +[0-9]+ +|wrong|rror" $OUT/decode.log
t end
