// Decode mode across nodes on the CUDA backend (label gpu, skipped without a GPU): dispatch and
// combine (docs/multi-node.md, "Decode mode across nodes"). In the one-GPU world with domains of
// one node each (make_single_gpu_world's domain_size = ranks_per_node: a rank sees only its
// node's buffers, so anything crossing nodes other than by the transport's persistent exchanges
// faults), at W/L = 4/2, 8/4 and 8/2, every output compared bit for bit with the CPU backend
// run on the same inputs with the same expert (slabs below the counts, counts, sources, out):
// every dispatch x combine dtype pair, two eager rounds per op (dispatch, the scaled expert of
// testing/low_latency.h on the host, combine); every pair captured as dispatch -> the same expert
// as a kernel (testing/gpu_low_latency.h) -> combine in one CUDA graph per rank, replayed with new inputs (new routing,
// masked slots, masked tokens, rounds with every token masked), each replay checked; and a round
// split by the overlap hooks (send parts, then receive parts) equal to the CPU backend. The
// dispatch alone is also checked against the reference over three rounds. The seed is printed
// (MOE_EP_TEST_SEED replays it).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "formats/codecs.h"
#include "moe_ep/cuda.h"
#include "testing/gpu_low_latency.h"
#include "testing/gpu_world.h"
#include "testing/low_latency.h"

namespace moe_ep {
namespace {

using reference::LowLatencyOutputs;
using testing::DtypePair;
using testing::InputSpec;
using testing::LowLatencyRound;
using testing::RankInput;
using testing::TestStream;

struct Nodes {
  int world_size;
  int ranks_per_node;
};

std::string nodes_name(const Nodes& n) {
  return "W" + std::to_string(n.world_size) + "L" + std::to_string(n.ranks_per_node);
}

// The decode tests' shape (test_gpu_low_latency.cu): 8 experts per rank, top-4, hidden 2048,
// slabs of 32 rows per source, with the node size.
OpConfig decode_nodes_config(const Nodes& n, DtypePair pair) {
  OpConfig c = testing::world_test_config(n.world_size, pair);
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

// Replay i's inputs: testing::replay_inputs with this file's seed offset.
std::vector<RankInput> replay_inputs(const OpConfig& c, int world_size, int i) {
  return testing::replay_inputs(c, world_size, i, 2000);
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
  const int w = n.world_size;
  for (DispatchDtype dtype : kAllDispatchDtypes) {
    SCOPED_TRACE(std::string(to_string(dtype)) + " at " + nodes_name(n));
    const OpConfig c = decode_nodes_config(n, {dtype, CombineDtype::bf16});
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
  const int w = n.world_size;
  const int replays = 20;
  const OpConfig c = decode_nodes_config(n, {DispatchDtype::fp8, CombineDtype::bf16});
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
    testing::world_barrier();  // every rank instantiated before any launches (gpu_world.h)
    for (int i = 0; i < replays; ++i) {
      const RankInput& in = inputs[i][rank];
      input.upload(in, stream.s);
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

using Expert = std::function<std::vector<uint16_t>(const LowLatencyOutputs&, const OpConfig&,
                                                   int world_size, int rank)>;

// The CPU backend's rounds on the same inputs with the same expert: [round][rank].
struct CpuRounds {
  std::vector<std::vector<LowLatencyOutputs>> received;
  std::vector<std::vector<std::vector<uint16_t>>> out;
};

CpuRounds cpu_rounds(const OpConfig& c, int world_size,
                     const std::vector<std::vector<RankInput>>& inputs, const Expert& expert) {
  CpuRounds cpu;
  cpu.received.assign(inputs.size(), std::vector<LowLatencyOutputs>(world_size));
  cpu.out.assign(inputs.size(), std::vector<std::vector<uint16_t>>(world_size));
  testing::run_ranks(world_size, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    std::shared_ptr<Op> op = create_op(comm, c);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const RankInput& in = inputs[i][rank];
      const LowLatencyDispatchResult d = op->low_latency_dispatch(in.args());
      cpu.received[i][rank] = reference::copy_low_latency_outputs(d);
      const std::vector<uint16_t> y = expert(cpu.received[i][rank], c, world_size, rank);
      std::vector<uint16_t>& out = cpu.out[i][rank];
      out.assign(in.num_tokens * c.hidden, 0xffff);
      op->low_latency_combine(
          TensorView::tensor3(y.data(), ScalarType::kBFloat16, c.num_experts / world_size,
                              static_cast<int64_t>(world_size) * c.max_tokens_per_rank, c.hidden),
          d.handle, TensorView::matrix(out.data(), ScalarType::kBFloat16, in.num_tokens, c.hidden));
    }
  });
  return cpu;
}

// Every rank's outputs of round i against the CPU backend's, bit for bit.
void expect_same_as_cpu(const std::vector<LowLatencyOutputs>& received,
                        const std::vector<std::vector<uint16_t>>& out, const CpuRounds& cpu,
                        size_t i) {
  for (size_t r = 0; r < received.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    testing::expect_same_low_latency(received[r], cpu.received[i][r]);
    testing::expect_same("out", out[r], cpu.out[i][r]);
  }
}

TEST_P(GpuLowLatencyNodes, EveryDtypePairEqualsTheCpuBackend) {
  const Nodes n = GetParam();
  const int w = n.world_size;
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair) + " at " + nodes_name(n));
    const OpConfig c = decode_nodes_config(n, pair);
    const std::vector<std::vector<RankInput>> inputs = {decode_inputs(c, w, 1),
                                                        decode_inputs(c, w, 2)};
    std::vector<LowLatencyRound> rounds;
    for (const auto& in : inputs) rounds.emplace_back(w, in);
    auto comms = make_single_gpu_world(w, 0, 0, n.ranks_per_node);
    testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
      auto op = testing::kept_op(comm, c);
      TestStream stream;
      for (LowLatencyRound& round : rounds) {
        testing::gpu_low_latency_round(*op, rank, round, stream.s);
      }
    });
    const CpuRounds cpu = cpu_rounds(c, w, inputs, testing::low_latency_expert);
    for (size_t i = 0; i < rounds.size(); ++i) {
      SCOPED_TRACE("round " + std::to_string(i + 1));
      expect_same_as_cpu(rounds[i].received, rounds[i].out, cpu, i);
      for (int r = 0; r < w; ++r) EXPECT_EQ(rounds[i].views[r].handle.call_seq, i + 1);
    }
    if (::testing::Test::HasFailure()) break;  // one pair's report is enough
  }
}

// Every pair: dispatch -> scaled expert -> combine captured in one CUDA graph per rank and
// replayed with new inputs copied into the captured buffers, each replay against the CPU backend.
TEST_P(GpuLowLatencyNodes, CapturedRoundOfEveryPairReplaysWithNewInputs) {
  const Nodes n = GetParam();
  const int w = n.world_size;
  const int replays = 8;
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair) + " at " + nodes_name(n));
    const OpConfig c = decode_nodes_config(n, pair);
    const int64_t t = c.max_tokens_per_rank;  // the captured shape: masking makes fewer tokens
    std::vector<std::vector<RankInput>> inputs;
    for (int i = 0; i < replays; ++i) inputs.push_back(replay_inputs(c, w, i));
    std::vector<std::vector<LowLatencyOutputs>> received(replays,
                                                         std::vector<LowLatencyOutputs>(w));
    std::vector<std::vector<std::vector<uint16_t>>> out(replays,
                                                        std::vector<std::vector<uint16_t>>(w));
    auto comms = make_single_gpu_world(w, 0, 0, n.ranks_per_node);
    testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
      auto op = testing::kept_op(comm, c);
      TestStream stream;
      testing::DeviceInput input(inputs[0][rank], 0);  // the captured buffers
      DispatchArgs args = input.view;
      args.stream = stream.s;
      const int local = c.num_experts / w;
      const int64_t slab_rows = static_cast<int64_t>(w) * c.max_tokens_per_rank;
      testing::DeviceBuffer y = testing::DeviceBuffer::of_bytes(local * slab_rows * c.hidden * 2);
      testing::DeviceBuffer out_dev = testing::DeviceBuffer::of_bytes(t * c.hidden * 2);
      cudaGraph_t graph = nullptr;
      MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
      const LowLatencyDispatchResult d = op->low_latency_dispatch(args);
      testing::launch_scaled_expert(c, w, rank, d, static_cast<uint16_t*>(y.ptr.get()), stream.s);
      op->low_latency_combine(TensorView::tensor3(y.ptr.get(), ScalarType::kBFloat16, local,
                                                  slab_rows, c.hidden, DeviceType::kCuda, 0),
                              d.handle,
                              TensorView::matrix(out_dev.ptr.get(), ScalarType::kBFloat16, t,
                                                 c.hidden, DeviceType::kCuda, 0),
                              stream.s);
      MOE_EP_CUDA_CHECK(cudaStreamEndCapture(stream.s, &graph));
      cudaGraphExec_t exec = nullptr;
      MOE_EP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      testing::world_barrier();  // every rank instantiated before any launches (gpu_world.h)
      for (int i = 0; i < replays; ++i) {
        const RankInput& in = inputs[i][rank];
        input.upload(in, stream.s);
        MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, stream.s));
        MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream.s));
        received[i][rank] = reference::copy_low_latency_outputs(d, testing::device_to_host);
        out[i][rank].assign(t * c.hidden, 0);
        testing::device_to_host(out[i][rank].data(), out_dev.ptr.get(), t * c.hidden * 2);
      }
      op->synchronize(stream.s);  // raises anything the replays reported
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    });
    const CpuRounds cpu = cpu_rounds(c, w, inputs, testing::low_latency_expert);
    for (int i = 0; i < replays; ++i) {
      SCOPED_TRACE("replay " + std::to_string(i));
      expect_same_as_cpu(received[i], out[i], cpu, i);
      if (::testing::Test::HasFailure()) break;  // one replay's report is enough
    }
    if (::testing::Test::HasFailure()) break;
  }
}

// A round split by the overlap hooks (each call's send part, then its receive part): the same
// exchanges on every rank as without them, and outputs equal to the CPU backend's.
TEST_P(GpuLowLatencyNodes, HookedRoundEqualsTheCpuBackend) {
  const Nodes n = GetParam();
  const int w = n.world_size;
  for (const DtypePair& pair : {DtypePair{DispatchDtype::fp8, CombineDtype::bf16},
                                DtypePair{DispatchDtype::bf16, CombineDtype::fp8}}) {
    SCOPED_TRACE(testing::pair_name(pair) + " at " + nodes_name(n));
    const OpConfig c = decode_nodes_config(n, pair);
    const std::vector<std::vector<RankInput>> inputs = {decode_inputs(c, w, 5)};
    std::vector<LowLatencyOutputs> received(w);
    std::vector<std::vector<uint16_t>> out(w);
    auto comms = make_single_gpu_world(w, 0, 0, n.ranks_per_node);
    testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
      auto op = testing::kept_op(comm, c);
      TestStream stream;
      testing::DeviceInput input(inputs[0][rank], 0);
      LowLatencyDispatchArgs args(input.view, /*hook=*/true);
      args.stream = stream.s;
      const LowLatencyDispatchResult d = op->low_latency_dispatch(args);
      op->low_latency_dispatch_recv(d.handle, stream.s);
      op->synchronize(stream.s);
      received[rank] = reference::copy_low_latency_outputs(d, testing::device_to_host);
      testing::DeviceBuffer y =
          testing::DeviceBuffer::copy_of(testing::low_latency_expert(received[rank], c, w, rank));
      const int64_t t = inputs[0][rank].num_tokens;
      testing::DeviceBuffer out_dev =
          testing::DeviceBuffer::copy_of(std::vector<uint16_t>(t * c.hidden, 0xffff));
      op->low_latency_combine(
          TensorView::tensor3(y.ptr.get(), ScalarType::kBFloat16, c.num_experts / w,
                              static_cast<int64_t>(w) * c.max_tokens_per_rank, c.hidden,
                              DeviceType::kCuda, 0),
          d.handle,
          TensorView::matrix(out_dev.ptr.get(), ScalarType::kBFloat16, t, c.hidden,
                             DeviceType::kCuda, 0),
          stream.s, /*return_recv_hook=*/true);
      op->low_latency_combine_recv(d.handle, stream.s);
      op->synchronize(stream.s);
      out[rank].assign(t * c.hidden, 0);
      if (t > 0) testing::device_to_host(out[rank].data(), out_dev.ptr.get(), t * c.hidden * 2);
    });
    const CpuRounds cpu = cpu_rounds(c, w, inputs, testing::low_latency_expert);
    expect_same_as_cpu(received, out, cpu, 0);
    if (::testing::Test::HasFailure()) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, GpuLowLatencyNodes,
                         ::testing::Values(Nodes{4, 2}, Nodes{8, 4}, Nodes{8, 2}),
                         [](const ::testing::TestParamInfo<Nodes>& info) {
                           return nodes_name(info.param);
                         });

}  // namespace
}  // namespace moe_ep
