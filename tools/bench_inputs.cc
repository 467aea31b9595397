// Input generation for `moe-ep bench`. A counter-based hash (splitmix64 finaliser over seed,
// rank, stream and index) gives every value independently, so generation order does not matter
// and each rank regenerates exactly its own data.
#include "bench_inputs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "formats/scalar.h"

namespace moe_ep::cli {
namespace {

// Independent streams of random values per rank.
enum Stream : uint64_t { kStreamX = 1, kStreamRoute = 2, kStreamWeight = 3, kStreamMask = 4 };

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

}  // namespace

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

  std::vector<int32_t> perm(s.experts);  // [E] scratch for the partial Fisher-Yates shuffle
  for (int64_t t = 0; t < t_count; ++t) {
    // Routing: the first K entries of a partial shuffle are K distinct uniform experts, in a
    // random slot order (so nothing may assume sorted slots).
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t j = 0; j < k; ++j) {
      const uint64_t r = hash(s.seed, rank, kStreamRoute, t * k + j);
      const int64_t pick = j + static_cast<int64_t>(r % static_cast<uint64_t>(s.experts - j));
      std::swap(perm[j], perm[pick]);
      const bool masked = uniform(hash(s.seed, rank, kStreamMask, t * k + j)) < s.masked_fraction;
      in.topk_idx[t * k + j] = masked ? -1 : perm[j];
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
