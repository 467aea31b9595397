#!/bin/bash
# run G (session 40): the one-GPU world's stall made deterministic. tests/test_gpu_late_rank.cu:
# W ranks of one GPU, the last one 300 ms late to its first call (after its upload), decode and
# normal mode, hidden 7168, 128 tokens a rank, at W = 8 and 4 and several SM budgets. Predicted
# (a model of what the waiting ranks hold: decode's step block of 1024 threads at 64 registers
# needs an SM with nothing else on it, and each waiting rank holds its step block plus its send
# grid parked behind it, 1 + 2b blocks): decode fails at the world's default budgets (W = 8: 16
# SMs, W = 4: 32) and passes at W = 8 with 8 or 4 SMs and at W = 4 with 16 or 8; normal mode
# (count_kernel lets nothing park behind it while it waits) passes.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 --target test_gpu_late_rank > $OUT/build.log 2>&1 || { echo "build failed"; grep -B2 -A10 error $OUT/build.log | head -40; }
t built
cd build/gpu/tests && MOE_EP_TIMEOUT_S=10 timeout 400 ./test_gpu_late_rank > $OUT/late-rank.log 2>&1; echo "rc $?"
grep -E "^\[ +(OK|FAILED) +\]|threw|began at" $OUT/late-rank.log | cut -c1-300 | head -60
t once
MOE_EP_TIMEOUT_S=10 timeout $(( 560 - $(date +%s) + T0 )) ./test_gpu_late_rank --gtest_repeat=2 > $OUT/late-rank-repeat.log 2>&1; echo "rc $?"
grep -E "^\[ +(OK|FAILED) +\]" $OUT/late-rank-repeat.log | head -40
t end
