// Decode mode over several nodes (OpConfig::low_latency with ranks_per_node 0 < L < W,
// docs/decode-mode.md#several-nodes) on the CPU backend, against the plain-loop reference, bit
// for bit: for every dtype pair at W=4 (L=2) and W=8 (L=2, L=4), two rounds per op, the slabs,
// counts and sources equal the one-node decode reference (and a one-node run of the same inputs)
// and out equals the node-by-node reference; L=W is today's one-node decode combine; a case
// where the node grouping changes bits (so that a backend summing flat would fail); masked slots
// and a rank with no tokens; decode mode equals normal mode over the same nodes.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "testing/harness.h"
#include "testing/low_latency.h"
#include "testing/nodes.h"

namespace moe_ep {
namespace {

using testing::all_pairs;
using testing::check_low_latency_round;
using testing::DtypePair;
using testing::expect_same;
using testing::expect_same_low_latency;
using testing::InputSpec;
using testing::LowLatencyRound;
using testing::make_inputs;
using testing::node_token_counts;
using testing::Nodes;
using testing::nodes_name;
using testing::pair_name;
using testing::RankInput;
using testing::test_seed;

InputSpec spec_for(Nodes nodes, DtypePair pair) {
  return testing::nodes_spec(nodes, pair, /*low_latency=*/true);
}

// Runs `rounds` on one op per rank with `config`, checks every round against the reference (the
// slabs are the one-node decode reference's whatever L is; out is node by node) and the slabs
// against a one-node run of the same rounds. Returns the rounds run with `config`.
std::vector<LowLatencyRound> run_against_one_node(
    const OpConfig& config, int world_size, const std::vector<std::vector<RankInput>>& rounds) {
  const std::vector<LowLatencyRound> res =
      testing::run_low_latency_rounds(config, world_size, rounds);
  OpConfig one_node = config;
  one_node.ranks_per_node = 0;
  const std::vector<LowLatencyRound> flat =
      testing::run_low_latency_rounds(one_node, world_size, rounds);
  for (size_t i = 0; i < res.size(); ++i) {
    SCOPED_TRACE("round " + std::to_string(i + 1));
    check_low_latency_round(config, world_size, res[i], i + 1);
    for (int r = 0; r < world_size; ++r) {
      SCOPED_TRACE("low_latency_dispatch on rank " + std::to_string(r) + " against one node");
      expect_same_low_latency(res[i].received[r], flat[i].received[r]);
    }
  }
  return res;
}

std::vector<std::vector<RankInput>> two_rounds(const InputSpec& spec) {
  std::vector<std::vector<RankInput>> rounds;
  for (int i = 0; i < 2; ++i) {
    rounds.push_back(
        make_inputs(spec, test_seed() + 1000 * (i + 1), node_token_counts(spec.world_size, i)));
  }
  return rounds;
}

class LowLatencyNodes : public ::testing::TestWithParam<std::tuple<DtypePair, Nodes>> {};

TEST_P(LowLatencyNodes, SlabsAsOneNodeCombineNodeByNode) {
  const auto [pair, nodes] = GetParam();
  const InputSpec spec = spec_for(nodes, pair);
  const std::vector<LowLatencyRound> res =
      run_against_one_node(spec.config, nodes.world_size, two_rounds(spec));
  int64_t total = 0;
  for (const auto& r : res.front().received) {
    for (int32_t c : r.recv_count) total += c;
  }
  EXPECT_GT(total, 30);  // the case really moves data
}

INSTANTIATE_TEST_SUITE_P(AllDtypePairs, LowLatencyNodes,
                         ::testing::Combine(::testing::ValuesIn(all_pairs()),
                                            ::testing::Values(Nodes{4, 2}, Nodes{8, 2},
                                                              Nodes{8, 4})),
                         [](const auto& info) {
                           return pair_name(std::get<0>(info.param)) + "_" +
                                  nodes_name(std::get<1>(info.param));
                         });

// The node-by-node out of the reference from the decode round's slabs and expert outputs, and
// the one-node one (the same with ranks_per_node 0).
std::vector<uint16_t> reference_out(const OpConfig& c, int world_size, int ranks_per_node,
                                    const std::vector<RankInput>& inputs, int src) {
  OpConfig with = c;
  with.ranks_per_node = ranks_per_node;
  return testing::expect_low_latency_round(with, world_size, inputs).out[src];
}

// ranks_per_node = W is one node: out is today's decode combine, bit for bit as with 0.
TEST(LowLatencyNodes, RanksPerNodeEqualToWorldSizeIsOneNode) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    const InputSpec spec = spec_for({4, 4}, pair);
    const std::vector<LowLatencyRound> res = run_against_one_node(spec.config, 4, two_rounds(spec));
    for (size_t i = 0; i < res.size(); ++i) {
      for (int s = 0; s < 4; ++s) {
        expect_same("out of rank " + std::to_string(s) + " in round " + std::to_string(i + 1),
                    res[i].out[s], reference_out(spec.config, 4, 0, res[i].inputs, s));
      }
    }
  }
}

// The node grouping is not the rank order: here the node-by-node sum (remote partials rounded to
// bf16 and re-encoded) differs from the flat one, and the op gives the node-by-node bits.
TEST(LowLatencyNodes, NodeGroupingChangesBits) {
  for (const DtypePair pair : {DtypePair{DispatchDtype::bf16, CombineDtype::bf16},
                               DtypePair{DispatchDtype::fp8, CombineDtype::fp8}}) {
    SCOPED_TRACE(pair_name(pair));
    const InputSpec spec = spec_for({4, 2}, pair);
    const std::vector<RankInput> inputs = make_inputs(spec, test_seed(), {16, 16, 16, 16});
    const LowLatencyRound res = testing::run_low_latency_rounds(spec.config, 4, {inputs}).front();
    check_low_latency_round(spec.config, 4, res);
    int64_t differing = 0;
    for (int s = 0; s < 4; ++s) {
      const std::vector<uint16_t> flat = reference_out(spec.config, 4, 0, inputs, s);
      for (size_t i = 0; i < flat.size(); ++i) differing += flat[i] != res.out[s][i];
    }
    // Without such elements the case could not tell the two rules apart.
    EXPECT_GT(differing, 0) << "the node-by-node combine equals the flat one on every element";
  }
}

// Masked slots, tokens with every slot masked (zeros), a rank with no tokens and a rank whose
// experts nobody names, so that one node receives only from its other rank.
TEST(LowLatencyNodes, MaskedSlotsAndRanksWithoutTokens) {
  InputSpec spec = spec_for({4, 2}, {DispatchDtype::fp8, CombineDtype::bf16});
  spec.exclude_dest = 3;  // node 1 holds only rank 2's experts
  spec.mask_prob = 0.3;
  std::vector<std::vector<RankInput>> rounds = {make_inputs(spec, test_seed(), {9, 4, 0, 12}),
                                                make_inputs(spec, test_seed() + 1, {0, 16, 3, 5})};
  rounds[0][0].mask_token(2);
  rounds[0][3].mask_token(0);
  const std::vector<LowLatencyRound> res = run_against_one_node(spec.config, 4, rounds);
  for (const LowLatencyRound& round : res) {
    for (int32_t c : round.received[3].recv_count) EXPECT_EQ(c, 0);
  }
  for (const auto& [rank, token] : std::vector<std::pair<int, int>>{{0, 2}, {3, 0}}) {
    const uint16_t* row = res[0].out[rank].data() + token * spec.config.hidden;
    for (int64_t j = 0; j < spec.config.hidden; ++j) ASSERT_EQ(row[j], 0);
  }
}

// Decode mode equals normal mode over the same nodes when normal mode's y is formed from the same
// expert outputs (docs/decode-mode.md, "Why it equals normal mode").
TEST(LowLatencyNodes, DecodeModeEqualsNormalMode) {
  for (const DtypePair& pair : all_pairs()) {
    for (const Nodes nodes : {Nodes{4, 2}, Nodes{8, 4}}) {
      SCOPED_TRACE(pair_name(pair) + " " + nodes_name(nodes));
      InputSpec spec = spec_for(nodes, pair);
      spec.mask_prob = 0.1;
      testing::check_modes_agree(
          spec.config, nodes.world_size,
          make_inputs(spec, test_seed(), node_token_counts(nodes.world_size, 0)));
    }
  }
}

}  // namespace
}  // namespace moe_ep
