// Decode mode on the CUDA backend (label gpu, skipped without a GPU), on W ranks of one GPU
// (make_single_gpu_world): every output of all dtype pairs at W = 1, 2, 4 and 8, two rounds per op,
// compared bit for bit with the reference (slabs below the counts, counts, sources, out), and of
// mxfp4 rows whose scale rows are not whole 4-byte words (hidden 2080); and the
// graph test: each rank captures low_latency_dispatch -> an expert kernel -> low_latency_combine
// in one CUDA graph and replays it 200 times with new inputs copied into the captured buffers
// (new routing, masked slots, tokens with every slot masked, and rounds where every token is
// masked), each replay checked bit for bit, on one GPU and, with two GPUs, one rank per GPU.
// Calls every rank rejects, between rounds of other sizes, leave the ranks in step. The overlap
// hooks' tests are in test_gpu_low_latency_hooks.cu.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <vector>

#include "testing/gpu_low_latency.h"
#include "testing/gpu_world.h"
#include "testing/low_latency.h"

namespace moe_ep {
namespace {

using testing::decode_config;
using testing::decode_inputs;
using testing::DtypePair;
using testing::gpu_low_latency_round;
using testing::LowLatencyRound;
using testing::RankInput;
using testing::TestStream;

class GpuLowLatency : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  }
};

// One eager round per input salt on one op per rank of a one-GPU world, each checked bit for bit.
void run_rounds_and_check(const OpConfig& c, int world_size, std::initializer_list<int> salts) {
  std::vector<LowLatencyRound> rounds;
  for (int salt : salts) rounds.emplace_back(world_size, decode_inputs(c, world_size, salt));
  auto comms = make_single_gpu_world(world_size);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, c);
    TestStream stream;
    for (LowLatencyRound& round : rounds) gpu_low_latency_round(*op, rank, round, stream.s);
  });
  for (size_t i = 0; i < rounds.size(); ++i) {
    SCOPED_TRACE("round " + std::to_string(i + 1));
    testing::check_low_latency_round(c, world_size, rounds[i], i + 1);
  }
}

TEST_P(GpuLowLatency, AllDtypePairsEqualTheReference) {
  const int world_size = GetParam();
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair) + " at W=" + std::to_string(world_size));
    run_rounds_and_check(decode_config(world_size, pair), world_size, {1, 2});
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GpuLowLatency, ::testing::Values(1, 2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "W" + std::to_string(info.param);
                         });

// World size 1 on one SM's budget: the combine's 256 items (32 tokens of 2 slices in 4 parts) on
// a grid of 4 blocks, 32 warps, so every warp takes 8 of them, and the send and the expand on
// those 4 blocks too; with masked slots and tokens. A dtype pair of each dispatch dtype.
TEST(GpuLowLatencyWorldOfOne, OneSmBudgetTakesEveryItem) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  for (const DtypePair& pair : {DtypePair{DispatchDtype::bf16, CombineDtype::bf16},
                                DtypePair{DispatchDtype::fp8, CombineDtype::fp8},
                                DtypePair{DispatchDtype::fp4, CombineDtype::int8_e3m4}}) {
    SCOPED_TRACE(testing::pair_name(pair));
    OpConfig c = decode_config(1, pair);
    c.num_sms = 1;
    run_rounds_and_check(c, 1, {5, 6});
  }
}

// An expert id out of range on one rank, found on the device by the validate kernel before the
// decode step: every rank raises it at its next synchronize, naming the slot and the value; the
// failed call counts nowhere (its recv_count reads 0 on every rank, not the round before's) and
// the op stays usable. At a small and a larger dispatch.
class GpuLowLatencyScan : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  }
};

TEST_P(GpuLowLatencyScan, OutOfRangeExpertFailsEveryRankAndTheOpStaysUsable) {
  const int world_size = 2;
  const int64_t tokens = GetParam();
  OpConfig c = decode_config(world_size, {DispatchDtype::fp8, CombineDtype::bf16});
  c.max_tokens_per_rank = tokens;
  LowLatencyRound first(world_size, decode_inputs(c, world_size, 50, {tokens, tokens}));
  LowLatencyRound last(world_size, decode_inputs(c, world_size, 51, {tokens, tokens}));
  std::vector<RankInput> bad = decode_inputs(c, world_size, 52, {tokens, tokens});
  bad[1].topk_idx[3 * c.topk + 1] = 999;
  std::vector<testing::RankOutcome> outcomes(world_size);
  const int local = c.num_experts / world_size;
  std::vector<std::vector<int32_t>> failed_counts(world_size, std::vector<int32_t>(local, -1));
  auto comms = make_single_gpu_world(world_size);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, c);
    TestStream stream;
    gpu_low_latency_round(*op, rank, first, stream.s);
    testing::DeviceInput input(bad[rank], 0);
    LowLatencyDispatchArgs args(input.view, /*hook=*/false);
    args.stream = stream.s;
    const void* recv_count = nullptr;
    outcomes[rank] = testing::outcome_of([&] {
      recv_count = op->low_latency_dispatch(args).recv_count.data;
      op->synchronize(stream.s);
    });
    if (recv_count != nullptr) {  // the host accepted: the device failed the call
      MOE_EP_CUDA_CHECK(cudaMemcpy(failed_counts[rank].data(), recv_count, sizeof(int32_t) * local,
                                   cudaMemcpyDeviceToHost));
    }
    gpu_low_latency_round(*op, rank, last, stream.s);
  });
  testing::check_low_latency_round(c, world_size, first, 1);
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(outcomes[r].threw) << "an expert id of 999 raised nothing";
    EXPECT_EQ(outcomes[r].code, ErrorCode::kInvalidArgument) << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("topk_idx[3][1]=999 is out of range"), std::string::npos)
        << outcomes[r].message;
  }
  EXPECT_NE(outcomes[0].message.find("rank 1 rejected"), std::string::npos) << outcomes[0].message;
  // Every rank's host accepted the call (the id is found by the device scan), so each has the
  // failed call's recv_count: 0 everywhere (the first round's counts are nonzero somewhere).
  for (int r = 0; r < world_size; ++r) {
    EXPECT_EQ(failed_counts[r], std::vector<int32_t>(local, 0)) << "rank " << r;
  }
  testing::check_low_latency_round(c, world_size, last, 2);
}

INSTANTIATE_TEST_SUITE_P(Tokens, GpuLowLatencyScan, ::testing::Values(32, 600),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "T" + std::to_string(info.param);
                         });

// mxfp4 scale rows of hidden / 32 bytes: at hidden 2080 a row has 65 scale bytes, not whole
// 4-byte words, so the expand copies them byte by byte instead of by words. Every combine dtype
// whose block divides 2080 (fp8 blockwise needs a multiple of 128).
TEST(GpuLowLatencyOddScales, Mxfp4ScaleRowsOfOddBytesEqualTheReference) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  for (int world_size : {2, 4}) {
    for (CombineDtype combine :
         {CombineDtype::bf16, CombineDtype::fp8_direct_cast, CombineDtype::int8_e3m4}) {
      const DtypePair pair{DispatchDtype::fp4, combine};
      SCOPED_TRACE(testing::pair_name(pair) + " at W=" + std::to_string(world_size));
      OpConfig c = decode_config(world_size, pair);
      c.hidden = 2080;
      run_rounds_and_check(c, world_size, {3});
    }
  }
}

// Column-major scales (OpConfig::column_major_scales): the expand's column kernels store scale j
// of expert e's row r at (e * scale_dim + j) * W*Tmax + r; the harness's copies turn them back
// into rows (reference::copy_low_latency_outputs), so every round is checked as above. fp8 and
// mxfp4 dispatch (at hidden 2080 too: 65 one-byte scales a row), W = 1 and 2.
TEST(GpuLowLatencyColumnScales, EqualTheReference) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  struct Case {
    DtypePair pair;
    int hidden;  // 0: the tests' shape
  };
  for (int world_size : {1, 2}) {
    for (const Case& k : {Case{{DispatchDtype::fp8, CombineDtype::bf16}, 0},
                          Case{{DispatchDtype::fp4, CombineDtype::fp8}, 0},
                          Case{{DispatchDtype::fp4, CombineDtype::bf16}, 2080}}) {
      SCOPED_TRACE(testing::pair_name(k.pair) + " at W=" + std::to_string(world_size) + " hidden " +
                   std::to_string(k.hidden));
      OpConfig c = decode_config(world_size, k.pair);
      c.column_major_scales = true;
      if (k.hidden != 0) c.hidden = k.hidden;
      run_rounds_and_check(c, world_size, {7, 8});
    }
  }
}

// Replay i's inputs: testing::replay_inputs with this file's seed offset.
std::vector<RankInput> replay_inputs(const OpConfig& c, int world_size, int i) {
  return testing::replay_inputs(c, world_size, i, 1000);
}

// The graph test: W ranks, on one GPU (the one-GPU world) or one per GPU (NCCL communicators
// over the GPUs' link, run_gpu_ranks), each capturing dispatch -> expert -> combine once and
// replaying it with new inputs, every replay checked bit for bit.
void captured_round_replays(int world_size, bool two_gpus) {
  const int replays = 200;
  const OpConfig c = decode_config(world_size, {DispatchDtype::fp8, CombineDtype::bf16});
  const int64_t t = c.max_tokens_per_rank;  // the captured shape: masking makes fewer tokens
  std::vector<std::vector<RankInput>> inputs;
  for (int i = 0; i < replays; ++i) inputs.push_back(replay_inputs(c, world_size, i));
  std::vector<LowLatencyRound> rounds;
  for (int i = 0; i < replays; ++i) rounds.emplace_back(world_size, inputs[i]);
  const auto rank_fn = [&](int rank, const std::shared_ptr<Communicator>& comm) {
    const int device = two_gpus ? rank : 0;
    auto op = testing::kept_op(comm, c);
    TestStream stream;
    // The captured buffers.
    testing::DeviceInput input(inputs[0][rank], device);
    DispatchArgs args = input.view;
    args.stream = stream.s;
    const int local = c.num_experts / world_size;
    const int64_t slab_rows = static_cast<int64_t>(world_size) * c.max_tokens_per_rank;
    testing::DeviceBuffer y = testing::DeviceBuffer::of_bytes(local * slab_rows * c.hidden * 2);
    testing::DeviceBuffer out = testing::DeviceBuffer::of_bytes(t * c.hidden * 2);
    cudaGraph_t graph = nullptr;
    MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
    const LowLatencyDispatchResult d = op->low_latency_dispatch(args);
    testing::launch_scaled_expert(c, world_size, rank, d, static_cast<uint16_t*>(y.ptr.get()),
                                  stream.s);
    op->low_latency_combine(TensorView::tensor3(y.ptr.get(), ScalarType::kBFloat16, local,
                                                slab_rows, c.hidden, DeviceType::kCuda, device),
                            d.handle,
                            TensorView::matrix(out.ptr.get(), ScalarType::kBFloat16, t, c.hidden,
                                               DeviceType::kCuda, device),
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
      LowLatencyRound& round = rounds[i];
      round.views[rank] = d;
      round.views[rank].handle.call_seq = i + 1;  // the device counted the calls; the host did not
      round.op_uids[rank] = op->uid();
      round.received[rank] = reference::copy_low_latency_outputs(d, testing::device_to_host);
      round.out[rank].assign(t * c.hidden, 0);
      testing::device_to_host(round.out[rank].data(), out.ptr.get(), t * c.hidden * 2);
    }
    op->synchronize(stream.s);  // raises anything the replays reported
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  };
  if (two_gpus) {
    const std::vector<std::string> errors =
        testing::run_gpu_ranks(make_local_nccl_communicators({0, 1}), rank_fn);
    for (int r = 0; r < world_size; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " threw";
  } else {
    testing::run_world(make_single_gpu_world(world_size), rank_fn);
  }
  for (int i = 0; i < replays; ++i) {
    SCOPED_TRACE("replay " + std::to_string(i));
    testing::check_low_latency_round(c, world_size, rounds[i], i + 1);
    if (::testing::Test::HasFailure()) break;  // one replay's report is enough
  }
}

TEST(GpuLowLatencyGraph, CapturedRoundReplays200TimesWithNewInputs) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  captured_round_replays(2, false);
}

// At world size 1, the bench's world (where the combine has no send item).
TEST(GpuLowLatencyGraph, CapturedRoundReplays200TimesWithNewInputsAtWorldSize1) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  captured_round_replays(1, false);
}

// The same with one rank per GPU: decode mode's flags, counts and rows across the GPUs' link
// (every other decode test runs its ranks on one GPU).
TEST(TwoGpuLowLatencyGraph, CapturedRoundReplays200TimesWithNewInputsOneRankPerGpu) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  captured_round_replays(2, true);
}

// Calls that every rank rejects on its host, between rounds whose token counts grow and shrink:
// a dispatch (x of half the hidden size), and a combine (out of half the hidden size) between a
// round's dispatch and its combine. A rejected call still runs its step kernel on every rank (the
// ranks stay in step) but no data kernel after it, and the send's grid follows the tokens (one
// block at one token, several at 32), so what each send block keeps for the next call (the call
// number its rows go to, LowLatencyParams::sent_calls) must come through calls without a data
// kernel and grids of other sizes. Every round checked bit for bit, the rejected calls raised on
// every rank and counted nowhere.
TEST(GpuLowLatencyCalls, RejectedCallsBetweenRoundsOfOtherSizesKeepTheRanksInStep) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  const OpConfig c = decode_config(world_size, {DispatchDtype::fp8, CombineDtype::bf16});
  const std::vector<std::vector<int64_t>> tokens = {{32, 20}, {1, 1}, {32, 32}, {3, 29}};
  std::vector<LowLatencyRound> rounds;
  for (size_t i = 0; i < tokens.size(); ++i) {
    rounds.emplace_back(world_size, decode_inputs(c, world_size, 60 + i, tokens[i]));
  }
  const std::vector<RankInput> rejected = decode_inputs(c, world_size, 70, {8, 8});
  // [call][rank]: the rejected dispatches before rounds 2 and 4, the rejected combines inside
  // rounds 2 and 4.
  std::vector<std::vector<testing::RankOutcome>> dispatches(2), combines(2);
  for (auto* calls : {&dispatches, &combines}) {
    for (auto& call : *calls) call.resize(world_size);
  }
  auto comms = make_single_gpu_world(world_size);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, c);
    TestStream stream;
    for (size_t i = 0; i < rounds.size(); ++i) {
      testing::BeforeCombine reject_a_combine;
      if (i % 2 == 1) {
        const size_t k = i / 2;
        testing::DeviceInput input(rejected[rank], 0);
        LowLatencyDispatchArgs bad(input.view, /*hook=*/false);
        bad.stream = stream.s;
        bad.x.shape[1] = c.hidden / 2;  // rejected by every rank's host checks
        dispatches[k][rank] = testing::outcome_of([&] { op->low_latency_dispatch(bad); });
        reject_a_combine = [&, k](const TensorView& y, const LowLatencyHandle& handle) {
          const int64_t t = rounds[i].inputs[rank].num_tokens;
          testing::DeviceBuffer out =
              testing::DeviceBuffer::copy_of(std::vector<uint16_t>(t * c.hidden / 2, 0xffff));
          combines[k][rank] = testing::outcome_of([&] {
            op->low_latency_combine(y, handle,
                                    TensorView::matrix(out.ptr.get(), ScalarType::kBFloat16, t,
                                                       c.hidden / 2, DeviceType::kCuda, 0),
                                    stream.s);
          });
        };
      }
      gpu_low_latency_round(*op, rank, rounds[i], stream.s, 0, reject_a_combine);
    }
  });
  for (size_t i = 0; i < rounds.size(); ++i) {
    SCOPED_TRACE("round " + std::to_string(i + 1) + " of " + std::to_string(tokens[i][0]) +
                 " and " + std::to_string(tokens[i][1]) + " tokens");
    testing::check_low_latency_round(c, world_size, rounds[i], i + 1);
  }
  for (size_t k = 0; k < 2; ++k) {
    for (int r = 0; r < world_size; ++r) {
      SCOPED_TRACE("rejected calls " + std::to_string(k + 1) + ", rank " + std::to_string(r));
      EXPECT_TRUE(dispatches[k][r].threw) << "a dispatch of half the hidden size raised nothing";
      EXPECT_EQ(dispatches[k][r].code, ErrorCode::kInvalidArgument) << dispatches[k][r].message;
      EXPECT_TRUE(combines[k][r].threw) << "a combine into half the hidden size raised nothing";
      EXPECT_EQ(combines[k][r].code, ErrorCode::kInvalidArgument) << combines[k][r].message;
    }
  }
}

}  // namespace
}  // namespace moe_ep
