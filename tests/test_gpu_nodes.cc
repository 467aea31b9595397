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
  auto comms = make_single_gpu_world(n.world_size, 0, 0, n.domain_size);
  std::vector<RoundResult> rounds = testing::make_round_results(
      n.world_size, {world_test_inputs(c, n.world_size, 1, prequantized),
                     world_test_inputs(c, n.world_size, 2, prequantized)});
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, c);
    TestStream stream;
    for (RoundResult& res : rounds) {
      testing::gpu_round(*op, rank, n.world_size, res, {stream.s, stream.s});
    }
  });
  for (size_t i = 0; i < rounds.size(); ++i) {
    SCOPED_TRACE("round " + std::to_string(i + 1));
    check_round(c, n.world_size, rounds[i], i + 1);
  }
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

// W = 4 as 2 x 2. Round 1: rank 1's topk_idx names an expert out of range, which its data scan
// rejects after its host accepted: every rank's dispatch fails (the others name rank 1). Then a
// good dispatch, whose combine rank 2 calls with an `out` of the wrong shape: every rank's
// combine fails. Then the same dispatch combined properly, and a fresh round: both exact.
TEST(GpuNodesErrors, RejectedDispatchAndCombineFailEveryRankAndTheOpStaysUsable) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const Nodes n{4, 2};
  const OpConfig c = nodes_config(n, {DispatchDtype::fp8, CombineDtype::fp8});
  std::vector<RankInput> bad = world_test_inputs(c, n.world_size, 3);
  ASSERT_GT(bad[2].num_tokens, 0);
  bad[2].topk_idx[1] = c.num_experts;  // token 0, slot 1 of rank 2
  std::vector<RoundResult> rounds = testing::make_round_results(
      n.world_size, {world_test_inputs(c, n.world_size, 4), world_test_inputs(c, n.world_size, 5)});
  std::vector<testing::RankOutcome> dispatch_error(n.world_size), combine_error(n.world_size);
  auto comms = make_single_gpu_world(n.world_size);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, c);
    TestStream stream;
    testing::DeviceInput in_bad(bad[rank], 0);
    DispatchArgs args = in_bad.view;
    args.stream = stream.s;
    dispatch_error[rank] = testing::outcome_of([&] { op->dispatch(args); });
    // A good dispatch, a combine that rank 2 rejects, then the proper round.
    RoundResult& res = rounds[0];
    testing::DeviceInput in(res.inputs[rank], 0);
    DispatchArgs good = in.view;
    good.stream = stream.s;
    const DispatchResult d = op->dispatch(good);
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    const int64_t tokens = res.inputs[rank].num_tokens;
    testing::DeviceBuffer y = testing::DeviceBuffer::copy_of(
        std::vector<uint16_t>(static_cast<size_t>(d.num_recv + 1) * c.hidden, 0));
    testing::DeviceBuffer out = testing::DeviceBuffer::copy_of(
        std::vector<uint16_t>(static_cast<size_t>(tokens + 1) * c.hidden, 0));
    // Combine of the good dispatch from y into out (out_rows rows), then synchronize.
    const auto combine = [&](const testing::DeviceBuffer& y_rows,
                             const testing::DeviceBuffer& out_rows_buffer, int64_t out_rows) {
      op->combine(d.handle,
                  TensorView::matrix(y_rows.ptr.get(), ScalarType::kBFloat16, d.num_recv, c.hidden,
                                     DeviceType::kCuda, 0),
                  TensorView::matrix(out_rows_buffer.ptr.get(), ScalarType::kBFloat16, out_rows,
                                     c.hidden, DeviceType::kCuda, 0),
                  stream.s);
      op->synchronize(stream.s);
    };
    combine_error[rank] =
        testing::outcome_of([&] { combine(y, out, rank == 2 ? tokens + 1 : tokens); });
    // The op is usable: the same dispatch's combine, through the harness, then a fresh round.
    res.received[rank] = testing::download_outputs(d);
    res.handles[rank] = d.handle;
    res.op_uids[rank] = op->uid();
    const std::vector<uint16_t> expert =
        testing::identity_expert(res.received[rank], c, n.world_size);
    testing::DeviceBuffer y_good = testing::DeviceBuffer::copy_of(expert);
    testing::DeviceBuffer out_good = testing::DeviceBuffer::copy_of(
        std::vector<uint16_t>(static_cast<size_t>(tokens) * c.hidden, 0xffff));
    combine(y_good, out_good, tokens);
    res.out[rank].assign(static_cast<size_t>(tokens) * c.hidden, 0);
    if (tokens > 0)
      testing::device_to_host(res.out[rank].data(), out_good.ptr.get(), res.out[rank].size() * 2);
    testing::gpu_round(*op, rank, n.world_size, rounds[1], {stream.s, stream.s});
  });
  for (int r = 0; r < n.world_size; ++r) {
    testing::expect_error(dispatch_error[r], ErrorCode::kInvalidArgument,
                          {r == 2 ? "topk_idx[0][1]=" + std::to_string(c.num_experts)
                                  : std::string("rank 2 rejected")},
                          r);
    testing::expect_error(combine_error[r], ErrorCode::kInvalidArgument,
                          {r == 2 ? std::string("out") : std::string("rank 2 rejected")}, r);
  }
  // The failed dispatch took no call number: the good ones are calls 1 and 2.
  check_round(c, n.world_size, rounds[0], 1);
  check_round(c, n.world_size, rounds[1], 2);
}

}  // namespace
}  // namespace moe_ep
