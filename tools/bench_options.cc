// Resolution and checking of the `moe-ep bench` options. Every rule runs before any rank starts:
// the simple ranges here, then moe_ep::check_config for every requested pair, whose message names
// the OpConfig field; the field is mapped back to the flag the user typed.
#include "bench_options.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "bench_backend.h"
#include "commands.h"
#include "moe_ep/config.h"
#include "moe_ep/errors.h"

namespace moe_ep::cli {
namespace {

struct ShapeDefaults {
  int ranks, tokens, hidden, experts, topk, iters, warmup;
};
// CPU: 4 rank threads and a shape whose 12 checked pairs finish in seconds on two cores (4.6 s
// idle, measured in v60; with 9 pairs, 7-8 s while other builds shared the two cores, and 256
// tokens took up to 18 s there).
constexpr ShapeDefaults kCpuDefaults = {4, 128, 2048, 64, 8, 5, 1};
// CUDA: DeepSeek-V3 (4096 tokens per rank, hidden 7168, top-8 of 256 experts); ranks = every
// visible GPU, filled in at plan time.
constexpr ShapeDefaults kCudaDefaults = {0, 4096, 7168, 256, 8, 20, 5};
// Decode mode's tokens per rank on every backend: the top of the usual decode sweep (1..128).
// Its slabs hold E * Tmax rows per rank (docs/decode-mode.md#memory-per-op) and the bench's y as
// many bf16 rows, so normal mode's 4096 would take about 28 GiB per GPU for DeepSeek-V3 with a
// bf16 dispatch, and more than that per rank in host memory for the check.
constexpr int kDecodeTokens = 128;

// A dtype option's dtypes: one, or a comma-separated list, each once and none of all|auto (those
// stand alone). `parse` throws InvalidArgument for a value that is no `leg` dtype.
template <typename Dtype, typename Parse>
std::vector<Dtype> dtype_list(const std::string& flag, const char* leg, const std::string& value,
                              const std::string& valid, Parse parse) {
  std::vector<Dtype> dtypes;
  const std::vector<std::string> items = split_list(value);
  for (const std::string& item : items) {
    if (items.size() > 1 && (item == "all" || item == "auto")) {
      bad_argument(flag, value,
                   "'" + item + "' stands alone, not in a list; valid list items: " + valid);
    }
    Dtype dtype;
    try {
      dtype = parse(item);
    } catch (const InvalidArgument&) {
      bad_argument(flag, value,
                   "'" + item + "' is not a " + leg + " dtype; valid values: all|auto|" + valid +
                       ", or several of them comma-separated");
    }
    if (std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end()) {
      bad_argument(flag, value, "'" + item + "' names a dtype listed before it; list each once");
    }
    dtypes.push_back(dtype);
  }
  return dtypes;
}

BenchMode parse_mode(const std::string& text) {
  if (text == "normal") return BenchMode::kNormal;
  if (text == "decode") return BenchMode::kDecode;
  bad_argument("--mode", text, "allowed: normal|decode");
}

Backend parse_backend(const std::string& text) {
  if (text == "cpu") return Backend::kCpu;
  const bool cuda_usable = MOE_EP_BENCH_HAS_CUDA && cuda_device_count() > 0;
  if (text == "auto") return cuda_usable ? Backend::kCuda : Backend::kCpu;
  if (text == "cuda") {
    if (!MOE_EP_BENCH_HAS_CUDA) {
      bad_argument("--backend", text, "this moe-ep was built without CUDA; allowed: auto|cpu");
    }
    if (!cuda_usable)
      bad_argument("--backend", text, "no CUDA device is visible; allowed: auto|cpu");
    return Backend::kCuda;
  }
  bad_argument("--backend", text, "allowed: auto|cpu|cuda");
}

// --baseline none|nccl; nccl runs on the CUDA backend's devices only, in normal mode.
bool parse_baseline(const std::string& text, Backend backend, BenchMode mode) {
  if (text == "none") return false;
  if (text != "nccl") bad_argument("--baseline", text, "allowed: none|nccl");
  if (mode == BenchMode::kDecode) {
    bad_argument("--baseline", text,
                 "the NCCL baseline is for --mode normal only; with --mode decode allowed: none");
  }
  if (backend != Backend::kCuda) {
    bad_argument("--baseline", text,
                 std::string("the NCCL baseline needs --backend cuda; this run uses the ") +
                     to_string(backend) + " backend");
  }
  return true;
}

WeightDtype parse_weights(const std::string& text) {
  try {
    return parse_weight_dtype(text, "--weights");
  } catch (const InvalidArgument&) {
    bad_argument("--weights", text, "allowed: bf16|fp8|fp4|bfloat16|float8|mxfp4");
  }
}

// The check_config field names and the flags that set them.
struct FieldFlag {
  const char* field;
  const char* flag;
};
constexpr FieldFlag kFieldFlags[] = {{"world_size", "--ranks"},
                                     {"num_experts", "--experts"},
                                     {"topk", "--topk"},
                                     {"hidden", "--hidden"},
                                     {"max_tokens_per_rank", "--max-tokens"},
                                     {"ranks_per_node", "--ranks-per-node"}};

// Rethrows a check_config failure as "--flag=value: <library message>".
[[noreturn]] void rethrow_config_error(const InvalidArgument& error, const BenchPlan& plan) {
  const std::string message = error.what();
  const std::string field = message.substr(0, message.find('='));
  const InputShape& s = plan.shape;
  const int values[] = {s.ranks, s.experts, s.topk, s.hidden, plan.max_tokens, plan.ranks_per_node};
  for (size_t i = 0; i < std::size(kFieldFlags); ++i) {
    if (field == kFieldFlags[i].field) {
      bad_argument(kFieldFlags[i].flag, std::to_string(values[i]), message);
    }
  }
  throw InvalidArgument(message);
}

// --routing uniform|zipf:S|groups:G:M (Routing), checked against the shape's experts and top-k.
Routing parse_routing(const std::string& text, int experts, int topk) {
  Routing routing;
  if (text == "uniform") return routing;
  const std::vector<std::string> parts = split_list(text, ':');
  // A whole decimal number (no sign, no trailing text), else nullopt.
  const auto whole_int = [](const std::string& v) -> std::optional<int> {
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    return std::stoi(v);
  };
  if (parts[0] == "zipf" && parts.size() == 2) {
    // Up to 8: the least popular expert's weight E^-S stays a normal double for any E below
    // 2^32 (2^-256), and beyond about 4 nearly every token draws the same K experts anyway.
    const char* begin = parts[1].c_str();
    char* end = nullptr;
    const double s = parts[1].empty() ? 0.0 : std::strtod(begin, &end);
    if (parts[1].empty() || end != begin + parts[1].size() || !(s > 0.0 && s <= 8.0)) {
      bad_argument("--routing", text, "the Zipf exponent S of zipf:S must be a number in (0, 8]");
    }
    routing.kind = Routing::Kind::kZipf;
    routing.zipf_s = s;
    return routing;
  }
  if (parts[0] == "groups" && parts.size() == 3) {
    const std::optional<int> g = whole_int(parts[1]), m = whole_int(parts[2]);
    if (!g || !m || *g < 1 || *m < 1) {
      bad_argument("--routing", text, "groups:G:M takes two integers >= 1");
    }
    if (experts % *g != 0) {
      bad_argument("--routing", text,
                   "the number of groups G must divide --experts=" + std::to_string(experts));
    }
    if (*m > *g) {
      bad_argument("--routing", text,
                   "a token's groups M must be <= the number of groups G=" + std::to_string(*g));
    }
    const int64_t reachable = static_cast<int64_t>(*m) * (experts / *g);
    if (topk > reachable) {
      bad_argument("--routing", text,
                   "M groups hold M * E / G = " + std::to_string(reachable) +
                       " experts, fewer than --topk=" + std::to_string(topk) +
                       " distinct experts a token");
    }
    routing.kind = Routing::Kind::kGroups;
    routing.groups = *g;
    routing.groups_per_token = *m;
    return routing;
  }
  bad_argument("--routing", text, "allowed: uniform|zipf:S|groups:G:M");
}

void check_at_least(const char* flag, int value, int minimum, const char* name) {
  if (value < minimum) {
    bad_argument(flag, std::to_string(value),
                 std::string(name) + " must be >= " + std::to_string(minimum));
  }
}

}  // namespace

const char* to_string(BenchMode mode) { return mode == BenchMode::kDecode ? "decode" : "normal"; }

const char* to_string(DecodeGraph graph) { return graph == DecodeGraph::kRound ? "round" : "leg"; }

OpConfig op_config(const BenchPlan& plan, const DtypePair& pair) {
  OpConfig config;
  config.num_experts = plan.shape.experts;
  config.hidden = plan.shape.hidden;
  config.topk = plan.shape.topk;
  config.max_tokens_per_rank = plan.max_tokens;
  config.dispatch_dtype = pair.dispatch;
  config.combine_dtype = pair.combine;
  config.num_sms = pair.num_sms;
  config.low_latency = plan.mode == BenchMode::kDecode;
  config.ranks_per_node = plan.ranks_per_node;
  config.copy_engine = plan.copy_engine;
  config.column_major_scales = plan.column_major_scales;
  return config;
}

bool several_nodes(const BenchPlan& plan) {
  return plan.ranks_per_node > 0 && plan.ranks_per_node < plan.shape.ranks;
}

BenchPlan plan_at_tokens(const BenchPlan& plan, int tokens) {
  BenchPlan sized = plan;
  sized.shape.tokens = tokens;
  if (!plan.max_tokens_given) sized.max_tokens = tokens > 0 ? tokens : 1;
  return sized;
}

BenchPlan plan_bench(const BenchOptions& o) {
  BenchPlan plan;
  plan.mode = parse_mode(o.mode);
  plan.backend = parse_backend(o.backend);
  if (o.baseline == "nccl" && o.process_ranks > 0) {
    bad_argument("--baseline", o.baseline,
                 "the NCCL baseline runs with a thread per GPU only, not yet under mpirun");
  }
  plan.nccl_baseline = parse_baseline(o.baseline, plan.backend, plan.mode);
  const Knobs& knobs = Knobs::get();  // a bad MOE_EP_* value fails here, naming the variable
  const WeightDtype weights = parse_weights(o.weights);

  // Dtype lists: all (default), auto (resolve_dtypes: environment, then the weights rule), one,
  // or several, comma-separated (each once); every pair of the two lists runs.
  std::vector<DispatchDtype> dispatch_list(std::begin(kAllDispatchDtypes),
                                           std::end(kAllDispatchDtypes));
  std::vector<CombineDtype> combine_list(std::begin(kAllCombineDtypes),
                                         std::end(kAllCombineDtypes));
  const bool dispatch_all = o.dispatch_dtype == "all", combine_all = o.combine_dtype == "all";
  const bool dispatch_auto = o.dispatch_dtype == "auto", combine_auto = o.combine_dtype == "auto";
  if (!dispatch_all && !dispatch_auto) {
    dispatch_list = dtype_list<DispatchDtype>(
        "--dispatch-dtype", "dispatch", o.dispatch_dtype, valid_dispatch_values(),
        [](const std::string& v) { return parse_dispatch_dtype(v); });
  }
  if (!combine_all && !combine_auto) {
    combine_list = dtype_list<CombineDtype>(
        "--combine-dtype", "combine", o.combine_dtype, valid_combine_values(),
        [](const std::string& v) { return parse_combine_dtype(v); });
  }
  if (dispatch_auto || combine_auto) {
    // The other leg's dtype when it names one (all, auto or a list leave it to the rule).
    std::optional<DispatchDtype> one_dispatch;
    std::optional<CombineDtype> one_combine;
    if (dispatch_list.size() == 1) one_dispatch = dispatch_list[0];
    if (combine_list.size() == 1) one_combine = combine_list[0];
    const DtypeResolution res = resolve_dtypes(one_dispatch, one_combine, weights, knobs);
    if (dispatch_auto) {
      dispatch_list = {res.dispatch};
      plan.notes.push_back(std::string("dispatch dtype auto -> ") + short_name(res.dispatch) +
                           " (" + res.dispatch_origin + ")");
    }
    if (combine_auto) {
      combine_list = {res.combine};
      plan.notes.push_back(std::string("combine dtype auto -> ") + short_name(res.combine) + " (" +
                           res.combine_origin + ")");
    }
  }
  for (DispatchDtype d : dispatch_list) {
    for (CombineDtype c : combine_list) plan.pairs.push_back({d, c, 0});
  }

  // Shape: flags over the backend's defaults.
  const ShapeDefaults& d = plan.backend == Backend::kCuda ? kCudaDefaults : kCpuDefaults;
  const int visible_gpus = plan.backend == Backend::kCuda ? cuda_device_count() : 0;
  InputShape& s = plan.shape;
  s.ranks = o.ranks.value_or(plan.backend == Backend::kCuda ? visible_gpus : d.ranks);
  plan.one_rank_per_process = o.process_ranks > 0;
  if (plan.one_rank_per_process) {
    // Under mpirun every process is one rank (bench_world.h): --ranks is mpirun's -np.
    if (o.ranks && *o.ranks != o.process_ranks) {
      bad_argument("--ranks", std::to_string(*o.ranks),
                   "under mpirun each process is one rank: --ranks must be mpirun's -np (" +
                       std::to_string(o.process_ranks) + ") or left out");
    }
    s.ranks = o.process_ranks;
    if (plan.backend == Backend::kCpu && s.ranks > 1) {
      bad_argument("--backend", "cpu",
                   "the cpu backend runs every rank as a thread of one process; under mpirun "
                   "-np " +
                       std::to_string(s.ranks) + " use --backend cuda (or run without mpirun)");
    }
  }
  plan.token_sizes = o.tokens;
  if (plan.token_sizes.empty()) {
    plan.token_sizes = {plan.mode == BenchMode::kDecode ? kDecodeTokens : d.tokens};
  }
  plan.tokens_column = plan.token_sizes.size() > 1;
  s.tokens = plan.token_sizes.front();
  s.hidden = o.hidden.value_or(d.hidden);
  s.experts = o.experts.value_or(d.experts);
  s.topk = o.topk.value_or(d.topk);
  s.masked_fraction = o.masked_fraction;
  s.x_std = o.x_std;
  s.seed = o.seed;
  plan.max_tokens_given = o.max_tokens.has_value();
  plan.max_tokens = o.max_tokens.value_or(s.tokens > 0 ? s.tokens : 1);
  plan.iters = o.iters.value_or(d.iters);
  plan.warmup = o.warmup.value_or(d.warmup);
  plan.check = o.check;
  plan.json_path = o.json_path;

  check_at_least("--ranks", s.ranks, 1, "ranks");
  // Under mpirun each process needs one GPU of its host (checked when its communicator is made).
  if (plan.backend == Backend::kCuda && !plan.one_rank_per_process && s.ranks > visible_gpus) {
    bad_argument("--ranks", std::to_string(s.ranks),
                 "ranks must be <= " + std::to_string(visible_gpus) +
                     ", the number of visible CUDA devices (one rank per GPU)");
  }
  // --ranks-per-node L: 0 < L <= --ranks, dividing it, in either mode and on either backend.
  if (o.ranks_per_node) {
    const int l = *o.ranks_per_node;
    const std::string value = std::to_string(l);
    check_at_least("--ranks-per-node", l, 1, "ranks per node");
    if (l > s.ranks) {
      bad_argument("--ranks-per-node", value,
                   "ranks per node must be <= --ranks=" + std::to_string(s.ranks));
    }
    if (s.ranks % l != 0) {
      bad_argument("--ranks-per-node", value,
                   "ranks per node must divide --ranks=" + std::to_string(s.ranks) +
                       " (every node holds the same number of ranks)");
    }
    plan.ranks_per_node = l;
  }
  // --copy-engine: the CUDA backend's copy-engine path, which is normal mode on one node
  // (OpConfig::copy_engine; create_op would refuse the other combinations).
  if (o.copy_engine) {
    if (plan.backend != Backend::kCuda) {
      bad_argument("--copy-engine", "on",
                   "the copy-engine path is the cuda backend's (--backend cuda, with a GPU)");
    }
    if (plan.mode == BenchMode::kDecode) {
      bad_argument("--copy-engine", "on",
                   "the copy-engine path is normal mode only (--mode normal)");
    }
    if (several_nodes(plan)) {
      bad_argument("--copy-engine", "on",
                   "the copy-engine path works on one node only: --ranks-per-node " +
                       std::to_string(plan.ranks_per_node) +
                       " must equal --ranks=" + std::to_string(s.ranks) + " or be left out");
    }
    plan.copy_engine = true;
  } else if (knobs.copy_engine && plan.backend == Backend::kCuda &&
             plan.mode == BenchMode::kNormal && !several_nodes(plan)) {
    plan.copy_engine = true;  // what create_op resolves for these ops (resolve_copy_engine)
    plan.notes.push_back("copy engine from MOE_EP_COPY_ENGINE");
  }
  // --column-major-scales: a layout of decode mode's slabs (create_op refuses it elsewhere).
  if (o.column_major_scales) {
    if (plan.mode != BenchMode::kDecode) {
      bad_argument("--column-major-scales", "on",
                   "the layout is decode mode's recv_x_scales (--mode decode)");
    }
    plan.column_major_scales = true;
  }
  // --decode-graph leg|round: how decode mode times its legs (DecodeGraph).
  if (o.decode_graph == "round") {
    if (plan.mode != BenchMode::kDecode) {
      bad_argument("--decode-graph", o.decode_graph,
                   "decode mode's timing: it needs --mode decode (normal mode times host calls)");
    }
    plan.decode_graph = DecodeGraph::kRound;
  } else if (o.decode_graph != "leg") {
    bad_argument("--decode-graph", o.decode_graph, "allowed: leg|round");
  }
  // --round-us: normal mode's rounds (decode mode times its rounds in one graph instead).
  if (o.round_us) {
    if (plan.mode != BenchMode::kNormal) {
      bad_argument("--round-us", "on",
                   "normal mode's rounds of host calls (decode mode: --decode-graph round)");
    }
    plan.round_us = true;
  }
  for (int tokens : plan.token_sizes) check_at_least("--tokens", tokens, 0, "tokens");
  check_at_least("--iters", plan.iters, 1, "iters");
  check_at_least("--warmup", plan.warmup, 0, "warmup");
  if (!(o.masked_fraction >= 0.0 && o.masked_fraction <= 1.0)) {
    bad_argument("--masked-fraction", fmt::format("{:g}", o.masked_fraction),
                 "the fraction of masked slots must be in [0, 1]");
  }
  // Finite, positive and small enough that x stays finite in bf16 (5 sigma below bf16's max).
  if (!(o.x_std > 0.0 && o.x_std <= 1e37)) {
    bad_argument("--x-std", fmt::format("{:g}", o.x_std),
                 "the standard deviation of x must be in (0, 1e37]");
  }
  // --num-sms: every pair once per budget, budgets outermost.
  if (!o.num_sms.empty()) {
    plan.sms_column = true;
    std::vector<DtypePair> runs;
    for (int sms : o.num_sms) {
      check_at_least("--num-sms", sms, 1, "SMs");
      for (DtypePair pair : plan.pairs) {
        pair.num_sms = sms;
        runs.push_back(pair);
      }
    }
    plan.pairs = std::move(runs);
  }
  // Every pair's op at every token size (max_tokens follows the size unless --max-tokens).
  for (int tokens : plan.token_sizes) {
    const BenchPlan sized = plan_at_tokens(plan, tokens);
    for (const DtypePair& pair : sized.pairs) {
      try {
        check_config(op_config(sized, pair), s.ranks);
      } catch (const InvalidArgument& error) {
        rethrow_config_error(error, sized);
      }
    }
    if (tokens > sized.max_tokens) {
      bad_argument("--tokens", std::to_string(tokens),
                   "tokens=" + std::to_string(tokens) + " is above --max-tokens=" +
                       std::to_string(sized.max_tokens) + " (max_tokens_per_rank)");
    }
  }
  // After the shape's own checks, which it relies on (E and K valid).
  s.routing = parse_routing(o.routing, s.experts, s.topk);
  // Writable, without creating the file: a run that fails writes nothing.
  if (!plan.json_path.empty()) {
    const std::filesystem::path path(plan.json_path);
    const std::filesystem::path dir =
        path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    const bool exists = std::filesystem::exists(path);
    if (exists ? access(plan.json_path.c_str(), W_OK) != 0
               : access(dir.c_str(), W_OK | X_OK) != 0) {
      bad_argument("--json", plan.json_path, "cannot open the file for writing");
    }
  }
  return plan;
}

}  // namespace moe_ep::cli
