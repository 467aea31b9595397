#!/bin/bash
# run H (session 40): the one-GPU world's budgets from single_gpu_world_sms_per_rank (policy.h;
# H200: 32 SMs a rank at W = 2, 10 at W = 4, 4 at W = 8, instead of floor(132 / W)). The
# late-rank tests (tests/test_gpu_late_rank.cu, at the world's budgets now; predicted to pass
# where run G's decode cases at the old budgets timed out), then the whole GPU suite.
set -u
T0=$(date +%s)
t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export NCCL_NVLS_ENABLE=0 CUDA_MODULE_LOADING=EAGER
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DMOE_EP_BUILD_TESTS=ON -DPython3_EXECUTABLE=$(command -v python3) > /dev/null 2>&1
cmake --build build/gpu -j16 > $OUT/build.log 2>&1 || { echo "build failed"; grep -B2 -A10 error $OUT/build.log | head -40; }
t built
MOE_EP_TIMEOUT_S=10 ctest --test-dir build/gpu --output-on-failure --timeout 60 -R 'GpuLateRank|WorldBudget|SingleGpuWorldLimits' > $OUT/ctest-late.log 2>&1
echo "late rc $?"; grep -E "tests passed|Failed|\*\*\*|Test +#" $OUT/ctest-late.log | head -20
t late
MOE_EP_TIMEOUT_S=10 timeout $(( 585 - $(date +%s) + T0 )) ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 60 \
  -E 'GpuLateRank|SingleGpuWorldLimits' > $OUT/ctest-gpu.log 2>&1
echo "gpu rc $?"
grep -E "tests passed|Failed|\*\*\*Timeout|\*\*\*Failed|Not Run" $OUT/ctest-gpu.log | head -30
tail -3 $OUT/ctest-gpu.log
t end
