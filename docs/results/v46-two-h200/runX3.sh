#!/bin/bash
# v46 run X3 on nvidia-h200-x2: TwoGpuBusy again after run_gpu_ranks gives each rank its own
# streams of the tests' pool (run X2: rank 0's rounds took the main thread's stream 23 on GPU 0,
# the one running the holding kernel, and waited the whole 6 s for it), with the other tests
# that run one rank per GPU through run_gpu_ranks, each in its own process.
#   bash docs/results/v46-two-h200/runX3.sh      (logs to $OUT)
set -u
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j30 --target test_gpu_world test_gpu_backend > $OUT/build.log 2>&1 ||
  { tail -40 $OUT/build.log; exit 1; }
timeout 120 ctest --test-dir build/gpu --output-on-failure --timeout 60 \
  -R 'TwoGpuBusy|SingleGpuWorldBusy|GpuBackend.RankThatNeverJoins' > $OUT/ctest.log 2>&1
echo "ctest rc $?"
grep -E "Test +#|busy GPU|tests passed|FAILED" $OUT/ctest.log | head -20
