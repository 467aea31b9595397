// Routing and layout math (src/core/routing.h) on hand-written tables: expert ownership, one send
// per destination rank however many of its experts a token names, masked slots, the canonical
// order of the send lists and receive offsets, the local slot view, rows per local expert, and
// the messages of the validation scans.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/routing.h"
#include "formats/scalar.h"

namespace moe_ep {
namespace {

using Ids = std::vector<int32_t>;

// W=2, E=4, K=2: rank 0 owns experts {0, 1}, rank 1 owns {2, 3}.
const RoutingShape kShape{2, 4, 2};
// clang-format off
const Ids kTable = {
     0,  1,   // t0: both experts on rank 0 -> rank 0 once
     1,  2,   // t1: ranks 0 and 1
    -1,  3,   // t2: masked slot, rank 1
    -1, -1,   // t3: every slot masked -> nowhere
     3,  0,   // t4: ranks 0 and 1 (slot order does not matter)
};
// clang-format on

TEST(Routing, OwnerAndExpertsPerRank) {
  const RoutingShape shape{3, 12, 5};
  EXPECT_EQ(shape.experts_per_rank(), 4);
  EXPECT_EQ(shape.owner(0), 0);
  EXPECT_EQ(shape.owner(3), 0);
  EXPECT_EQ(shape.owner(4), 1);
  EXPECT_EQ(shape.owner(11), 2);
}

TEST(Routing, TokenGoesToOncePerDestination) {
  EXPECT_TRUE(token_goes_to(kShape, &kTable[0], 0));
  EXPECT_FALSE(token_goes_to(kShape, &kTable[0], 1));
  EXPECT_TRUE(token_goes_to(kShape, &kTable[2], 0));
  EXPECT_TRUE(token_goes_to(kShape, &kTable[2], 1));
  EXPECT_FALSE(token_goes_to(kShape, &kTable[4], 0));  // the masked slot is not expert -1 / 0
  EXPECT_TRUE(token_goes_to(kShape, &kTable[4], 1));
  EXPECT_FALSE(token_goes_to(kShape, &kTable[6], 0));
  EXPECT_FALSE(token_goes_to(kShape, &kTable[6], 1));
}

TEST(Routing, PlanSendsDedupsAndKeepsTokenOrder) {
  const SendPlan plan = plan_sends(kShape, kTable.data(), 5);
  ASSERT_EQ(plan.tokens_per_dest.size(), 2u);
  EXPECT_EQ(plan.tokens_per_dest[0], Ids({0, 1, 4}));  // t0 once although it names 0 and 1
  EXPECT_EQ(plan.tokens_per_dest[1], Ids({1, 2, 4}));
  EXPECT_EQ(plan.count(0), 3);
  EXPECT_EQ(plan.count(1), 3);
}

TEST(Routing, PlanSendsWithZeroTokensAndAllMasked) {
  const SendPlan empty = plan_sends(kShape, nullptr, 0);
  EXPECT_EQ(empty.count(0), 0);
  EXPECT_EQ(empty.count(1), 0);
  const Ids masked = {-1, -1, -1, -1};
  const SendPlan none = plan_sends(kShape, masked.data(), 2);
  EXPECT_EQ(none.count(0), 0);
  EXPECT_EQ(none.count(1), 0);
}

TEST(Routing, PlanSendsThreeRanksTopFive) {
  // W=3, E=12, K=5: experts 0-3 on rank 0, 4-7 on rank 1, 8-11 on rank 2.
  const RoutingShape shape{3, 12, 5};
  // clang-format off
  const Ids table = {
      0,  1,  2,  3,  4,   // ranks 0, 1
     11, -1,  8, -1, 10,   // rank 2 only, three experts there
     -1, -1, -1, -1,  7,   // rank 1
  };
  // clang-format on
  const SendPlan plan = plan_sends(shape, table.data(), 3);
  EXPECT_EQ(plan.tokens_per_dest[0], Ids({0}));
  EXPECT_EQ(plan.tokens_per_dest[1], Ids({0, 2}));
  EXPECT_EQ(plan.tokens_per_dest[2], Ids({1}));
}

TEST(Routing, LocalSlotsKeepOwnedSlotsOnly) {
  Ids out(2);
  local_slots(kShape, &kTable[8], 0, out.data());  // t4 = {3, 0}
  EXPECT_EQ(out, Ids({-1, 0}));
  local_slots(kShape, &kTable[8], 1, out.data());
  EXPECT_EQ(out, Ids({1, -1}));                    // expert 3 is local expert 1 of rank 1
  local_slots(kShape, &kTable[4], 1, out.data());  // t2 = {-1, 3}
  EXPECT_EQ(out, Ids({-1, 1}));
  local_slots(kShape, &kTable[6], 0, out.data());  // every slot masked
  EXPECT_EQ(out, Ids({-1, -1}));
}

TEST(Routing, RecvOffsetsAreCanonical) {
  // counts[src][dest]: rank 0 sends 3 rows to rank 0 and 1 to rank 1; rank 1 sends 2 and 0;
  // rank 2 sends 4 and 5.
  const std::vector<std::vector<int64_t>> counts = {{3, 1}, {2, 0}, {4, 5}};
  EXPECT_EQ(recv_offset(counts, 0, 0), 0);
  EXPECT_EQ(recv_offset(counts, 1, 0), 3);
  EXPECT_EQ(recv_offset(counts, 2, 0), 5);
  EXPECT_EQ(recv_offset(counts, 0, 1), 0);
  EXPECT_EQ(recv_offset(counts, 1, 1), 1);
  EXPECT_EQ(recv_offset(counts, 2, 1), 1);  // rank 1 sent nothing to rank 1
}

TEST(Routing, CountRowsPerLocalExpert) {
  const RoutingShape shape{2, 6, 3};  // 3 local experts per rank
  // clang-format off
  const Ids local = {
       0,  2, -1,
      -1, -1,  2,
       1,  1, -1,   // a duplicate counts once per row
      -1, -1, -1,
  };
  // clang-format on
  Ids counts(3, 99);
  count_rows_per_local_expert(shape, local.data(), 4, counts.data());
  EXPECT_EQ(counts, Ids({1, 1, 2}));
  count_rows_per_local_expert(shape, local.data(), 0, counts.data());
  EXPECT_EQ(counts, Ids({0, 0, 0}));
}

TEST(Routing, FindBadTopkRange) {
  const RoutingShape shape{2, 8, 2};
  EXPECT_EQ(find_bad_topk(shape, kTable.data(), 5), "");
  const Ids low = {0, 1, 2, -2};
  EXPECT_EQ(find_bad_topk(shape, low.data(), 2),
            "topk_idx[1][1]=-2 is out of range: expert ids must be in [-1, 8)");
  const Ids high = {8, 1};
  EXPECT_EQ(find_bad_topk(shape, high.data(), 1),
            "topk_idx[0][0]=8 is out of range: expert ids must be in [-1, 8)");
  // The range check runs without the duplicate check too.
  EXPECT_NE(find_bad_topk(shape, high.data(), 1, /*check_duplicates=*/false), "");
}

TEST(Routing, FindBadTopkDuplicates) {
  const RoutingShape shape{2, 8, 3};
  const Ids dup = {0, 1, 2, 5, -1, 5};
  EXPECT_EQ(find_bad_topk(shape, dup.data(), 2),
            "topk_idx[1] names expert 5 twice (slots 0 and 2): each expert may appear once per "
            "token");
  EXPECT_EQ(find_bad_topk(shape, dup.data(), 2, /*check_duplicates=*/false), "");
  const Ids masked_twice = {-1, -1, 3};  // -1 may repeat
  EXPECT_EQ(find_bad_topk(shape, masked_twice.data(), 1), "");
  const Ids zero_twice = {-1, 0, 0};  // expert 0 is an expert like any other
  EXPECT_EQ(find_bad_topk(shape, zero_twice.data(), 1),
            "topk_idx[0] names expert 0 twice (slots 1 and 2): each expert may appear once per "
            "token");
}

TEST(Routing, FindNonFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> w = {0.5f, 1.0f, 0.25f, inf};
  EXPECT_EQ(find_nonfinite_f32("topk_weights", w.data(), 2, 2),
            "topk_weights[1][1]=inf is not finite (validation mode, MOE_EP_VALIDATE=1)");
  EXPECT_EQ(find_nonfinite_f32("topk_weights", w.data(), 1, 2), "");
  std::vector<uint16_t> x(6, formats::float_to_bf16(1.0f));
  EXPECT_EQ(find_nonfinite_bf16("x", x.data(), 2, 3), "");
  x[4] = formats::kBf16NaN;
  const std::string message = find_nonfinite_bf16("x", x.data(), 2, 3);
  EXPECT_NE(message.find("x[1][1]=nan"), std::string::npos) << message;
}

}  // namespace
}  // namespace moe_ep
