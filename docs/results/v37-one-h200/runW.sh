#!/bin/bash
# v37 run W (about 280 s of device time left): the working tree with whole-steps-4.patch merged
# (kCombineWholeSteps = kCombineUnroll for every format; PTX identical to run V's V): the
# GpuBackend tests that reach the own-only whole rows with random, extreme finite and (validation
# off) Inf and NaN blocks, as far as the time allows.
#   bash docs/results/v37-one-h200/runW.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j15 --target test_gpu_backend > $OUT/build.log 2>&1 || { echo "build failed"; grep -B2 -A10 error $OUT/build.log | head -40; }
t built
BT=$(find build/gpu -name test_gpu_backend -type f | head -1)
{ MOE_EP_VALIDATE=0 MOE_EP_TIMEOUT_S=10 timeout $(( 100 - $(date +%s) + T0 )) $BT --gtest_filter='GpuBackendUnvalidated.NonFinite*'; echo "rc $?"
  MOE_EP_TIMEOUT_S=10 timeout $(( 170 - $(date +%s) + T0 )) $BT --gtest_filter='GpuBackend.AllPairs*:GpuBackend.ExtremeFinite*:GpuBackend.OddShapes*'; echo "rc $?"; } > $OUT/tests.log 2>&1
grep -E "^rc|^\[  (PASSED|FAILED)|FAILED  \]|OK \]" $OUT/tests.log | head -20
t end
