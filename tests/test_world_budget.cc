// The SM budget of a rank in the one-GPU test world (single_gpu_world_sms_per_rank,
// src/backends/cuda/policy.h), checked on the CPU: for every world size up to the backend's
// limit on a GPU of 132 SMs (H200) and of 78 and 8, the budget leaves an SM with nothing of the
// other ranks on it even when each holds two calls' worth of blocks on SMs of their own
// ((W - 1) * (4b + 2) <= SMs - 1), it is the largest such budget, and it is at least 1.
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/policy.h"

namespace moe_ep::cuda_backend {
namespace {

bool leaves_an_sm(int sms, int world, int b) { return (world - 1) * (4 * b + 2) <= sms - 1; }

TEST(WorldBudget, LargestBudgetThatLeavesAnSmForALateRank) {
  for (int sms : {132, 78, 8}) {
    for (int world = 1; world <= Policy::kMaxPeers && world <= sms; ++world) {
      SCOPED_TRACE("SMs=" + std::to_string(sms) + " W=" + std::to_string(world));
      const int b = single_gpu_world_sms_per_rank(sms, world);
      ASSERT_GE(b, 1);
      ASSERT_LE(b, sms);
      if (world == 1) {
        EXPECT_EQ(b, sms);
        continue;
      }
      if (leaves_an_sm(sms, world, 1)) {
        EXPECT_TRUE(leaves_an_sm(sms, world, b));
        EXPECT_FALSE(leaves_an_sm(sms, world, b + 1));
      } else {
        EXPECT_EQ(b, 1);  // no budget leaves one: the least (the world warns)
      }
    }
  }
  // The H200's figures the documentation names.
  EXPECT_EQ(single_gpu_world_sms_per_rank(132, 2), 32);
  EXPECT_EQ(single_gpu_world_sms_per_rank(132, 4), 10);
  EXPECT_EQ(single_gpu_world_sms_per_rank(132, 8), 4);
}

}  // namespace
}  // namespace moe_ep::cuda_backend
