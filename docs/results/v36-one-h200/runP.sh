#!/bin/bash
# v36 run P, on main at 0f05c8e (run O's C) or later with no kernel change:
#   1. the decode bench, every dtype pair, 1 / 32 / 128 / 256 tokens (graph replays, W = 1);
#   2. the --num-sms sweep at 4096 tokens, every pair, 8 / 16 / 32 / 64 / 132 SMs (the last one
#      was v27's, before v28-v36's kernels);
#   3. run O's one failure, Nodes/GpuLowLatencyNodes.HookedRoundEqualsTheCpuBackend/W8L4 (rank
#      6's upload of x returned 10 s late, after its peers had timed out), repeated with the rest
#      of its test file's hooked cases, to see how often it comes back.
#   bash docs/results/v36-one-h200/runP.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j15 --target moe-ep test_gpu_low_latency_nodes > $OUT/build.log 2>&1 || { echo "build failed"; grep -B2 -A10 error $OUT/build.log | head -40; }
t built
M=build/gpu/tools/moe-ep
timeout 90 $M bench --backend cuda --ranks 1 --mode decode --tokens 1,32,128,256 --iters 200 --warmup 20 > $OUT/decode.log 2>&1
grep -E "^ +[0-9]+ +|wrong|rror" $OUT/decode.log
t decode
timeout 240 $M bench --backend cuda --ranks 1 --tokens 4096 --num-sms 8,16,32,64,132 --iters 20 --warmup 3 > $OUT/sweep.log 2>&1
echo "sweep rc $?"; grep -E "^ +(32|132) +|wrong|rror" $OUT/sweep.log
t sweep
T=$(find build/gpu -name test_gpu_low_latency_nodes -type f | head -1)
for i in 1 2 3 4 5 6 7 8; do
  [ $(( $(date +%s) - T0 )) -gt 520 ] && break
  echo "== repeat $i"; MOE_EP_TIMEOUT_S=10 timeout 60 $T --gtest_filter='*Hooked*' 2>&1 | grep -E "^\[  |FAILED|threw|host trace" | head -30
done > $OUT/nodes-repeat.log 2>&1
grep -cE "^\[       OK" $OUT/nodes-repeat.log; grep -E "FAILED  \]|threw" $OUT/nodes-repeat.log | head
t end
