// The candidate formats of the study (candidates.h).
#include "format_study/candidates.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace moe_ep::formats {
namespace {

// --- candidate formats ---------------------------------------------------------------------------

// A shipped format, through its trait: the wire's bytes.
template <typename F>
Candidate shipped(const char* name) {
  Candidate c;
  c.name = name;
  c.bytes_per_elem =
      F::kBitsPerElem / 8.0 + (F::kBlock ? sizeof(typename F::Scale) * 1.0 / F::kBlock : 0.0);
  c.round_trip = [](const uint16_t* x, int n, float* out) {
    std::vector<uint8_t> payload(payload_bytes_of<F>(n));
    std::vector<typename F::Scale> scales(F::kBlock ? n / F::kBlock : 1);
    encode_row<F>(x, n, payload.data(), scales.data());
    decode_row<F>(payload.data(), scales.data(), n, out);
  };
  return c;
}

float block_amax(const uint16_t* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(fl(x[i])));
  return amax;
}

// The value of the smallest bf16 at or above a float x >= 0.
float bf16_at_or_above(float x) { return bf16_to_float(bf16_round_up(x)); }

// How a candidate stores its block scale:
//   fp32  amax / max exactly (4 bytes)
//   bf16  amax / max rounded up to bf16 (2 bytes), so amax never exceeds the code range
//   e8m0  the smallest power of two 2^e with amax <= max * 2^e (1 byte; scaling is exact)
//   pow2  amax / 2^k rounded up to bf16, 2^k the largest power of two <= max (2 bytes): amax
//         itself codes exactly as 2^k, at the cost of the codes above 2^k
enum class ScaleKind { fp32, bf16, e8m0, pow2 };
const char* scale_name(ScaleKind k) {
  const char* names[] = {"fp32", "bf16", "e8m0", "bf16 amax->2^k"};
  return names[static_cast<int>(k)];
}
int scale_bytes(ScaleKind k) { return k == ScaleKind::fp32 ? 4 : (k == ScaleKind::e8m0 ? 1 : 2); }

double block_scale(float amax, double max, ScaleKind kind) {
  if (amax == 0.0f) return 0.0;
  switch (kind) {
    case ScaleKind::fp32: return amax / static_cast<float>(max);
    case ScaleKind::bf16: return bf16_at_or_above(static_cast<float>(amax / max));
    case ScaleKind::e8m0: {
      int e = std::ilogb(amax) - std::ilogb(max);
      if (std::ldexp(amax, -e) > max) ++e;
      return std::ldexp(1.0, e);
    }
    case ScaleKind::pow2: return bf16_at_or_above(std::ldexp(amax, -std::ilogb(max)));
  }
  return 0.0;
}

// Symmetric int8 in [-127, 127] with one scale per `block`: codes rne(x / scale), decode
// q * scale.
Candidate int8_block(int block, ScaleKind kind) {
  Candidate c;
  c.name = "int8 b" + std::to_string(block) + " " + scale_name(kind);
  c.bytes_per_elem = 1.0 + static_cast<double>(scale_bytes(kind)) / block;
  c.round_trip = [block, kind](const uint16_t* x, int n, float* out) {
    for (int b0 = 0; b0 < n; b0 += block) {
      const double scale = block_scale(block_amax(x + b0, block), 127.0, kind);
      for (int i = b0; i < b0 + block; ++i) {
        const double q =
            scale == 0.0 ? 0.0 : std::clamp(std::nearbyint(fl(x[i]) / scale), -127.0, 127.0);
        out[i] = static_cast<float>(q * scale);
      }
    }
  };
  return c;
}

// OCP MXFP8 (e4m3, block 32, e8m0): e = floor(log2(amax)) - 8, codes e4m3_satfinite(x * 2^-e):
// amax * 2^-e lies in [256, 512), and values above 448 saturate.
Candidate mxfp8() {
  Candidate c;
  c.name = "mxfp8 (e4m3 b32 e8m0, OCP rule)";
  c.bytes_per_elem = 1.0 + 1.0 / 32;
  c.round_trip = [](const uint16_t* x, int n, float* out) {
    for (int b0 = 0; b0 < n; b0 += 32) {
      const float amax = block_amax(x + b0, 32);
      const int e = amax > 0.0f ? std::clamp(floor_log2(amax) - 8, -127, 127) : 0;
      for (int i = b0; i < b0 + 32; ++i) {
        out[i] = e4m3_to_float(e4m3_satfinite(std::ldexp(fl(x[i]), -e))) * std::ldexp(1.0f, e);
      }
    }
  };
  return c;
}

// 8-bit logarithmic: sign and a 7-bit level k; k = 0 is zero, k >= 1 is base * 2^((k - 127) /
// steps), base = the block's amax (a bf16 value, so a bf16 base holds it exactly). Rounds to the
// nearer level in linear terms.
Candidate log8(int block, int steps) {
  Candidate c;
  c.name = "log8 b" + std::to_string(block) + " bf16 base, " + std::to_string(steps) + "/octave";
  c.bytes_per_elem = 1.0 + 2.0 / block;
  c.round_trip = [block, steps](const uint16_t* x, int n, float* out) {
    for (int b0 = 0; b0 < n; b0 += block) {
      const double base = block_amax(x + b0, block);
      auto level = [&](int k) { return k == 0 ? 0.0 : base * std::exp2((k - 127.0) / steps); };
      for (int i = b0; i < b0 + block; ++i) {
        const double v = fl(x[i]), a = std::fabs(v);
        double q = 0;
        if (a > 0 && base > 0) {
          const int k0 =
              std::clamp(static_cast<int>(std::floor(127 + steps * std::log2(a / base))), 0, 127);
          const int k1 = std::min(k0 + 1, 127);
          q = (a - level(k0) <= level(k1) - a) ? level(k0) : level(k1);
        }
        out[i] = static_cast<float>(v < 0 ? -q : q);
      }
    }
  };
  return c;
}

// A block-scaled minifloat with `ebits` exponent and `mbits` mantissa bits, no Inf or NaN codes,
// subnormals at the bottom: grid steps 2^-mbits below 2 (so below 1 too), 2^(k - mbits) in
// [2^k, 2^(k+1)), max (2 - 2^-mbits) * 2^(2^ebits - 2). e3m4 here is the shipped e3m4 (bias 1).
double minifloat_max(int ebits, int mbits) {
  return (2.0 - std::ldexp(1.0, -mbits)) * std::ldexp(1.0, (1 << ebits) - 2);
}
double minifloat_round(double a, int ebits, int mbits) {  // a >= 0, saturating at the max
  const double max = minifloat_max(ebits, mbits);
  if (a >= max) return max;
  const int k = a < 1.0 ? 0 : std::ilogb(a);
  const double ulp = std::ldexp(1.0, k - mbits);
  return std::nearbyint(a / ulp) * ulp;  // ties to even: an even multiple of ulp is an even code
}

Candidate minifloat(int ebits, int mbits, int block, ScaleKind kind) {
  Candidate c;
  c.name = "e" + std::to_string(ebits) + "m" + std::to_string(mbits) + " b" +
           std::to_string(block) + " " + scale_name(kind);
  c.bytes_per_elem = 1.0 + static_cast<double>(scale_bytes(kind)) / block;
  c.round_trip = [=](const uint16_t* x, int n, float* out) {
    const double max = minifloat_max(ebits, mbits);
    for (int b0 = 0; b0 < n; b0 += block) {
      const double scale = block_scale(block_amax(x + b0, block), max, kind);
      for (int i = b0; i < b0 + block; ++i) {
        const double v = fl(x[i]);
        const double q =
            scale == 0.0 ? 0.0 : minifloat_round(std::fabs(v) / scale, ebits, mbits) * scale;
        out[i] = static_cast<float>(v < 0 ? -q : q);
      }
    }
  };
  return c;
}

// Per block of 32, the option with the smallest squared error (the first on ties); two options
// fit the free sign bit of a bf16 scale, more need bits taken from elsewhere.
Candidate best_of(const std::vector<Candidate>& options) {
  Candidate c;
  c.name = options[0].name;
  for (size_t k = 1; k < options.size(); ++k) c.name += " or " + options[k].name;
  c.name += " per block";
  c.bytes_per_elem = options[0].bytes_per_elem;
  c.round_trip = [options](const uint16_t* x, int n, float* out) {
    std::vector<float> o(32);
    for (int b0 = 0; b0 < n; b0 += 32) {
      double best = INFINITY;
      for (const Candidate& option : options) {
        option.round_trip(x + b0, 32, o.data());
        double err = 0;
        for (int i = 0; i < 32; ++i) err += (o[i] - fl(x[b0 + i])) * (o[i] - fl(x[b0 + i]));
        if (err < best) {
          best = err;
          std::copy(o.begin(), o.end(), out + b0);
        }
      }
    }
  };
  return c;
}

// The shipped int8/e3m4 codes with another limit for the code energy (the sum of the squares of
// the block's int8 codes; the shipped format takes e3m4 below 2 * 127^2): the sweep behind the 2.
Candidate int8_e3m4_energy_limit(double ratio) {
  Candidate c;
  char name[96];
  std::snprintf(name, sizeof(name), "int8/e3m4, e3m4 iff code energy < %.1f * 127^2", ratio);
  c.name = name;
  c.bytes_per_elem = 1.0625;
  const double limit = ratio * 127.0 * 127.0;
  c.round_trip = [limit](const uint16_t* x, int n, float* out) {
    using F = Int8E3m4Wire;
    for (int b0 = 0; b0 < n; b0 += F::kBlock) {
      F::Params p = F::block_params(block_amax(x + b0, F::kBlock), false);
      double energy = 0;
      for (int i = b0; i < b0 + F::kBlock; ++i) energy += F::code_energy(x[i], p);
      if (energy < limit) {
        p.stored = p.e3m4_stored;
        p.inv = p.e3m4_inv;
      }
      for (int i = b0; i < b0 + F::kBlock; ++i) out[i] = F::decode(F::encode(x[i], p), p.stored);
    }
  };
  return c;
}

}  // namespace

std::vector<Candidate> candidates() {
  std::vector<Candidate> c;
  c.push_back(shipped<Bf16Wire>("bf16 (no quantization)"));
  c.push_back(shipped<Fp8DirectWire>("fp8 direct cast (shipped)"));
  c.push_back(shipped<Fp8BlockWire>("fp8 blockwise b128 fp32 (shipped)"));
  c.push_back(mxfp8());
  for (int block : {32, 64}) {
    for (ScaleKind k : {ScaleKind::fp32, ScaleKind::bf16, ScaleKind::e8m0}) {
      c.push_back(int8_block(block, k));
    }
  }
  c.push_back(int8_block(16, ScaleKind::e8m0));
  c.push_back(log8(32, 16));
  c.push_back(log8(32, 8));
  c.push_back(minifloat(2, 5, 32, ScaleKind::bf16));
  c.push_back(minifloat(3, 4, 32, ScaleKind::bf16));
  c.push_back(minifloat(3, 4, 32, ScaleKind::pow2));
  const Candidate int8 = int8_block(32, ScaleKind::bf16);
  c.push_back(best_of({int8, minifloat(4, 3, 32, ScaleKind::pow2)}));
  c.push_back(best_of({int8, minifloat(2, 5, 32, ScaleKind::pow2)}));
  c.push_back(best_of({int8, minifloat(3, 4, 32, ScaleKind::bf16)}));
  c.push_back(best_of({int8, minifloat(3, 4, 32, ScaleKind::pow2)}));
  c.push_back(
      best_of({int8, minifloat(2, 5, 32, ScaleKind::bf16), minifloat(3, 4, 32, ScaleKind::bf16)}));
  c.push_back(
      shipped<Int8E3m4Wire>("int8/e3m4 blockwise (shipped: int8_e3m4; energy < 2 * 127^2)"));
  for (double ratio : {1.0, 1.5, 2.5, 3.0}) c.push_back(int8_e3m4_energy_limit(ratio));
  return c;
}

}  // namespace moe_ep::formats
