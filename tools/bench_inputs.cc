// Input generation for `moe-ep bench`. A counter-based hash (splitmix64 finaliser over seed,
// rank, stream and index) gives every value independently, so generation order does not matter
// and each rank regenerates exactly its own data.
#include "bench_inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "formats/scalar.h"

namespace moe_ep::cli {
namespace {

// Independent streams of random values per rank.
enum Stream : uint64_t {
  kStreamX = 1,
  kStreamRoute = 2,
  kStreamWeight = 3,
  kStreamMask = 4,
  kStreamPopularity = 5,  // Routing::kZipf's popularity order (kAllRanks)
  kStreamGroup = 6,       // Routing::kGroups' groups of each token
};
// The rank argument of hash() for values every rank shares.
constexpr int kAllRanks = -1;

uint64_t splitmix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t hash(uint64_t seed, int rank, Stream stream, uint64_t index) {
  uint64_t h = splitmix(seed);
  h = splitmix(h ^ static_cast<uint64_t>(rank));
  h = splitmix(h ^ stream);
  return splitmix(h ^ index);
}

// Uniform in the open interval (0, 1): the top 53 bits plus half a step.
double uniform(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53; }

// A uniform index in [0, n) from h (n > 0; the modulo's bias, below n / 2^64, is immaterial).
int64_t below(uint64_t h, int64_t n) { return static_cast<int64_t>(h % static_cast<uint64_t>(n)); }

// Routing::kZipf's weight of each expert: 1 / (i + 1)^s for the expert at place i of a shuffle of
// the experts made from the seed alone (the same on every rank).
std::vector<double> zipf_weights(const InputShape& s) {
  std::vector<int32_t> order(s.experts);  // [E] experts, most popular first
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = 0; i + 1 < s.experts; ++i) {
    const uint64_t h = hash(s.seed, kAllRanks, kStreamPopularity, i);
    std::swap(order[i], order[i + below(h, s.experts - i)]);
  }
  std::vector<double> weight(s.experts);  // [E]
  for (int64_t i = 0; i < s.experts; ++i) {
    weight[order[i]] = std::pow(static_cast<double>(i + 1), -s.routing.zipf_s);
  }
  return weight;
}

// Picks token t's K distinct experts into ids[0, K) in slot order, by the shape's routing.
class Router {
 public:
  Router(const InputShape& s, int rank) : s_(s), rank_(rank) {
    switch (s.routing.kind) {
      case Routing::Kind::kUniform: scratch_.resize(s.experts); break;
      case Routing::Kind::kZipf:
        weight_ = zipf_weights(s);
        taken_.assign(s.experts, 0);
        break;
      case Routing::Kind::kGroups:
        groups_.resize(s.routing.groups);
        scratch_.resize(static_cast<size_t>(s.routing.groups_per_token) *
                        (s.experts / s.routing.groups));
        break;
    }
  }

  void pick(int64_t t, int32_t* ids) {
    switch (s_.routing.kind) {
      case Routing::Kind::kUniform:
        // The first K entries of a partial shuffle are K distinct uniform experts, in a random
        // slot order (so nothing may assume sorted slots).
        std::iota(scratch_.begin(), scratch_.end(), 0);
        first_of_shuffle(scratch_, s_.topk, kStreamRoute, t * s_.topk, ids);
        break;
      case Routing::Kind::kZipf: pick_zipf(t, ids); break;
      case Routing::Kind::kGroups: {
        // M distinct groups by a partial shuffle of the groups, then K distinct experts by a
        // partial shuffle of their experts.
        const int m = s_.routing.groups_per_token;
        const int per_group = s_.experts / s_.routing.groups;
        std::iota(groups_.begin(), groups_.end(), 0);
        first_of_shuffle(groups_, m, kStreamGroup, t * m, nullptr);  // groups_[0, M): the chosen
        for (int g = 0; g < m; ++g) {
          for (int i = 0; i < per_group; ++i) {
            scratch_[static_cast<size_t>(g) * per_group + i] = groups_[g] * per_group + i;
          }
        }
        first_of_shuffle(scratch_, s_.topk, kStreamRoute, t * s_.topk, ids);
        break;
      }
    }
  }

 private:
  // Shuffles the first n entries of v into place (a partial Fisher-Yates with the stream's values
  // from index first on) and copies them to out when given.
  void first_of_shuffle(std::vector<int32_t>& v, int n, Stream stream, int64_t first,
                        int32_t* out) const {
    const int64_t size = static_cast<int64_t>(v.size());
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t h = hash(s_.seed, rank_, stream, first + j);
      std::swap(v[j], v[j + below(h, size - j)]);
      if (out != nullptr) out[j] = v[j];
    }
  }

  // Successive draws without replacement, each in proportion to the weights not drawn yet. The
  // remaining total is summed again for each draw rather than kept by subtraction, so rounding
  // never leaves it off the experts still in play; a draw that the sum's rounding puts past the
  // last expert takes the last one not drawn.
  void pick_zipf(int64_t t, int32_t* ids) {
    for (int64_t j = 0; j < s_.topk; ++j) {
      double total = 0.0;
      for (int64_t e = 0; e < s_.experts; ++e) total += taken_[e] ? 0.0 : weight_[e];
      const double u = uniform(hash(s_.seed, rank_, kStreamRoute, t * s_.topk + j)) * total;
      double acc = 0.0;
      int32_t picked = -1;
      for (int64_t e = 0; e < s_.experts; ++e) {
        if (taken_[e]) continue;
        picked = static_cast<int32_t>(e);
        acc += weight_[e];
        if (u < acc) break;
      }
      taken_[picked] = 1;
      ids[j] = picked;
    }
    for (int64_t j = 0; j < s_.topk; ++j) taken_[ids[j]] = 0;
  }

  const InputShape& s_;
  const int rank_;
  std::vector<int32_t> scratch_;  // kUniform: [E] experts; kGroups: [M * E / G] candidates
  std::vector<int32_t> groups_;   // kGroups: [G]
  std::vector<double> weight_;    // kZipf: [E]
  std::vector<char> taken_;       // kZipf: [E] drawn for the current token
};

}  // namespace

std::string to_string(const Routing& routing) {
  switch (routing.kind) {
    case Routing::Kind::kZipf: return fmt::format("zipf:{:g}", routing.zipf_s);
    case Routing::Kind::kGroups:
      return fmt::format("groups:{}:{}", routing.groups, routing.groups_per_token);
    case Routing::Kind::kUniform: break;
  }
  return "uniform";
}

RankInputs make_inputs(const InputShape& s, int rank) {
  const int64_t t_count = s.tokens, h = s.hidden, k = s.topk;
  RankInputs in;
  in.x.resize(t_count * h);
  in.topk_idx.resize(t_count * k);
  in.topk_weights.resize(t_count * k);

  // x: Box-Muller, one pair of uniforms per pair of elements.
  constexpr double kTwoPi = 6.283185307179586;
  for (int64_t i = 0; i < t_count * h; i += 2) {
    const double u1 = uniform(hash(s.seed, rank, kStreamX, 2 * (i / 2)));
    const double u2 = uniform(hash(s.seed, rank, kStreamX, 2 * (i / 2) + 1));
    const double radius = std::sqrt(-2.0 * std::log(u1));
    in.x[i] = formats::float_to_bf16(static_cast<float>(s.x_std * radius * std::cos(kTwoPi * u2)));
    if (i + 1 < t_count * h) {
      in.x[i + 1] =
          formats::float_to_bf16(static_cast<float>(s.x_std * radius * std::sin(kTwoPi * u2)));
    }
  }

  Router router(s, rank);
  for (int64_t t = 0; t < t_count; ++t) {
    int32_t* ids = in.topk_idx.data() + t * k;
    router.pick(t, ids);
    for (int64_t j = 0; j < k; ++j) {
      const bool masked = uniform(hash(s.seed, rank, kStreamMask, t * k + j)) < s.masked_fraction;
      if (masked) ids[j] = -1;
    }
    // Weights in [0.1, 1), normalised to sum 1 like a renormalised top-k softmax; masked slots
    // keep theirs (they are copied as sent but never used).
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      const double w = 0.1 + 0.9 * uniform(hash(s.seed, rank, kStreamWeight, t * k + j));
      in.topk_weights[t * k + j] = static_cast<float>(w);
      sum += w;
    }
    for (int64_t j = 0; j < k; ++j) {
      in.topk_weights[t * k + j] = static_cast<float>(in.topk_weights[t * k + j] / sum);
    }
  }
  return in;
}

std::vector<int64_t> count_route_rows(const InputShape& s, const std::vector<RankInputs>& inputs) {
  const int experts_per_rank = s.experts / s.ranks;
  std::vector<int64_t> rows(static_cast<size_t>(s.ranks) * s.ranks, 0);  // [W, W]
  std::vector<char> goes(s.ranks);  // [W] does the current token go to rank r
  for (int src = 0; src < s.ranks; ++src) {
    for (int64_t t = 0; t < s.tokens; ++t) {
      std::fill(goes.begin(), goes.end(), 0);
      for (int64_t j = 0; j < s.topk; ++j) {
        const int32_t e = inputs[src].topk_idx[t * s.topk + j];
        if (e >= 0) goes[e / experts_per_rank] = 1;
      }
      for (int r = 0; r < s.ranks; ++r) rows[static_cast<size_t>(src) * s.ranks + r] += goes[r];
    }
  }
  return rows;
}

Balance count_balance(const InputShape& s, const std::vector<RankInputs>& inputs,
                      const std::vector<int64_t>& route_rows) {
  Balance b;
  int64_t total = 0;
  for (int r = 0; r < s.ranks; ++r) {
    int64_t recv = 0;
    for (int src = 0; src < s.ranks; ++src)
      recv += route_rows[static_cast<size_t>(src) * s.ranks + r];
    b.recv_rows_max = std::max(b.recv_rows_max, recv);
    total += recv;
  }
  b.recv_rows_mean = static_cast<double>(total) / s.ranks;
  std::vector<int64_t> per_expert(s.experts, 0);  // [E]
  int64_t pairs = 0;
  for (int src = 0; src < s.ranks; ++src) {
    for (int32_t e : inputs[src].topk_idx) {
      if (e < 0) continue;
      ++per_expert[e];
      ++pairs;
    }
  }
  for (int64_t n : per_expert) b.expert_rows_max = std::max(b.expert_rows_max, n);
  b.expert_rows_mean = static_cast<double>(pairs) / s.experts;
  return b;
}

int64_t count_remote_rows(const InputShape& s, const std::vector<RankInputs>& inputs) {
  const std::vector<int64_t> route = count_route_rows(s, inputs);  // [W, W]
  int64_t rows = 0;
  for (int src = 0; src < s.ranks; ++src) {
    for (int r = 0; r < s.ranks; ++r) rows += r != src ? route[src * s.ranks + r] : 0;
  }
  return rows;
}

int64_t count_net_rows(const InputShape& s, const std::vector<RankInputs>& inputs,
                       int ranks_per_node) {
  if (ranks_per_node <= 0 || ranks_per_node >= s.ranks) return 0;
  const int experts_per_rank = s.experts / s.ranks;
  const int nodes = s.ranks / ranks_per_node;
  std::vector<char> goes(nodes);  // [nodes] does the current token go to node n
  int64_t rows = 0;
  for (int src = 0; src < s.ranks; ++src) {
    const int own = src / ranks_per_node;
    for (int64_t t = 0; t < s.tokens; ++t) {
      std::fill(goes.begin(), goes.end(), 0);
      for (int64_t j = 0; j < s.topk; ++j) {
        const int32_t e = inputs[src].topk_idx[t * s.topk + j];
        if (e >= 0) goes[e / experts_per_rank / ranks_per_node] = 1;
      }
      for (int n = 0; n < nodes; ++n) rows += n != own ? goes[n] : 0;
    }
  }
  return rows;
}

ErrorSums unquantized_error(const InputShape& s, const RankInputs& in, const uint16_t* out) {
  ErrorSums sums;
  for (int64_t t = 0; t < s.tokens; ++t) {
    double weight = 0.0;  // identity experts: want[t] = (sum of unmasked weights) * x[t]
    for (int64_t j = 0; j < s.topk; ++j) {
      if (in.topk_idx[t * s.topk + j] >= 0) weight += in.topk_weights[t * s.topk + j];
    }
    for (int64_t c = 0; c < s.hidden; ++c) {
      const double want = weight * formats::bf16_to_float(in.x[t * s.hidden + c]);
      const double got = formats::bf16_to_float(out[t * s.hidden + c]);
      sums.err2 += (got - want) * (got - want);
      sums.ref2 += want * want;
    }
  }
  return sums;
}

}  // namespace moe_ep::cli
