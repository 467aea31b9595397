#!/bin/bash
# v28 run W (session 35): is the one-GPU world's stall (a rank's first kernel starts only once the
# others timed out; runs U and V met it in Ranks/GpuCopyEngine.PrequantizedInputEqualsTheReference/W8)
# the hardware queues? Eight ranks' streams on CUDA_DEVICE_MAX_CONNECTIONS = 8 queues (the default)
# can put a rank's first kernel behind another rank's kernel that waits for it. That test, one run
# at a time, alternating the default and 32 queues, until the time is up; pass/fail counted.
#   bash docs/results/v28-one-h200/runW.sh       (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER MOE_EP_TIMEOUT_S=5
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 > $OUT/build.log 2>&1 || { echo "build failed"; tail -30 $OUT/build.log; exit 1; }
t built
declare -A pass fail
for q in 8 32; do pass[$q]=0; fail[$q]=0; done
while [ $(( $(date +%s) - T0 )) -lt 200 ]; do
  for q in 8 32; do
    if CUDA_DEVICE_MAX_CONNECTIONS=$q timeout 30 ctest --test-dir build/gpu \
        -R 'Ranks/GpuCopyEngine.PrequantizedInputEqualsTheReference/W8' --timeout 25 \
        --output-on-failure >> $OUT/ctest-q$q.log 2>&1; then
      pass[$q]=$(( ${pass[$q]} + 1 ))
    else
      fail[$q]=$(( ${fail[$q]} + 1 )); echo "[$(( $(date +%s) - T0 )) s] failed with $q queues"
    fi
  done
done
for q in 8 32; do echo "CUDA_DEVICE_MAX_CONNECTIONS=$q: ${pass[$q]} passed, ${fail[$q]} failed"; done
t end
