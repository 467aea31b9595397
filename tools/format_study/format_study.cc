// moe-ep-format-study: measures the accuracy of candidate combine wire formats at about one byte
// per element, the study behind the int8/e3m4 blockwise format (docs/formats.md, "Choosing the
// int8/e3m4 format"). For each payload it reports the relative L2 and the largest error of one
// encode/decode round trip, and the relative L2 error of the summed combine output over W = 2,
// 4 and 8 ranks: every rank's partial row is encoded on its own, decoded, the rows are added in
// fp32 in ascending rank order from +0.0 and rounded once to bf16, exactly as combine does, and
// the result is compared with the fp64 sum of the unquantized bf16 partial rows. The shipped
// formats run through their traits of src/formats/codecs.h, so their rows are the wire's bits;
// the other candidates are written out in candidates.cc. Every draw comes from one seed
// (--seed, printed), through a generator written out here, so a run replays on any compiler and
// library.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format_study/candidates.h"
#include "formats/codecs.h"

namespace moe_ep::formats {
namespace {

// --- random numbers ------------------------------------------------------------------------------

// splitmix64 seeding a xoshiro256** stream; Box-Muller gaussians. Each payload and each rank has
// its own stream, derived from the seed and a stream number.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) {
    uint64_t z = seed ^ (stream * 0x9e3779b97f4a7c15ull);
    for (uint64_t& w : s_) w = splitmix(z);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  double normal() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(6.283185307179586 * u2);
    have_spare_ = true;
    return r * std::cos(6.283185307179586 * u2);
  }
  // Student-t with `dof` degrees of freedom: a gaussian over sqrt(chi-square / dof).
  double student_t(int dof) {
    double chi2 = 0;
    for (int i = 0; i < dof; ++i) {
      const double z = normal();
      chi2 += z * z;
    }
    return normal() / std::sqrt(chi2 / dof);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix(uint64_t& z) {
    uint64_t r = (z += 0x9e3779b97f4a7c15ull);
    r = (r ^ (r >> 30)) * 0xbf58476d1ce4e5b9ull;
    r = (r ^ (r >> 27)) * 0x94d049bb133111ebull;
    return r ^ (r >> 31);
  }
  uint64_t s_[4];
  double spare_ = 0;
  bool have_spare_ = false;
};

uint16_t bf(double x) { return float_to_bf16(static_cast<float>(x)); }

// --- payloads ------------------------------------------------------------------------------------

constexpr int kMaxRanks = 8;

// Partial rows of one payload: for a world of W ranks, rank r's rows (bf16) and which tokens it
// contributes to. Round trips use the W = 1 rows.
struct Payload {
  std::string name;
  int hidden = 0;
  int rows = 0;
  // partial(W, r): [rows, hidden] bf16; present(W, r)[t]: rank r sends a row for token t.
  std::function<const std::vector<uint16_t>&(int, int)> partial;
  std::function<const std::vector<char>&(int, int)> present;
};

// Independent draws per rank: rank r of any W uses stream r, so W = 2 is a prefix of W = 8.
Payload synthetic(const std::string& name, uint64_t seed, uint64_t stream, int rows, int hidden,
                  const std::function<void(Rng&, uint16_t* row)>& draw) {
  auto ranks = std::make_shared<std::vector<std::vector<uint16_t>>>(kMaxRanks);
  for (int r = 0; r < kMaxRanks; ++r) {
    Rng rng(seed, stream * 64 + r);
    (*ranks)[r].resize(static_cast<size_t>(rows) * hidden);
    for (int t = 0; t < rows; ++t) draw(rng, (*ranks)[r].data() + static_cast<size_t>(t) * hidden);
  }
  auto all = std::make_shared<std::vector<char>>(rows, 1);
  Payload p;
  p.name = name;
  p.hidden = hidden;
  p.rows = rows;
  p.partial = [ranks](int, int r) -> const std::vector<uint16_t>& { return (*ranks)[r]; };
  p.present = [all](int, int) -> const std::vector<char>& { return *all; };
  return p;
}

// The MoE layer of examples/moe_layer.py on one rank's tokens: x ~ N(0, 1) in bf16, a bf16
// router (weights N(0, 1/H)), softmax over the experts, top-k renormalised; SwiGLU experts
// silu(x w1) * (x w3) w2 with weights N(0, 1/fan_in) in bf16, every matmul accumulated in fp32 and
// rounded to bf16 as torch's bf16 matmul does. Rank r of W owns experts [r E/W, (r+1) E/W); its
// partial row is bf16(sum over the token's slots k on r, ascending, of w_k * expert_k(x)) in fp32,
// as the example's weighted_sum then y.to(bfloat16).
Payload experts(uint64_t seed, int tokens, int hidden, int ffn, int num_experts, int topk) {
  Rng rng(seed, 1000);
  std::vector<float> x(static_cast<size_t>(tokens) * hidden);  // [T, H]
  for (float& v : x) v = fl(bf(rng.normal()));
  // Router: logits [T, E] bf16, softmax in fp32, top-k, renormalised.
  std::vector<float> router(static_cast<size_t>(num_experts) * hidden);  // [E, H]
  for (float& v : router) v = fl(bf(rng.normal() / std::sqrt(hidden)));
  std::vector<int> idx(static_cast<size_t>(tokens) * topk);    // [T, K]
  std::vector<float> wts(static_cast<size_t>(tokens) * topk);  // [T, K]
  for (int t = 0; t < tokens; ++t) {
    std::vector<float> p(num_experts);
    float mx = -INFINITY;
    for (int e = 0; e < num_experts; ++e) {
      float acc = 0;
      for (int h = 0; h < hidden; ++h) acc += x[t * hidden + h] * router[e * hidden + h];
      p[e] = fl(bf(acc));
      mx = std::max(mx, p[e]);
    }
    float sum = 0;
    for (float& v : p) sum += (v = std::exp(v - mx));
    for (float& v : p) v /= sum;
    std::vector<int> order(num_experts);
    for (int e = 0; e < num_experts; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    float top = 0;
    for (int k = 0; k < topk; ++k) top += p[order[k]];
    for (int k = 0; k < topk; ++k) {
      idx[t * topk + k] = order[k];
      wts[t * topk + k] = p[order[k]] / top;
    }
  }
  // Expert outputs per (token, slot): [T, K, H] fp32 of bf16 values. Weights are drawn one
  // expert at a time (w1, w3, w2 from the expert's own stream) to keep memory small.
  std::vector<float> o(static_cast<size_t>(tokens) * topk * hidden);
  std::vector<float> w1(static_cast<size_t>(hidden) * ffn), w3(w1.size()), w2(w1.size());
  std::vector<float> g(ffn), u(ffn), h(ffn), acc(hidden);
  for (int e = 0; e < num_experts; ++e) {
    Rng wr(seed, 2000 + e);
    for (float& v : w1) v = fl(bf(wr.normal() / std::sqrt(hidden)));  // [H, F]
    for (float& v : w3) v = fl(bf(wr.normal() / std::sqrt(hidden)));  // [H, F]
    for (float& v : w2) v = fl(bf(wr.normal() / std::sqrt(ffn)));     // [F, H]
    for (int t = 0; t < tokens; ++t) {
      for (int k = 0; k < topk; ++k) {
        if (idx[t * topk + k] != e) continue;
        std::fill(g.begin(), g.end(), 0.0f);
        std::fill(u.begin(), u.end(), 0.0f);
        for (int i = 0; i < hidden; ++i) {
          const float xi = x[t * hidden + i];
          const float* r1 = &w1[static_cast<size_t>(i) * ffn];
          const float* r3 = &w3[static_cast<size_t>(i) * ffn];
          for (int f = 0; f < ffn; ++f) {
            g[f] += xi * r1[f];
            u[f] += xi * r3[f];
          }
        }
        for (int f = 0; f < ffn; ++f) {
          const float gb = fl(bf(g[f])), ub = fl(bf(u[f]));
          const float silu = fl(bf(gb / (1.0f + std::exp(-gb))));
          h[f] = fl(bf(silu * ub));
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int f = 0; f < ffn; ++f) {
          const float* r2 = &w2[static_cast<size_t>(f) * hidden];
          for (int j = 0; j < hidden; ++j) acc[j] += h[f] * r2[j];
        }
        float* dst = &o[(static_cast<size_t>(t) * topk + k) * hidden];
        for (int j = 0; j < hidden; ++j) dst[j] = fl(bf(acc[j]));
      }
    }
  }
  // Partial rows for W = 1, 2, 4, 8.
  auto rows = std::make_shared<std::vector<std::vector<std::vector<uint16_t>>>>(kMaxRanks + 1);
  auto present = std::make_shared<std::vector<std::vector<std::vector<char>>>>(kMaxRanks + 1);
  for (int w : {1, 2, 4, 8}) {
    (*rows)[w].assign(w, std::vector<uint16_t>(static_cast<size_t>(tokens) * hidden, 0));
    (*present)[w].assign(w, std::vector<char>(tokens, 0));
    const int per_rank = num_experts / w;
    std::vector<float> sum(hidden);
    for (int r = 0; r < w; ++r) {
      for (int t = 0; t < tokens; ++t) {
        std::fill(sum.begin(), sum.end(), 0.0f);
        bool any = false;
        for (int k = 0; k < topk; ++k) {
          if (idx[t * topk + k] / per_rank != r) continue;
          any = true;
          const float wk = wts[t * topk + k];
          const float* src = &o[(static_cast<size_t>(t) * topk + k) * hidden];
          for (int j = 0; j < hidden; ++j) sum[j] += wk * src[j];
        }
        (*present)[w][r][t] = any;
        for (int j = 0; j < hidden; ++j)
          (*rows)[w][r][static_cast<size_t>(t) * hidden + j] = bf(sum[j]);
      }
    }
  }
  Payload p;
  p.name = "SwiGLU expert outputs (examples/moe_layer.py: H " + std::to_string(hidden) + ", ffn " +
           std::to_string(ffn) + ", " + std::to_string(num_experts) + " experts, top-" +
           std::to_string(topk) + ", x ~ N(0, 1))";
  p.hidden = hidden;
  p.rows = tokens;
  p.partial = [rows](int w, int r) -> const std::vector<uint16_t>& { return (*rows)[w][r]; };
  p.present = [present](int w, int r) -> const std::vector<char>& { return (*present)[w][r]; };
  return p;
}

std::vector<Payload> payloads(uint64_t seed, bool quick) {
  const int rows = quick ? 8 : 64, hidden = 4096;
  std::vector<Payload> p;
  p.push_back(synthetic("gaussian, sd 0.02", seed, 1, rows, hidden, [=](Rng& rng, uint16_t* row) {
    for (int i = 0; i < hidden; ++i) row[i] = bf(0.02 * rng.normal());
  }));
  p.push_back(synthetic("Student-t, 3 degrees of freedom, times 0.02", seed, 2, rows, hidden,
                        [=](Rng& rng, uint16_t* row) {
                          for (int i = 0; i < hidden; ++i) row[i] = bf(0.02 * rng.student_t(3));
                        }));
  // Outlier channels: the same 8 channels of every row (a property of the model), 100x.
  std::vector<char> outlier(hidden, 0);
  {
    Rng pick(seed, 3000);
    for (int n = 0; n < 8;) {
      const int ch = static_cast<int>(pick.uniform() * hidden);
      if (!outlier[ch]) outlier[ch] = 1, ++n;
    }
  }
  p.push_back(synthetic("gaussian sd 0.02 with 8 outlier channels at 100x", seed, 3, rows, hidden,
                        [=](Rng& rng, uint16_t* row) {
                          for (int i = 0; i < hidden; ++i) {
                            row[i] = bf(0.02 * rng.normal() * (outlier[i] ? 100.0 : 1.0));
                          }
                        }));
  // Each block of 32 scaled by 10^u, u uniform in [-1.5, 1.5]: blocks differ by up to 10^3.
  p.push_back(synthetic("gaussian sd 0.02, each 32-block times 10^U(-1.5, 1.5)", seed, 4, rows,
                        hidden, [=](Rng& rng, uint16_t* row) {
                          for (int b = 0; b < hidden; b += 32) {
                            const double m = std::pow(10.0, 3.0 * rng.uniform() - 1.5);
                            for (int i = b; i < b + 32; ++i) row[i] = bf(0.02 * m * rng.normal());
                          }
                        }));
  p.push_back(quick ? experts(seed, 8, 512, 256, 16, 4) : experts(seed, 128, 2048, 1024, 32, 4));
  return p;
}

// --- measurements --------------------------------------------------------------------------------

struct Result {
  double rt_rel_l2 = 0, rt_max_over_rms = 0;
  double combine_rel_l2[4] = {0, 0, 0, 0};  // W = 1 (unused), 2, 4, 8
};

Result measure(const Candidate& c, const Payload& p) {
  Result res;
  const int h = p.hidden;
  std::vector<float> out(h);
  // Round trip of the W = 1 rows.
  {
    const std::vector<uint16_t>& x = p.partial(1, 0);
    double err2 = 0, ref2 = 0, max_err = 0;
    for (int t = 0; t < p.rows; ++t) {
      const uint16_t* row = x.data() + static_cast<size_t>(t) * h;
      c.round_trip(row, h, out.data());
      for (int j = 0; j < h; ++j) {
        const double v = fl(row[j]), d = static_cast<double>(out[j]) - v;
        err2 += d * d;
        ref2 += v * v;
        max_err = std::max(max_err, std::fabs(d));
      }
    }
    res.rt_rel_l2 = std::sqrt(err2 / ref2);
    res.rt_max_over_rms = max_err / std::sqrt(ref2 / (static_cast<double>(p.rows) * h));
  }
  // Combine: each rank's row encoded alone, fp32 sum in ascending rank order, one bf16 rounding.
  int slot = 1;
  for (int w : {2, 4, 8}) {
    double err2 = 0, ref2 = 0;
    std::vector<float> sum(h);
    std::vector<double> ref(h);
    for (int t = 0; t < p.rows; ++t) {
      std::fill(sum.begin(), sum.end(), 0.0f);
      std::fill(ref.begin(), ref.end(), 0.0);
      for (int r = 0; r < w; ++r) {
        if (!p.present(w, r)[t]) continue;
        const uint16_t* row = p.partial(w, r).data() + static_cast<size_t>(t) * h;
        c.round_trip(row, h, out.data());
        for (int j = 0; j < h; ++j) {
          sum[j] += out[j];
          ref[j] += fl(row[j]);
        }
      }
      for (int j = 0; j < h; ++j) {
        const double d = static_cast<double>(fl(float_to_bf16(sum[j]))) - ref[j];
        err2 += d * d;
        ref2 += ref[j] * ref[j];
      }
    }
    res.combine_rel_l2[slot++] = std::sqrt(err2 / ref2);
  }
  return res;
}

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--seed N] [--quick]\n", argv0);
  return 2;
}

int run(int argc, char** argv) {
  uint64_t seed = 1;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) {
      char* end = nullptr;
      seed = std::strtoull(argv[++i], &end, 0);
      if (!end || *end) return usage(argv[0]);
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else {
      return usage(argv[0]);
    }
  }
  std::printf("moe-ep-format-study: seed %llu%s (replay: moe-ep-format-study --seed %llu%s)\n",
              static_cast<unsigned long long>(seed), quick ? ", quick" : "",
              static_cast<unsigned long long>(seed), quick ? " --quick" : "");
  std::printf(
      "rel L2 = sqrt(sum err^2 / sum ref^2); max = max |err| / rms(ref); combine: each "
      "rank's row encoded alone, fp32 sum by ascending rank, bf16 once, vs the fp64 sum\n");
  const std::vector<Candidate> cands = candidates();
  for (const Payload& p : payloads(seed, quick)) {
    std::printf("\n### %s (%d rows of %d)\n\n", p.name.c_str(), p.rows, p.hidden);
    std::printf(
        "| format | bytes/elem | round trip rel L2 | round trip max | combine W=2 | "
        "combine W=4 | combine W=8 |\n|---|---|---|---|---|---|---|\n");
    for (const Candidate& c : cands) {
      const Result r = measure(c, p);
      std::printf("| %s | %.4g | %.3e | %.3e | %.3e | %.3e | %.3e |\n", c.name.c_str(),
                  c.bytes_per_elem, r.rt_rel_l2, r.rt_max_over_rms, r.combine_rel_l2[1],
                  r.combine_rel_l2[2], r.combine_rel_l2[3]);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace moe_ep::formats

int main(int argc, char** argv) { return moe_ep::formats::run(argc, argv); }
