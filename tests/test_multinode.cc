// Several nodes (OpConfig::ranks_per_node L < W, docs/design.md#several-nodes) on the CPU
// backend: for every dtype pair at W=4 (L=2, L=1) and W=8 (L=2, L=4), dispatch outputs equal a
// one-node run of the same inputs bit for bit and combine equals the node-by-node reference bit
// for bit; L=W is today's one-node combine; a case where the node order changes bits (so that a
// backend summing flat would fail); pre-quantized input and ranks without tokens across nodes;
// bad ranks_per_node values rejected on every rank; decode mode over several nodes created.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "testing/harness.h"
#include "testing/nodes.h"

namespace moe_ep {
namespace {

using testing::all_pairs;
using testing::check_round;
using testing::DtypePair;
using testing::expect_error;
using testing::expect_same;
using testing::expect_same_dispatch;
using testing::Expected;
using testing::InputSpec;
using testing::make_inputs;
using testing::node_token_counts;
using testing::Nodes;
using testing::nodes_name;
using testing::pair_name;
using testing::RankInput;
using testing::RankOutcome;
using testing::RoundResult;
using testing::run_once;
using testing::run_ranks_outcomes;
using testing::test_seed;

InputSpec spec_for(Nodes nodes, DtypePair pair) {
  return testing::nodes_spec(nodes, pair, /*low_latency=*/false);
}

// Runs `inputs` with `config` and with the same config on one node (ranks_per_node 0), checks
// the first against the reference and its dispatch outputs against the one-node run's.
RoundResult run_against_one_node(const OpConfig& config, int world_size,
                                 const std::vector<RankInput>& inputs) {
  const RoundResult res = run_once(config, world_size, inputs);
  check_round(config, world_size, res);
  OpConfig one_node = config;
  one_node.ranks_per_node = 0;
  const RoundResult flat = run_once(one_node, world_size, inputs);
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("dispatch on rank " + std::to_string(r) + " against the one-node run");
    expect_same_dispatch(res.received[r], flat.received[r]);
  }
  return res;
}

class MultiNode : public ::testing::TestWithParam<std::tuple<DtypePair, Nodes>> {};

TEST_P(MultiNode, DispatchAsOneNodeCombineNodeByNode) {
  const auto [pair, nodes] = GetParam();
  const InputSpec spec = spec_for(nodes, pair);
  const std::vector<RankInput> inputs =
      make_inputs(spec, test_seed(), node_token_counts(nodes.world_size));
  const RoundResult res = run_against_one_node(spec.config, nodes.world_size, inputs);
  int64_t total = 0;
  for (const auto& r : res.received) total += r.num_recv;
  EXPECT_GT(total, 30);  // the case really moves data
}

INSTANTIATE_TEST_SUITE_P(AllDtypePairs, MultiNode,
                         ::testing::Combine(::testing::ValuesIn(all_pairs()),
                                            ::testing::Values(Nodes{4, 2}, Nodes{4, 1}, Nodes{8, 2},
                                                              Nodes{8, 4})),
                         [](const auto& info) {
                           return pair_name(std::get<0>(info.param)) + "_" +
                                  nodes_name(std::get<1>(info.param));
                         });

// ranks_per_node = W is one node: combine is the rank-ascending sum, bit for bit as with 0.
TEST(MultiNode, RanksPerNodeEqualToWorldSizeIsOneNode) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    const InputSpec spec = spec_for({4, 4}, pair);
    const std::vector<RankInput> inputs = make_inputs(spec, test_seed(), node_token_counts(4));
    const RoundResult res = run_against_one_node(spec.config, 4, inputs);
    const Expected flat = testing::expect_round(spec.config, 4, inputs);
    const reference::Shape shape = testing::reference_shape(spec.config, 4);
    for (int s = 0; s < 4; ++s) {
      const std::vector<uint16_t> want = reference::flat_combine(shape, pair.combine, flat.received,
                                                                 flat.y, s, inputs[s].num_tokens);
      expect_same("out of rank " + std::to_string(s), res.out[s], want);
    }
  }
}

// The node order is not the rank order: here the node-by-node sum (remote partials rounded to
// bf16 and re-encoded) differs from the flat one, and the op gives the node-by-node bits.
TEST(MultiNode, NodeOrderChangesBits) {
  for (const DtypePair pair : {DtypePair{DispatchDtype::bf16, CombineDtype::bf16},
                               DtypePair{DispatchDtype::fp8, CombineDtype::fp8}}) {
    SCOPED_TRACE(pair_name(pair));
    const InputSpec spec = spec_for({4, 2}, pair);
    const std::vector<RankInput> inputs = make_inputs(spec, test_seed(), {16, 16, 16, 16});
    const Expected want = testing::expect_round(spec.config, 4, inputs);
    const RoundResult res = run_once(spec.config, 4, inputs);
    check_round(spec.config, 4, res);
    const reference::Shape shape = testing::reference_shape(spec.config, 4);
    int64_t differing = 0;
    for (int s = 0; s < 4; ++s) {
      const std::vector<uint16_t> flat = reference::flat_combine(shape, pair.combine, want.received,
                                                                 want.y, s, inputs[s].num_tokens);
      for (size_t i = 0; i < flat.size(); ++i) differing += flat[i] != res.out[s][i];
    }
    // Without such elements the case could not tell the two rules apart.
    EXPECT_GT(differing, 0) << "the node-by-node combine equals the flat one on every element";
  }
}

TEST(MultiNode, PrequantizedInputForwardedUnchanged) {
  for (const DispatchDtype dispatch : {DispatchDtype::fp8, DispatchDtype::fp4}) {
    SCOPED_TRACE(short_name(dispatch));
    InputSpec spec = spec_for({8, 2}, {dispatch, CombineDtype::fp8});
    spec.prequantized = true;
    run_against_one_node(spec.config, 8, make_inputs(spec, test_seed(), node_token_counts(8)));
  }
}

TEST(MultiNode, NodeThatReceivesNothingAndMaskedTokens) {
  InputSpec spec = spec_for({4, 2}, {DispatchDtype::fp8, CombineDtype::bf16});
  spec.exclude_dest = 3;  // node 1 holds only rank 2's experts
  spec.mask_prob = 0.3;
  std::vector<RankInput> inputs = make_inputs(spec, test_seed(), {9, 4, 0, 12});
  inputs[0].mask_token(2);
  inputs[3].mask_token(0);
  const RoundResult res = run_against_one_node(spec.config, 4, inputs);
  EXPECT_EQ(res.received[3].num_recv, 0);
  for (const auto& [rank, token] : std::vector<std::pair<int, int>>{{0, 2}, {3, 0}}) {
    const uint16_t* row = res.out[rank].data() + token * spec.config.hidden;
    for (int64_t j = 0; j < spec.config.hidden; ++j) ASSERT_EQ(row[j], 0);
  }
}

TEST(MultiNode, SeveralRoundsOnOneOp) {
  const InputSpec spec = spec_for({8, 4}, {DispatchDtype::fp4, CombineDtype::int8_e3m4});
  std::vector<std::vector<RankInput>> rounds;
  for (int i = 0; i < 3; ++i) {
    std::vector<int64_t> tokens = node_token_counts(8);
    for (int64_t& t : tokens) t = (t + 5 * i) % 17;
    rounds.push_back(make_inputs(spec, test_seed() + 1000 * (i + 1), tokens));
  }
  const std::vector<RoundResult> results = testing::run_rounds(spec.config, 8, rounds);
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE("round " + std::to_string(i));
    check_round(spec.config, 8, results[i], i + 1);
  }
}

// ---------------------------------------------------------------------------------------------
// Rejections: at creation, on every rank, naming the value.

std::vector<RankOutcome> create_everywhere(const OpConfig& config, int world_size) {
  return run_ranks_outcomes(
      world_size, [&](int, const std::shared_ptr<Communicator>& comm) { create_op(comm, config); });
}

TEST(MultiNode, BadRanksPerNodeRejectedOnEveryRank) {
  const std::vector<std::pair<int, std::string>> cases = {
      {3, "ranks_per_node=3 does not divide world_size=4"},
      {-2, "ranks_per_node=-2 must be >= 0"},
      {8, "ranks_per_node=8 exceeds world_size=4"}};
  for (const auto& [value, message] : cases) {
    SCOPED_TRACE(message);
    OpConfig config = spec_for({4, value}, {DispatchDtype::bf16, CombineDtype::bf16}).config;
    const std::vector<RankOutcome> outcomes = create_everywhere(config, 4);
    for (int r = 0; r < 4; ++r)
      expect_error(outcomes[r], ErrorCode::kInvalidArgument, {message}, r);
  }
}

// Decode mode over several nodes is built on the CPU backend (tests/test_low_latency_nodes.cc).
TEST(MultiNode, DecodeModeOverSeveralNodesCreatedOnEveryRank) {
  OpConfig config = spec_for({4, 2}, {DispatchDtype::fp8, CombineDtype::bf16}).config;
  config.low_latency = true;
  for (const RankOutcome& o : create_everywhere(config, 4)) EXPECT_FALSE(o.threw) << o.message;
}

TEST(MultiNode, RanksPerNodeDifferingBetweenRanksNamesTheField) {
  const auto outcomes = run_ranks_outcomes(
      2,
      [](int rank, const std::shared_ptr<Communicator>& comm) {
        OpConfig c = spec_for({2, 1}, {DispatchDtype::bf16, CombineDtype::bf16}).config;
        c.ranks_per_node = rank == 1 ? 1 : 2;
        create_op(comm, c);
      },
      /*timeout_s=*/0.5);
  for (int r = 0; r < 2; ++r) {
    expect_error(outcomes[r], ErrorCode::kInvalidArgument,
                 {"configuration differs between ranks: ", "ranks_per_node=1 on rank 1",
                  "ranks_per_node=2 on rank 0"},
                 r);
  }
}

}  // namespace
}  // namespace moe_ep
