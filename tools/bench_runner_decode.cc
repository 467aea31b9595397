// Decode mode's rank run of `moe-ep bench` (the steps of bench_runner.cc's header comment, with
// low_latency_dispatch and low_latency_combine as the legs).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>

#include "bench_pair.h"
#include "moe_ep/errors.h"

namespace moe_ep::cli {

// Decode mode's steps 1 to 3 on one rank (see the top of the file).
void run_rank_decode(const PairContext& ctx, int rank, PairShared& shared) {
  const InputShape& s = ctx.plan.shape;
  const RankInputs& in = ctx.inputs.ranks[rank];
  BenchBackend& backend = ctx.backend;
  backend.bind_rank(rank);
  void* stream = backend.stream(rank);

  // 1. The reference: this rank's slabs and expert output, then (once every rank has its y)
  //    what low_latency_combine must return here.
  std::vector<uint16_t> ref_out;  // [T, H] bf16 bits
  if (ctx.plan.check) {
    for (int r : reference_ranks(ctx, rank)) {
      shared.ref_slabs[r] = reference::low_latency_dispatch(ctx.ref_shape, ctx.pair.dispatch,
                                                            ctx.plan.max_tokens, ctx.ref_inputs, r);
      shared.ref_y[r] =
          decode_identity_expert(ctx.ref_shape, ctx.pair.dispatch, shared.ref_slabs[r]);
    }
  }
  sync(ctx, shared);
  if (ctx.plan.check) {
    ref_out = reference::low_latency_combine(ctx.ref_shape, ctx.pair.combine, ctx.ref_inputs,
                                             shared.ref_slabs, shared.ref_y, rank);
  }

  // 2. Device inputs, the op (low_latency = true) and the checked run.
  const RankTensors tensors = upload_rank(backend, rank, in, s);
  const BenchTensor& out = tensors.out;
  const std::shared_ptr<Op> op = create_op(ctx.comms[rank], op_config(ctx.plan, ctx.pair));
  const LowLatencyDispatchArgs args = tensors.args(stream);
  LowLatencyDispatchResult result = op->low_latency_dispatch(args);
  op->synchronize(stream);
  const LowLatencyOutputs got = download_low_latency_outputs(backend, rank, result);
  const std::vector<uint16_t> y_host =
      decode_identity_expert(ctx.ref_shape, ctx.pair.dispatch, got);  // [E/W, W*Tmax, H]
  const int64_t local_experts = s.experts / s.ranks;
  const int64_t slab_rows = static_cast<int64_t>(s.ranks) * ctx.plan.max_tokens;  // W * Tmax
  const BenchTensor y = upload_new(
      backend, rank, y_host.data(),
      TensorView::tensor3(nullptr, ScalarType::kBFloat16, local_experts, slab_rows, s.hidden));
  op->low_latency_combine(y.view, result.handle, out.view, stream);
  op->synchronize(stream);
  std::vector<uint16_t> out_host(static_cast<size_t>(s.tokens) * s.hidden);  // [T, H]
  backend.download(rank, out.view, out_host.data());
  shared.err[rank] = unquantized_error(s, in, out_host.data());
  if (ctx.plan.check) {
    compare_low_latency(rank, ctx.pair.dispatch, got, shared.ref_slabs[rank], shared.check[rank]);
    compare_out(rank, out_host, ref_out, shared.check[rank]);
  }

  // 3. Warm-up and timed iterations, reusing y: the slabs of every iteration are those of the
  //    checked run (same inputs), which the counts of the last one confirm below. Where the
  //    backend has graphs (CUDA) each leg is captured once and the iterations time replays, as a
  //    serving engine runs decode; the op's call numbers live in device memory, so the replays
  //    pair up across ranks like host calls. --decode-graph round captures the whole round,
  //    its timers included (DecodeGraph).
  const auto issue_dispatch = [&] { result = op->low_latency_dispatch(args); };
  const auto issue_combine = [&] {
    op->low_latency_combine(y.view, result.handle, out.view, stream);
  };
  // Both legs between their timers: the calls themselves, their graphs, or (round) inside one.
  const auto timed_legs = [&](const std::function<void()>& dispatch,
                              const std::function<void()>& combine) {
    backend.timer_start(rank, Leg::kDispatch);
    dispatch();
    backend.timer_stop(rank, Leg::kDispatch);
    backend.timer_start(rank, Leg::kCombine);
    combine();
    backend.timer_stop(rank, Leg::kCombine);
  };
  // Warm-up and timed iterations of `body`, every rank starting each together; `record` keeps
  // a timed iteration's figures.
  const auto iterate = [&](const std::function<void()>& body, const std::function<void()>& record) {
    for (int it = 0; it < ctx.plan.warmup + ctx.plan.iters; ++it) {
      sync(ctx, shared);
      body();
      op->synchronize(stream);
      backend.synchronize(rank);
      if (it >= ctx.plan.warmup) record();
    }
  };
  const bool in_one_graph = ctx.plan.decode_graph == DecodeGraph::kRound;
  std::function<void()> timed_round;
  if (in_one_graph) {
    timed_round = backend.capture(rank, [&] { timed_legs(issue_dispatch, issue_combine); });
  } else if (std::function<void()> dispatch_leg = backend.capture(rank, issue_dispatch)) {
    timed_round = [&timed_legs, dispatch_leg, combine_leg = backend.capture(rank, issue_combine)] {
      timed_legs(dispatch_leg, combine_leg);
    };
  }
  if (!timed_round) timed_round = [&] { timed_legs(issue_dispatch, issue_combine); };
  iterate(timed_round, [&] {
    shared.times[0][rank].push_back(backend.elapsed_us(rank, Leg::kDispatch));
    shared.times[1][rank].push_back(backend.elapsed_us(rank, Leg::kCombine));
  });
  // --decode-graph round, then: kRoundsPerGraph rounds back to back in one graph, with no timer
  // between them (an event node in a graph costs a few microseconds, perf-history v40), timed by
  // events on the stream around its replay; a round's time is the replay's over the rounds (the
  // graph's own start, under a microsecond, shared by them). Host calls without graphs.
  if (in_one_graph) {
    const auto rounds = [&] {
      for (int k = 0; k < kRoundsPerGraph; ++k) {
        issue_dispatch();
        issue_combine();
      }
    };
    std::function<void()> batch = backend.capture(rank, rounds);
    if (!batch) batch = rounds;
    iterate(
        [&] {
          backend.timer_start(rank, Leg::kDispatch);
          batch();
          backend.timer_stop(rank, Leg::kDispatch);
        },
        [&] {
          shared.round_times[rank].push_back(backend.elapsed_us(rank, Leg::kDispatch) /
                                             kRoundsPerGraph);
        });
  }
  std::vector<int32_t> counts(static_cast<size_t>(local_experts));  // [E/W]
  backend.download(rank, result.recv_count, counts.data());
  if (counts != got.recv_count) {
    throw Internal(fmt::format(
        "bench: low_latency_dispatch counts [{}] after the timed iterations but [{}] in the "
        "checked run (same inputs)",
        fmt::join(counts, ", "), fmt::join(got.recv_count, ", ")));
  }
}

}  // namespace moe_ep::cli
