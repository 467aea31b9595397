#!/bin/bash
# v42 run C: (1) queue_probe.cu (which streams share a hardware queue; does programmatic dependent
# launch free a shared queue), (2) the whole GPU suite on the merged tree (run A's decode done
# counts merged; run A ran only the decode binaries).
#   bash docs/results/v42-one-h200/runC.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
R=docs/results/v42-one-h200
nvcc -O3 -arch=sm_90 -o /tmp/queue_probe $R/queue_probe.cu && timeout 120 /tmp/queue_probe > $OUT/probe.log 2>&1
echo "probe rc $?"; cat $OUT/probe.log
t probe
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) \
  > $OUT/build.log 2>&1
cmake --build build/gpu -j16 >> $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu \
  --output-on-failure --timeout 60 > $OUT/suite.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Skipped\)" $OUT/suite.log | head -30
t end
