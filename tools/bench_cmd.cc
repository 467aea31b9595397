// `moe-ep bench` (docs/bench.md): the options on the CLI11 app, then plan (every check before any
// rank starts) -> inputs -> run pair by pair, printing each row as it finishes -> footer and
// JSON. With a --tokens list, each size gets its own inputs and ops, one size after the other.
// Exit 0 when every checked element matched, 1 when any differs. --mode decode times decode
// mode's low_latency_dispatch / low_latency_combine instead of dispatch / combine.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "bench_backend.h"
#include "bench_options.h"
#include "bench_report.h"
#include "bench_runner.h"
#include "bench_world.h"
#include "commands.h"
#include "moe_ep/errors.h"

namespace moe_ep::cli {
namespace {

// Numeric options are taken as text and parsed here, so that a malformed number is reported like
// every other bad argument: "--flag=value: what is allowed" (CLI11 would say "Could not convert").
template <typename T>
T parse_number(const std::string& flag, const std::string& text, const char* allowed) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    throw CLI::ValidationError(flag + "=" + text + ": not " + allowed);
  }
  return value;
}

// An int option that records whether it was given, so the backend's default applies otherwise.
void add_int(CLI::App* cmd, const std::string& flag, std::optional<int>& target,
             const std::string& help) {
  cmd->add_option_function<std::string>(
         flag,
         [flag, &target](const std::string& v) {
           target = parse_number<int>(flag, v, "an integer");
         },
         help)
      ->type_name("INT");
}

void add_double(CLI::App* cmd, const std::string& flag, double& target, const std::string& help) {
  cmd->add_option_function<std::string>(
         flag,
         [flag, &target](const std::string& v) {
           target = parse_number<double>(flag, v, "a number");
         },
         help)
      ->type_name("FLOAT");
}

// Under mpirun: the first problem any process found, raised on every process alike (an empty
// `mine` is none). Every process calls it at the same point.
void raise_any(BenchWorld& world, const std::string& mine) {
  for (const std::string& problem : world.allgather(mine)) {
    if (!problem.empty()) throw InvalidArgument(problem);
  }
}

// The run of a checked plan: communicators, then every token size and pair.
int run_plan(BenchWorld& world, const BenchPlan& plan) {
  const std::unique_ptr<BenchBackend> backend = make_bench_backend(plan.backend);
  const std::string backend_name = to_string(plan.backend);
  if (plan.nccl_baseline) {
    if (!backend->supports_nccl_baseline()) {
      throw RunFailure(backend_name + " backend: --baseline nccl is not supported");
    }
    backend->enable_nccl_baseline();  // its communicators are made in communicators()
  }
  // Communicators first: a backend may measure its link floor while it sets them up.
  std::vector<std::shared_ptr<Communicator>> comms;
  if (world.distributed()) {
    // Rank r runs on its host's GPU of r's index among the host's processes (checked in run()).
    const std::string id = world.broadcast(world.root() ? backend->nccl_unique_id() : "");
    comms = backend->process_communicators(world.rank(), plan.shape.ranks, world.local_rank(), id);
  } else {
    comms = backend->communicators(plan.shape.ranks);
  }
  const std::optional<double> floor = backend->link_floor_gbps();
  // Only process 0 prints (and writes --json); every process gets every rank's results.
  std::ostringstream discard;
  std::ostream& out = world.root() ? std::cout : discard;
  BenchPlan shown = plan;  // the header's notes gain the placement under mpirun
  if (world.distributed()) {
    // Where every rank runs, so that a placement can be checked at a glance: rank@host:GPU.
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const std::vector<std::string> places =
        world.allgather(fmt::format("{}@{}:{}", world.rank(), host, world.local_rank()));
    std::string line = "processes (rank@host:GPU):";
    for (const std::string& place : places) line += " " + place;
    shown.notes.push_back(line);
  }
  print_header(out, shown, backend->describe(plan.shape.ranks));

  // One token size at a time: its inputs, then every (SMs, dispatch, combine) of the plan.
  std::vector<PairResult> results;
  std::vector<PairMetrics> metrics;
  for (int tokens : plan.token_sizes) {
    const BenchPlan sized = plan_at_tokens(plan, tokens);
    const BenchInputs inputs = make_bench_inputs(sized);
    if (plan.shape.routing.kind != Routing::Kind::kUniform) {
      print_balance(out, sized, inputs.balance);
    }
    std::vector<PairResult> sized_results =
        run_bench(world, sized, *backend, comms, inputs, [&](const PairResult& result) {
          metrics.push_back(pair_metrics(sized, inputs, result, floor));
          metrics.back().memory = op_memory(comms.front(), op_config(sized, result.pair));
          print_row(out, plan, result, metrics.back());
          discard.str("");
        });
    std::move(sized_results.begin(), sized_results.end(), std::back_inserter(results));
  }
  const int64_t wrong = print_footer(out, plan, results);
  if (!plan.json_path.empty() && world.root()) {
    write_json(plan.json_path, plan, backend_name, results, metrics);
  }
  return wrong == 0 ? 0 : 1;
}

int run(BenchOptions options, LogBuffer& logs) {
  // Under mpirun one rank per process (bench_world.h): the node split is checked first, on every
  // host, and agreed before any GPU is touched.
  const std::unique_ptr<BenchWorld> world = make_bench_world();
  if (world->distributed()) {
    options.process_ranks = world->size();
    raise_any(*world, node_split_problem(world->rank(), world->size(), world->local_size(),
                                         world->local_first(), world->local_consecutive(),
                                         options.ranks_per_node.value_or(0)));
  }
  const BenchPlan plan = plan_bench(options);  // the same arguments: every process alike
  logs.flush_to_stderr();  // the arguments are good: from here on the library logs directly
  if (!world->distributed()) return run_plan(*world, plan);
  // NCCL's initialisation waits for every rank, so a process without a GPU says so on every
  // process before it starts.
  const int device = world->local_rank();
  const int visible = plan.backend == Backend::kCuda ? cuda_device_count() : 1;
  raise_any(*world, device < visible ? std::string()
                                     : fmt::format("rank {} is process {} of its host, which sees "
                                                   "{} CUDA device(s): one GPU per process",
                                                   world->rank(), device, visible));
  try {
    return run_plan(*world, plan);
  } catch (const std::exception& e) {
    // A failure of this process alone (its GPU, its communicator, its check): the others may wait
    // for it in a collective or inside NCCL, so it ends them all.
    world->abort(e.what());
  }
  return 1;  // not reached: abort does not return (this keeps -Wreturn-type quiet)
}

}  // namespace

CommandFn add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  BenchOptions& o = *options;
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "dispatch -> identity expert -> combine for each (dispatch, combine) dtype pair: checked "
      "against a plain reference, then timed");
  cmd->add_option("--mode", o.mode,
                  "normal|decode; decode times low_latency_dispatch / low_latency_combine on ops "
                  "created with low_latency=true, Tmax = --max-tokens (default normal)");
  cmd->add_option("--backend", o.backend,
                  "auto|cpu|cuda; auto = cuda when built with CUDA and a GPU is visible");
  add_int(cmd, "--ranks", o.ranks, "ranks (threads on cpu, GPUs on cuda); cpu 4, cuda all GPUs");
  cmd->add_option_function<std::string>(
         "--tokens",
         [&o](const std::string& v) {
           // One integer keeps the message of every int option; a list names the whole value.
           o.tokens.clear();
           const std::vector<std::string> items = split_list(v);
           if (items.size() == 1) {
             o.tokens.push_back(parse_number<int>("--tokens", v, "an integer"));
             return;
           }
           for (const std::string& item : items) {
             try {
               o.tokens.push_back(parse_number<int>("--tokens", item, "an integer"));
             } catch (const CLI::ValidationError&) {
               throw CLI::ValidationError("--tokens=" + v + ": '" + item +
                                          "' is not an integer; want a comma-separated list of "
                                          "integers, e.g. 1,32,128");
             }
           }
         },
         "tokens per rank, or a list (e.g. 1,32,128): every pair runs once per size, each size "
         "with its own op; cpu 128, cuda 4096, --mode decode 128")
      ->type_name("LIST");
  add_int(cmd, "--ranks-per-node", o.ranks_per_node,
          "ranks per node L (OpConfig::ranks_per_node), dividing --ranks: ranks [n*L, (n+1)*L) "
          "form node n; with L < --ranks the table gains d_net_MB and c_net_MB, "
          "the bytes per rank per leg between nodes; default one node");
  add_int(cmd, "--hidden", o.hidden, "hidden size H; cpu 2048, cuda 7168");
  add_int(cmd, "--experts", o.experts, "experts E (a multiple of --ranks); cpu 64, cuda 256");
  add_int(cmd, "--topk", o.topk, "experts per token K; 8");
  add_int(cmd, "--max-tokens", o.max_tokens,
          "max_tokens_per_rank of the op, >= every --tokens size; default each size");
  cmd->add_option("--dispatch-dtype", o.dispatch_dtype,
                  "all|auto|" + valid_dispatch_values() +
                      ", or several comma-separated (e.g. bf16,fp8); default all");
  cmd->add_option(
      "--combine-dtype", o.combine_dtype,
      "all|auto|" + valid_combine_values() +
          ", or several comma-separated; every pair of the two lists runs; default all");
  cmd->add_option("--weights", o.weights, "expert weight dtype for `auto`: bf16|fp8|fp4");
  add_int(cmd, "--iters", o.iters, "timed iterations; cpu 5, cuda 20");
  add_int(cmd, "--warmup", o.warmup, "warm-up iterations; cpu 1, cuda 5");
  cmd->add_option_function<std::string>(
         "--seed",
         [&o](const std::string& v) {
           o.seed = parse_number<uint64_t>("--seed", v, "an unsigned 64-bit integer");
         },
         "seed of the inputs (printed in the header); default 1")
      ->type_name("UINT");
  cmd->add_option("--json", o.json_path, "also write the rows as a JSON array to FILE");
  cmd->add_flag("--check,!--no-check", o.check,
                "compare every output bit for bit with the reference (default on)");
  add_double(cmd, "--masked-fraction", o.masked_fraction,
             "fraction of top-k slots masked with -1 (default 0)");
  cmd->add_option("--routing", o.routing,
                  "uniform|zipf:S|groups:G:M, how tokens pick their experts: uniform (default); "
                  "zipf:S, expert popularity falling as 1/rank^S, the same hot experts on every "
                  "rank; groups:G:M, DeepSeek-V3's group-limited routing, E/G consecutive "
                  "experts a group, each token's experts from M groups (V3: groups:8:4)");
  cmd->add_option("--baseline", o.baseline,
                  "none|nccl; nccl also times an NCCL all-to-allv moving the same bytes per peer "
                  "as each leg (cuda and --mode normal only; default none)");
  cmd->add_option_function<std::string>(
         "--num-sms",
         [&o](const std::string& v) {
           o.num_sms.clear();
           for (const std::string& item : split_list(v)) {
             o.num_sms.push_back(
                 parse_number<int>("--num-sms", item, "a comma-separated list of integers"));
           }
         },
         "SM budgets, e.g. 8,16,32: every pair runs once per budget (OpConfig::num_sms; "
         "default: the op's default, MOE_EP_NUM_SMS or 32)")
      ->type_name("LIST");
  cmd->add_flag("--copy-engine", o.copy_engine,
                "move the rows with the GPU's copy engines instead of SMs (OpConfig::copy_engine; "
                "cuda backend, --mode normal, one node; default off, or MOE_EP_COPY_ENGINE)");
  cmd->add_flag("--column-major-scales", o.column_major_scales,
                "decode mode's recv_x_scales column by column, [E/W, scale_dim, W*Tmax] "
                "(OpConfig::column_major_scales; --mode decode only; default off)");
  cmd->add_option("--decode-graph", o.decode_graph,
                  "leg|round, decode mode's timing (cuda): leg = each leg a graph of its own, "
                  "timed around its replay (a graph start included); round = dispatch and combine "
                  "in one graph, each leg timed inside it by event nodes, and a round_us column: " +
                      std::to_string(kRoundsPerGraph) +
                      " rounds in one graph with no timer between them, per round (default leg)");
  cmd->add_flag("--round-us", o.round_us,
                "normal mode: also time " + std::to_string(kRoundsPerGraph) +
                    " rounds (dispatch, then combine, host calls) back to back between two "
                    "events, no timer between them: a round_us column, per round (default off)");
  add_double(cmd, "--x-std", o.x_std,
             "standard deviation of the gaussian x (default 0.02, activation-sized; "
             "docs/bench.md says why)");
  return [options](LogBuffer& logs) { return run(*options, logs); };
}

}  // namespace moe_ep::cli
