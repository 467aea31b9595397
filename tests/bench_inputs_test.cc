// The inputs of `moe-ep bench` (tools/bench_inputs.h): every routing gives each token K distinct
// experts in range, group-limited routing keeps a token inside its M groups, Zipf routing skews
// the experts the same way on every rank, inputs replay from (seed, rank), and the balance counts
// match counts made by hand. The CLI tests (cli_bench_routing_*) run checked benches with them.
#include "bench_inputs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "testing/format_refs.h"

namespace moe_ep::cli {
namespace {

using formats::test_seed;

Routing zipf(double s) {
  Routing r;
  r.kind = Routing::Kind::kZipf;
  r.zipf_s = s;
  return r;
}

Routing groups(int g, int m) {
  Routing r;
  r.kind = Routing::Kind::kGroups;
  r.groups = g;
  r.groups_per_token = m;
  return r;
}

InputShape shape_of(int ranks, int tokens, int experts, int topk, Routing routing, uint64_t seed) {
  InputShape s;
  s.ranks = ranks;
  s.tokens = tokens;
  s.hidden = 8;  // x plays no part here
  s.experts = experts;
  s.topk = topk;
  s.routing = routing;
  s.seed = seed;
  return s;
}

std::vector<RankInputs> all_ranks(const InputShape& s) {
  std::vector<RankInputs> inputs;
  for (int r = 0; r < s.ranks; ++r) inputs.push_back(make_inputs(s, r));
  return inputs;
}

TEST(BenchRouting, EveryTokenGetsKDistinctExpertsInRange) {
  const uint64_t seed = test_seed();
  // groups:8:1 with K = E / G: a token takes its one group's every expert.
  for (const Routing& routing :
       {Routing{}, zipf(1.2), zipf(8.0), groups(8, 4), groups(8, 1), groups(1, 1)}) {
    for (double masked : {0.0, 0.25}) {
      InputShape s = shape_of(4, 200, 64, 8, routing, seed);
      s.masked_fraction = masked;
      int64_t masked_slots = 0;
      for (int rank = 0; rank < s.ranks; ++rank) {
        const RankInputs in = make_inputs(s, rank);
        ASSERT_EQ(in.topk_idx.size(), static_cast<size_t>(s.tokens * s.topk));
        for (int t = 0; t < s.tokens; ++t) {
          std::set<int32_t> seen;
          for (int j = 0; j < s.topk; ++j) {
            const int32_t e = in.topk_idx[t * s.topk + j];
            if (e == -1) {
              ++masked_slots;
              continue;
            }
            ASSERT_TRUE(e >= 0 && e < s.experts)
                << to_string(routing) << " rank " << rank << " token " << t << ": " << e;
            ASSERT_TRUE(seen.insert(e).second) << to_string(routing) << " rank " << rank
                                               << " token " << t << ": " << e << " twice";
          }
        }
      }
      // 6400 slots: at 0.25 the count's standard deviation is about 35 around 1600.
      if (masked == 0.0) {
        EXPECT_EQ(masked_slots, 0) << to_string(routing);
      } else {
        EXPECT_GT(masked_slots, 1300) << to_string(routing);
        EXPECT_LT(masked_slots, 1900) << to_string(routing);
      }
    }
  }
}

TEST(BenchRouting, GroupsKeepEachTokenInsideMGroups) {
  // DeepSeek-V3's shape of the rule at W = 8: 8 groups of 8 experts (one rank's each), 4 a token.
  const InputShape s = shape_of(8, 300, 64, 8, groups(8, 4), test_seed());
  const std::vector<RankInputs> inputs = all_ranks(s);
  std::vector<int64_t> chosen(8, 0);  // [G] tokens whose experts use group g
  for (const RankInputs& in : inputs) {
    for (int t = 0; t < s.tokens; ++t) {
      std::set<int32_t> used;
      for (int j = 0; j < s.topk; ++j) used.insert(in.topk_idx[t * s.topk + j] / 8);
      EXPECT_LE(used.size(), 4u) << "token " << t;
      for (int32_t g : used) ++chosen[g];
    }
  }
  // Every group serves some tokens: a group is left out of a token's 4 with probability 1/2, so
  // of all 2400 tokens with probability 2^-2400.
  for (int g = 0; g < 8; ++g) EXPECT_GT(chosen[g], 0) << "group " << g;
  // Each token reaches at most 4 ranks (a group is a rank's experts here).
  const std::vector<int64_t> route = count_route_rows(s, inputs);
  for (int src = 0; src < s.ranks; ++src) {
    int64_t rows = 0;
    for (int r = 0; r < s.ranks; ++r) rows += route[src * s.ranks + r];
    EXPECT_LE(rows, 4 * s.tokens) << "rank " << src;
    EXPECT_GE(rows, s.tokens) << "rank " << src;  // every token goes somewhere
  }
  // One group a token and K = E / G: the token's experts are that group, whole.
  const InputShape whole = shape_of(2, 50, 64, 8, groups(8, 1), test_seed());
  for (const RankInputs& in : all_ranks(whole)) {
    for (int t = 0; t < whole.tokens; ++t) {
      std::vector<int32_t> ids(in.topk_idx.begin() + t * 8, in.topk_idx.begin() + t * 8 + 8);
      std::sort(ids.begin(), ids.end());
      for (int j = 0; j < 8; ++j) EXPECT_EQ(ids[j], ids[0] / 8 * 8 + j) << "token " << t;
    }
  }
}

TEST(BenchRouting, ZipfSkewsTheSameExpertsOnEveryRank) {
  const uint64_t seed = test_seed();
  // E = 64, K = 4, 2000 tokens a rank: 125 (token, expert) pairs an expert on average.
  const InputShape skewed = shape_of(2, 2000, 64, 4, zipf(1.2), seed);
  const InputShape flat = shape_of(2, 2000, 64, 4, Routing{}, seed);
  std::vector<int64_t> count[2];  // [rank][E]
  const std::vector<RankInputs> inputs = all_ranks(skewed);
  for (int rank = 0; rank < 2; ++rank) {
    count[rank].assign(64, 0);
    for (int32_t e : inputs[rank].topk_idx) ++count[rank][e];
  }
  // The most popular expert has weight 1 against 2^-1.2 = 0.44 for the next: it is in about 78%
  // of the tokens, the next in about 49% (a simulation of these draws, 20000 tokens), near 580
  // tokens apart against standard deviations near 20.
  const auto top = [](const std::vector<int64_t>& c) {
    return std::max_element(c.begin(), c.end()) - c.begin();
  };
  EXPECT_EQ(top(count[0]), top(count[1])) << "the hot expert differs between ranks";
  // Ranks draw their own tokens: the same popularity, not the same routing.
  EXPECT_NE(inputs[0].topk_idx, inputs[1].topk_idx);
  // The busiest expert against the mean: about 1550 / 125 = 12x here; uniform routing's
  // busiest of 64 experts sits about 3 standard deviations (11 each) above 125, near 1.3x.
  const Balance b = count_balance(skewed, inputs, count_route_rows(skewed, inputs));
  EXPECT_DOUBLE_EQ(b.expert_rows_mean, 2.0 * 2000 * 4 / 64);
  EXPECT_GT(b.expert_rows_max, 6 * b.expert_rows_mean);
  const std::vector<RankInputs> flat_inputs = all_ranks(flat);
  const Balance u = count_balance(flat, flat_inputs, count_route_rows(flat, flat_inputs));
  EXPECT_LT(u.expert_rows_max, 1.6 * u.expert_rows_mean);
}

TEST(BenchRouting, InputsReplayFromSeedAndRank) {
  const uint64_t seed = test_seed();
  for (const Routing& routing : {Routing{}, zipf(1.0), groups(4, 2)}) {
    InputShape s = shape_of(3, 40, 32, 4, routing, seed);
    s.masked_fraction = 0.1;
    const RankInputs a = make_inputs(s, 2), b = make_inputs(s, 2);
    EXPECT_EQ(a.topk_idx, b.topk_idx) << to_string(routing);
    EXPECT_EQ(a.topk_weights, b.topk_weights) << to_string(routing);
    EXPECT_EQ(a.x, b.x) << to_string(routing);
    EXPECT_NE(a.topk_idx, make_inputs(s, 1).topk_idx) << to_string(routing);
    s.seed = seed + 1;
    EXPECT_NE(a.topk_idx, make_inputs(s, 2).topk_idx) << to_string(routing);
  }
}

TEST(BenchRouting, BalanceCountsByHand) {
  // W = 2, E = 4 (experts 0-1 on rank 0, 2-3 on rank 1), K = 2, 2 tokens a rank.
  const InputShape s = shape_of(2, 2, 4, 2, Routing{}, 0);
  std::vector<RankInputs> inputs(2);
  inputs[0].topk_idx = {0, 1, /**/ 1, 3};   // token 0 -> rank 0; token 1 -> ranks 0 and 1
  inputs[1].topk_idx = {2, -1, /**/ 1, 2};  // token 0 -> rank 1; token 1 -> ranks 0 and 1
  const std::vector<int64_t> route = count_route_rows(s, inputs);
  EXPECT_EQ(route, (std::vector<int64_t>{2, 1, 1, 2}));
  const Balance b = count_balance(s, inputs, route);
  EXPECT_EQ(b.recv_rows_max, 3);  // rank 0 and rank 1 receive 3 rows each
  EXPECT_DOUBLE_EQ(b.recv_rows_mean, 3.0);
  EXPECT_EQ(b.expert_rows_max, 3);  // expert 1: rank 0's tokens 0 and 1, rank 1's token 1
  EXPECT_DOUBLE_EQ(b.expert_rows_mean, 7.0 / 4);  // 7 unmasked slots over 4 experts
}

TEST(BenchRouting, NamesAreWhatRoutingTakes) {
  EXPECT_EQ(to_string(Routing{}), "uniform");
  EXPECT_EQ(to_string(zipf(1.2)), "zipf:1.2");
  EXPECT_EQ(to_string(zipf(8)), "zipf:8");
  EXPECT_EQ(to_string(groups(8, 4)), "groups:8:4");
}

}  // namespace
}  // namespace moe_ep::cli
