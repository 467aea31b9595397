// Table, footer and JSON of `moe-ep bench`. The JSON is written by hand (no JSON library in the
// tree): strings go through json_string, non-finite numbers become null.
#include "bench_report.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "commands.h"

namespace moe_ep::cli {
namespace {

constexpr size_t kMaxNotes = 10;  // mismatch lines printed after the table

std::string format(const char* fmt, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), fmt, value);
  return text;
}

std::string pct(const std::optional<double>& value) {
  return value ? format("%.1f", *value) : std::string("-");
}

std::string json_number(double value) {
  return std::isfinite(value) ? format("%.17g", value) : std::string("null");
}

// nccl / moe-ep time of a leg: above 1 when moe-ep is faster.
std::string ratio(double nccl_us, double moe_ep_us) {
  return moe_ep_us > 0.0 ? format("%.2f", nccl_us / moe_ep_us) : std::string("-");
}

}  // namespace

PairMetrics pair_metrics(const BenchPlan& plan, int64_t remote_rows, const PairResult& result,
                         std::optional<double> link_floor_gbps) {
  const int64_t h = plan.shape.hidden, ranks = plan.shape.ranks;
  const int64_t dispatch_row =
      payload_bytes(result.pair.dispatch, h) + scale_bytes(result.pair.dispatch, h);
  const int64_t combine_row =
      payload_bytes(result.pair.combine, h) + scale_bytes(result.pair.combine, h);
  PairMetrics m;
  m.dispatch_bytes = remote_rows * dispatch_row / ranks;
  m.combine_bytes = remote_rows * combine_row / ranks;
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
  char line[512];
  std::snprintf(
      line, sizeof(line),
      "# moe-ep bench: backend %s, ranks %d, tokens %d/rank (max %d), hidden %d, "
      "experts %d, topk %d, masked %g, x_std %g, iters %d, warmup %d, seed %llu, check %s\n",
      backend.c_str(), s.ranks, s.tokens, plan.max_tokens, s.hidden, s.experts, s.topk,
      s.masked_fraction, s.x_std, plan.iters, plan.warmup, static_cast<unsigned long long>(s.seed),
      plan.check ? "on" : "off");
  os << line;
  for (const std::string& note : plan.notes) os << "# " << note << "\n";
  os << "# times: median over iterations of the slowest rank; MB: bytes per rank per leg sent "
        "to other ranks (1e6); rel_err vs fp64 on the bf16 input\n";
  if (plan.nccl_baseline) {
    os << "# nccl_*_us: NCCL all-to-allv (ncclSend/ncclRecv of bytes) moving the leg's bytes per "
          "peer, self included, same statistic; d_x, comb_x: nccl / moe-ep time (> 1: moe-ep "
          "faster)\n";
  }
  std::snprintf(line, sizeof(line), "%-8s %-15s %10s %10s %8s %8s %9s %9s %7s %7s %9s %7s",
                "dispatch", "combine", "disp_us", "comb_us", "disp_MB", "comb_MB", "disp_GB/s",
                "comb_GB/s", "d_%flr", "c_%flr", "rel_err", "#wrong");
  os << line;
  if (plan.nccl_baseline) {
    std::snprintf(line, sizeof(line), " %10s %10s %7s %7s", "nccl_d_us", "nccl_c_us", "d_x",
                  "comb_x");
    os << line;
  }
  os << "\n" << std::flush;
}

void print_row(std::ostream& os, const PairResult& r, const PairMetrics& m) {
  char line[512];
  const std::string wrong = r.wrong ? std::to_string(*r.wrong) : std::string("-");
  std::snprintf(line, sizeof(line),
                "%-8s %-15s %10.1f %10.1f %8.3f %8.3f %9.2f %9.2f %7s %7s %9.3g %7s",
                short_name(r.pair.dispatch), short_name(r.pair.combine), r.dispatch_us,
                r.combine_us, m.dispatch_bytes / 1e6, m.combine_bytes / 1e6, m.dispatch_algbw_gbps,
                m.combine_algbw_gbps, pct(m.dispatch_floor_pct).c_str(),
                pct(m.combine_floor_pct).c_str(), r.rel_err, wrong.c_str());
  os << line;
  if (r.nccl_dispatch_us && r.nccl_combine_us) {
    std::snprintf(line, sizeof(line), " %10.1f %10.1f %7s %7s", *r.nccl_dispatch_us,
                  *r.nccl_combine_us, ratio(*r.nccl_dispatch_us, r.dispatch_us).c_str(),
                  ratio(*r.nccl_combine_us, r.combine_us).c_str());
    os << line;
  }
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
        os << "# mismatch " << short_name(r.pair.dispatch) << "/" << short_name(r.pair.combine)
           << ": " << note << "\n";
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

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out += escaped;
        } else {
          out += ch;  // UTF-8 bytes pass through unchanged
        }
    }
  }
  return out + "\"";
}

void write_json(const std::string& path, const BenchPlan& plan, const std::string& backend,
                const std::vector<PairResult>& results, const std::vector<PairMetrics>& metrics) {
  const InputShape& s = plan.shape;
  std::ofstream file(path, std::ios::trunc);
  if (!file) throw RunFailure("--json=" + path + ": cannot open the file for writing");
  file << "[\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const PairResult& r = results[i];
    const PairMetrics& m = metrics[i];
    auto opt = [](const std::optional<double>& v) { return v ? json_number(*v) : "null"; };
    file << "  {"
         << "\"backend\": " << json_string(backend) << ", \"ranks\": " << s.ranks
         << ", \"tokens\": " << s.tokens << ", \"max_tokens\": " << plan.max_tokens
         << ", \"hidden\": " << s.hidden << ", \"experts\": " << s.experts
         << ", \"topk\": " << s.topk << ", \"masked_fraction\": " << json_number(s.masked_fraction)
         << ", \"x_std\": " << json_number(s.x_std) << ", \"seed\": " << s.seed
         << ", \"iters\": " << plan.iters << ", \"warmup\": " << plan.warmup
         << ", \"dispatch_dtype\": " << json_string(to_string(r.pair.dispatch))
         << ", \"combine_dtype\": " << json_string(to_string(r.pair.combine))
         << ", \"dispatch_us\": " << json_number(r.dispatch_us)
         << ", \"combine_us\": " << json_number(r.combine_us)
         << ", \"dispatch_bytes\": " << m.dispatch_bytes
         << ", \"combine_bytes\": " << m.combine_bytes
         << ", \"bytes_per_rank\": " << m.dispatch_bytes + m.combine_bytes
         << ", \"dispatch_algbw_gbps\": " << json_number(m.dispatch_algbw_gbps)
         << ", \"combine_algbw_gbps\": " << json_number(m.combine_algbw_gbps)
         << ", \"dispatch_pct_floor\": " << opt(m.dispatch_floor_pct)
         << ", \"combine_pct_floor\": " << opt(m.combine_floor_pct)
         << ", \"rel_err\": " << json_number(r.rel_err)
         << ", \"checked\": " << (r.wrong ? "true" : "false")
         << ", \"wrong\": " << (r.wrong ? std::to_string(*r.wrong) : std::string("null"));
    if (r.nccl_dispatch_us && r.nccl_combine_us) {
      file << ", \"nccl_dispatch_us\": " << json_number(*r.nccl_dispatch_us)
           << ", \"nccl_combine_us\": " << json_number(*r.nccl_combine_us);
    }
    file << "}" << (i + 1 < results.size() ? ",\n" : "\n");
  }
  file << "]\n";
  file.close();
  if (!file) throw RunFailure("--json=" + path + ": writing the file failed");
}

}  // namespace moe_ep::cli
