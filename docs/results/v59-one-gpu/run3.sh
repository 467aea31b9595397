#!/bin/bash
# v59 run 3 (one GPU, DEADLINE seconds, 560 by default): main with the notify change.
# 1. ncu: count_kernel's and dispatch_kernel's durations at boost clocks (--clock-control none)
#    at 128 and 4096 tokens, 32 SMs, fp8 dispatch (what the 4096-token dispatch's fixed part is).
# 2. The whole GPU suite (ctest -L gpu, --timeout 120) in what is left.
#   DEADLINE=<seconds> bash docs/results/v59-one-gpu/run3.sh      (logs to $OUT)
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-560}
left() { echo $((DEADLINE - $(date +%s) + T0)); }
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j16 > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
for tok in 128 4096; do
  echo "== $tok tokens"
  timeout 60 ncu --clock-control none --kernel-name regex:'count_kernel|dispatch_kernel' \
    --launch-skip 10 --launch-count 6 --metrics gpu__time_duration.sum,sm__cycles_active.max \
    build/gpu/tools/moe-ep bench --backend cuda --ranks 1 --tokens $tok --num-sms 32 --iters 5 \
    --warmup 5 --dispatch-dtype fp8 --combine-dtype bf16 2>&1 |
    grep -E "count_kernel|dispatch_kernel|gpu__time|sm__cycles|wrong"
done > $OUT/ncu.txt 2>&1
cat $OUT/ncu.txt
t ncu
MOE_EP_TIMEOUT_S=10 timeout $(( $(left) - 10 )) ctest --test-dir build/gpu -L gpu \
  --output-on-failure --timeout 120 > $OUT/suite.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)|Total Test" $OUT/suite.log | head -30
t end
