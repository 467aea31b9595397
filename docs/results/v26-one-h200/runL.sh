#!/bin/bash
# v26 run L (one H200; written in session 31 as v25's next-runL.sh, run in session 32): the GPU
# tests of main with untested-whole-slice-dispatch.patch applied (the one-launch decode dispatch
# had lost in run K, so only this one), the whole suite with the one-GPU world at W = 2/4/8:
# `MOE_EP_TIMEOUT_S=10 ctest -L gpu`.
# Usage: git apply docs/results/v25-one-h200/untested-whole-slice-dispatch.patch;
#        bash docs/results/v26-one-h200/runL.sh
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
CFG="-G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=$(command -v python3)"
cmake -S . -B build/gpu $CFG -DMOE_EP_BUILD_TESTS=ON > /dev/null 2>&1
cmake --build build/gpu -j16 > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
t built
MOE_EP_TIMEOUT_S=10 timeout $(( 590 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 > $OUT/ctest.log 2>&1
grep -E "tests passed|Total Test time|\*\*\*|Failed" $OUT/ctest.log | head -30
t end
