// Runs `moe-ep bench`: W rank threads per dtype pair, each creating its op, then one checked run
// (dispatch -> identity expert -> combine, compared with the reference) and warm-up and timed
// iterations. Per iteration each rank times its dispatch and its combine; a leg's time is the
// median over iterations of the slowest rank. With --baseline nccl, each pair then times an NCCL
// all-to-allv per leg moving the same bytes per peer, with the same statistic. In decode mode
// (BenchMode::kDecode) the legs are low_latency_dispatch and low_latency_combine, checked against
// the reference's decode mode and timed the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench_backend.h"
#include "bench_options.h"
#include "bench_world.h"

namespace moe_ep::cli {

struct PairResult {
  DtypePair pair;
  int tokens = 0;            // tokens per rank of the run (the plan's shape.tokens)
  int max_tokens = 0;        // max_tokens_per_rank of its op
  double dispatch_us = 0.0;  // median over iterations of the slowest rank
  double combine_us = 0.0;
  std::optional<double> nccl_dispatch_us;  // --baseline nccl: same statistic; nullopt without
  std::optional<double> nccl_combine_us;
  // --decode-graph round: a round's time (dispatch, then combine) from kRoundsPerGraph rounds in
  // one graph with no timer between them, per round, same statistic; --round-us: the same from
  // host calls back to back (normal mode); nullopt otherwise.
  std::optional<double> round_us;
  double rel_err = 0.0;            // ||out - fp64(sum_k w_k x)|| / ||fp64 ref|| over all ranks
  std::optional<int64_t> wrong;    // elements differing from the reference; nullopt: unchecked
  std::vector<std::string> notes;  // where the wrong elements are
};

struct BenchInputs {
  std::vector<RankInputs> ranks;  // [W]
  int64_t remote_rows = 0;        // rows dispatch moves between ranks, all ranks summed
  int64_t net_rows = 0;  // rows dispatch moves between nodes, all ranks summed (0 on one node)
  std::vector<int64_t> route_rows;  // [W, W] rows dispatch moves from rank s to rank r (s == r too)
  Balance balance;                  // how evenly the rows land (count_balance)
};

// Generates every rank's inputs (one thread per rank).
BenchInputs make_bench_inputs(const BenchPlan& plan);

// Runs every pair of the plan in order on `comms` (backend.communicators(W), or under mpirun
// backend.process_communicators), calling on_pair as each one finishes (on every process, with
// every rank's results). Throws RunFailure naming the pair and the rank whose failure came first;
// under mpirun a failing rank ends every process instead (BenchWorld::abort).
std::vector<PairResult> run_bench(BenchWorld& world, const BenchPlan& plan, BenchBackend& backend,
                                  const std::vector<std::shared_ptr<Communicator>>& comms,
                                  const BenchInputs& inputs,
                                  const std::function<void(const PairResult&)>& on_pair);

}  // namespace moe_ep::cli
