// Overlap hooks of decode mode on the CPU backend (docs/decode-mode.md#overlap-hooks): two
// micro-batches on two ops (instance_id 0 and 1), each call split into its send part
// (return_recv_hook) and its receive part, in the order an engine overlapping them uses:
//   dispatch(A, hook), dispatch(B, hook), dispatch_recv(A), dispatch_recv(B), experts,
//   combine(A, hook), combine(B, hook), combine_recv(A), combine_recv(B)
// at W = 1, 2, 4 (and W = 4 over two nodes of L = 2) for every dtype pair, two rounds per op,
// each output bit for bit equal to the reference and to the same calls without hooks. Misuse, on every rank and without waiting for
// any: any other call while a receive is pending (InvalidUsage through the step's verdicts,
// naming the pending receive and the call that completes it), a receive call with nothing
// pending, of the other kind, twice, or with another handle (checked on each rank alone); after
// each the pending receive still completes and the op works. A hooked call that the agreement
// rejects (a bad argument on one rank, calls out of step) leaves nothing pending; a receive whose
// peer never comes times out in "<call>/exchange" and poisons the op; a backend without decode
// mode says so for the receive calls too.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "testing/harness.h"
#include "testing/low_latency.h"

namespace moe_ep {
namespace {

using testing::all_pairs;
using testing::check_low_latency_round;
using testing::DtypePair;
using testing::expect_error;
using testing::expect_same;
using testing::expect_same_low_latency;
using testing::InputSpec;
using testing::LowLatencyRound;
using testing::make_inputs;
using testing::outcome_of;
using testing::pair_name;
using testing::RankInput;
using testing::RankOutcome;
using testing::run_ranks;
using testing::run_ranks_outcomes;
using testing::test_seed;

// ctest sets MOE_EP_VALIDATE=1; set it here too (before Knobs::get() first reads the
// environment) so running the binary by hand tests the same thing.
const bool kValidateEnv = (setenv("MOE_EP_VALIDATE", "1", /*overwrite=*/0), true);

OpConfig hook_config(DtypePair pair) {
  OpConfig c;
  c.num_experts = 8;  // divisible by 1, 2 and 4 ranks
  c.hidden = 128;
  c.topk = 3;
  c.max_tokens_per_rank = 8;
  c.dispatch_dtype = pair.dispatch;
  c.combine_dtype = pair.combine;
  c.low_latency = true;
  return c;
}

std::vector<RankInput> hook_inputs(const OpConfig& c, int world_size, uint64_t salt,
                                   const std::vector<int64_t>& tokens) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config = c;
  spec.mask_prob = 0.15;
  return make_inputs(spec, test_seed() + salt,
                     std::vector<int64_t>(tokens.begin(), tokens.begin() + world_size));
}

TensorView slab_view(const std::vector<uint16_t>& y, const OpConfig& c, int world_size) {
  return TensorView::tensor3(y.data(), ScalarType::kBFloat16, c.num_experts / world_size,
                             static_cast<int64_t>(world_size) * c.max_tokens_per_rank, c.hidden);
}

TensorView out_view(std::vector<uint16_t>& out, int64_t tokens, const OpConfig& c) {
  return TensorView::matrix(out.data(), ScalarType::kBFloat16, tokens, c.hidden);
}

// Rank `rank`'s micro-batches A (on op_a) and B (on op_b) with overlap hooks, in the overlapped
// order; outputs copied into `a` and `b` as LowLatencyRound::run does. `first_round`: the slabs
// have never been filled, so the hooked dispatch's counts must still be zero before its receive.
void run_two_micro_batches(int rank, Op& op_a, Op& op_b, LowLatencyRound& a, LowLatencyRound& b,
                           bool first_round) {
  const OpConfig& c = op_a.config();
  const int w = op_a.world_size();
  const LowLatencyDispatchResult da =
      op_a.low_latency_dispatch(LowLatencyDispatchArgs(a.inputs[rank].args(), true));
  const LowLatencyDispatchResult db =
      op_b.low_latency_dispatch(LowLatencyDispatchArgs(b.inputs[rank].args(), true));
  EXPECT_TRUE(da.recv_pending);
  EXPECT_TRUE(db.recv_pending);
  if (first_round) {  // the send part filled nothing: that is the receive part's job
    const int32_t* count = static_cast<const int32_t*>(da.recv_count.data);
    for (int64_t e = 0; e < da.recv_count.rows(); ++e) EXPECT_EQ(count[e], 0) << "expert " << e;
  }
  op_a.low_latency_dispatch_recv(da.handle);
  op_b.low_latency_dispatch_recv(db.handle);

  std::vector<uint16_t> y[2];
  std::vector<uint16_t>* outs[2] = {&a.out[rank], &b.out[rank]};
  LowLatencyRound* rounds[2] = {&a, &b};
  const LowLatencyDispatchResult* results[2] = {&da, &db};
  Op* ops[2] = {&op_a, &op_b};
  for (int m = 0; m < 2; ++m) {
    LowLatencyRound& round = *rounds[m];
    round.views[rank] = *results[m];
    round.op_uids[rank] = ops[m]->uid();
    round.received[rank] = reference::copy_low_latency_outputs(*results[m]);
    y[m] = testing::low_latency_expert(round.received[rank], c, w, rank);
    outs[m]->assign(round.inputs[rank].num_tokens * c.hidden, 0xffff);  // NaN: untouched shows
  }
  for (int m = 0; m < 2; ++m) {
    ops[m]->low_latency_combine(slab_view(y[m], c, w), results[m]->handle,
                                out_view(*outs[m], rounds[m]->inputs[rank].num_tokens, c), nullptr,
                                /*return_recv_hook=*/true);
  }
  for (int m = 0; m < 2; ++m) {  // the send part sums nothing into out
    for (uint16_t v : *outs[m]) ASSERT_EQ(v, 0xffff) << "micro-batch " << m;
  }
  op_a.low_latency_combine_recv(da.handle);
  op_b.low_latency_combine_recv(db.handle);
}

// Both micro-batches' rounds on two ops per rank, with hooks.
struct TwoMicroBatches {
  std::vector<LowLatencyRound> a, b;  // [round]
};

TwoMicroBatches run_hooked(const OpConfig& config, int world_size,
                           const std::vector<std::vector<RankInput>>& inputs_a,
                           const std::vector<std::vector<RankInput>>& inputs_b) {
  TwoMicroBatches res;
  for (const auto& in : inputs_a) res.a.emplace_back(world_size, in);
  for (const auto& in : inputs_b) res.b.emplace_back(world_size, in);
  OpConfig config_b = config;
  config_b.instance_id = config.instance_id + 1;
  run_ranks(world_size, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    std::shared_ptr<Op> op_a = create_op(comm, config);
    std::shared_ptr<Op> op_b = create_op(comm, config_b);
    for (size_t i = 0; i < res.a.size(); ++i) {
      run_two_micro_batches(rank, *op_a, *op_b, res.a[i], res.b[i], i == 0);
    }
  });
  return res;
}

// The hooked round `hooked` equals the one-call round `plain` bit for bit.
void expect_same_round(const LowLatencyRound& hooked, const LowLatencyRound& plain,
                       int world_size) {
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": with hooks against without");
    expect_same_low_latency(hooked.received[r], plain.received[r]);
    expect_same("out", hooked.out[r], plain.out[r]);
    EXPECT_EQ(hooked.views[r].handle.call_seq, plain.views[r].handle.call_seq);
  }
}

// ranks_per_node 0 (one node), or L < W: several nodes, the forwarders' step in the receive part.
void two_micro_batches_case(int world_size, int ranks_per_node) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE("W=" + std::to_string(world_size) + " L=" + std::to_string(ranks_per_node) + " " +
                 pair_name(pair));
    OpConfig c = hook_config(pair);
    c.ranks_per_node = ranks_per_node;
    // Rank 2 sends nothing in A's first round, rank 1 sends Tmax tokens in B's.
    const std::vector<std::vector<RankInput>> inputs_a = {
        hook_inputs(c, world_size, 11, {8, 3, 0, 6}), hook_inputs(c, world_size, 12, {2, 7, 5, 8})};
    const std::vector<std::vector<RankInput>> inputs_b = {
        hook_inputs(c, world_size, 21, {5, 8, 7, 1}), hook_inputs(c, world_size, 22, {0, 4, 8, 3})};
    const TwoMicroBatches hooked = run_hooked(c, world_size, inputs_a, inputs_b);
    const std::vector<LowLatencyRound> plain_a =
        testing::run_low_latency_rounds(c, world_size, inputs_a);
    const std::vector<LowLatencyRound> plain_b =
        testing::run_low_latency_rounds(c, world_size, inputs_b);
    for (size_t i = 0; i < inputs_a.size(); ++i) {
      SCOPED_TRACE("round " + std::to_string(i + 1));
      {
        SCOPED_TRACE("micro-batch A");
        check_low_latency_round(c, world_size, hooked.a[i], i + 1);
        expect_same_round(hooked.a[i], plain_a[i], world_size);
      }
      {
        SCOPED_TRACE("micro-batch B");
        check_low_latency_round(c, world_size, hooked.b[i], i + 1);
        expect_same_round(hooked.b[i], plain_b[i], world_size);
      }
    }
    if (::testing::Test::HasFailure()) return;  // one case's report is enough
  }
}

TEST(LowLatencyHooks, TwoMicroBatchesEqualTheReferenceAndTheCallsWithoutHooks) {
  for (int world_size : {1, 2, 4}) {
    two_micro_batches_case(world_size, 0);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(LowLatencyHooks, TwoMicroBatchesOverSeveralNodes) { two_micro_batches_case(4, 2); }

TEST(LowLatencyHooks, HookedAndPlainCallsInterleaveWithNormalMode) {
  // One op per rank: a hooked low-latency dispatch and its receive, a normal round, then a
  // one-call low-latency combine of the hooked dispatch; a plain low-latency dispatch, then a
  // hooked combine of it. Each mode keeps its own calls and outputs; nothing stays pending.
  const int w = 3;
  const OpConfig c = [] {
    OpConfig config = hook_config({DispatchDtype::fp8, CombineDtype::int8_e3m4});
    config.num_experts = 12;
    return config;
  }();
  std::vector<LowLatencyRound> ll;
  ll.emplace_back(w, hook_inputs(c, w, 31, {8, 2, 6}));
  ll.emplace_back(w, hook_inputs(c, w, 32, {0, 8, 5}));
  std::vector<testing::RoundResult> normal =
      testing::make_round_results(w, {hook_inputs(c, w, 33, {4, 8, 1})});
  run_ranks(w, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, c);
    const auto expert_and_out = [&](LowLatencyRound& round, const LowLatencyDispatchResult& d) {
      round.views[rank] = d;
      round.op_uids[rank] = op->uid();
      round.received[rank] = reference::copy_low_latency_outputs(d);
      round.out[rank].assign(round.inputs[rank].num_tokens * c.hidden, 0xffff);
      return testing::low_latency_expert(round.received[rank], c, w, rank);
    };
    const LowLatencyDispatchResult d1 =
        op->low_latency_dispatch(LowLatencyDispatchArgs(ll[0].inputs[rank].args(), true));
    op->low_latency_dispatch_recv(d1.handle);
    testing::RoundResult& n = normal[0];
    const DispatchResult nd = op->dispatch(n.inputs[rank].args());
    n.received[rank] = testing::copy_outputs(nd);
    n.handles[rank] = nd.handle;
    n.op_uids[rank] = op->uid();
    const std::vector<uint16_t> ny = testing::identity_expert(n.received[rank], c);
    n.out[rank].assign(n.inputs[rank].num_tokens * c.hidden, 0xffff);
    op->combine(nd.handle,
                TensorView::matrix(ny.data(), ScalarType::kBFloat16, nd.num_recv, c.hidden),
                out_view(n.out[rank], n.inputs[rank].num_tokens, c));
    const std::vector<uint16_t> y1 = expert_and_out(ll[0], d1);
    op->low_latency_combine(slab_view(y1, c, w), d1.handle,
                            out_view(ll[0].out[rank], ll[0].inputs[rank].num_tokens, c));
    const LowLatencyDispatchResult d2 = op->low_latency_dispatch(ll[1].inputs[rank].args());
    EXPECT_FALSE(d2.recv_pending);
    const std::vector<uint16_t> y2 = expert_and_out(ll[1], d2);
    op->low_latency_combine(slab_view(y2, c, w), d2.handle,
                            out_view(ll[1].out[rank], ll[1].inputs[rank].num_tokens, c), nullptr,
                            /*return_recv_hook=*/true);
    op->low_latency_combine_recv(d2.handle);
  });
  check_low_latency_round(c, w, ll[0], 1);
  check_low_latency_round(c, w, ll[1], 2);
  testing::check_round(c, w, normal[0], 1);
}

// ---- misuse -----------------------------------------------------------------------------

// Misuse on every rank: the same call on each, so each rank's outcome is checked alike.
void expect_on_every_rank(const std::vector<RankOutcome>& outcomes, ErrorCode code,
                          const std::vector<std::string>& fragments) {
  for (size_t r = 0; r < outcomes.size(); ++r) {
    expect_error(outcomes[r], code, fragments, static_cast<int>(r));
  }
}

const OpConfig kMisuseConfig = hook_config({DispatchDtype::fp8, CombineDtype::fp8});

TEST(LowLatencyHooksMisuse, EveryOtherCallWhileADispatchReceiveIsPending) {
  // After low_latency_dispatch(hook) every rank tries each other call of the op: each is
  // rejected on every rank through the step's verdicts (nothing moves), naming the pending
  // receive and low_latency_dispatch_recv; then the receive completes and the round is exact.
  const int w = 2;
  const OpConfig& c = kMisuseConfig;
  LowLatencyRound round(w, hook_inputs(c, w, 41, {6, 4}));
  const auto others = hook_inputs(c, w, 42, {3, 5});
  std::vector<std::vector<RankOutcome>> outcomes(7, std::vector<RankOutcome>(w));
  std::vector<uint64_t> uids(w);
  run_ranks(w, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, c);
    uids[rank] = op->uid();
    const LowLatencyDispatchResult d =
        op->low_latency_dispatch(LowLatencyDispatchArgs(round.inputs[rank].args(), true));
    std::vector<uint16_t> y(c.num_experts / w * w * c.max_tokens_per_rank * c.hidden, 0);
    std::vector<uint16_t> out(round.inputs[rank].num_tokens * c.hidden, 0x1234);
    outcomes[0][rank] = outcome_of([&] { op->low_latency_dispatch(others[rank].args()); });
    outcomes[1][rank] = outcome_of(
        [&] { op->low_latency_dispatch(LowLatencyDispatchArgs(others[rank].args(), true)); });
    outcomes[2][rank] = outcome_of([&] {
      op->low_latency_combine(slab_view(y, c, w), d.handle,
                              out_view(out, round.inputs[rank].num_tokens, c));
    });
    outcomes[3][rank] = outcome_of([&] { op->dispatch(others[rank].args()); });
    outcomes[4][rank] = outcome_of([&] {
      op->combine(Handle{op->uid(), 1, 0, 0},
                  TensorView::matrix(y.data(), ScalarType::kBFloat16, 0, c.hidden),
                  TensorView::matrix(out.data(), ScalarType::kBFloat16, 0, c.hidden));
    });
    outcomes[5][rank] = outcome_of([&] { op->low_latency_combine_recv(d.handle); });
    outcomes[6][rank] =
        outcome_of([&] { op->reject(CallKind::kLowLatencyCombine, "y: not contiguous"); });
    for (uint16_t v : out) ASSERT_EQ(v, 0x1234);  // nothing was written
    op->low_latency_dispatch_recv(d.handle);
    // The slabs are this dispatch's, and the op goes on: its combine, then a plain round.
    round.views[rank] = d;
    round.op_uids[rank] = op->uid();
    round.received[rank] = reference::copy_low_latency_outputs(d);
    const std::vector<uint16_t> y1 = testing::low_latency_expert(round.received[rank], c, w, rank);
    round.out[rank].assign(round.inputs[rank].num_tokens * c.hidden, 0xffff);
    op->low_latency_combine(slab_view(y1, c, w), d.handle,
                            out_view(round.out[rank], round.inputs[rank].num_tokens, c));
  });
  const std::string pending = "low_latency_dispatch_recv of low-latency dispatch call 1 of op uid ";
  const std::string what = "is pending (the call was made with return_recv_hook=true) on rank ";
  const std::string call_it = "call low_latency_dispatch_recv(handle) first";
  const char* kinds[] = {"low_latency_dispatch: ", "low_latency_dispatch: ",
                         "low_latency_combine: ", "dispatch: ", "combine: "};
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE(std::string("call while pending: ") + kinds[i]);
    expect_on_every_rank(outcomes[i], ErrorCode::kInvalidUsage, {kinds[i], pending, what, call_it});
  }
  for (int r = 0; r < w; ++r) {
    EXPECT_EQ(outcomes[0][r].message.find(kinds[0]), 0u) << outcomes[0][r].message;
    EXPECT_NE(outcomes[0][r].message.find(std::to_string(uids[r])), std::string::npos);
  }
  // The receive of the other kind: rejected on each rank alone.
  expect_on_every_rank(
      outcomes[5], ErrorCode::kInvalidUsage,
      {"low_latency_combine_recv: the receive pending on op uid ",
       "is low_latency_dispatch_recv of low-latency dispatch call 1",
       "not low_latency_combine_recv", "call low_latency_dispatch_recv(handle) first"});
  // Op::reject keeps the caller's reason and says what is pending.
  expect_on_every_rank(outcomes[6], ErrorCode::kInvalidArgument,
                       {"low_latency_combine: y: not contiguous; also, ", pending, call_it});
  check_low_latency_round(c, w, round, 1);
}

TEST(LowLatencyHooksMisuse, EveryOtherCallWhileACombineReceiveIsPending) {
  const int w = 2;
  const OpConfig& c = kMisuseConfig;
  LowLatencyRound round(w, hook_inputs(c, w, 43, {7, 2}));
  std::vector<std::vector<RankOutcome>> outcomes(4, std::vector<RankOutcome>(w));
  run_ranks(w, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, c);
    const LowLatencyDispatchResult d = op->low_latency_dispatch(round.inputs[rank].args());
    round.views[rank] = d;
    round.op_uids[rank] = op->uid();
    round.received[rank] = reference::copy_low_latency_outputs(d);
    const std::vector<uint16_t> y = testing::low_latency_expert(round.received[rank], c, w, rank);
    round.out[rank].assign(round.inputs[rank].num_tokens * c.hidden, 0xffff);
    const TensorView out = out_view(round.out[rank], round.inputs[rank].num_tokens, c);
    op->low_latency_combine(slab_view(y, c, w), d.handle, out, nullptr, true);
    outcomes[0][rank] =
        outcome_of([&] { op->low_latency_combine(slab_view(y, c, w), d.handle, out); });
    outcomes[1][rank] = outcome_of([&] { op->low_latency_dispatch(round.inputs[rank].args()); });
    outcomes[2][rank] = outcome_of([&] { op->low_latency_dispatch_recv(d.handle); });
    outcomes[3][rank] = outcome_of([&] { op->low_latency_combine_recv(d.handle); });
  });
  const std::vector<std::string> pending = {
      "low_latency_combine_recv of the low-latency combine of low-latency dispatch call 1",
      "call low_latency_combine_recv(handle) first"};
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> fragments = pending;
    fragments.push_back(i == 0 ? "low_latency_combine: " : "low_latency_dispatch: ");
    expect_on_every_rank(outcomes[i], ErrorCode::kInvalidUsage, fragments);
  }
  expect_on_every_rank(outcomes[2], ErrorCode::kInvalidUsage,
                       {"low_latency_dispatch_recv: the receive pending on op uid",
                        "not low_latency_dispatch_recv", pending[1]});
  for (int r = 0; r < w; ++r) EXPECT_FALSE(outcomes[3][r].threw) << outcomes[3][r].message;
  check_low_latency_round(c, w, round, 1);
}

TEST(LowLatencyHooksMisuse, ReceiveWithNothingPendingTwiceOrWithAnotherHandle) {
  const int w = 2;
  const OpConfig& c = kMisuseConfig;
  OpConfig other_config = c;
  other_config.instance_id = 1;
  LowLatencyRound round(w, hook_inputs(c, w, 44, {5, 8}));
  std::vector<std::vector<RankOutcome>> outcomes(6, std::vector<RankOutcome>(w));
  run_ranks(w, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, c);
    auto other = create_op(comm, other_config);
    const LowLatencyHandle never{op->uid(), 1, round.inputs[rank].num_tokens};
    // Nothing made yet.
    outcomes[0][rank] = outcome_of([&] { op->low_latency_dispatch_recv(never); });
    outcomes[1][rank] = outcome_of([&] { op->low_latency_combine_recv(never); });
    // Another op's handle, then a handle of the right op with another call number.
    const LowLatencyHandle foreign = other->low_latency_dispatch(round.inputs[rank].args()).handle;
    const LowLatencyDispatchResult d =
        op->low_latency_dispatch(LowLatencyDispatchArgs(round.inputs[rank].args(), true));
    outcomes[2][rank] = outcome_of([&] { op->low_latency_dispatch_recv(foreign); });
    LowLatencyHandle later = d.handle;
    later.call_seq += 1;
    outcomes[3][rank] = outcome_of([&] { op->low_latency_dispatch_recv(later); });
    op->low_latency_dispatch_recv(d.handle);  // still pending after the two rejections
    // Twice.
    outcomes[4][rank] = outcome_of([&] { op->low_latency_dispatch_recv(d.handle); });
    round.views[rank] = d;
    round.op_uids[rank] = op->uid();
    round.received[rank] = reference::copy_low_latency_outputs(d);
    const std::vector<uint16_t> y = testing::low_latency_expert(round.received[rank], c, w, rank);
    round.out[rank].assign(round.inputs[rank].num_tokens * c.hidden, 0xffff);
    op->low_latency_combine(slab_view(y, c, w), d.handle,
                            out_view(round.out[rank], round.inputs[rank].num_tokens, c), nullptr,
                            true);
    LowLatencyHandle fewer = d.handle;
    fewer.num_tokens -= 1;
    outcomes[5][rank] = outcome_of([&] { op->low_latency_combine_recv(fewer); });
    op->low_latency_combine_recv(d.handle);
  });
  expect_on_every_rank(outcomes[0], ErrorCode::kInvalidUsage,
                       {"low_latency_dispatch_recv: no receive is pending on op uid ",
                        "handle given: low-latency dispatch call 1 of op uid ",
                        "completes a low_latency_dispatch made with return_recv_hook=true, once"});
  expect_on_every_rank(outcomes[1], ErrorCode::kInvalidUsage,
                       {"low_latency_combine_recv: no receive is pending on op uid ",
                        "completes a low_latency_combine made with return_recv_hook=true"});
  for (int i : {2, 3}) {
    expect_on_every_rank(outcomes[i], ErrorCode::kInvalidArgument,
                         {"low_latency_dispatch_recv: handle is low-latency dispatch call ",
                          "but the pending receive is low_latency_dispatch_recv of low-latency "
                          "dispatch call 1 of op uid ",
                          "pass the handle of the call made with return_recv_hook=true"});
  }
  for (int r = 0; r < w; ++r) {
    EXPECT_NE(outcomes[3][r].message.find("handle is low-latency dispatch call 2"),
              std::string::npos)
        << outcomes[3][r].message;
  }
  expect_on_every_rank(outcomes[4], ErrorCode::kInvalidUsage,
                       {"low_latency_dispatch_recv: no receive is pending"});
  expect_on_every_rank(outcomes[5], ErrorCode::kInvalidArgument,
                       {"low_latency_combine_recv: handle is low-latency dispatch call 1",
                        "but the pending receive is low_latency_combine_recv of the low-latency "
                        "combine of low-latency dispatch call 1"});
  check_low_latency_round(c, w, round, 1);
}

// ---- rejected hooked calls ----------------------------------------------------------------

TEST(LowLatencyHooksRejected, DispatchWithABadArgumentOnOneRankLeavesNothingPending) {
  const int w = 3;
  OpConfig c = kMisuseConfig;
  c.num_experts = 12;
  const auto bad = hook_inputs(c, w, 51, {6, 6, 6});
  LowLatencyRound after(w, hook_inputs(c, w, 52, {4, 8, 2}));
  std::vector<RankOutcome> first(w), recv(w);
  run_ranks(w, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, c);
    RankInput in = bad[rank];
    if (rank == 1) in.topk_idx[3] = c.num_experts;  // out of range
    first[rank] =
        outcome_of([&] { op->low_latency_dispatch(LowLatencyDispatchArgs(in.args(), true)); });
    recv[rank] = outcome_of([&] {
      op->low_latency_dispatch_recv({op->uid(), 1, bad[rank].num_tokens});
    });
    after.run(rank, *op);  // low-latency dispatch #1 again, without hooks
  });
  expect_error(first[1], ErrorCode::kInvalidArgument, {"low_latency_dispatch: topk_idx[1][0]="}, 1);
  for (int r : {0, 2}) {
    expect_error(first[r], ErrorCode::kInvalidArgument,
                 {"low_latency_dispatch aborted: rank 1 rejected its input: topk_idx[1][0]="}, r);
  }
  expect_on_every_rank(recv, ErrorCode::kInvalidUsage, {"no receive is pending"});
  check_low_latency_round(c, w, after, 1);
}

TEST(LowLatencyHooksRejected, CombineWithABadArgumentOnOneRankLeavesNothingPending) {
  // The dispatch stays combinable: a hooked combine of it after the rejected one is exact.
  const int w = 2;
  const OpConfig& c = kMisuseConfig;
  LowLatencyRound round(w, hook_inputs(c, w, 53, {8, 5}));
  std::vector<RankOutcome> first(w), recv(w);
  run_ranks(w, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, c);
    const LowLatencyDispatchResult d = op->low_latency_dispatch(round.inputs[rank].args());
    round.views[rank] = d;
    round.op_uids[rank] = op->uid();
    round.received[rank] = reference::copy_low_latency_outputs(d);
    const std::vector<uint16_t> y = testing::low_latency_expert(round.received[rank], c, w, rank);
    round.out[rank].assign(round.inputs[rank].num_tokens * c.hidden, 0xffff);
    TensorView yv = slab_view(y, c, w);
    if (rank == 0) yv.shape[1] -= 1;
    first[rank] = outcome_of([&] {
      op->low_latency_combine(
          yv, d.handle, out_view(round.out[rank], round.inputs[rank].num_tokens, c), nullptr, true);
    });
    recv[rank] = outcome_of([&] { op->low_latency_combine_recv(d.handle); });
    for (uint16_t v : round.out[rank]) ASSERT_EQ(v, 0xffff);
    op->low_latency_combine(slab_view(y, c, w), d.handle,
                            out_view(round.out[rank], round.inputs[rank].num_tokens, c), nullptr,
                            true);
    op->low_latency_combine_recv(d.handle);
  });
  expect_error(first[0], ErrorCode::kInvalidArgument, {"low_latency_combine: y=bf16[4, 15, 128]"},
               0);
  expect_error(first[1], ErrorCode::kInvalidArgument,
               {"low_latency_combine aborted: rank 0 rejected its input: y="}, 1);
  expect_on_every_rank(recv, ErrorCode::kInvalidUsage,
                       {"low_latency_combine_recv: no receive is pending"});
  check_low_latency_round(c, w, round, 1);
}

TEST(LowLatencyHooksRejected, HookedDispatchOutOfStepLeavesNothingPending) {
  // Rank 0 makes a hooked low-latency dispatch, rank 1 a normal dispatch: both fail naming both
  // calls and neither has a receive pending; then both make the hooked round in step.
  const int w = 2;
  const OpConfig& c = kMisuseConfig;
  const auto inputs = hook_inputs(c, w, 54, {5, 6});
  LowLatencyRound round_a(w, inputs), round_b(w, hook_inputs(c, w, 55, {3, 8}));
  std::vector<RankOutcome> skewed(w), recv(w);
  OpConfig config_b = c;
  config_b.instance_id = 1;
  run_ranks(w, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = create_op(comm, c);
    auto op_b = create_op(comm, config_b);
    skewed[rank] = outcome_of([&] {
      if (rank == 0) {
        op->low_latency_dispatch(LowLatencyDispatchArgs(inputs[rank].args(), true));
      } else {
        op->dispatch(inputs[rank].args());
      }
    });
    recv[rank] = outcome_of([&] {
      op->low_latency_dispatch_recv({op->uid(), 1, inputs[rank].num_tokens});
    });
    run_two_micro_batches(rank, *op, *op_b, round_a, round_b, true);
  });
  expect_error(skewed[0], ErrorCode::kInvalidUsage,
               {"rank 0 is in low_latency_dispatch #1, rank 1 in dispatch #1"}, 0);
  expect_error(skewed[1], ErrorCode::kInvalidUsage,
               {"rank 1 is in dispatch #1, rank 0 in low_latency_dispatch #1"}, 1);
  expect_on_every_rank(recv, ErrorCode::kInvalidUsage, {"no receive is pending"});
  check_low_latency_round(c, w, round_a, 1);
  check_low_latency_round(config_b, w, round_b, 1);
}

// ---- failures -------------------------------------------------------------------------------

TEST(LowLatencyHooksFailures, ReceiveWhosePeerNeverComesTimesOutAndPoisonsTheOp) {
  // Both ranks make the hooked dispatch; only rank 0 calls the receive, which waits for rank 1
  // at the dispatch's exchange barrier and times out there.
  const OpConfig& c = kMisuseConfig;
  const auto inputs = hook_inputs(c, 2, 56, {4, 4});
  std::vector<RankOutcome> recv(2), later(2);
  run_ranks_outcomes(
      2,
      [&](int rank, const std::shared_ptr<Communicator>& comm) {
        auto op = create_op(comm, c);
        const LowLatencyDispatchResult d =
            op->low_latency_dispatch(LowLatencyDispatchArgs(inputs[rank].args(), true));
        if (rank != 0) return;
        recv[0] = outcome_of([&] { op->low_latency_dispatch_recv(d.handle); });
        later[0] = outcome_of([&] { op->low_latency_dispatch(inputs[rank].args()); });
      },
      /*timeout_s=*/0.5);
  expect_error(recv[0], ErrorCode::kTimeout,
               {"low_latency_dispatch/exchange: rank 0 timed out", "waiting for ranks [1]"}, 0);
  expect_error(later[0], ErrorCode::kInvalidUsage, {"op unusable after: "}, 0);
}

// A backend that lacks decode mode inherits Op's defaults, the receive calls included.
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

TEST(LowLatencyHooksFailures, BackendWithoutDecodeModeSaysSo) {
  NoDecodeOp op;
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { op.low_latency_dispatch(LowLatencyDispatchArgs({}, true)); },
           [&] { op.low_latency_combine({}, {}, {}, nullptr, true); },
           [&] { op.low_latency_dispatch_recv({}); }, [&] { op.low_latency_combine_recv({}); }}) {
    expect_error(outcome_of(call), ErrorCode::kInvalidUsage,
                 {"decode mode is not implemented by the cuda backend"});
  }
}

}  // namespace
}  // namespace moe_ep
