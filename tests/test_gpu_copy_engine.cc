// The copy-engine path (OpConfig::copy_engine; docs/copy-engine.md) in the
// single-GPU test world (label gpu, skipped without a GPU): W ranks as threads on one GPU, rows
// moved by cudaMemcpyAsync between the ranks' buffers instead of SM stores. Every output of every
// dispatch/combine dtype pair must equal the reference bit for bit (the same check as the SM
// path's tests), two rounds per op, at W = 1, 2, 4 and 8; also pre-quantized input, a DeepSeek
// row size, the SM path and the copy-engine path on the same inputs, a rejected dispatch and
// combine that fail every rank and leave the op usable, a late rank giving timeouts instead of
// a hang, MOE_EP_COPY_ENGINE as the default of the ops that can use it, and ranks that disagree
// on copy_engine failing the creation. The inputs come from testing::test_seed() (printed;
// MOE_EP_TEST_SEED replays a run).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "moe_ep/config.h"
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

OpConfig ce_config(int world_size, DtypePair pair) {
  OpConfig c = testing::world_test_config(world_size, pair);
  c.copy_engine = true;
  return c;
}

// The op of every rank took the path its configuration asked for.
void expect_path_of(const OpConfig& c, int rank, const Op& op) {
  EXPECT_EQ(op.config().copy_engine, c.copy_engine) << "rank " << rank;
}

// Runs `rounds` on one op per rank of a fresh world, each round through testing::gpu_round
// (dispatch, the reference's identity expert, combine; outputs downloaded); the second round
// combines on another stream than it dispatched on.
void run_rounds(int world_size, const OpConfig& c, std::vector<RoundResult>& rounds) {
  testing::run_rounds_on_world(make_single_gpu_world(world_size), c, rounds, true,
                               [&](int rank, const Op& op) { expect_path_of(c, rank, op); });
}

void run_and_check(int world_size, const OpConfig& c, bool prequantized = false) {
  testing::run_and_check_rounds(make_single_gpu_world(world_size), c, prequantized, true,
                                [&](int rank, const Op& op) { expect_path_of(c, rank, op); });
}

class GpuCopyEngine : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  }
};

TEST_P(GpuCopyEngine, AllDtypePairsEqualTheReference) {
  const int world = GetParam();
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair) + " at W=" + std::to_string(world) + ", seed " +
                 std::to_string(testing::test_seed()));
    run_and_check(world, ce_config(world, pair));
  }
}

TEST_P(GpuCopyEngine, PrequantizedInputEqualsTheReference) {
  const int world = GetParam();
  for (DispatchDtype d : {DispatchDtype::fp8, DispatchDtype::fp4}) {
    for (CombineDtype cd : {CombineDtype::bf16, CombineDtype::int8_e3m4}) {
      SCOPED_TRACE(std::string(short_name(d)) + "_" + short_name(cd) +
                   " at W=" + std::to_string(world));
      run_and_check(world, ce_config(world, {d, cd}), true);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GpuCopyEngine, ::testing::Values(1, 2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "W" + std::to_string(info.param);
                         });

// DeepSeek's row (H = 7168: 56 fp8 blocks, 224 mxfp4 blocks) with a few hundred tokens per rank
// and every pair, at W = 2: copies of several MB per peer.
TEST(GpuCopyEngineShapes, DeepSeekRowEqualsTheReference) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world = 2;
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair));
    OpConfig c = ce_config(world, pair);
    c.hidden = 7168;
    c.num_experts = 64;
    c.topk = 8;
    c.max_tokens_per_rank = 300;
    run_and_check(world, c);
  }
}

// The same inputs through the SM path and the copy-engine path: every output equal, byte for
// byte (each is also checked against the reference).
TEST(GpuCopyEngineShapes, SmPathAndCopyEnginePathAgree) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world = 4;
  for (const DtypePair& pair : {DtypePair{DispatchDtype::fp8, CombineDtype::bf16},
                                DtypePair{DispatchDtype::fp4, CombineDtype::int8_e3m4}}) {
    SCOPED_TRACE(testing::pair_name(pair));
    const OpConfig ce = ce_config(world, pair);
    OpConfig sm = ce;
    sm.copy_engine = false;
    std::vector<RoundResult> by_ce = testing::make_round_results(
        world, {world_test_inputs(ce, world, 7), world_test_inputs(ce, world, 8)});
    std::vector<RoundResult> by_sm = by_ce;
    run_rounds(world, ce, by_ce);
    run_rounds(world, sm, by_sm);
    for (size_t i = 0; i < by_ce.size(); ++i) {
      check_round(ce, world, by_ce[i], i + 1);
      check_round(sm, world, by_sm[i], i + 1);
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(by_ce[i].out[r], by_sm[i].out[r]) << "round " << i + 1 << ", rank " << r;
      }
    }
  }
}

// W = 4: rejected calls fail every rank together, before any copy is queued, and leave the op
// usable (the rounds of testing/rejected_calls.h).
TEST(GpuCopyEngineErrors, RejectedDispatchAndCombineFailEveryRankAndTheOpStaysUsable) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world = 4;
  testing::expect_rejected_calls_leave_the_op_usable(
      ce_config(world, {DispatchDtype::fp8, CombineDtype::fp8}), world,
      make_single_gpu_world(world));
}

// The copy-engine combine waits on the host for its step before queueing copies. W = 2 with a
// short bound: rank 1 joins the combine only after rank 0's step gave up, so rank 0 gets a Timeout
// (from that host wait, not a hang) and queues no copy; rank 1's step then finds rank 0's word,
// passes, and its reduce times out waiting for rank 0's rows (raised by synchronize). Both ops end
// poisoned. No assertion on time: the Timeout itself is the proof that nothing waited forever.
TEST(GpuCopyEngineErrors, CombineThatARankJoinsLateGivesTimeoutsNotAHang) {
  setenv("MOE_EP_TIMEOUT_S", "2", 1);
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  if (Knobs::get().timeout_s > 2) {  // knobs are read once per process; ctest runs it alone
    GTEST_SKIP() << "needs its own process (MOE_EP_TIMEOUT_S=2 was read too late)";
  }
  const int world = 2;
  const OpConfig c = ce_config(world, {DispatchDtype::fp8, CombineDtype::fp8});
  // Both ranks hold full batches (world_test_inputs gives rank 1 none, and a rank with no tokens
  // has nothing to wait for: its combine rightly succeeds), every slot live.
  testing::InputSpec spec;
  spec.world_size = world;
  spec.config = c;
  spec.mask_prob = 0.0;
  const std::vector<RankInput> inputs = testing::make_inputs(
      spec, testing::test_seed() + 11, {c.max_tokens_per_rank, c.max_tokens_per_rank});
  std::vector<testing::RankOutcome> outcome(world);
  auto comms = make_single_gpu_world(world);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, c);
    TestStream stream;
    testing::DeviceInput in(inputs[rank], 0);
    DispatchArgs args = in.view;
    args.stream = stream.s;
    const DispatchResult d = op->dispatch(args);
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    const int64_t tokens = inputs[rank].num_tokens;
    testing::DeviceBuffer y = testing::DeviceBuffer::copy_of(
        std::vector<uint16_t>(static_cast<size_t>(d.num_recv) * c.hidden, 0));
    testing::DeviceBuffer out = testing::DeviceBuffer::copy_of(
        std::vector<uint16_t>(static_cast<size_t>(tokens) * c.hidden, 0));
    if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(5));
    outcome[rank] = testing::outcome_of([&] {
      op->combine(d.handle,
                  TensorView::matrix(y.ptr.get(), ScalarType::kBFloat16, d.num_recv, c.hidden,
                                     DeviceType::kCuda, 0),
                  TensorView::matrix(out.ptr.get(), ScalarType::kBFloat16, tokens, c.hidden,
                                     DeviceType::kCuda, 0),
                  stream.s);
      op->synchronize(stream.s);
    });
  });
  for (int r = 0; r < world; ++r) {
    testing::expect_error(outcome[r], ErrorCode::kTimeout, {"timed out"}, r);
  }
}

// MOE_EP_COPY_ENGINE=1 (read once per process; ctest runs each test in a process of its own) is
// the default of the ops that can use the path: a normal-mode op takes it (and is exact), a
// decode-mode op keeps the SM path instead of being refused, and an explicit copy_engine=true on
// a decode-mode op is refused on every rank naming both fields.
TEST(GpuCopyEngineEnv, EnvironmentDefaultAppliesWhereThePathApplies) {
  setenv("MOE_EP_COPY_ENGINE", "1", 1);
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  if (!Knobs::get().copy_engine) {  // knobs are read once per process; ctest runs it alone
    GTEST_SKIP() << "needs its own process (MOE_EP_COPY_ENGINE=1 was read too late)";
  }
  const int world = 2;
  OpConfig normal = testing::world_test_config(world, {DispatchDtype::bf16, CombineDtype::bf16});
  OpConfig decode = normal;
  decode.low_latency = true;
  OpConfig refused = decode;
  refused.copy_engine = true;
  std::vector<RoundResult> rounds =
      testing::make_round_results(world, {world_test_inputs(normal, world, 9)});
  std::vector<int> normal_ce(world, -1), decode_ce(world, -1);
  std::vector<testing::RankOutcome> refusal(world);
  auto comms = make_single_gpu_world(world);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, normal);
    normal_ce[rank] = op->config().copy_engine ? 1 : 0;
    decode_ce[rank] = testing::kept_op(comm, decode)->config().copy_engine ? 1 : 0;
    refusal[rank] = testing::outcome_of([&] { create_op(comm, refused); });
    TestStream stream;
    testing::gpu_round(*op, rank, world, rounds[0], {stream.s, stream.s});
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(normal_ce[r], 1) << "rank " << r;
    EXPECT_EQ(decode_ce[r], 0) << "rank " << r;
    testing::expect_error(refusal[r], ErrorCode::kInvalidArgument,
                          {"copy_engine=true with low_latency=true"}, r);
  }
  check_round(normal, world, rounds[0], 1);
}

// Ranks that disagree on copy_engine never pair: the creation fails on every rank naming the
// field (after the bounded wait, shortened here), and an agreed creation works afterwards.
TEST(GpuCopyEngineErrors, RanksThatDisagreeOnCopyEngineFailTheCreation) {
  setenv("MOE_EP_TIMEOUT_S", "2", 1);
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world = 2;
  const OpConfig c = ce_config(world, {DispatchDtype::fp8, CombineDtype::bf16});
  std::vector<RoundResult> rounds =
      testing::make_round_results(world, {world_test_inputs(c, world, 10)});
  std::vector<testing::RankOutcome> mismatch(world);
  auto comms = make_single_gpu_world(world);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    OpConfig mine = c;  // another instance than the op made next, so that nothing pairs with it
    mine.instance_id = 7;
    mine.copy_engine = rank == 0;
    mismatch[rank] = testing::outcome_of([&] { create_op(comm, mine); });
    auto op = testing::kept_op(comm, c);
    TestStream stream;
    testing::gpu_round(*op, rank, world, rounds[0], {stream.s, stream.s});
  });
  for (int r = 0; r < world; ++r) {
    testing::expect_error(mismatch[r], ErrorCode::kInvalidArgument, {"copy_engine="}, r);
  }
  check_round(c, world, rounds[0], 1);
}

}  // namespace
}  // namespace moe_ep
