// The SM budget of a rank in the one-GPU test world (single_gpu_world_sms_per_rank,
// src/backends/cuda/policy.h), checked on the CPU: for every world size up to the backend's
// limit on a GPU of 132 SMs (H200) and of 78 and 8, the budget leaves an SM with nothing of the
// other ranks on it even when each holds two calls' worth of blocks on SMs of their own
// (single_gpu_world_leaves_an_sm: (W - 1) * 2 * (4b + 1) <= SMs - 1 at 4 data blocks a SM,
// checked here at its values), it is the largest such budget, and it is at least 1.
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
  // The predicate itself, at 4 data blocks a SM: 7 waiting ranks of 2 SMs (8 data blocks each,
  // two calls of 9 blocks) hold at most 7 * 18 = 126 of 132 SMs (6 stay free), of 3 SMs 7 * 26 =
  // 182; a world of one leaves the whole GPU.
  static_assert(Policy::kDataBlocksPerSm == 4, "the figures below are those of 4 blocks a SM");
  EXPECT_TRUE(single_gpu_world_leaves_an_sm(132, 8, 2));
  EXPECT_FALSE(single_gpu_world_leaves_an_sm(132, 8, 3));
  EXPECT_TRUE(single_gpu_world_leaves_an_sm(132, 1, 132));
  // The H200's figures the documentation names (64, 20 and 8 data blocks a rank).
  EXPECT_EQ(single_gpu_world_sms_per_rank(132, 2), 16);
  EXPECT_EQ(single_gpu_world_sms_per_rank(132, 4), 5);
  EXPECT_EQ(single_gpu_world_sms_per_rank(132, 8), 2);
}

}  // namespace
}  // namespace moe_ep::cuda_backend
