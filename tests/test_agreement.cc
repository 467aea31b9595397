// Ranks never drift apart (docs/design.md#collective-calls-and-agreement), on the CPU backend:
// calls out of step fail every rank together and pair nothing; a rank that rejects through
// Op::reject fails every rank's call; creations are matched by configuration, so a rank that
// rejects or misses one creation costs that creation only; one thread at a time per op; an
// output view passed back in as an input is rejected. Each case then shows the op (or the next
// creation) still works, with outputs checked against the reference.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/agreement.h"
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

OpConfig small_config() {
  OpConfig c;
  c.num_experts = 12;  // divisible by 2 and 3 ranks
  c.hidden = 128;
  c.topk = 2;
  c.max_tokens_per_rank = 6;
  c.dispatch_dtype = DispatchDtype::fp8;
  c.combine_dtype = CombineDtype::fp8;
  return c;
}

std::vector<RankInput> inputs_for(int world_size, const OpConfig& config, uint64_t salt = 0) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config = config;
  return make_inputs(spec, test_seed() + salt, std::vector<int64_t>(world_size, 5));
}

// One dispatch + identity expert + combine on every rank of `op`, checked against the
// reference; `rank_results[r]` gets what rank r saw.
struct RoundCheck {
  std::vector<testing::RoundResult> results;
  explicit RoundCheck(int world_size, const std::vector<RankInput>& inputs)
      : results(testing::make_round_results(world_size, {inputs})) {}
  void run(int rank, Op& op) {
    testing::RoundResult& res = results[0];
    const DispatchResult d = op.dispatch(res.inputs[rank].args());
    res.received[rank] = testing::copy_outputs(d);
    res.handles[rank] = d.handle;
    res.op_uids[rank] = op.uid();
    const std::vector<uint16_t> y = testing::identity_expert(res.received[rank], op.config());
    res.out[rank].assign(res.inputs[rank].num_tokens * op.config().hidden, 0xffff);
    op.combine(d.handle,
               TensorView::matrix(y.data(), ScalarType::kBFloat16, d.num_recv, op.config().hidden),
               TensorView::matrix(res.out[rank].data(), ScalarType::kBFloat16,
                                  res.inputs[rank].num_tokens, op.config().hidden));
  }
};

// How a creation names the first field two ranks' configurations differ in: dtypes by name at
// both ends of their enums (a number past the end as a number), the last field like the others,
// and a field index out of range as "unknown field".
TEST(Agreement, ConfigDifferenceNamesTheFieldAndItsValues) {
  OpConfig a;
  a.num_experts = 8;
  a.hidden = 256;
  a.topk = 2;
  a.max_tokens_per_rank = 4;
  OpConfig b = a;
  a.dispatch_dtype = DispatchDtype::bf16;
  b.dispatch_dtype = DispatchDtype::fp4;
  EXPECT_EQ(first_config_difference(config_values(a, 2), 0, config_values(b, 2), 1),
            "dispatch_dtype=bfloat16 on rank 0, dispatch_dtype=mxfp4_blockwise on rank 1");
  b = a;
  a.combine_dtype = CombineDtype::bf16;
  b.combine_dtype = CombineDtype::int8_e3m4;
  EXPECT_EQ(first_config_difference(config_values(a, 2), 0, config_values(b, 2), 1),
            "combine_dtype=bfloat16 on rank 0, combine_dtype=int8_e3m4_blockwise on rank 1");
  ConfigValues past = config_values(a, 2);
  past[5] = 3;  // no dispatch dtype has this value
  EXPECT_EQ(first_config_difference(config_values(a, 2), 0, past, 1),
            "dispatch_dtype=bfloat16 on rank 0, dispatch_dtype=3 on rank 1");
  b = a;
  b.low_latency = a.low_latency = true;
  b.column_major_scales = true;  // the last field
  EXPECT_EQ(first_config_difference(config_values(a, 2), 3, config_values(b, 2), 2),
            "column_major_scales=0 on rank 3, column_major_scales=1 on rank 2");
  EXPECT_EQ(first_config_difference(config_values(a, 2), 0, config_values(a, 2), 1), "");
  EXPECT_STREQ(config_field_name(0), "world_size");
  EXPECT_STREQ(config_field_name(kNumConfigFields - 1), "column_major_scales");
  EXPECT_STREQ(config_field_name(kNumConfigFields), "unknown field");
  EXPECT_STREQ(config_field_name(-1), "unknown field");
}

TEST(Agreement, DispatchMeetingCombineFailsBothAndPairsNothing) {
  // Rank 1 skips combine #1 (as after an exception of its own) and dispatches again while rank 0
  // combines #1. Both fail naming both calls; after that both dispatch #2 and all is exact.
  const OpConfig config = small_config();
  const auto inputs = inputs_for(2, config);
  std::vector<RankOutcome> skewed(2);
  RoundCheck second(2, inputs_for(2, config, 1));
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    const DispatchResult d = op->dispatch(inputs[rank].args());
    const std::vector<uint16_t> y(d.num_recv * config.hidden, 0);
    std::vector<uint16_t> out(inputs[rank].num_tokens * config.hidden, 0x1234);
    skewed[rank] = outcome_of([&] {
      if (rank == 0) {
        op->combine(d.handle,
                    TensorView::matrix(y.data(), ScalarType::kBFloat16, d.num_recv, config.hidden),
                    TensorView::matrix(out.data(), ScalarType::kBFloat16, inputs[rank].num_tokens,
                                       config.hidden));
      } else {
        op->dispatch(inputs[rank].args());
      }
    });
    // Nothing was written into rank 0's out: the combine never ran.
    for (uint16_t v : out) ASSERT_EQ(v, 0x1234);
    second.run(rank, *op);
  });
  expect_error(skewed[0], ErrorCode::kInvalidUsage,
               {"calls out of step: rank 0 is in combine #1, rank 1 in dispatch #2"});
  expect_error(skewed[1], ErrorCode::kInvalidUsage,
               {"calls out of step: rank 1 is in dispatch #2, rank 0 in combine #1"});
  testing::check_round(config, 2, second.results[0], /*expected_call_seq=*/2);
}

TEST(Agreement, RejectFromAnUpperLayerFailsEveryRankWithItsReason) {
  const OpConfig config = small_config();
  const auto inputs = inputs_for(3, config);
  std::vector<RankOutcome> first(3);
  RoundCheck after(3, inputs);
  run_ranks(3, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    first[rank] = outcome_of([&] {
      if (rank == 2) {
        op->reject(CallKind::kDispatch, "topk_idx: dtype int16 is not int32 or int64");
      } else {
        op->dispatch(inputs[rank].args());
      }
    });
    after.run(rank, *op);
  });
  expect_error(first[2], ErrorCode::kInvalidArgument,
               {"dispatch: topk_idx: dtype int16 is not int32 or int64"}, 2);
  for (int r = 0; r < 2; ++r) {
    expect_error(first[r], ErrorCode::kInvalidArgument,
                 {"dispatch aborted: rank 2 rejected its input: topk_idx: dtype int16"}, r);
  }
  testing::check_round(config, 3, after.results[0], /*expected_call_seq=*/1);
}

TEST(Agreement, RejectedCombineLeavesTheDispatchCombinable) {
  const OpConfig config = small_config();
  const auto inputs = inputs_for(2, config);
  std::vector<RankOutcome> first(2);
  testing::RoundResult res = testing::make_round_results(2, {inputs})[0];
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    const DispatchResult d = op->dispatch(inputs[rank].args());
    res.received[rank] = testing::copy_outputs(d);
    res.handles[rank] = d.handle;
    res.op_uids[rank] = op->uid();
    const std::vector<uint16_t> y = testing::identity_expert(res.received[rank], config);
    res.out[rank].assign(inputs[rank].num_tokens * config.hidden, 0xffff);
    const TensorView y_view =
        TensorView::matrix(y.data(), ScalarType::kBFloat16, d.num_recv, config.hidden);
    const TensorView out_view = TensorView::matrix(res.out[rank].data(), ScalarType::kBFloat16,
                                                   inputs[rank].num_tokens, config.hidden);
    first[rank] = outcome_of([&] {
      if (rank == 1) {
        op->reject(CallKind::kCombine, "y: not contiguous");
      } else {
        op->combine(d.handle, y_view, out_view);
      }
    });
    op->combine(d.handle, y_view, out_view);
  });
  expect_error(first[0], ErrorCode::kInvalidArgument,
               {"combine aborted: rank 1 rejected its input: y: not contiguous"}, 0);
  expect_error(first[1], ErrorCode::kInvalidArgument, {"combine: y: not contiguous"}, 1);
  testing::check_round(config, 2, res);
}

TEST(Agreement, RejectedCreationFailsEveryRankAtOnceAndTheNextWorks) {
  // Rank 1's upper layer cannot parse its dtype; it tells the others instead of leaving them to
  // time out, and the creation after that pairs normally.
  const OpConfig config = small_config();
  std::vector<RankOutcome> first(3);
  std::vector<double> seconds(3);
  RoundCheck after(3, inputs_for(3, config));
  std::atomic<int> rejected{0};
  run_ranks(
      3,
      [&](int rank, const std::shared_ptr<Communicator>& comm) {
        const auto start = std::chrono::steady_clock::now();
        first[rank] = outcome_of([&] {
          if (rank == 1) {
            reject_create(comm, "dispatch_dtype='fp16' is not a valid value");
            ++rejected;
            throw InvalidArgument("rejected here");
          }
          create_op(comm, config);
        });
        seconds[rank] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        // Rank 1 goes on only once the others have seen its rejection.
        if (rank == 1) {
          while (rejected.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        } else {
          ++rejected;
        }
        auto op = create_op(comm, config);
        after.run(rank, *op);
      },
      /*timeout_s=*/10.0);
  for (int r : {0, 2}) {
    expect_error(first[r], ErrorCode::kInvalidArgument,
                 {"create_op aborted: rank 1 rejected its configuration: dispatch_dtype='fp16'"},
                 r);
    EXPECT_LT(seconds[r], 5.0) << "rank " << r << " waited for the timeout";
  }
  testing::check_round(config, 3, after.results[0]);
}

TEST(Agreement, MissedCreationFailsThatCreationOnlyAndTheNextWorks) {
  // Rank 1 skips the creation of `skipped`; ranks 0 and 2 time out on it and then create `next`,
  // which rank 1 is already waiting to create: that one pairs.
  OpConfig skipped = small_config();
  OpConfig next = small_config();
  next.instance_id = 1;
  std::vector<RankOutcome> first(3);
  RoundCheck after(3, inputs_for(3, next));
  run_ranks(
      3,
      [&](int rank, const std::shared_ptr<Communicator>& comm) {
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
        } else {
          first[rank] = outcome_of([&] { create_op(comm, skipped); });
        }
        auto op = create_op(comm, next);
        after.run(rank, *op);
      },
      /*timeout_s=*/1.0);
  for (int r : {0, 2}) {
    expect_error(first[r], ErrorCode::kInvalidArgument,
                 {"configuration differs between ranks", "instance_id=1 on rank 1",
                  "instance_id=0 on rank "},
                 r);
  }
  testing::check_round(next, 3, after.results[0]);
}

TEST(Agreement, APeerPastTheCreationIsJudgedAtOnceByItsAttemptThere) {
  // Rank 1 arrives at a creation after rank 0 gave up on it (its 2 s bound) and started the next
  // one: rank 1 fails at once naming the field that differed in the creation rank 0 left (not
  // the next one's instance_id), as on the CUDA backend; then both create the next op.
  OpConfig next = small_config();
  std::vector<RankOutcome> first(2);
  std::vector<double> seconds(2);
  RoundCheck after(2, inputs_for(2, next, 3));
  run_ranks(
      2,
      [&](int rank, const std::shared_ptr<Communicator>& comm) {
        OpConfig mine = next;
        mine.instance_id = 7;
        mine.hidden = rank == 1 ? 256 : 128;
        // 0.6 s after rank 0's bound, 1.4 s before the bound of its next creation.
        if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2600));
        const auto start = std::chrono::steady_clock::now();
        first[rank] = outcome_of([&] { create_op(comm, mine); });
        seconds[rank] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        auto op = create_op(comm, next);
        after.run(rank, *op);
      },
      /*timeout_s=*/2.0);
  expect_error(first[0], ErrorCode::kTimeout,
               {"create_op: rank 0 timed out after 2 s", "rank 1 is not creating an op"}, 0);
  expect_error(first[1], ErrorCode::kInvalidArgument,
               {"configuration differs between ranks: hidden=128 on rank 0, hidden=256 on rank 1",
                "rank 1 found ranks [0] past this creation",
                "rank 0 left this creation, made with another configuration"},
               1);
  EXPECT_LT(seconds[1], 1.0) << "rank 1 waited for a match that could not come";
  testing::check_round(next, 2, after.results[0]);
}

TEST(Agreement, RankThatDestroysItsOpLeavesOthersATimeoutAndTheNextOpWorks) {
  // Rank 1 drops its op; rank 0 dispatches on its own and times out naming rank 1 (its op is
  // poisoned); a new op (another instance) then works on both ranks.
  OpConfig config = small_config();
  const auto inputs = inputs_for(2, config);
  OpConfig next = config;
  next.instance_id = 1;
  RankOutcome lonely;
  std::atomic<bool> gave_up{false};
  RoundCheck after(2, inputs_for(2, next, 5));
  run_ranks(
      2,
      [&](int rank, const std::shared_ptr<Communicator>& comm) {
        auto op = create_op(comm, config);
        if (rank == 1) {
          op.reset();
          // The ranks recover together: rank 1 creates the next op once rank 0 has given up.
          while (!gave_up.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        } else {
          lonely = outcome_of([&] { op->dispatch(inputs[0].args()); });
          expect_error(outcome_of([&] { op->dispatch(inputs[0].args()); }),
                       ErrorCode::kInvalidUsage, {"op unusable after"}, 0);
          gave_up = true;
        }
        auto fresh = create_op(comm, next);
        after.run(rank, *fresh);
      },
      /*timeout_s=*/0.5);
  expect_error(lonely, ErrorCode::kTimeout,
               {"dispatch/publish", "rank 0 timed out", "waiting for ranks [1]"});
  testing::check_round(next, 2, after.results[0]);
}

TEST(Agreement, TwoThreadsInOneOpRaiseInvalidUsage) {
  // A second thread entering rank 0's op while its dispatch waits in the barrier (rank 1 holds
  // back) is refused at once and never joins the collective; the first call completes.
  const OpConfig config = small_config();
  const auto inputs = inputs_for(2, config);
  RankOutcome intruder;
  std::atomic<bool> waiting{false};
  std::atomic<bool> intruder_done{false};
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    if (rank == 0) {
      std::thread second([&] {
        while (!waiting.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        intruder = outcome_of([&] { op->dispatch(inputs[0].args()); });
        intruder_done = true;
      });
      waiting = true;
      const DispatchResult d = op->dispatch(inputs[0].args());
      EXPECT_EQ(d.handle.call_seq, 1u);
      second.join();
    } else {
      while (!intruder_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      op->dispatch(inputs[1].args());
    }
  });
  expect_error(intruder, ErrorCode::kInvalidUsage, {"is already inside a call on another thread"});
}

TEST(Agreement, OutputViewPassedBackAsInputIsRejectedOnEveryRank) {
  // bf16 dispatch: recv_x is [R, H] bf16, shaped like a valid x. Passing it back would have peers
  // overwrite it while it is read.
  OpConfig config = small_config();
  config.dispatch_dtype = DispatchDtype::bf16;
  const auto inputs = inputs_for(2, config);
  std::vector<RankOutcome> outcome(2);
  run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, config);
    const DispatchResult d = op->dispatch(inputs[rank].args());
    DispatchArgs again = inputs[rank].args();
    if (rank == 1) {
      const int64_t rows = std::min<int64_t>(d.num_recv, config.max_tokens_per_rank);
      again.x = TensorView::matrix(d.recv_x.data, ScalarType::kBFloat16, rows, config.hidden);
      again.topk_idx.shape[0] = rows;
      again.topk_weights.shape[0] = rows;
      std::vector<int32_t> idx(rows * config.topk, -1);
      std::vector<float> w(rows * config.topk, 1.0f);
      again.topk_idx.data = idx.data();
      again.topk_weights.data = w.data();
      outcome[rank] = outcome_of([&] { op->dispatch(again); });
    } else {
      outcome[rank] = outcome_of([&] { op->dispatch(again); });
    }
    op->dispatch(inputs[rank].args());  // still usable
  });
  expect_error(outcome[1], ErrorCode::kInvalidArgument, {"x=", "overlaps this op's own buffers"},
               1);
  expect_error(outcome[0], ErrorCode::kInvalidArgument,
               {"dispatch aborted: rank 1 rejected its input: x=", "overlaps"}, 0);
}

TEST(Agreement, CpuWorldTimeoutOutsideTheClockRangeIsRejected) {
  for (double bad : {1e10, 1e-320, 1e-4}) {
    expect_error(outcome_of([&] { CpuWorld::create(2, bad); }), ErrorCode::kInvalidArgument,
                 {"CpuWorld: timeout_s=",
                  "must be 0 (MOE_EP_TIMEOUT_S) or a number of seconds in "
                  "[0.001, 1e+09]"});
  }
}

}  // namespace
}  // namespace moe_ep
