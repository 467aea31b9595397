// The threads of `moe-ep bench`. For each dtype pair, W threads (one per rank) run:
//   1. the reference for their rank (dispatch and expert; barrier; combine), when checking;
//   2. create_op, then one checked run: dispatch, download, identity expert on the host, upload
//      y, combine, download out; count wrong elements and the error sums against fp64 math;
//   3. warm-up and timed iterations, each starting at a barrier, reusing y: dispatch is
//      deterministic, so every iteration receives the same R rows as the checked run;
//   4. with --baseline nccl, the same number of warm-up and timed NCCL all-to-allv per leg, each
//      after a barrier, moving per peer the bytes the leg moves: dispatch sends rows(me -> p) x
//      (payload + scales of the dispatch dtype) to p, combine sends rows(p -> me) x (payload +
//      scales of the combine dtype) back to p; the row counts come from the routing.
// In decode mode (--mode decode) the ops are created with OpConfig::low_latency and the legs are
// low_latency_dispatch and low_latency_combine: the reference is reference::low_latency_dispatch
// and reference::low_latency_combine, the expert is the decoded slab row (decode_identity_expert,
// the op applies the weights), y is [E/W, W*Tmax, H], and the iterations are timed the same way;
// after them the counts of the last dispatch must equal the checked run's (bench_runner_decode.cc,
// with the state the rank threads share in bench_pair.h). There is no NCCL baseline in decode
// mode (plan_bench rejects it).
// A failing rank aborts the harness barrier so that the others stop at their next barrier
// instead of waiting forever; waits inside the library are bounded by its own timeout.
// Under mpirun (bench_world.h) this process runs its own rank only: it computes the reference of
// every rank (the inputs are the same everywhere, made from the seed), its iterations start at a
// barrier of all processes, a failure ends every process (BenchWorld::abort), and after each pair
// every rank's times, checks and error sums are gathered so that every process holds the whole
// table (process 0 prints it).
#include "bench_runner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <thread>

#include "bench_check.h"
#include "bench_pair.h"
#include "commands.h"
#include "moe_ep/dtypes.h"
#include "moe_ep/errors.h"
#include "reference/reference.h"

namespace moe_ep::cli {
namespace {

// Step 4: the NCCL all-to-allv baseline of this rank, the same bytes per peer as each leg.
void run_nccl_baseline(const PairContext& ctx, int rank, PairShared& shared) {
  const int ranks = ctx.plan.shape.ranks;
  const int64_t h = ctx.plan.shape.hidden;
  const int64_t row_bytes[kNumLegs] = {
      payload_bytes(ctx.pair.dispatch, h) + scale_bytes(ctx.pair.dispatch, h),
      payload_bytes(ctx.pair.combine, h) + scale_bytes(ctx.pair.combine, h)};
  const std::vector<int64_t>& route = ctx.inputs.route_rows;  // [W, W] rows src -> dst
  std::vector<int64_t> send[kNumLegs], recv[kNumLegs];        // [leg][W] bytes per peer
  int64_t send_max = 0, recv_max = 0;
  for (int l = 0; l < kNumLegs; ++l) {
    send[l].resize(ranks);
    recv[l].resize(ranks);
    int64_t send_total = 0, recv_total = 0;
    for (int p = 0; p < ranks; ++p) {
      const int64_t to_p = route[static_cast<size_t>(rank) * ranks + p];
      const int64_t from_p = route[static_cast<size_t>(p) * ranks + rank];
      // Dispatch sends my rows to p; combine returns the rows p sent me.
      send[l][p] = (l == 0 ? to_p : from_p) * row_bytes[l];
      recv[l][p] = (l == 0 ? from_p : to_p) * row_bytes[l];
      send_total += send[l][p];
      recv_total += recv[l][p];
    }
    send_max = std::max(send_max, send_total);
    recv_max = std::max(recv_max, recv_total);
  }
  ctx.backend.nccl_reserve(rank, send_max, recv_max);
  for (int it = 0; it < ctx.plan.warmup + ctx.plan.iters; ++it) {
    for (int l = 0; l < kNumLegs; ++l) {
      sync(ctx, shared);  // every rank posts its half together
      const double us = ctx.backend.nccl_alltoallv_us(rank, send[l], recv[l]);
      if (it >= ctx.plan.warmup) shared.nccl_times[l][rank].push_back(us);
    }
  }
}

void run_rank(const PairContext& ctx, int rank, PairShared& shared) {
  if (ctx.plan.mode == BenchMode::kDecode) return run_rank_decode(ctx, rank, shared);
  const InputShape& s = ctx.plan.shape;
  const RankInputs& in = ctx.inputs.ranks[rank];
  BenchBackend& backend = ctx.backend;
  backend.bind_rank(rank);
  void* stream = backend.stream(rank);

  // 1. The reference: this rank's received rows and expert output, then (once every rank has
  //    its y) what combine must return here.
  std::vector<uint16_t> ref_out;  // [T, H] bf16 bits
  if (ctx.plan.check) {
    for (int r : reference_ranks(ctx, rank)) {
      shared.ref_recv[r] = reference::dispatch(ctx.ref_shape, ctx.pair.dispatch, ctx.ref_inputs, r);
      shared.ref_y[r] =
          reference::identity_expert(ctx.ref_shape, ctx.pair.dispatch, shared.ref_recv[r]);
    }
  }
  sync(ctx, shared);
  if (ctx.plan.check) {
    ref_out = reference::combine(ctx.ref_shape, ctx.pair.combine, shared.ref_recv, shared.ref_y,
                                 rank, s.tokens);
  }

  // 2. Device inputs, the op and the checked run.
  const RankTensors tensors = upload_rank(backend, rank, in, s);
  const BenchTensor& out = tensors.out;
  const std::shared_ptr<Op> op = create_op(ctx.comms[rank], op_config(ctx.plan, ctx.pair));
  const DispatchArgs args = tensors.args(stream);
  DispatchResult result = op->dispatch(args);
  op->synchronize(stream);
  const DispatchOutputs got = download_outputs(backend, rank, result);
  const int64_t num_recv = result.num_recv;
  const std::vector<uint16_t> y_host =
      reference::identity_expert(ctx.ref_shape, ctx.pair.dispatch, got);  // [R, H]
  const BenchTensor y =
      upload_new(backend, rank, y_host.data(), shape_of(ScalarType::kBFloat16, num_recv, s.hidden));
  op->combine(result.handle, y.view, out.view, stream);
  op->synchronize(stream);
  std::vector<uint16_t> out_host(static_cast<size_t>(s.tokens) * s.hidden);  // [T, H]
  backend.download(rank, out.view, out_host.data());
  shared.err[rank] = unquantized_error(s, in, out_host.data());
  if (ctx.plan.check) {
    compare_dispatch(rank, ctx.pair.dispatch, got, shared.ref_recv[rank], shared.check[rank]);
    compare_out(rank, out_host, ref_out, shared.check[rank]);
  }

  // 3. Warm-up and timed iterations. Every dispatch of the same inputs receives the checked
  //    run's rows (the message is made only when it does not: the check sits in timed loops).
  //    round: the round of a --round-us iteration, or -1.
  const auto same_rows = [&](int it, int round) {
    if (result.num_recv == num_recv) return;
    const std::string when = round < 0 ? "iteration " + std::to_string(it)
                                       : "round " + std::to_string(round) +
                                             " of --round-us iteration " + std::to_string(it);
    throw Internal("bench: dispatch received " + std::to_string(result.num_recv) + " rows in " +
                   when + " but " + std::to_string(num_recv) + " in the checked run (same inputs)");
  };
  for (int it = 0; it < ctx.plan.warmup + ctx.plan.iters; ++it) {
    sync(ctx, shared);  // every rank starts the iteration together
    backend.timer_start(rank, Leg::kDispatch);
    result = op->dispatch(args);
    backend.timer_stop(rank, Leg::kDispatch);
    same_rows(it, -1);
    backend.timer_start(rank, Leg::kCombine);
    op->combine(result.handle, y.view, out.view, stream);
    backend.timer_stop(rank, Leg::kCombine);
    op->synchronize(stream);
    backend.synchronize(rank);
    if (it >= ctx.plan.warmup) {
      shared.times[0][rank].push_back(backend.elapsed_us(rank, Leg::kDispatch));
      shared.times[1][rank].push_back(backend.elapsed_us(rank, Leg::kCombine));
    }
  }

  // 4. --round-us: kRoundsPerGraph rounds back to back between two events, no timer between them
  //    (each leg's timing events cost the stream about 2 us and the next kernel its early
  //    launch: docs/bench.md), a round's time per iteration.
  if (ctx.plan.round_us) {
    for (int it = 0; it < ctx.plan.warmup + ctx.plan.iters; ++it) {
      sync(ctx, shared);
      backend.timer_start(rank, Leg::kDispatch);
      for (int k = 0; k < kRoundsPerGraph; ++k) {
        result = op->dispatch(args);
        same_rows(it, k);
        op->combine(result.handle, y.view, out.view, stream);
      }
      backend.timer_stop(rank, Leg::kDispatch);
      op->synchronize(stream);
      backend.synchronize(rank);
      if (it >= ctx.plan.warmup) {
        shared.round_times[rank].push_back(backend.elapsed_us(rank, Leg::kDispatch) /
                                           kRoundsPerGraph);
      }
    }
  }

  // 5. The NCCL baseline.
  if (ctx.plan.nccl_baseline) run_nccl_baseline(ctx, rank, shared);
}

// The median over iterations of the slowest rank of each iteration.
double median_of_slowest(const std::vector<std::vector<double>>& times) {  // [W][iters]
  std::vector<double> slowest(times[0].size(), 0.0);                       // [iters]
  for (const auto& rank_times : times) {
    for (size_t i = 0; i < slowest.size(); ++i) slowest[i] = std::max(slowest[i], rank_times[i]);
  }
  std::sort(slowest.begin(), slowest.end());
  const size_t n = slowest.size();
  return n % 2 == 1 ? slowest[n / 2] : 0.5 * (slowest[n / 2 - 1] + slowest[n / 2]);
}

// True for failures caused by another rank's failure: a peer's error or a wait that expired.
bool is_secondary(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.code() == ErrorCode::kRemoteError || e.code() == ErrorCode::kTimeout;
  } catch (...) {
  }
  return false;
}

// The failure to report: the first rank whose error is its own, else the first that failed.
void rethrow_root_cause(const PairShared& shared, const BenchPlan& plan, const DtypePair& pair) {
  int chosen = -1;
  for (int pass = 0; pass < 2 && chosen < 0; ++pass) {
    for (size_t r = 0; r < shared.errors.size() && chosen < 0; ++r) {
      if (shared.errors[r] && (pass == 1 || !is_secondary(shared.errors[r]))) {
        chosen = static_cast<int>(r);
      }
    }
  }
  if (chosen < 0) return;
  const std::string tokens =
      plan.tokens_column ? fmt::format(" at {} tokens", plan.shape.tokens) : std::string();
  const std::string where = std::string("bench ") + short_name(pair.dispatch) + "/" +
                            short_name(pair.combine) + tokens + ": rank " + std::to_string(chosen) +
                            ": ";
  try {
    std::rethrow_exception(shared.errors[chosen]);
  } catch (const std::exception& e) {
    throw RunFailure(where + e.what());
  } catch (...) {
    throw RunFailure(where + "unknown exception");
  }
}

}  // namespace

BenchInputs make_bench_inputs(const BenchPlan& plan) {
  const int ranks = plan.shape.ranks;
  BenchInputs inputs;
  inputs.ranks.resize(ranks);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(ranks);
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        inputs.ranks[r] = make_inputs(plan.shape, r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::bad_alloc&) {
      throw RunFailure(
          fmt::format("rank {}: out of host memory making the inputs ({} tokens x "
                      "hidden {})",
                      r, plan.shape.tokens, plan.shape.hidden));
    }
  }
  inputs.remote_rows = count_remote_rows(plan.shape, inputs.ranks);
  inputs.route_rows = count_route_rows(plan.shape, inputs.ranks);
  inputs.balance = count_balance(plan.shape, inputs.ranks, inputs.route_rows);
  inputs.net_rows = count_net_rows(plan.shape, inputs.ranks, plan.ranks_per_node);
  return inputs;
}

// Under mpirun, after a pair: every process holds every rank's times, error sums and checks
// (its own rank's are the only ones it filled).
void gather_ranks(BenchWorld& world, const BenchPlan& plan, PairShared& shared) {
  const int me = world.rank();
  const int ranks = plan.shape.ranks;
  std::vector<std::vector<std::vector<double>>*> series;  // [W][iters] each
  for (auto& leg : shared.times) series.push_back(&leg);
  if (times_rounds(plan)) series.push_back(&shared.round_times);
  for (std::vector<std::vector<double>>* s : series) {
    std::vector<std::vector<double>>& leg = *s;
    const std::vector<double> all = world.allgather(leg[me]);
    const size_t iters = leg[me].size();
    for (int r = 0; r < ranks; ++r) {
      leg[r].assign(all.begin() + static_cast<std::ptrdiff_t>(r * iters),
                    all.begin() + static_cast<std::ptrdiff_t>((r + 1) * iters));
    }
  }
  const ErrorSums& e = shared.err[me];
  const CheckResult& c = shared.check[me];
  // Wrong counts travel as doubles: exact below 2^53 elements.
  const std::vector<double> sums =
      world.allgather(std::vector<double>{e.err2, e.ref2, static_cast<double>(c.wrong)});
  std::string notes;
  for (const std::string& note : c.notes) notes += note + '\n';
  const std::vector<std::string> all_notes = world.allgather(notes);
  for (int r = 0; r < ranks; ++r) {
    shared.err[r] = {sums[3 * r], sums[3 * r + 1]};
    shared.check[r].wrong = static_cast<int64_t>(sums[3 * r + 2]);
    shared.check[r].notes.clear();
    for (size_t at = 0; at < all_notes[r].size();) {
      const size_t end = all_notes[r].find('\n', at);
      shared.check[r].notes.push_back(all_notes[r].substr(at, end - at));
      at = end + 1;
    }
  }
}

std::vector<PairResult> run_bench(BenchWorld& world, const BenchPlan& plan, BenchBackend& backend,
                                  const std::vector<std::shared_ptr<Communicator>>& comms,
                                  const BenchInputs& inputs,
                                  const std::function<void(const PairResult&)>& on_pair) {
  const InputShape& s = plan.shape;
  std::vector<reference::RankInput> ref_inputs(s.ranks);  // [W] the inputs as host arrays
  for (int r = 0; r < s.ranks; ++r) {
    ref_inputs[r].num_tokens = s.tokens;
    ref_inputs[r].x = inputs.ranks[r].x.data();
    ref_inputs[r].topk_idx = inputs.ranks[r].topk_idx.data();
    ref_inputs[r].topk_weights = inputs.ranks[r].topk_weights.data();
  }
  // The reference's combine sums by node when ranks_per_node < W (docs/design.md#several-nodes).
  const reference::Shape ref_shape{s.ranks, s.hidden, s.experts, s.topk, plan.ranks_per_node};

  // This process's ranks: every rank, or under mpirun its own.
  std::vector<int> local;
  for (int r = 0; r < s.ranks; ++r) {
    if (!world.distributed() || r == world.rank()) local.push_back(r);
  }

  std::vector<PairResult> results;
  for (const DtypePair& pair : plan.pairs) {
    PairShared shared(s.ranks, static_cast<int>(local.size()));
    const PairContext ctx{world, plan, pair, backend, comms, inputs, ref_inputs, ref_shape};
    std::vector<std::thread> threads;
    for (int r : local) {
      threads.emplace_back([&, r] {
        try {
          run_rank(ctx, r, shared);
        } catch (const Barrier::Aborted&) {
          // Another rank failed first; its error is the one reported.
        } catch (...) {
          shared.errors[r] = std::current_exception();
          shared.barrier.abort();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    if (world.distributed()) {
      // The peers may be inside a barrier or a library wait: a failure ends every process.
      try {
        rethrow_root_cause(shared, plan, pair);
      } catch (const RunFailure& e) {
        world.abort(e.what());
      }
      gather_ranks(world, plan, shared);
    }
    rethrow_root_cause(shared, plan, pair);

    PairResult result;
    result.pair = pair;
    result.tokens = s.tokens;
    result.max_tokens = plan.max_tokens;
    result.dispatch_us = median_of_slowest(shared.times[0]);
    result.combine_us = median_of_slowest(shared.times[1]);
    if (times_rounds(plan)) result.round_us = median_of_slowest(shared.round_times);
    if (plan.nccl_baseline) {
      result.nccl_dispatch_us = median_of_slowest(shared.nccl_times[0]);
      result.nccl_combine_us = median_of_slowest(shared.nccl_times[1]);
    }
    ErrorSums total;
    for (const ErrorSums& e : shared.err) total.err2 += e.err2, total.ref2 += e.ref2;
    result.rel_err = total.ref2 > 0.0 ? std::sqrt(total.err2 / total.ref2) : std::sqrt(total.err2);
    if (plan.check) {
      result.wrong = 0;
      for (const CheckResult& c : shared.check) {
        *result.wrong += c.wrong;
        result.notes.insert(result.notes.end(), c.notes.begin(), c.notes.end());
      }
    }
    on_pair(result);
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace moe_ep::cli
