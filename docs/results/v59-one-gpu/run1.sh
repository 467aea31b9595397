#!/bin/bash
# v59 run 1 (one GPU, about 5 minutes): (a) test_gpu_agreement on main, whose creation-timeout
# message v58 changed (compiled only then); (b) v58's next-runT2.sh (the send's two more trace
# points at 1 / 32 / 128 / 256 tokens).
#   bash docs/results/v59-one-gpu/run1.sh      (logs to $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG > /dev/null 2>&1
cmake --build build/gpu -j16 --target test_gpu_agreement > $OUT/build.log 2>&1 ||
  { tail -40 $OUT/build.log; exit 1; }
t built
MOE_EP_TIMEOUT_S=10 timeout 200 ctest --test-dir build/gpu -R 'GpuAgreement|GpuStep' \
  --output-on-failure --timeout 120 > $OUT/agreement.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Total Test" $OUT/agreement.log
t agreement
bash docs/results/v58-one-gpu/next-runT2.sh
t end
