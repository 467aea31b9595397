#!/bin/bash
# v62, one GPU: the normal-mode GPU tests on main + part-experts-poll.patch (NP): agreement,
# backend (with the parts test), nodes, copy engine, the one-GPU world at W = 2/4/8, late ranks,
# timeouts. About 5 minutes.
#   bash docs/results/v62-one-gpu/test-np.sh   (logs: $OUT)
set -u
T0=$(date +%s)
t() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3)"
SRC="CMakeLists.txt CMakePresets.json cmake include src tools python pyproject.toml tests examples docs"
rm -rf tmp-gpu/NPT && mkdir -p tmp-gpu/NPT && tar -c $SRC | tar -x -C tmp-gpu/NPT
(cd tmp-gpu/NPT && patch -p1 -s < ../../docs/results/v62-one-gpu/part-experts-poll.patch) || exit 1
(cd tmp-gpu/NPT && cmake -S . -B build/gpu $CFG > /dev/null 2>&1 &&
  cmake --build build/gpu -j16 > $OUT/build.log 2>&1) || { tail -40 $OUT/build.log; exit 1; }
t built
MOE_EP_TIMEOUT_S=10 timeout 400 ctest --test-dir tmp-gpu/NPT/build/gpu -L gpu \
  -R "GpuAgreement|GpuBackend|GpuNodes|GpuCopyEngine|SingleGpuWorld|GpuLateRank|GpuTimeout|GpuLowLatency" \
  --output-on-failure --timeout 120 > $OUT/tests.log 2>&1
echo "ctest rc $?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Total Test" $OUT/tests.log
t end
