// The SM budget of a rank in the one-GPU test world (single_gpu_world_sms_per_rank,
// src/backends/cuda/policy.h), checked on the CPU: for every world size up to the backend's
// limit on a GPU of 132 SMs (H200) and of 78 and 8, the budget leaves an SM with nothing of the
// other ranks on it even when each holds two calls' worth of blocks on SMs of their own
// (single_gpu_world_leaves_an_sm: (W - 1) * (4b + 2) <= SMs - 1, checked here at its values),
// it is the largest such budget, and it is at least 1.
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/policy.h"

namespace moe_ep::cuda_backend {
namespace {

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
      if (single_gpu_world_leaves_an_sm(sms, world, 1)) {
        EXPECT_TRUE(single_gpu_world_leaves_an_sm(sms, world, b));
        EXPECT_FALSE(single_gpu_world_leaves_an_sm(sms, world, b + 1));
      } else {
        EXPECT_EQ(b, 1);  // no budget leaves one: the least (the world warns)
      }
    }
  }
  // The predicate itself: 7 waiting ranks of 4 SMs hold at most 7 * 18 = 126 of 132 SMs (6 stay
  // free), of 5 SMs 7 * 22 = 154; a world of one leaves the whole GPU.
  EXPECT_TRUE(single_gpu_world_leaves_an_sm(132, 8, 4));
  EXPECT_FALSE(single_gpu_world_leaves_an_sm(132, 8, 5));
  EXPECT_TRUE(single_gpu_world_leaves_an_sm(132, 1, 132));
  // The H200's figures the documentation names.
  EXPECT_EQ(single_gpu_world_sms_per_rank(132, 2), 32);
  EXPECT_EQ(single_gpu_world_sms_per_rank(132, 4), 10);
  EXPECT_EQ(single_gpu_world_sms_per_rank(132, 8), 4);
}

}  // namespace
}  // namespace moe_ep::cuda_backend
