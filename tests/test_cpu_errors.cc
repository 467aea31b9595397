// Errors of the CPU backend (docs/design.md#errors), one case per test, each asserting the exception type on
// every rank and that the message names the argument and the value: configuration rules at
// creation, configurations that differ between ranks, bad dispatch inputs (shapes, T > max,
// expert ids out of range, and in validation mode duplicates and non-finite values), stale or
// foreign handles, one rank rejecting its input (every rank fails, the op stays usable), and a
// rank that never joins (the others time out naming phase and rank; the op is poisoned).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>
#include <vector>

#include "moe_ep/config.h"
#include "testing/harness.h"

namespace moe_ep {
namespace {

using testing::expect_error;
using testing::InputSpec;
using testing::make_inputs;
using testing::outcome_of;
using testing::RankInput;
using testing::RankOutcome;
using testing::run_ranks;
using testing::run_ranks_outcomes;
using testing::test_seed;

// ctest sets MOE_EP_VALIDATE=1; set it here too (before Knobs::get() first reads the
// environment) so running the binary by hand tests the same thing.
const bool kValidateEnv = (setenv("MOE_EP_VALIDATE", "1", /*overwrite=*/0), true);

OpConfig small_config() {
  OpConfig c;
  c.num_experts = 16;
  c.hidden = 128;
  c.topk = 4;
  c.max_tokens_per_rank = 8;
  c.dispatch_dtype = DispatchDtype::fp8;
  c.combine_dtype = CombineDtype::bf16;
  return c;
}

// create_op with `config` on every rank of a world of `world_size`.
std::vector<RankOutcome> create_everywhere(const OpConfig& config, int world_size = 4) {
  return run_ranks_outcomes(
      world_size, [&](int, const std::shared_ptr<Communicator>& comm) { create_op(comm, config); });
}

void expect_all(const std::vector<RankOutcome>& outcomes, ErrorCode code,
                const std::vector<std::string>& fragments) {
  for (size_t r = 0; r < outcomes.size(); ++r) expect_error(outcomes[r], code, fragments, r);
}

// ---------------------------------------------------------------------------------------------
// Configuration

TEST(CpuErrors, Hidden7100WithFp8Dispatch) {
  OpConfig c = small_config();
  c.hidden = 7100;
  expect_all(create_everywhere(c), ErrorCode::kInvalidArgument,
             {"hidden=7100 is not a multiple of 128, the block size of float8_blockwise "
              "(dispatch)"});
}

TEST(CpuErrors, Hidden7100WithFp4Dispatch) {
  OpConfig c = small_config();
  c.hidden = 7100;
  c.dispatch_dtype = DispatchDtype::fp4;
  expect_all(create_everywhere(c), ErrorCode::kInvalidArgument,
             {"hidden=7100 is not a multiple of 32, the block size of mxfp4_blockwise "
              "(dispatch)"});
}

TEST(CpuErrors, Hidden2880Fp4WithBf16CombineIsFine) {
  OpConfig c = small_config();
  c.hidden = 2880;
  c.max_tokens_per_rank = 2;
  c.dispatch_dtype = DispatchDtype::fp4;
  c.combine_dtype = CombineDtype::bf16;
  for (const RankOutcome& o : create_everywhere(c)) EXPECT_FALSE(o.threw) << o.message;
}

TEST(CpuErrors, Hidden2880Fp4WithFp8CombineFails) {
  OpConfig c = small_config();
  c.hidden = 2880;
  c.dispatch_dtype = DispatchDtype::fp4;
  c.combine_dtype = CombineDtype::fp8;
  expect_all(create_everywhere(c), ErrorCode::kInvalidArgument,
             {"hidden=2880 is not a multiple of 128, the block size of float8_blockwise "
              "(combine)"});
}

TEST(CpuErrors, TopkZero) {
  OpConfig c = small_config();
  c.num_experts = 64;
  c.topk = 0;
  expect_all(create_everywhere(c), ErrorCode::kInvalidArgument,
             {"topk=0 must be in [1, num_experts=64]"});
}

TEST(CpuErrors, TopkAboveExperts) {
  OpConfig c = small_config();
  c.topk = 17;
  expect_all(create_everywhere(c), ErrorCode::kInvalidArgument,
             {"topk=17 must be in [1, num_experts=16]"});
}

TEST(CpuErrors, ExpertsNotDivisibleByWorldSize) {
  OpConfig c = small_config();
  c.num_experts = 10;
  c.topk = 2;
  expect_all(create_everywhere(c, 4), ErrorCode::kInvalidArgument,
             {"num_experts=10 is not divisible by world_size=4"});
}

TEST(CpuErrors, ConfigurationDiffersBetweenRanks) {
  // Rank 1 asks for hidden=4096, the others for 7168. Creations are matched by configuration, so
  // the two never pair: each waits out the bound and fails naming the differing field.
  const auto outcomes = run_ranks_outcomes(
      3,
      [](int rank, const std::shared_ptr<Communicator>& comm) {
        OpConfig c = small_config();
        c.num_experts = 12;
        c.max_tokens_per_rank = 2;
        c.hidden = rank == 1 ? 4096 : 7168;
        create_op(comm, c);
      },
      /*timeout_s=*/0.5);
  expect_all(
      outcomes, ErrorCode::kInvalidArgument,
      {"configuration differs between ranks: ", "hidden=4096 on rank 1", "hidden=7168 on rank"});
}

TEST(CpuErrors, InvalidConfigurationOnOneRankFailsEveryRankAtOnce) {
  // Rank 2's configuration breaks a rule: it reports the rule, the others the difference, and
  // nobody waits for a timeout.
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes =
      run_ranks_outcomes(3, [](int rank, const std::shared_ptr<Communicator>& comm) {
        OpConfig c = small_config();
        c.num_experts = 12;
        if (rank == 2) c.topk = 0;
        create_op(comm, c);
      });
  expect_error(outcomes[2], ErrorCode::kInvalidArgument, {"topk=0 must be in [1, num_experts=12]"});
  for (int r = 0; r < 2; ++r) {
    expect_error(outcomes[r], ErrorCode::kInvalidArgument,
                 {"create_op aborted: rank 2 rejected its configuration",
                  "topk=0 on rank 2, topk=4 on rank ", "topk=0 must be in [1, num_experts=12]"},
                 r);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// ---------------------------------------------------------------------------------------------
// Dispatch inputs: the rejecting rank names the problem; every other rank says who rejected.

// Runs one dispatch on 2 ranks where rank `bad_rank`'s input is edited by `edit`, and returns
// the outcomes. Each rank then runs a clean dispatch + combine to show the op stays usable.
template <typename Edit>
std::vector<RankOutcome> dispatch_with_bad_rank(int bad_rank, Edit edit, int64_t tokens = 6) {
  InputSpec spec;
  spec.world_size = 2;
  spec.config = small_config();
  const std::vector<RankInput> clean = make_inputs(spec, test_seed(), {tokens, tokens});
  std::vector<RankOutcome> outcomes(2);
  std::vector<RankOutcome> after(2);
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, spec.config);
    RankInput in = clean[rank];
    DispatchArgs args = in.args();
    if (rank == bad_rank) edit(in, args);
    outcomes[rank] = outcome_of([&] { op->dispatch(args); });
    after[rank] = outcome_of([&] {
      const DispatchResult d = op->dispatch(clean[rank].args());
      std::vector<uint16_t> y(d.num_recv * spec.config.hidden);
      std::vector<uint16_t> out(clean[rank].num_tokens * spec.config.hidden);
      op->combine(
          d.handle, TensorView::matrix(y.data(), ScalarType::kBFloat16, d.num_recv, 128),
          TensorView::matrix(out.data(), ScalarType::kBFloat16, clean[rank].num_tokens, 128));
      EXPECT_EQ(d.handle.call_seq, 1u);  // the rejected call did not count
    });
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_FALSE(after[r].threw) << "rank " << r << ": " << after[r].message;
  expect_error(outcomes[1 - bad_rank], ErrorCode::kInvalidArgument,
               {"dispatch aborted: rank " + std::to_string(bad_rank) + " rejected its input: "},
               1 - bad_rank);
  return outcomes;
}

TEST(CpuErrors, TooManyTokens) {
  const auto o = dispatch_with_bad_rank(1, [](RankInput&, DispatchArgs& a) {
    a.x.shape[0] = 9;  // only shapes are checked before the limit, so no data is read
    a.topk_idx.shape[0] = 9;
    a.topk_weights.shape[0] = 9;
  });
  expect_error(o[1], ErrorCode::kInvalidArgument,
               {"dispatch: num_tokens=9 exceeds max_tokens_per_rank=8"});
  expect_error(o[0], ErrorCode::kInvalidArgument, {"num_tokens=9 exceeds max_tokens_per_rank=8"});
}

TEST(CpuErrors, ExpertIdMinusTwo) {
  const auto o =
      dispatch_with_bad_rank(0, [](RankInput& in, DispatchArgs&) { in.topk_idx[2 * 4 + 1] = -2; });
  expect_error(o[0], ErrorCode::kInvalidArgument,
               {"topk_idx[2][1]=-2 is out of range", "[-1, 16)"});
}

TEST(CpuErrors, ExpertIdEqualToNumExperts) {
  const auto o =
      dispatch_with_bad_rank(1, [](RankInput& in, DispatchArgs&) { in.topk_idx[5 * 4 + 3] = 16; });
  expect_error(o[1], ErrorCode::kInvalidArgument,
               {"topk_idx[5][3]=16 is out of range", "[-1, 16)"});
}

TEST(CpuErrors, SameExpertTwiceInValidationMode) {
  ASSERT_TRUE(Knobs::get().validate) << "needs MOE_EP_VALIDATE=1";
  const auto o = dispatch_with_bad_rank(0, [](RankInput& in, DispatchArgs&) {
    in.topk_idx[1 * 4 + 0] = 7;
    in.topk_idx[1 * 4 + 2] = 7;
  });
  expect_error(o[0], ErrorCode::kInvalidArgument, {"topk_idx[1] names expert 7 twice"});
}

TEST(CpuErrors, NanInXInValidationMode) {
  ASSERT_TRUE(Knobs::get().validate) << "needs MOE_EP_VALIDATE=1";
  const auto o = dispatch_with_bad_rank(
      1, [](RankInput& in, DispatchArgs&) { in.x[3 * 128 + 17] = formats::kBf16NaN; });
  expect_error(o[1], ErrorCode::kInvalidArgument, {"x[3][17]=nan is not finite"});
}

TEST(CpuErrors, InfInWeightsInValidationMode) {
  ASSERT_TRUE(Knobs::get().validate) << "needs MOE_EP_VALIDATE=1";
  const auto o = dispatch_with_bad_rank(0, [](RankInput& in, DispatchArgs&) {
    in.topk_weights[4 * 4 + 2] = std::numeric_limits<float>::infinity();
  });
  expect_error(o[0], ErrorCode::kInvalidArgument, {"topk_weights[4][2]=inf is not finite"});
}

TEST(CpuErrors, WrongDtypeOfX) {
  const auto o = dispatch_with_bad_rank(
      0, [](RankInput&, DispatchArgs& a) { a.x.dtype = ScalarType::kFloat32; });
  expect_error(o[0], ErrorCode::kInvalidArgument,
               {"x has dtype fp32", "float8_blockwise takes bf16 or pre-quantized e4m3"});
}

TEST(CpuErrors, WrongHiddenOfX) {
  const auto o = dispatch_with_bad_rank(1, [](RankInput&, DispatchArgs& a) { a.x.shape[1] = 64; });
  expect_error(o[1], ErrorCode::kInvalidArgument, {"x has 64 columns, expected 128 (hidden)"});
}

TEST(CpuErrors, ScalesWithBf16X) {
  std::vector<float> scales(6);
  const auto o = dispatch_with_bad_rank(1, [&](RankInput&, DispatchArgs& a) {
    a.x_scales = TensorView::matrix(scales.data(), ScalarType::kFloat32, 6, 1);
  });
  expect_error(o[1], ErrorCode::kInvalidArgument, {"x_scales=fp32[6, 1] on cpu must be undefined"});
}

TEST(CpuErrors, TopkIdxRowsDifferFromX) {
  const auto o =
      dispatch_with_bad_rank(0, [](RankInput&, DispatchArgs& a) { a.topk_idx.shape[0] = 5; });
  expect_error(o[0], ErrorCode::kInvalidArgument, {"topk_idx has 5 rows, expected 6"});
}

TEST(CpuErrors, TensorOnCuda) {
  const auto o = dispatch_with_bad_rank(
      1, [](RankInput&, DispatchArgs& a) { a.topk_weights.device = DeviceType::kCuda; });
  expect_error(o[1], ErrorCode::kInvalidArgument,
               {"topk_weights=fp32[6, 4] on cuda:0 is not on cpu"});
}

// ---------------------------------------------------------------------------------------------
// Combine arguments

struct CombineFixture {
  InputSpec spec;
  std::vector<RankInput> inputs;
  CombineFixture() {
    spec.world_size = 2;
    spec.config = small_config();
    inputs = make_inputs(spec, test_seed(), {5, 3});
  }
};

TEST(CpuErrors, HandleFromAnotherOp) {
  CombineFixture f;
  std::vector<RankOutcome> outcomes(2);
  std::vector<uint64_t> uids_a(2), uids_b(2);
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    OpConfig other = f.spec.config;
    other.instance_id = 1;
    auto a = create_op(comm, f.spec.config);
    auto b = create_op(comm, other);
    uids_a[rank] = a->uid();
    uids_b[rank] = b->uid();
    const DispatchResult da = a->dispatch(f.inputs[rank].args());
    const DispatchResult db = b->dispatch(f.inputs[rank].args());
    std::vector<uint16_t> y(da.num_recv * 128), out(f.inputs[rank].num_tokens * 128);
    outcomes[rank] = outcome_of([&] {
      a->combine(
          db.handle, TensorView::matrix(y.data(), ScalarType::kBFloat16, da.num_recv, 128),
          TensorView::matrix(out.data(), ScalarType::kBFloat16, f.inputs[rank].num_tokens, 128));
    });
  });
  for (int r = 0; r < 2; ++r) {
    expect_error(outcomes[r], ErrorCode::kInvalidArgument,
                 {"combine: handle belongs to op uid " + std::to_string(uids_b[r]),
                  "not to this op (uid " + std::to_string(uids_a[r]) + ")"},
                 r);
  }
}

TEST(CpuErrors, HandleFromAnEarlierCall) {
  CombineFixture f;
  std::vector<RankOutcome> outcomes(2);
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, f.spec.config);
    const DispatchResult first = op->dispatch(f.inputs[rank].args());
    const DispatchResult second = op->dispatch(f.inputs[rank].args());
    std::vector<uint16_t> y(first.num_recv * 128), out(f.inputs[rank].num_tokens * 128);
    outcomes[rank] = outcome_of([&] {
      op->combine(
          first.handle, TensorView::matrix(y.data(), ScalarType::kBFloat16, first.num_recv, 128),
          TensorView::matrix(out.data(), ScalarType::kBFloat16, f.inputs[rank].num_tokens, 128));
    });
    // The latest handle still works.
    op->combine(
        second.handle, TensorView::matrix(y.data(), ScalarType::kBFloat16, second.num_recv, 128),
        TensorView::matrix(out.data(), ScalarType::kBFloat16, f.inputs[rank].num_tokens, 128));
  });
  for (int r = 0; r < 2; ++r) {
    expect_error(outcomes[r], ErrorCode::kInvalidArgument,
                 {"combine: handle is from dispatch call 1", "the latest dispatch is call 2"}, r);
  }
}

TEST(CpuErrors, CombineYRowsDifferFromNumRecv) {
  CombineFixture f;
  std::vector<RankOutcome> outcomes(2);
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, f.spec.config);
    const DispatchResult d = op->dispatch(f.inputs[rank].args());
    const int64_t wrong = rank == 0 ? d.num_recv + 1 : d.num_recv;
    std::vector<uint16_t> y(wrong * 128), out(f.inputs[rank].num_tokens * 128);
    outcomes[rank] = outcome_of([&] {
      op->combine(
          d.handle, TensorView::matrix(y.data(), ScalarType::kBFloat16, wrong, 128),
          TensorView::matrix(out.data(), ScalarType::kBFloat16, f.inputs[rank].num_tokens, 128));
    });
  });
  expect_error(outcomes[0], ErrorCode::kInvalidArgument, {"combine: y has ", "(handle.num_recv)"});
  expect_error(outcomes[1], ErrorCode::kInvalidArgument,
               {"combine aborted: rank 0 rejected its input: y has "});
}

TEST(CpuErrors, CombineOutRowsDifferFromNumTokens) {
  CombineFixture f;
  std::vector<RankOutcome> outcomes(2);
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, f.spec.config);
    const DispatchResult d = op->dispatch(f.inputs[rank].args());
    std::vector<uint16_t> y(d.num_recv * 128), out(8 * 128);
    outcomes[rank] = outcome_of([&] {
      op->combine(d.handle, TensorView::matrix(y.data(), ScalarType::kBFloat16, d.num_recv, 128),
                  TensorView::matrix(out.data(), ScalarType::kBFloat16, 4, 128));
    });
  });
  expect_error(outcomes[0], ErrorCode::kInvalidArgument,
               {"combine: out has 4 rows, expected 5 (handle.num_tokens)"});
  expect_error(outcomes[1], ErrorCode::kInvalidArgument,
               {"combine: out has 4 rows, expected 3 (handle.num_tokens)"});
}

// ---------------------------------------------------------------------------------------------
// A rank that never joins

TEST(CpuErrors, RankThatNeverJoinsDispatchTimesOutAndPoisons) {
  InputSpec spec;
  spec.world_size = 3;
  spec.config = small_config();
  spec.config.num_experts = 12;
  const std::vector<RankInput> inputs = make_inputs(spec, test_seed(), {4, 4, 4});
  std::vector<RankOutcome> first(3), second(3), late(3);
  std::vector<double> seconds(3, 0.0);
  std::atomic<int> gave_up{0};
  testing::run_ranks(
      3,
      [&](int rank, const std::shared_ptr<Communicator>& comm) {
        auto op = create_op(comm, spec.config);
        if (rank == 2) {
          // Join only after the others have given up: the group is broken, so this fails at
          // once (and poisons this rank's op too) instead of waiting.
          while (gave_up.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          late[rank] = outcome_of([&] { op->dispatch(inputs[rank].args()); });
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        first[rank] = outcome_of([&] { op->dispatch(inputs[rank].args()); });
        seconds[rank] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        ++gave_up;
        second[rank] = outcome_of([&] { op->dispatch(inputs[rank].args()); });
      },
      /*timeout_s=*/0.5);
  for (int r = 0; r < 2; ++r) {
    expect_error(first[r], ErrorCode::kTimeout,
                 {"dispatch/publish", "rank " + std::to_string(r) + " timed out",
                  "waiting for ranks [2]", "expected 3 arrivals, seen 2"},
                 r);
    EXPECT_LT(seconds[r], 5.0) << "rank " << r << " waited far longer than the 0.5 s timeout";
    expect_error(second[r], ErrorCode::kInvalidUsage, {"op unusable after: dispatch/publish"}, r);
  }
  expect_error(late[2], ErrorCode::kRemoteError, {"dispatch/publish", "rank 2 cannot proceed"}, 2);
}

TEST(CpuErrors, RankThatNeverJoinsCreateTimesOut) {
  const auto outcomes = run_ranks_outcomes(
      2,
      [](int rank, const std::shared_ptr<Communicator>& comm) {
        if (rank == 0) create_op(comm, small_config());
      },
      /*timeout_s=*/0.3);
  expect_error(outcomes[0], ErrorCode::kTimeout,
               {"create_op: rank 0 timed out", "waiting for ranks [1]",
                "expected 2 arrivals, seen 1", "rank 1 is not creating an op"});
}

}  // namespace
}  // namespace moe_ep
