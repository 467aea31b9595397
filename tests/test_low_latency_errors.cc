// Errors and agreement of decode mode on the CPU backend (docs/decode-mode.md,
// docs/design.md#collective-calls-and-agreement): a y of the wrong shape or dtype, an out of the
// wrong shape, stale and foreign handles and a combine before any low-latency dispatch fail every
// rank with InvalidArgument naming the argument and the value, and the op stays usable; a rank
// rejecting its low-latency dispatch or combine fails every rank; low-latency calls meeting
// normal-mode calls are out of step on every rank and pair nothing; a rank that never joins
// times out and poisons the op; a backend without decode mode says so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "moe_ep/config.h"
#include "testing/harness.h"
#include "testing/low_latency.h"

namespace moe_ep {
namespace {

using testing::expect_error;
using testing::InputSpec;
using testing::LowLatencyRound;
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
  c.num_experts = 12;  // divisible by 2 and 3 ranks
  c.hidden = 128;
  c.topk = 3;
  c.max_tokens_per_rank = 6;
  c.dispatch_dtype = DispatchDtype::fp8;
  c.combine_dtype = CombineDtype::fp8;
  c.low_latency = true;
  return c;
}

std::vector<RankInput> inputs_for(int world_size, const OpConfig& config, uint64_t salt = 0) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config = config;
  return make_inputs(spec, test_seed() + salt, std::vector<int64_t>(world_size, 5));
}

// A correctly shaped y ([E/W, W*Tmax, H] bf16, zeros) for `op`.
struct SlabY {
  std::vector<uint16_t> data;
  TensorView view;
  explicit SlabY(const Op& op) {
    const OpConfig& c = op.config();
    const int64_t slabs = c.num_experts / op.world_size();
    const int64_t rows = static_cast<int64_t>(op.world_size()) * c.max_tokens_per_rank;
    data.assign(slabs * rows * c.hidden, 0);
    view = TensorView::tensor3(data.data(), ScalarType::kBFloat16, slabs, rows, c.hidden);
  }
};

TensorView out_view(std::vector<uint16_t>& out, const RankInput& in, const OpConfig& c) {
  out.assign(in.num_tokens * c.hidden, 0x1234);
  return TensorView::matrix(out.data(), ScalarType::kBFloat16, in.num_tokens, c.hidden);
}

// One bad low_latency_combine on `bad_rank` (the others pass good arguments), then a good round
// on the same op, checked against the reference.
template <typename Bad>
void expect_bad_combine(Bad make_bad, const std::vector<std::string>& fragments) {
  const OpConfig config = small_config();
  const auto inputs = inputs_for(2, config);
  std::vector<RankOutcome> first(2);
  LowLatencyRound after(2, inputs_for(2, config, 1));
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    const LowLatencyDispatchResult d = op->low_latency_dispatch(inputs[rank].args());
    SlabY y(*op);
    std::vector<uint16_t> out;
    TensorView o = out_view(out, inputs[rank], config);
    LowLatencyHandle h = d.handle;
    TensorView yv = y.view;
    if (rank == 1) make_bad(yv, h, o);
    first[rank] = outcome_of([&] { op->low_latency_combine(yv, h, o); });
    for (uint16_t v : out) ASSERT_EQ(v, 0x1234);  // nothing was written
    after.run(rank, *op);
  });
  std::vector<std::string> own = {"low_latency_combine: "};
  own.insert(own.end(), fragments.begin(), fragments.end());
  expect_error(first[1], ErrorCode::kInvalidArgument, own, 1);
  std::vector<std::string> peer = {"low_latency_combine aborted: rank 1 rejected its input: "};
  peer.insert(peer.end(), fragments.begin(), fragments.end());
  expect_error(first[0], ErrorCode::kInvalidArgument, peer, 0);
  testing::check_low_latency_round(config, 2, after, /*expected_call_seq=*/2);
}

TEST(LowLatencyErrors, YWithTheWrongShape) {
  expect_bad_combine([](TensorView& y, LowLatencyHandle&, TensorView&) { y.shape[1] -= 1; },
                     {"y=bf16[6, 11, 128] on cpu has the wrong shape, expected bf16[6, 12, 128] "
                      "([E/W, W*Tmax, hidden] with E/W=6, W*Tmax=12, hidden=128)"});
}

TEST(LowLatencyErrors, YAsAMatrix) {
  // Normal mode's [R, H] y is not decode mode's.
  expect_bad_combine(
      [](TensorView& y, LowLatencyHandle&, TensorView&) {
        y = TensorView::matrix(y.data, ScalarType::kBFloat16, 72, 128);
      },
      {"y=bf16[72, 128] on cpu has the wrong shape, expected bf16[6, 12, 128]"});
}

TEST(LowLatencyErrors, YWithTheWrongDtype) {
  expect_bad_combine(
      [](TensorView& y, LowLatencyHandle&, TensorView&) { y.dtype = ScalarType::kFloat8E4M3; },
      {"y has dtype e4m3, expected bf16[6, 12, 128]"});
}

TEST(LowLatencyErrors, OutWithTheWrongRows) {
  expect_bad_combine([](TensorView&, LowLatencyHandle&, TensorView& out) { out.shape[0] += 1; },
                     {"out has 6 rows, expected 5 (handle.num_tokens)"});
}

TEST(LowLatencyErrors, HandleOfAnotherOp) {
  expect_bad_combine([](TensorView&, LowLatencyHandle& h, TensorView&) { h.op_uid += 1000; },
                     {"handle belongs to op uid ", ", not to this op (uid "});
}

TEST(LowLatencyErrors, HandleWithAnotherTokenCount) {
  expect_bad_combine([](TensorView&, LowLatencyHandle& h, TensorView&) { h.num_tokens = 4; },
                     {"handle has num_tokens=4 but low-latency dispatch call 1 had num_tokens=5"});
}

TEST(LowLatencyErrors, StaleHandleFailsEveryRank) {
  // Low-latency dispatch #1 and #2, then a combine with #1's handle: rejected on every rank; the
  // combine of #2 then works.
  const OpConfig config = small_config();
  const auto inputs = inputs_for(2, config);
  std::vector<RankOutcome> stale(2);
  LowLatencyRound second(2, inputs_for(2, config, 3));
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    const LowLatencyHandle first = op->low_latency_dispatch(inputs[rank].args()).handle;
    second.run(rank, *op);  // dispatch #2 and its combine
    SlabY y(*op);
    std::vector<uint16_t> out;
    stale[rank] = outcome_of(
        [&] { op->low_latency_combine(y.view, first, out_view(out, inputs[rank], config)); });
  });
  for (int r = 0; r < 2; ++r) {
    expect_error(stale[r], ErrorCode::kInvalidArgument,
                 {"handle is from low-latency dispatch call 1 of op uid",
                  "but the latest low-latency dispatch is call 2; low_latency_combine takes the "
                  "handle of the latest low-latency dispatch"},
                 r);
  }
  testing::check_low_latency_round(config, 2, second, /*expected_call_seq=*/2);
}

TEST(LowLatencyErrors, CombineBeforeAnyLowLatencyDispatch) {
  // A normal dispatch does not count: low-latency calls have their own numbers.
  const OpConfig config = small_config();
  const auto inputs = inputs_for(2, config);
  std::vector<RankOutcome> early(2);
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    op->dispatch(inputs[rank].args());
    SlabY y(*op);
    std::vector<uint16_t> out;
    const LowLatencyHandle h{op->uid(), 1, inputs[rank].num_tokens};
    early[rank] = outcome_of(
        [&] { op->low_latency_combine(y.view, h, out_view(out, inputs[rank], config)); });
  });
  for (int r = 0; r < 2; ++r) {
    expect_error(early[r], ErrorCode::kInvalidArgument,
                 {"handle.call_seq=1 but op uid", "has not made a low-latency dispatch yet"}, r);
  }
}

TEST(LowLatencyErrors, TooManyTokensFailsEveryRank) {
  OpConfig config = small_config();
  InputSpec spec;
  spec.world_size = 2;
  spec.config = config;
  const auto inputs = make_inputs(spec, test_seed(), {7, 3});  // rank 0 exceeds Tmax=6
  const auto outcomes =
      run_ranks_outcomes(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
        auto op = create_op(comm, config);
        op->low_latency_dispatch(inputs[rank].args());
      });
  expect_error(outcomes[0], ErrorCode::kInvalidArgument,
               {"low_latency_dispatch: num_tokens=7 exceeds max_tokens_per_rank=6"}, 0);
  expect_error(outcomes[1], ErrorCode::kInvalidArgument,
               {"low_latency_dispatch aborted: rank 0 rejected its input: num_tokens=7"}, 1);
}

TEST(LowLatencyErrors, DuplicateExpertRejectedInValidationMode) {
  ASSERT_TRUE(Knobs::get().validate) << "needs MOE_EP_VALIDATE=1";
  const OpConfig config = small_config();
  auto inputs = inputs_for(2, config);
  inputs[1].topk_idx[2 * config.topk] = 4;  // token 2 of rank 1 names expert 4 in slots 0 and 1
  inputs[1].topk_idx[2 * config.topk + 1] = 4;
  const auto outcomes =
      run_ranks_outcomes(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
        auto op = create_op(comm, config);
        op->low_latency_dispatch(inputs[rank].args());
      });
  expect_error(outcomes[1], ErrorCode::kInvalidArgument,
               {"low_latency_dispatch: topk_idx[2] names expert 4 twice"}, 1);
  expect_error(outcomes[0], ErrorCode::kInvalidArgument,
               {"low_latency_dispatch aborted: rank 1 rejected its input: topk_idx[2]"}, 0);
}

TEST(LowLatencyErrors, RankRejectingItsLowLatencyDispatchFailsEveryRank) {
  // Rank 2's upper layer rejects its arguments through Op::reject: every rank fails with its
  // reason, nothing moved, and the next low-latency dispatch is #1 again and exact.
  const OpConfig config = small_config();
  const auto inputs = inputs_for(3, config);
  std::vector<RankOutcome> first(3);
  LowLatencyRound after(3, inputs);
  run_ranks(3, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    first[rank] = outcome_of([&] {
      if (rank == 2) {
        op->reject(CallKind::kLowLatencyDispatch, "x: not contiguous");
      } else {
        op->low_latency_dispatch(inputs[rank].args());
      }
    });
    after.run(rank, *op);
  });
  expect_error(first[2], ErrorCode::kInvalidArgument, {"low_latency_dispatch: x: not contiguous"},
               2);
  for (int r = 0; r < 2; ++r) {
    expect_error(first[r], ErrorCode::kInvalidArgument,
                 {"low_latency_dispatch aborted: rank 2 rejected its input: x: not contiguous"}, r);
  }
  testing::check_low_latency_round(config, 3, after, /*expected_call_seq=*/1);
}

TEST(LowLatencyErrors, RejectedLowLatencyCombineLeavesTheDispatchCombinable) {
  const OpConfig config = small_config();
  const auto inputs = inputs_for(2, config);
  std::vector<RankOutcome> first(2);
  LowLatencyRound res(2, inputs);
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    first[rank] = outcome_of([&] {
      if (rank == 1) {
        op->low_latency_dispatch(inputs[rank].args());
        op->reject(CallKind::kLowLatencyCombine, "y: not contiguous");
      } else {
        const LowLatencyDispatchResult d = op->low_latency_dispatch(inputs[rank].args());
        SlabY y(*op);
        std::vector<uint16_t> out;
        op->low_latency_combine(y.view, d.handle, out_view(out, inputs[rank], config));
      }
    });
    res.run(rank, *op);  // low-latency dispatch #2 and its combine
  });
  expect_error(first[0], ErrorCode::kInvalidArgument,
               {"low_latency_combine aborted: rank 1 rejected its input: y: not contiguous"}, 0);
  expect_error(first[1], ErrorCode::kInvalidArgument, {"low_latency_combine: y: not contiguous"},
               1);
  testing::check_low_latency_round(config, 2, res, /*expected_call_seq=*/2);
}

TEST(LowLatencyErrors, LowLatencyCombineMeetingCombineIsOutOfStep) {
  // Both ranks made dispatch #1 and low_latency_dispatch #1; rank 0 then combines in decode mode,
  // rank 1 in normal mode. Both fail naming both calls, nothing is written, and both combines
  // then work in the same order on every rank.
  const OpConfig config = small_config();
  const auto inputs = inputs_for(2, config);
  const auto ll_inputs = inputs_for(2, config, 9);
  std::vector<RankOutcome> skewed(2);
  LowLatencyRound ll(2, ll_inputs);
  testing::RoundResult normal = testing::make_round_results(2, {inputs})[0];
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    const DispatchResult d = op->dispatch(inputs[rank].args());
    const LowLatencyDispatchResult lld = op->low_latency_dispatch(ll_inputs[rank].args());
    std::vector<uint16_t> out;
    skewed[rank] = outcome_of([&] {
      if (rank == 0) {
        SlabY y(*op);
        op->low_latency_combine(y.view, lld.handle, out_view(out, ll_inputs[rank], config));
      } else {
        const std::vector<uint16_t> y(d.num_recv * config.hidden, 0);
        op->combine(d.handle,
                    TensorView::matrix(y.data(), ScalarType::kBFloat16, d.num_recv, config.hidden),
                    out_view(out, inputs[rank], config));
      }
    });
    for (uint16_t v : out) ASSERT_EQ(v, 0x1234);
    // Now in step: the normal combine, then the low-latency one (its dispatch is redone, since
    // LowLatencyRound::run dispatches too: low-latency dispatch #2).
    normal.received[rank] = testing::copy_outputs(d);
    normal.handles[rank] = d.handle;
    normal.op_uids[rank] = op->uid();
    const std::vector<uint16_t> y = testing::identity_expert(normal.received[rank], config);
    normal.out[rank].assign(inputs[rank].num_tokens * config.hidden, 0xffff);
    op->combine(d.handle,
                TensorView::matrix(y.data(), ScalarType::kBFloat16, d.num_recv, config.hidden),
                TensorView::matrix(normal.out[rank].data(), ScalarType::kBFloat16,
                                   inputs[rank].num_tokens, config.hidden));
    ll.run(rank, *op);
  });
  expect_error(skewed[0], ErrorCode::kInvalidUsage,
               {"low_latency_combine aborted: calls out of step: rank 0 is in low_latency_combine "
                "#1, rank 1 in combine #1"},
               0);
  expect_error(skewed[1], ErrorCode::kInvalidUsage,
               {"combine aborted: calls out of step: rank 1 is in combine #1, rank 0 in "
                "low_latency_combine #1"},
               1);
  testing::check_round(config, 2, normal);
  testing::check_low_latency_round(config, 2, ll, /*expected_call_seq=*/2);
}

TEST(LowLatencyErrors, LowLatencyDispatchMeetingDispatchIsOutOfStep) {
  const OpConfig config = small_config();
  const auto inputs = inputs_for(2, config);
  std::vector<RankOutcome> skewed(2);
  LowLatencyRound after(2, inputs);
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    skewed[rank] = outcome_of([&] {
      if (rank == 0) {
        op->low_latency_dispatch(inputs[rank].args());
      } else {
        op->dispatch(inputs[rank].args());
      }
    });
    after.run(rank, *op);
  });
  expect_error(skewed[0], ErrorCode::kInvalidUsage,
               {"rank 0 is in low_latency_dispatch #1, rank 1 in dispatch #1"}, 0);
  expect_error(skewed[1], ErrorCode::kInvalidUsage,
               {"rank 1 is in dispatch #1, rank 0 in low_latency_dispatch #1"}, 1);
  testing::check_low_latency_round(config, 2, after, /*expected_call_seq=*/1);
}

TEST(LowLatencyErrors, RankThatNeverJoinsTimesOutAndPoisonsTheOp) {
  const OpConfig config = small_config();
  const auto inputs = inputs_for(2, config);
  std::vector<RankOutcome> first(2);
  std::vector<RankOutcome> later(2);
  run_ranks_outcomes(
      2,
      [&](int rank, const std::shared_ptr<Communicator>& comm) {
        auto op = create_op(comm, config);
        if (rank == 0) {
          first[0] = outcome_of([&] { op->low_latency_dispatch(inputs[0].args()); });
          later[0] = outcome_of([&] { op->low_latency_dispatch(inputs[0].args()); });
        }
      },
      /*timeout_s=*/0.5);
  expect_error(first[0], ErrorCode::kTimeout, {"low_latency_dispatch/publish", "rank 0"}, 0);
  expect_error(later[0], ErrorCode::kInvalidUsage, {"op unusable after: "}, 0);
}

// A backend that lacks decode mode inherits Op's defaults.
class NoDecodeOp : public Op {
 public:
  const OpConfig& config() const override { return config_; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Backend backend() const override { return Backend::kCuda; }
  uint64_t uid() const override { return 1; }
  DispatchResult dispatch(const DispatchArgs&) override { return {}; }
  void combine(const Handle&, const TensorView&, const TensorView&, void*) override {}
  void reject(CallKind, const std::string&, void*) override {}

 private:
  OpConfig config_;
};

TEST(LowLatencyErrors, BackendWithoutDecodeModeSaysSo) {
  NoDecodeOp op;
  expect_error(outcome_of([&] { op.low_latency_dispatch({}); }), ErrorCode::kInvalidUsage,
               {"decode mode is not implemented by the cuda backend"});
  expect_error(outcome_of([&] { op.low_latency_combine({}, {}, {}); }), ErrorCode::kInvalidUsage,
               {"decode mode is not implemented by the cuda backend"});
  // Op::memory() too is a default such a backend inherits.
  expect_error(outcome_of([&] { op.memory(); }), ErrorCode::kInvalidUsage,
               {"memory() is not implemented by the cuda backend"});
}

TEST(LowLatencyErrors, CallKindNames) {
  EXPECT_STREQ(to_string(CallKind::kLowLatencyDispatch), "low_latency_dispatch");
  EXPECT_STREQ(to_string(CallKind::kLowLatencyCombine), "low_latency_combine");
}

TEST(LowLatencyErrors, DecodeCallsOnAnOpWithoutSlabsAreRejectedOnEveryRank) {
  OpConfig config = small_config();
  config.low_latency = false;
  const std::vector<RankInput> inputs = inputs_for(2, config);
  std::vector<RankOutcome> outcomes(2);
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    outcomes[rank] = outcome_of([&] { op->low_latency_dispatch(inputs[rank].args()); });
    op->dispatch(inputs[rank].args());  // normal mode still works
  });
  for (int r = 0; r < 2; ++r) {
    expect_error(outcomes[r], ErrorCode::kInvalidArgument,
                 {"this op was created with low_latency=false", "OpConfig::low_latency=true"}, r);
  }
}

}  // namespace
}  // namespace moe_ep
