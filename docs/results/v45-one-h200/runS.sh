#!/bin/bash
# v45 run S (v39 run H again): the --num-sms sweep at 4096 tokens, every pair, 8-132 SMs, on main
# with v45's release adds merged (the last sweep was v39 run H's). Issue 12 asks for this
# table. The build is moe-ep alone, to fit what was left of the session's device time.
#   bash docs/results/v45-one-h200/runS.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 --target moe-ep > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
timeout $(( 300 - $(date +%s) + T0 )) build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --tokens 4096 \
  --num-sms 8,16,32,64,132 --iters 20 --warmup 3 > $OUT/sweep.log 2>&1
echo "sweep rc $?"; grep -E "wrong|rror" $OUT/sweep.log; grep -cE "^ +[0-9]+ +" $OUT/sweep.log
t end
