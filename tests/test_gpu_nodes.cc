// The CUDA backend across nodes (ranks_per_node L < W; docs/multi-node.md) in the single-GPU
// test world (label gpu, skipped without a GPU): what crosses between "nodes" moves through the
// loopback transport as staged bytes, as it would through NCCL between machines; everything
// inside a node goes through the symmetric buffers. Every output of every dtype pair is compared
// bit for bit with the reference (dispatch as one node, combine node by node in the order of
// docs/design.md#several-nodes), two rounds per op, at W = 2 (2 nodes of 1), 4 (2 x 2, 4 x 1) and
// 8 (2 x 4, 4 x 2), also in worlds of domains (a rank sees only its domain's buffers, so nothing
// may cross nodes but by the transport: creation, step words, counts, rows, partials);
// pre-quantized input; a rejected dispatch and combine that fail every rank, take no transport
// exchange, and leave the op usable; and nodes larger than a domain refused at creation.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "testing/gpu_world.h"
#include "testing/ranks.h"
#include "testing/rejected_calls.h"

namespace moe_ep {
namespace {

using testing::check_round;
using testing::DtypePair;
using testing::RankInput;
using testing::RoundResult;
using testing::TestStream;
using testing::world_test_inputs;

struct Nodes {
  int world_size;
  int ranks_per_node;
  // make_single_gpu_world's domain_size: 0, every rank sees every buffer; D, a rank sees only
  // its D-rank domain's, so that anything crossing nodes other than by the transport faults.
  int domain_size = 0;
};

// The one-node world tests' shape (testing/gpu_world.h), with the node size.
OpConfig nodes_config(const Nodes& n, DtypePair pair) {
  OpConfig c = testing::world_test_config(n.world_size, pair);
  c.ranks_per_node = n.ranks_per_node;
  return c;
}

void run_and_check(const Nodes& n, const OpConfig& c, bool prequantized = false) {
  testing::run_and_check_rounds(make_single_gpu_world(n.world_size, 0, 0, n.domain_size), c,
                                prequantized);
}

class GpuNodes : public ::testing::TestWithParam<Nodes> {
 protected:
  void SetUp() override {
    if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  }
};

TEST_P(GpuNodes, AllDtypePairsEqualTheReference) {
  const Nodes n = GetParam();
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair) + " at W=" + std::to_string(n.world_size) +
                 ", L=" + std::to_string(n.ranks_per_node));
    run_and_check(n, nodes_config(n, pair));
  }
}

TEST_P(GpuNodes, PrequantizedInputEqualsTheReference) {
  const Nodes n = GetParam();
  for (DispatchDtype d : {DispatchDtype::fp8, DispatchDtype::fp4}) {
    SCOPED_TRACE(short_name(d));
    run_and_check(n, nodes_config(n, {d, CombineDtype::fp8}), true);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GpuNodes,
                         ::testing::Values(Nodes{2, 1}, Nodes{4, 2}, Nodes{4, 1}, Nodes{8, 4},
                                           Nodes{8, 2}, Nodes{2, 1, 1}, Nodes{4, 2, 2},
                                           Nodes{8, 4, 4}, Nodes{8, 2, 2}, Nodes{8, 2, 4}),
                         [](const ::testing::TestParamInfo<Nodes>& info) {
                           const Nodes& n = info.param;
                           return "W" + std::to_string(n.world_size) + "_L" +
                                  std::to_string(n.ranks_per_node) +
                                  (n.domain_size > 0 ? "_D" + std::to_string(n.domain_size)
                                                     : std::string());
                         });

// A world of domains of 2 ranks (machines of 2 GPUs, as it were): an op whose nodes do not fit
// in a domain (one node of all 4 ranks; nodes of 4) is refused on every rank at creation,
// naming ranks_per_node and the domain; then nodes of 2 work.
TEST(GpuNodesDomains, NodesLargerThanADomainAreRefusedOnEveryRank) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const Nodes n{4, 2, 2};
  const OpConfig good = nodes_config(n, {DispatchDtype::fp8, CombineDtype::bf16});
  std::vector<RoundResult> rounds =
      testing::make_round_results(n.world_size, {world_test_inputs(good, n.world_size, 6)});
  std::vector<testing::RankOutcome> one_node(n.world_size), nodes_of_4(n.world_size);
  auto comms = make_single_gpu_world(n.world_size, 0, 0, n.domain_size);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    OpConfig c = good;
    c.ranks_per_node = 0;
    one_node[rank] = testing::outcome_of([&] { create_op(comm, c); });
    c.ranks_per_node = 4;
    nodes_of_4[rank] = testing::outcome_of([&] { create_op(comm, c); });
    auto op = testing::kept_op(comm, good);
    TestStream stream;
    testing::gpu_round(*op, rank, n.world_size, rounds[0], {stream.s, stream.s});
  });
  for (int r = 0; r < n.world_size; ++r) {
    testing::expect_error(
        one_node[r], ErrorCode::kInvalidArgument,
        {"ranks_per_node=0: the ranks of a node must be load/store peers", "hold 2 ranks each"}, r);
    testing::expect_error(nodes_of_4[r], ErrorCode::kInvalidArgument,
                          {"ranks_per_node=4: the ranks of a node must be load/store peers"}, r);
  }
  check_round(good, n.world_size, rounds[0]);
}

// W = 4 as 2 x 2: rejected calls fail every rank together and leave the op usable (the rounds
// of testing/rejected_calls.h).
TEST(GpuNodesErrors, RejectedDispatchAndCombineFailEveryRankAndTheOpStaysUsable) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const Nodes n{4, 2};
  testing::expect_rejected_calls_leave_the_op_usable(
      nodes_config(n, {DispatchDtype::fp8, CombineDtype::fp8}), n.world_size,
      make_single_gpu_world(n.world_size));
}

}  // namespace
}  // namespace moe_ep
