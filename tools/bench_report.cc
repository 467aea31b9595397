// Table, footer and JSON of `moe-ep bench`. The table is formatted with fmt, the JSON written
// with nlohmann-json (an ordered object per record, so the fields keep their documented order;
// non-finite numbers become null).
#include "bench_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"

namespace moe_ep::cli {
namespace {

constexpr size_t kMaxNotes = 10;  // mismatch lines printed after the table

std::string pct(const std::optional<double>& value) {
  return value ? fmt::format("{:.1f}", *value) : std::string("-");
}

// nccl / moe-ep time of a leg: above 1 when moe-ep is faster.
std::string ratio(double nccl_us, double moe_ep_us) {
  return moe_ep_us > 0.0 ? fmt::format("{:.2f}", nccl_us / moe_ep_us) : std::string("-");
}

// A JSON number, or null for nullopt (nlohmann writes NaN and Inf as null too).
nlohmann::ordered_json number_or_null(const std::optional<double>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

}  // namespace

PairMetrics pair_metrics(const BenchPlan& plan, const BenchInputs& inputs, const PairResult& result,
                         std::optional<double> link_floor_gbps) {
  const int64_t remote_rows = inputs.remote_rows;
  const int64_t h = plan.shape.hidden, ranks = plan.shape.ranks;
  const int64_t dispatch_row =
      payload_bytes(result.pair.dispatch, h) + scale_bytes(result.pair.dispatch, h);
  const int64_t combine_row =
      payload_bytes(result.pair.combine, h) + scale_bytes(result.pair.combine, h);
  PairMetrics m;
  m.balance = inputs.balance;
  m.dispatch_bytes = remote_rows * dispatch_row / ranks;
  m.combine_bytes = remote_rows * combine_row / ranks;
  if (several_nodes(plan)) {
    m.dispatch_net_bytes = inputs.net_rows * dispatch_row / ranks;
    m.combine_net_bytes = inputs.net_rows * combine_row / ranks;
  }
  auto algbw = [](int64_t bytes, double us) { return us > 0.0 ? bytes / (us * 1e3) : 0.0; };
  m.dispatch_algbw_gbps = algbw(m.dispatch_bytes, result.dispatch_us);
  m.combine_algbw_gbps = algbw(m.combine_bytes, result.combine_us);
  if (link_floor_gbps && *link_floor_gbps > 0.0) {
    m.dispatch_floor_pct = 100.0 * m.dispatch_algbw_gbps / *link_floor_gbps;
    m.combine_floor_pct = 100.0 * m.combine_algbw_gbps / *link_floor_gbps;
  }
  return m;
}

void print_header(std::ostream& os, const BenchPlan& plan, const std::string& backend) {
  const InputShape& s = plan.shape;
  // One size: "tokens 8/rank (max 16)"; a list: "tokens 1,8/rank (max 16)", or "(max = tokens)"
  // when each size's op has max_tokens_per_rank = its size.
  std::vector<int64_t> slab_rows;  // W * Tmax of each size (decode mode)
  for (int tokens : plan.token_sizes) {
    slab_rows.push_back(static_cast<int64_t>(s.ranks) * plan_at_tokens(plan, tokens).max_tokens);
  }
  const std::string max = plan.tokens_column && !plan.max_tokens_given
                              ? std::string("= tokens")
                              : std::to_string(plan.max_tokens);
  os << fmt::format(
      "# moe-ep bench: mode {}, backend {}, ranks {}, tokens {}/rank (max {}), hidden {}, "
      "experts {}, topk {}, masked {:g}, routing {}, x_std {:g}, iters {}, warmup {}, seed {}, "
      "check {}\n",
      to_string(plan.mode), backend, s.ranks, fmt::join(plan.token_sizes, ","), max, s.hidden,
      s.experts, s.topk, s.masked_fraction, to_string(s.routing), s.x_std, plan.iters, plan.warmup,
      s.seed, plan.check ? "on" : "off");
  if (plan.one_rank_per_process) {
    os << "# launch: mpirun, one rank per process; every process checks its own rank against the "
          "reference of all ranks, times are gathered\n";
  }
  if (several_nodes(plan)) {
    os << fmt::format(
        "# nodes: {} of {} ranks each (--ranks-per-node {}): ranks [n*{}, (n+1)*{}) form node n; "
        "the check's reference combine sums by node\n",
        s.ranks / plan.ranks_per_node, plan.ranks_per_node, plan.ranks_per_node,
        plan.ranks_per_node, plan.ranks_per_node);
  }
  if (plan.mode == BenchMode::kDecode) {
    os << fmt::format(
        "# decode mode: low_latency_dispatch / low_latency_combine (ops with low_latency=true), "
        "{} slabs of W*Tmax = {} rows per rank; expert y = bf16(decoded slab row)\n",
        s.experts / s.ranks, fmt::join(slab_rows, ","));
    if (plan.decode_graph == DecodeGraph::kRound) {
      os << fmt::format(
          "# timed per leg inside one graph a round (--decode-graph round: dispatch, then "
          "combine, between event nodes; no graph start of its own); round_us: {} rounds in one "
          "graph with no timer between them, its replay's time per round (host calls where the "
          "backend has no graphs)\n",
          kRoundsPerGraph);
    }
  }
  if (plan.round_us) {
    os << fmt::format(
        "# round_us (--round-us): {} rounds of host calls (dispatch, then combine) back to back "
        "between two events with no timer between them, per round\n",
        kRoundsPerGraph);
  }
  if (plan.copy_engine) {
    os << "# copy engine (--copy-engine): rows packed locally, moved by cudaMemcpyAsync per peer, "
          "then a done word per source (OpConfig::copy_engine)\n";
  }
  if (plan.column_major_scales) {
    os << "# column-major scales (--column-major-scales): recv_x_scales stored [E/W, scale_dim, "
          "W*Tmax] (OpConfig::column_major_scales)\n";
  }
  for (const std::string& note : plan.notes) os << "# " << note << "\n";
  os << "# times: median over iterations of the slowest rank; MB: bytes per rank per leg sent "
        "to other ranks (1e6); rel_err vs fp64 on the bf16 input\n";
  if (several_nodes(plan)) {
    os << "# d_net_MB, c_net_MB: bytes per rank sent between nodes in the dispatch leg (each token "
          "once per other node owning one of its experts, to that node's forwarder; dispatch row "
          "size) and in the combine leg (one partial row per token and other node holding it; "
          "combine row size), from this run's routing, averaged over ranks like disp_MB (1e6)\n";
  }
  if (plan.nccl_baseline) {
    os << "# nccl_*_us: NCCL all-to-allv (ncclSend/ncclRecv of bytes) moving the leg's bytes per "
          "peer, self included, same statistic; d_x, comb_x: nccl / moe-ep time (> 1: moe-ep "
          "faster)\n";
  }
  if (plan.tokens_column) os << fmt::format("{:>6} ", "tokens");
  if (plan.sms_column) os << fmt::format("{:>4} ", "sms");
  os << fmt::format("{:<8} {:<15} {:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>7} {:>7} {:>9} {:>7}",
                    "dispatch", "combine", "disp_us", "comb_us", "disp_MB", "comb_MB", "disp_GB/s",
                    "comb_GB/s", "d_%flr", "c_%flr", "rel_err", "#wrong");
  if (several_nodes(plan)) os << fmt::format(" {:>8} {:>8}", "d_net_MB", "c_net_MB");
  if (plan.nccl_baseline) {
    os << fmt::format(" {:>10} {:>10} {:>7} {:>7}", "nccl_d_us", "nccl_c_us", "d_x", "comb_x");
  }
  if (times_rounds(plan)) os << fmt::format(" {:>9}", "round_us");
  os << "\n" << std::flush;
}

void print_balance(std::ostream& os, const BenchPlan& plan, const Balance& b) {
  const auto ratio_to_mean = [](int64_t max, double mean) {
    return mean > 0.0 ? fmt::format("{:.2f}x", max / mean) : std::string("-");
  };
  os << fmt::format(
      "# routing {}, {} tokens: rows received per rank max {} (mean {:.1f}, {}); (token, "
      "expert) pairs per expert max {} (mean {:.1f}, {})\n",
      to_string(plan.shape.routing), plan.shape.tokens, b.recv_rows_max, b.recv_rows_mean,
      ratio_to_mean(b.recv_rows_max, b.recv_rows_mean), b.expert_rows_max, b.expert_rows_mean,
      ratio_to_mean(b.expert_rows_max, b.expert_rows_mean));
}

void print_row(std::ostream& os, const BenchPlan& plan, const PairResult& r, const PairMetrics& m) {
  const std::string wrong = r.wrong ? std::to_string(*r.wrong) : std::string("-");
  if (plan.tokens_column) os << fmt::format("{:>6} ", r.tokens);
  if (r.pair.num_sms != 0) os << fmt::format("{:>4} ", r.pair.num_sms);
  os << fmt::format(
      "{:<8} {:<15} {:>10.1f} {:>10.1f} {:>8.3f} {:>8.3f} {:>9.2f} {:>9.2f} {:>7} {:>7} {:>9.3g} "
      "{:>7}",
      short_name(r.pair.dispatch), short_name(r.pair.combine), r.dispatch_us, r.combine_us,
      m.dispatch_bytes / 1e6, m.combine_bytes / 1e6, m.dispatch_algbw_gbps, m.combine_algbw_gbps,
      pct(m.dispatch_floor_pct), pct(m.combine_floor_pct), r.rel_err, wrong);
  if (m.dispatch_net_bytes && m.combine_net_bytes) {
    os << fmt::format(" {:>8.3f} {:>8.3f}", *m.dispatch_net_bytes / 1e6,
                      *m.combine_net_bytes / 1e6);
  }
  if (r.nccl_dispatch_us && r.nccl_combine_us) {
    os << fmt::format(" {:>10.1f} {:>10.1f} {:>7} {:>7}", *r.nccl_dispatch_us, *r.nccl_combine_us,
                      ratio(*r.nccl_dispatch_us, r.dispatch_us),
                      ratio(*r.nccl_combine_us, r.combine_us));
  }
  if (r.round_us) os << fmt::format(" {:>9.1f}", *r.round_us);
  os << "\n" << std::flush;
}

int64_t print_footer(std::ostream& os, const BenchPlan& plan,
                     const std::vector<PairResult>& results) {
  int64_t wrong = 0;
  size_t printed = 0, total_notes = 0;
  for (const PairResult& r : results) {
    wrong += r.wrong.value_or(0);
    for (const std::string& note : r.notes) {
      ++total_notes;
      if (printed++ < kMaxNotes) {
        os << "# mismatch " << short_name(r.pair.dispatch) << "/" << short_name(r.pair.combine);
        if (plan.tokens_column) os << " at " << r.tokens << " tokens";
        os << ": " << note << "\n";
      }
    }
  }
  if (total_notes > kMaxNotes) {
    os << "# ... " << total_notes - kMaxNotes << " more mismatching fields\n";
  }
  if (!plan.check) {
    os << "# wrong: not checked (--no-check)\n";
  } else {
    os << "# wrong: " << wrong << (wrong == 0 ? " OK" : " FAILED") << "\n";
  }
  return wrong;
}

void write_json(const std::string& path, const BenchPlan& plan, const std::string& backend,
                const std::vector<PairResult>& results, const std::vector<PairMetrics>& metrics) {
  const InputShape& s = plan.shape;
  nlohmann::ordered_json records = nlohmann::ordered_json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const PairResult& r = results[i];
    const PairMetrics& m = metrics[i];
    nlohmann::ordered_json record;
    record["backend"] = backend;
    record["mode"] = to_string(plan.mode);
    record["ranks"] = s.ranks;
    record["tokens"] = r.tokens;
    record["max_tokens"] = r.max_tokens;
    record["hidden"] = s.hidden;
    record["experts"] = s.experts;
    record["topk"] = s.topk;
    if (several_nodes(plan)) record["ranks_per_node"] = plan.ranks_per_node;
    record["masked_fraction"] = s.masked_fraction;
    record["routing"] = to_string(s.routing);
    record["x_std"] = s.x_std;
    record["seed"] = s.seed;
    record["iters"] = plan.iters;
    record["warmup"] = plan.warmup;
    record["dispatch_dtype"] = to_string(r.pair.dispatch);
    record["combine_dtype"] = to_string(r.pair.combine);
    if (r.pair.num_sms != 0) record["num_sms"] = r.pair.num_sms;
    if (plan.copy_engine) record["copy_engine"] = true;
    if (plan.column_major_scales) record["column_major_scales"] = true;
    if (plan.decode_graph == DecodeGraph::kRound) {
      record["decode_graph"] = to_string(plan.decode_graph);
    }
    record["dispatch_us"] = r.dispatch_us;
    record["combine_us"] = r.combine_us;
    record["dispatch_bytes"] = m.dispatch_bytes;
    record["combine_bytes"] = m.combine_bytes;
    record["bytes_per_rank"] = m.dispatch_bytes + m.combine_bytes;
    if (m.dispatch_net_bytes && m.combine_net_bytes) {
      record["dispatch_net_bytes"] = *m.dispatch_net_bytes;
      record["combine_net_bytes"] = *m.combine_net_bytes;
    }
    record["recv_rows_max"] = m.balance.recv_rows_max;
    record["recv_rows_mean"] = m.balance.recv_rows_mean;
    record["expert_rows_max"] = m.balance.expert_rows_max;
    record["expert_rows_mean"] = m.balance.expert_rows_mean;
    record["dispatch_algbw_gbps"] = m.dispatch_algbw_gbps;
    record["combine_algbw_gbps"] = m.combine_algbw_gbps;
    record["dispatch_pct_floor"] = number_or_null(m.dispatch_floor_pct);
    record["combine_pct_floor"] = number_or_null(m.combine_floor_pct);
    record["memory_peer_bytes"] = m.memory.peer_bytes;
    record["memory_private_bytes"] = m.memory.private_bytes;
    record["rel_err"] = r.rel_err;
    record["checked"] = r.wrong.has_value();
    record["wrong"] = r.wrong ? nlohmann::ordered_json(*r.wrong) : nlohmann::ordered_json(nullptr);
    if (r.nccl_dispatch_us && r.nccl_combine_us) {
      record["nccl_dispatch_us"] = *r.nccl_dispatch_us;
      record["nccl_combine_us"] = *r.nccl_combine_us;
    }
    if (r.round_us) record["round_us"] = *r.round_us;
    records.push_back(std::move(record));
  }
  std::ofstream file(path, std::ios::trunc);
  if (!file) throw RunFailure("--json=" + path + ": cannot open the file for writing");
  // Invalid UTF-8 (none is expected: the strings are dtype and backend names) is replaced
  // rather than thrown.
  file << records.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  file.close();
  if (!file) throw RunFailure("--json=" + path + ": writing the file failed");
}

}  // namespace moe_ep::cli
