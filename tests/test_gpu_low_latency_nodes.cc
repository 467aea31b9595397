// Decode mode across nodes on the CUDA backend (label gpu, skipped without a GPU): its DISPATCH
// only (docs/multi-node.md, "Decode mode across nodes"; the combine is not built, so create_op
// refuses such an op unless the test-only switch allow_decode_dispatch_across_nodes of
// src/backends/cuda/factory.h is on). In the one-GPU world with domains of one node each
// (make_single_gpu_world's domain_size = ranks_per_node: a rank sees only its node's buffers, so
// anything crossing nodes other than by the transport's persistent exchange faults), at W = 4
// (2 nodes of 2) and W = 8 (2 x 4, 4 x 2): every dispatch dtype, three eager dispatches per op,
// each compared bit for bit with the reference's decode dispatch (per-expert recv_x and scales
// below the counts, counts, sources); one dispatch captured in a CUDA graph and replayed with new
// inputs (new routing, masked slots, masked tokens, rounds with every token masked), each replay
// checked bit for bit; the combine raising InvalidUsage on every rank and the op staying usable;
// and creation refused on every rank while the switch is off. The seed is printed
// (MOE_EP_TEST_SEED replays it). WRITTEN WITHOUT A GPU: NOT RUN YET.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/factory.h"
#include "moe_ep/cuda.h"
#include "testing/gpu_world.h"
#include "testing/low_latency.h"

namespace moe_ep {
namespace {

using reference::LowLatencyOutputs;
using testing::InputSpec;
using testing::RankInput;
using testing::TestStream;

struct Nodes {
  int world_size;
  int ranks_per_node;
};

std::string nodes_name(const Nodes& n) {
  return "W" + std::to_string(n.world_size) + "L" + std::to_string(n.ranks_per_node);
}

// The test-only switch of factory.h, on for one test.
struct DispatchAcrossNodesAllowed {
  DispatchAcrossNodesAllowed() { cuda_backend::allow_decode_dispatch_across_nodes(true); }
  ~DispatchAcrossNodesAllowed() { cuda_backend::allow_decode_dispatch_across_nodes(false); }
};

// The decode tests' shape (test_gpu_low_latency.cu): 8 experts per rank, top-4, hidden 2048,
// slabs of 32 rows per source, with the node size.
OpConfig decode_nodes_config(const Nodes& n, DispatchDtype dispatch) {
  OpConfig c = testing::world_test_config(n.world_size, {dispatch, CombineDtype::bf16});
  c.max_tokens_per_rank = 32;
  c.low_latency = true;
  c.ranks_per_node = n.ranks_per_node;
  return c;
}

// Rank 1 sends nothing, the others part of the 32 rows; 20% of slots masked.
std::vector<RankInput> decode_inputs(const OpConfig& c, int world_size, uint64_t salt) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config = c;
  spec.mask_prob = 0.2;
  std::vector<int64_t> tokens(world_size);
  for (int r = 0; r < world_size; ++r) tokens[r] = r == 1 ? 0 : 32 - (3 * r + salt) % 32;
  return testing::make_inputs(spec, testing::test_seed() + salt, tokens);
}

// Replay `i` of the graph test: every rank Tmax tokens (the captured shape), new routing each
// time; every 7th replay masks every token, the others 20% of slots and every 5th token.
std::vector<RankInput> replay_inputs(const OpConfig& c, int world_size, int i) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config = c;
  spec.mask_prob = 0.2;
  std::vector<RankInput> inputs =
      testing::make_inputs(spec, testing::test_seed() + 2000 + i,
                           std::vector<int64_t>(world_size, c.max_tokens_per_rank));
  for (RankInput& in : inputs) {
    for (int64_t t = 0; t < in.num_tokens; ++t) {
      if (i % 7 == 0 || (t + i) % 5 == 0) in.mask_token(t);
    }
  }
  return inputs;
}

// Every rank's dispatch outputs of one round against the reference, bit for bit.
void check_dispatch(const OpConfig& c, int world_size, const std::vector<RankInput>& inputs,
                    const std::vector<LowLatencyOutputs>& got) {
  const reference::Shape shape = testing::reference_shape(c, world_size);
  const std::vector<reference::RankInput> ref_inputs = testing::reference_inputs(inputs);
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("low_latency_dispatch on rank " + std::to_string(r));
    testing::expect_same_low_latency(
        got[r], reference::low_latency_dispatch(shape, c.dispatch_dtype, c.max_tokens_per_rank,
                                                ref_inputs, r));
  }
}

class GpuLowLatencyNodes : public ::testing::TestWithParam<Nodes> {
 protected:
  void SetUp() override {
    if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  }
};

TEST_P(GpuLowLatencyNodes, DispatchOfEveryDtypeEqualsTheReference) {
  const Nodes n = GetParam();
  DispatchAcrossNodesAllowed allowed;
  const int w = n.world_size;
  for (DispatchDtype dtype : kAllDispatchDtypes) {
    SCOPED_TRACE(std::string(to_string(dtype)) + " at " + nodes_name(n));
    const OpConfig c = decode_nodes_config(n, dtype);
    const int rounds = 3;
    std::vector<std::vector<RankInput>> inputs;
    std::vector<std::vector<LowLatencyOutputs>> got(rounds, std::vector<LowLatencyOutputs>(w));
    std::vector<std::vector<uint64_t>> call_seq(rounds, std::vector<uint64_t>(w, 0));
    for (int i = 0; i < rounds; ++i) inputs.push_back(decode_inputs(c, w, 1 + i));
    auto comms = make_single_gpu_world(w, 0, 0, n.ranks_per_node);
    testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
      auto op = testing::kept_op(comm, c);
      TestStream stream;
      for (int i = 0; i < rounds; ++i) {
        testing::DeviceInput input(inputs[i][rank], 0);
        DispatchArgs args = input.view;
        args.stream = stream.s;
        const LowLatencyDispatchResult d = op->low_latency_dispatch(args);
        op->synchronize(stream.s);  // raises what the device reported
        call_seq[i][rank] = d.handle.call_seq;
        got[i][rank] = reference::copy_low_latency_outputs(d, testing::device_to_host);
      }
    });
    for (int i = 0; i < rounds; ++i) {
      SCOPED_TRACE("round " + std::to_string(i + 1));
      check_dispatch(c, w, inputs[i], got[i]);
      for (int r = 0; r < w; ++r) EXPECT_EQ(call_seq[i][r], static_cast<uint64_t>(i + 1));
    }
    if (::testing::Test::HasFailure()) break;  // one dtype's report is enough
  }
}

TEST_P(GpuLowLatencyNodes, CapturedDispatchReplaysWithNewInputs) {
  const Nodes n = GetParam();
  DispatchAcrossNodesAllowed allowed;
  const int w = n.world_size;
  const int replays = 20;
  const OpConfig c = decode_nodes_config(n, DispatchDtype::fp8);
  std::vector<std::vector<RankInput>> inputs;
  for (int i = 0; i < replays; ++i) inputs.push_back(replay_inputs(c, w, i));
  std::vector<std::vector<LowLatencyOutputs>> got(replays, std::vector<LowLatencyOutputs>(w));
  auto comms = make_single_gpu_world(w, 0, 0, n.ranks_per_node);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, c);
    TestStream stream;
    testing::DeviceInput input(inputs[0][rank], 0);  // the captured buffers
    DispatchArgs args = input.view;
    args.stream = stream.s;
    cudaGraph_t graph = nullptr;
    MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
    const LowLatencyDispatchResult d = op->low_latency_dispatch(args);
    MOE_EP_CUDA_CHECK(cudaStreamEndCapture(stream.s, &graph));
    cudaGraphExec_t exec = nullptr;
    MOE_EP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < replays; ++i) {
      const RankInput& in = inputs[i][rank];
      MOE_EP_CUDA_CHECK(cudaMemcpyAsync(input.topk_idx.ptr.get(), in.topk_idx.data(),
                                        in.topk_idx.size() * 4, cudaMemcpyHostToDevice, stream.s));
      MOE_EP_CUDA_CHECK(cudaMemcpyAsync(input.topk_weights.ptr.get(), in.topk_weights.data(),
                                        in.topk_weights.size() * 4, cudaMemcpyHostToDevice,
                                        stream.s));
      MOE_EP_CUDA_CHECK(cudaMemcpyAsync(input.x.ptr.get(), in.x.data(), in.x.size() * 2,
                                        cudaMemcpyHostToDevice, stream.s));
      MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, stream.s));
      MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream.s));
      got[i][rank] = reference::copy_low_latency_outputs(d, testing::device_to_host);
    }
    op->synchronize(stream.s);  // raises anything the replays reported
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  });
  for (int i = 0; i < replays; ++i) {
    SCOPED_TRACE("replay " + std::to_string(i));
    check_dispatch(c, w, inputs[i], got[i]);
    if (::testing::Test::HasFailure()) break;  // one replay's report is enough
  }
}

// The combine is not built: every rank raises InvalidUsage before its step, and the next
// dispatch still runs and equals the reference.
TEST_P(GpuLowLatencyNodes, CombineIsRefusedOnEveryRankAndTheOpStaysUsable) {
  const Nodes n = GetParam();
  DispatchAcrossNodesAllowed allowed;
  const int w = n.world_size;
  const OpConfig c = decode_nodes_config(n, DispatchDtype::bf16);
  const std::vector<RankInput> first = decode_inputs(c, w, 7), second = decode_inputs(c, w, 8);
  std::vector<LowLatencyOutputs> got(w);
  std::vector<std::string> errors(w);
  auto comms = make_single_gpu_world(w, 0, 0, n.ranks_per_node);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, c);
    TestStream stream;
    testing::DeviceInput a(first[rank], 0), b(second[rank], 0);
    DispatchArgs args = a.view;
    args.stream = stream.s;
    const LowLatencyDispatchResult d = op->low_latency_dispatch(args);
    op->synchronize(stream.s);
    const int64_t t = first[rank].num_tokens;
    const int local = c.num_experts / w;
    const int64_t slab_rows = static_cast<int64_t>(w) * c.max_tokens_per_rank;
    testing::DeviceBuffer y = testing::DeviceBuffer::of_bytes(local * slab_rows * c.hidden * 2);
    testing::DeviceBuffer out = testing::DeviceBuffer::of_bytes((t > 0 ? t : 1) * c.hidden * 2);
    try {
      op->low_latency_combine(TensorView::tensor3(y.ptr.get(), ScalarType::kBFloat16, local,
                                                  slab_rows, c.hidden, DeviceType::kCuda, 0),
                              d.handle,
                              TensorView::matrix(out.ptr.get(), ScalarType::kBFloat16, t, c.hidden,
                                                 DeviceType::kCuda, 0),
                              stream.s);
    } catch (const InvalidUsage& e) {
      errors[rank] = e.what();
    }
    args = b.view;
    args.stream = stream.s;
    const LowLatencyDispatchResult d2 = op->low_latency_dispatch(args);
    op->synchronize(stream.s);
    got[rank] = reference::copy_low_latency_outputs(d2, testing::device_to_host);
  });
  for (int r = 0; r < w; ++r) {
    EXPECT_NE(errors[r].find("decode combine across nodes is not yet built"), std::string::npos)
        << "rank " << r << ": '" << errors[r] << "'";
  }
  check_dispatch(c, w, second, got);
}

INSTANTIATE_TEST_SUITE_P(Nodes, GpuLowLatencyNodes,
                         ::testing::Values(Nodes{4, 2}, Nodes{8, 4}, Nodes{8, 2}),
                         [](const ::testing::TestParamInfo<Nodes>& info) {
                           return nodes_name(info.param);
                         });

// Without the switch, decode mode across nodes is refused at creation on every rank, naming
// ranks_per_node, world_size and low_latency.
TEST(GpuLowLatencyNodesCreation, RefusedWhileTheCombineIsNotBuilt) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const Nodes n{4, 2};
  const OpConfig c = decode_nodes_config(n, DispatchDtype::fp8);
  std::vector<std::string> errors(n.world_size);
  auto comms = make_single_gpu_world(n.world_size, 0, 0, n.ranks_per_node);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    try {
      testing::kept_op(comm, c);
    } catch (const InvalidArgument& e) {
      errors[rank] = e.what();
    }
  });
  for (int r = 0; r < n.world_size; ++r) {
    EXPECT_NE(errors[r].find("ranks_per_node=2 < world_size=4 with low_latency=true"),
              std::string::npos)
        << "rank " << r << ": '" << errors[r] << "'";
  }
}

}  // namespace
}  // namespace moe_ep
