// The options of `moe-ep bench` as given on the command line, and the plan they resolve to:
// mode (normal dispatch/combine, or decode mode's low_latency_dispatch/low_latency_combine),
// backend, shape defaults (a seconds-long CPU shape, or DeepSeek-V3 on every visible GPU, with 128
// tokens per rank in decode mode), the list of (dispatch, combine) pairs, and every rule checked
// before anything runs. A rejected option raises InvalidArgument "--flag=value: rule" (exit 2).
// --tokens and --num-sms take lists: every (tokens, SMs, dispatch, combine) combination runs
// once, token sizes outermost.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench_inputs.h"
#include "moe_ep/dtypes.h"
#include "moe_ep/op.h"

namespace moe_ep::cli {

struct BenchOptions {
  std::string mode = "normal";   // normal|decode
  std::string backend = "auto";  // auto|cpu|cuda
  std::optional<int> ranks, hidden, experts, topk, max_tokens, iters, warmup;
  std::optional<int> ranks_per_node;  // --ranks-per-node L; unset: one node (OpConfig's 0)
  std::vector<int> tokens;  // --tokens 1,32,128: one run per size, in order; empty: the default
  std::string dispatch_dtype = "all";  // all|auto|<dtype>
  std::string combine_dtype = "all";
  std::string weights = "bf16";  // drives `auto`
  uint64_t seed = 1;
  std::string json_path;  // empty: no JSON
  bool check = true;
  double masked_fraction = 0.0;
  std::string routing = "uniform";  // --routing uniform|zipf:S|groups:G:M (InputShape::routing)
  double x_std = 0.02;              // standard deviation of the gaussian x (docs/bench.md)
  std::string baseline = "none";    // none|nccl (nccl: cuda backend only)
  std::vector<int> num_sms;         // --num-sms 8,16,32: one run per budget; empty: the default
  bool copy_engine = false;         // --copy-engine: OpConfig::copy_engine (cuda, normal, one node)
  bool column_major_scales = false;  // --column-major-scales (decode mode)
  std::string decode_graph = "leg";  // --decode-graph leg|round (decode mode's timing)
  bool round_us = false;             // --round-us (normal mode's rounds back to back)
  // Not a flag: under mpirun, the number of processes (one rank each, bench_world.h); 0 when the
  // ranks are threads of this process.
  int process_ranks = 0;
};

// What a run times: dispatch/combine, or decode mode's low_latency_dispatch/low_latency_combine
// on ops created with OpConfig::low_latency (docs/decode-mode.md).
enum class BenchMode { kNormal, kDecode };
const char* to_string(BenchMode mode);  // "normal", "decode"

// How decode mode times its legs where the backend has graphs (CUDA): kLeg captures each leg in
// a graph of its own and times its replays between events on the stream, so a leg's figure
// includes the start of a graph on an idle stream; kRound captures a round (dispatch, then
// combine) in one graph with each leg's events inside it, as graph nodes, so a leg's figure is
// its time inside a captured decode step, where a serving engine runs it. Without graphs (CPU)
// both time host calls.
enum class DecodeGraph { kLeg, kRound };
const char* to_string(DecodeGraph graph);  // "leg", "round"
// kRound also times this many rounds captured back to back in one graph with no timer between
// them, for a round's time without the legs' event nodes (the round_us column).
inline constexpr int kRoundsPerGraph = 16;

// One row of the table: a (dispatch, combine) pair at an SM budget (0: the op's default).
struct DtypePair {
  DispatchDtype dispatch;
  CombineDtype combine;
  int num_sms = 0;
};

struct BenchPlan {
  BenchMode mode = BenchMode::kNormal;
  Backend backend = Backend::kCpu;
  InputShape shape;    // ranks, tokens per rank, hidden, experts, topk, masked, routing, seed
  int max_tokens = 0;  // max_tokens_per_rank of the op (Tmax of the slabs in decode mode)
  // OpConfig::ranks_per_node of every op: ranks [n*L, (n+1)*L) form node n; 0 = one node.
  int ranks_per_node = 0;
  // Every token size of the run, in order (--tokens LIST; one entry without a list). shape.tokens
  // and max_tokens are those of the first; plan_at_tokens gives the plan of each.
  std::vector<int> token_sizes;
  bool max_tokens_given = false;  // --max-tokens given: every size's op uses it, else its size
  bool tokens_column = false;     // several token sizes: the table shows the size
  int iters = 0;
  int warmup = 0;
  bool check = true;
  bool nccl_baseline = false;        // --baseline nccl: time an NCCL all-to-allv of the same bytes
  bool copy_engine = false;          // --copy-engine: every op takes the copy-engine path
  bool column_major_scales = false;  // --column-major-scales: OpConfig::column_major_scales
  DecodeGraph decode_graph = DecodeGraph::kLeg;  // --decode-graph; kRound only in decode mode
  // --round-us (normal mode): kRoundsPerGraph rounds of host calls back to back between two
  // events, no timer between them, for a round's time without the legs' timing events.
  bool round_us = false;
  std::string json_path;
  std::vector<DtypePair> pairs;    // in the order they run and print (budgets outer, pairs inner)
  bool sms_column = false;         // --num-sms given: the table shows the budget
  std::vector<std::string> notes;  // how `auto` resolved, for the header
  bool one_rank_per_process = false;  // under mpirun (BenchOptions::process_ranks)
};

BenchPlan plan_bench(const BenchOptions& options);

// Whether the run has the round_us column: --decode-graph round or --round-us.
inline bool times_rounds(const BenchPlan& plan) {
  return plan.decode_graph == DecodeGraph::kRound || plan.round_us;
}

// True when the ranks form several nodes (0 < ranks_per_node < ranks): the table gains net_MB
// and the JSON records ranks_per_node and the net bytes.
bool several_nodes(const BenchPlan& plan);

// The plan of one token size of `plan`: shape.tokens = tokens and max_tokens = --max-tokens if
// given, else tokens (1 for 0 tokens).
BenchPlan plan_at_tokens(const BenchPlan& plan, int tokens);

// The op configuration of one pair (low_latency set in decode mode).
OpConfig op_config(const BenchPlan& plan, const DtypePair& pair);

}  // namespace moe_ep::cli
