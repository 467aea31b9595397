// The SM budget's arithmetic on the device (label gpu, skipped without a GPU): every kernel whose
// launches the budget bounds in blocks (Policy: N SMs are N * blocks_per_sm blocks) fits that
// many blocks on one SM of this GPU, with its registers and shared memory as compiled
// (load_budgeted_kernel, cudaOccupancyMaxActiveBlocksPerMultiprocessor). A kernel whose register
// count grows past what its policy assumes fails here instead of silently holding more SMs than
// an op's num_sms (v34 in docs/perf-history.md).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/cuda/launch.h"
#include "testing/gpu_world.h"

namespace moe_ep::cuda_backend {
namespace {

TEST(GpuPolicy, BudgetedKernelsFitTheirBlocksPerSm) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  preload_kernels(0);
  const std::vector<std::string> overruns = budget_overruns();
  std::string all;
  for (const std::string& what : overruns) all += what + "; ";
  EXPECT_TRUE(overruns.empty()) << all;
}

}  // namespace
}  // namespace moe_ep::cuda_backend
