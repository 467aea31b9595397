// What `moe-ep bench` prints: a header (shape, backend, ranks, seed), one table row per dtype
// pair as soon as it finishes, the first mismatches, the `# wrong: N OK|FAILED` footer, and the
// same rows as a JSON array for --json. With --baseline nccl the table gains the NCCL times and
// the ratios nccl / moe-ep per leg, and each JSON record nccl_dispatch_us and nccl_combine_us;
// without it both stay as they were. The header and every JSON record name the mode (normal or
// decode); the columns are the same in both modes. With several --tokens sizes the table gains a
// `tokens` column; every JSON record has `tokens` and `max_tokens` (those of its row). With several
// nodes (--ranks-per-node L < W) the header gains a line naming the nodes, the table the columns
// d_net_MB and c_net_MB, and each JSON record ranks_per_node, dispatch_net_bytes and
// combine_net_bytes; on one node all three stay as they were. The header names the routing
// (--routing); with one other than uniform a comment line before each size's rows says how evenly
// its rows land, and every JSON record has the routing and those counts.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "bench_options.h"
#include "bench_runner.h"

namespace moe_ep::cli {

// Bytes and bandwidth of one pair. Bytes per rank per leg are what crosses between ranks:
//   bytes = (remote rows of all ranks / W) x (payload bytes + scale bytes per row of the leg's
//   dtype), where a remote row is a (token, destination rank != source rank) pair that dispatch
//   moves; combine sends the same rows back. Rows a rank keeps for itself are not counted.
//   Decode mode moves the same rows (a token once per destination rank, copied into the slabs
//   there; one partial sum per (source, token) back), so the count is the same.
//   algbw (GB/s) = bytes / time = bytes / (us * 1e3); %floor = algbw / link floor * 100.
// Net bytes per rank per leg (several nodes only) are what crosses node boundaries, the same way:
//   (net rows of all ranks / W) x the leg's bytes per row, where a net row is a (token, node other
//   than its source's that owns one of its experts) pair: dispatch sends the token there once, to
//   the node's forwarder, and combine returns one partial row per such pair.
struct PairMetrics {
  int64_t dispatch_bytes = 0;
  int64_t combine_bytes = 0;
  std::optional<int64_t> dispatch_net_bytes;  // nullopt on one node
  std::optional<int64_t> combine_net_bytes;
  double dispatch_algbw_gbps = 0.0;
  double combine_algbw_gbps = 0.0;
  std::optional<double> dispatch_floor_pct;  // nullopt without a link floor (CPU)
  std::optional<double> combine_floor_pct;
  OpMemory memory;  // what the pair's op holds on rank 0 (moe_ep::op_memory), for the JSON
  Balance balance;  // how evenly the inputs' rows land (the same for every pair of a size)
};
PairMetrics pair_metrics(const BenchPlan& plan, const BenchInputs& inputs, const PairResult& result,
                         std::optional<double> link_floor_gbps);

void print_header(std::ostream& os, const BenchPlan& plan, const std::string& backend);
// With a routing other than uniform, before each token size's rows: how evenly its rows land.
void print_balance(std::ostream& os, const BenchPlan& plan, const Balance& balance);
// The row of one run; the plan says which optional columns the table has (tokens, sms).
void print_row(std::ostream& os, const BenchPlan& plan, const PairResult& result,
               const PairMetrics& metrics);
// Prints the mismatch notes (at most a few) and the footer; returns the total of wrong elements.
int64_t print_footer(std::ostream& os, const BenchPlan& plan,
                     const std::vector<PairResult>& results);

// Writes the JSON array of --json; throws RunFailure if the file cannot be written.
void write_json(const std::string& path, const BenchPlan& plan, const std::string& backend,
                const std::vector<PairResult>& results, const std::vector<PairMetrics>& metrics);

}  // namespace moe_ep::cli
