// Replayable test inputs (as nccl-tests `verifiable/` does). The seed is printed once per
// process and MOE_EP_TEST_SEED overrides it; every value derives from (seed, rank, index) through
// a counter-based hash, so any rank's data can be regenerated anywhere, in any order. Payload
// pattern: column 0 of every x row is (source rank + 1) and column 1 is (source token % 256) + 1,
// both exact in bf16, so a misrouted row is visible at a glance in a dump; the other columns are
// random with a magnitude that changes per 32-column block, so the quantized formats see blocks
// of very different scales. Expert ids are distinct per token; slots are masked (-1) with a set
// probability; a destination rank can be excluded entirely (a rank that receives nothing).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "formats/codecs.h"
#include "moe_ep/op.h"

namespace moe_ep::testing {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A pseudo-random 64-bit value for (seed, stream, a, b): stream separates uses (x, ids, ...).
inline uint64_t hash4(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
  return splitmix64(splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ a) ^ b);
}

// Uniform in [0, 1), 24 random bits.
inline float unit_float(uint64_t h) { return static_cast<float>(h >> 40) * (1.0f / 16777216.0f); }

// The seed of this process: MOE_EP_TEST_SEED if set, else a fixed default; printed once.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* text = std::getenv("MOE_EP_TEST_SEED");
    const uint64_t s = text ? std::strtoull(text, nullptr, 0) : 20250611ull;
    std::printf("[moe-ep tests] seed=%llu (set MOE_EP_TEST_SEED=%llu to replay)\n",
                static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    std::fflush(stdout);
    return s;
  }();
  return seed;
}

enum Stream : uint64_t {
  kStreamX = 1,
  kStreamIds = 2,
  kStreamMask = 3,
  kStreamWeights = 4,
  kStreamQuant = 5
};

struct InputSpec {
  OpConfig config;
  int world_size = 1;
  double mask_prob = 0.15;    // probability that a slot is -1
  int exclude_dest = -1;      // when >= 0, no slot names an expert of this rank
  bool prequantized = false;  // also fill x_payload / x_scales (fp8 and fp4 dispatch only)
};

// One rank's inputs for one call, owning its memory.
struct RankInput {
  int rank = 0;
  int64_t num_tokens = 0;
  int hidden = 0;
  int topk = 0;
  std::vector<uint16_t> x;          // [T, H] bf16
  std::vector<int32_t> topk_idx;    // [T, K]
  std::vector<float> topk_weights;  // [T, K]
  // Pre-quantized x, when requested: the wire format of the dispatch dtype.
  DispatchDtype quant_dtype = DispatchDtype::bf16;
  std::vector<uint8_t> x_payload;  // [T, payload bytes]
  std::vector<uint8_t> x_scales;   // [T, scale bytes]

  bool prequantized() const { return quant_dtype != DispatchDtype::bf16; }

  // The dispatch arguments viewing this input (pointers are null when T == 0).
  DispatchArgs args() const {
    DispatchArgs a;
    const auto ptr = [&](const auto& v) { return v.empty() ? nullptr : v.data(); };
    if (prequantized()) {
      if (quant_dtype == DispatchDtype::fp8) {
        a.x = TensorView::matrix(ptr(x_payload), ScalarType::kFloat8E4M3, num_tokens, hidden);
        a.x_scales = TensorView::matrix(ptr(x_scales), ScalarType::kFloat32, num_tokens,
                                        hidden / kFp8BlockSize);
      } else {
        a.x = TensorView::matrix(ptr(x_payload), ScalarType::kFloat4E2M1, num_tokens, hidden / 2);
        a.x_scales = TensorView::matrix(ptr(x_scales), ScalarType::kFloat8E8M0, num_tokens,
                                        hidden / kMxfp4BlockSize);
      }
    } else {
      a.x = TensorView::matrix(ptr(x), ScalarType::kBFloat16, num_tokens, hidden);
    }
    a.topk_idx = TensorView::matrix(ptr(topk_idx), ScalarType::kInt32, num_tokens, topk);
    a.topk_weights = TensorView::matrix(ptr(topk_weights), ScalarType::kFloat32, num_tokens, topk);
    return a;
  }

  // Masks every slot of token t (the token then goes nowhere and combines to zeros).
  void mask_token(int64_t t) {
    for (int k = 0; k < topk; ++k) topk_idx[t * topk + k] = -1;
  }
};

inline float x_value(uint64_t seed, int rank, int64_t t, int64_t h) {
  if (h == 0) return static_cast<float>(rank + 1);
  if (h == 1) return static_cast<float>(t % 256 + 1);
  const int64_t block = h / 32;
  const int exponent = static_cast<int>((block * 7 + t) % 9) - 4;  // 2^-4 .. 2^4
  const float u = unit_float(hash4(seed, kStreamX, (static_cast<uint64_t>(rank) << 32) | t, h));
  return std::ldexp(4.0f * u - 2.0f, exponent);
}

inline RankInput make_input(const InputSpec& spec, uint64_t seed, int rank, int64_t num_tokens) {
  const OpConfig& c = spec.config;
  RankInput in;
  in.rank = rank;
  in.num_tokens = num_tokens;
  in.hidden = c.hidden;
  in.topk = c.topk;
  in.x.resize(num_tokens * c.hidden);
  in.topk_idx.resize(num_tokens * c.topk);
  in.topk_weights.resize(num_tokens * c.topk);
  const uint64_t rank_key = static_cast<uint64_t>(rank) << 32;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t h = 0; h < c.hidden; ++h) {
      in.x[t * c.hidden + h] = formats::float_to_bf16(x_value(seed, rank, t, h));
    }
    // Distinct experts: a partial Fisher-Yates shuffle of the allowed experts.
    const int per_rank = c.num_experts / spec.world_size;
    std::vector<int32_t> pool;
    for (int e = 0; e < c.num_experts; ++e) {
      if (spec.exclude_dest < 0 || e / per_rank != spec.exclude_dest) pool.push_back(e);
    }
    for (int k = 0; k < c.topk; ++k) {
      const uint64_t h = hash4(seed, kStreamIds, rank_key | t, k);
      const size_t j = k + h % (pool.size() - k);
      std::swap(pool[k], pool[j]);
      const bool masked = unit_float(hash4(seed, kStreamMask, rank_key | t, k)) < spec.mask_prob;
      in.topk_idx[t * c.topk + k] = masked ? -1 : pool[k];
      in.topk_weights[t * c.topk + k] =
          0.05f + 0.95f * unit_float(hash4(seed, kStreamWeights, rank_key | t, k));
    }
  }
  if (spec.prequantized) {
    // A valid encoding of other data (a different stream), so the op can only get it right by
    // copying these bytes rather than re-quantizing x.
    in.quant_dtype = c.dispatch_dtype;
    const int64_t payload = payload_bytes(c.dispatch_dtype, c.hidden);
    const int64_t scales = scale_bytes(c.dispatch_dtype, c.hidden);
    in.x_payload.resize(num_tokens * payload);
    in.x_scales.resize(num_tokens * scales);
    std::vector<uint16_t> other(c.hidden);  // [hidden] bf16
    formats::visit_format(c.dispatch_dtype, [&](auto format) {
      using F = decltype(format);
      for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t h = 0; h < c.hidden; ++h) {
          other[h] = formats::float_to_bf16(x_value(seed ^ kStreamQuant, rank, t, h) * 3.0f);
        }
        formats::encode_row<F>(
            other.data(), c.hidden, in.x_payload.data() + t * payload,
            reinterpret_cast<typename F::Scale*>(in.x_scales.data() + t * scales));
      }
    });
  }
  return in;
}

// Inputs of every rank: rank r gets token_counts[r] tokens.
inline std::vector<RankInput> make_inputs(const InputSpec& spec, uint64_t seed,
                                          const std::vector<int64_t>& token_counts) {
  std::vector<RankInput> inputs;
  for (int r = 0; r < spec.world_size; ++r) {
    inputs.push_back(make_input(spec, seed, r, token_counts[r]));
  }
  return inputs;
}

}  // namespace moe_ep::testing
