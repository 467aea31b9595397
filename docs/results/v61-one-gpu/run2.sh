#!/bin/bash
# v61, one GPU, a short call (what device time was left): main + recv-count-zero.patch (v60,
# decode) built with the three test programs it and v61's poisoned codec outputs touch, and
# their tests: GpuLowLatencyScan (the failed call's recv_count reads 0 on both ranks),
# GpuLowLatency.*, GpuFormats.*, GpuFastCodecs.*; ctest stops DEADLINE s (default 280) after the
# start.   bash docs/results/v61-one-gpu/run2.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
patch -p1 -s < docs/results/v60-one-gpu/recv-count-zero.patch || { echo "patch failed"; exit 1; }
(cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1 &&
  cmake --build build/gpu -j16 --target test_gpu_low_latency test_gpu_formats \
    test_gpu_fast_codecs > $OUT/build.log 2>&1) || { tail -30 $OUT/build.log; exit 1; }
t built
LEFT=$((${DEADLINE:-280} - $(date +%s) + T0))
MOE_EP_TIMEOUT_S=10 timeout $LEFT ctest --test-dir build/gpu -L gpu \
  -R 'GpuLowLatencyScan|GpuLowLatency\.|GpuFormats|GpuFastCodecs' \
  --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $? (given $LEFT s)"
grep -E "Test +#|tests passed|tests failed|Total Test" $OUT/tests.log | tail -40
t end
