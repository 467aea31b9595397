// Random-input tests of the wire codecs (src/formats/): the scalar conversions against the CUDA
// headers' host functions (cuda_fp8.h, cuda_fp4.h, cuda_fp16.h, cuda_bf16.h) and against
// references written here from the OCP definitions (nearest representable value, ties to the
// even code), over several distributions including exact ties built from bit patterns; the row
// codecs against a plain re-implementation of the DESIGN 4 formulas; and the round-trip error of
// each format on gaussian rows, with each bound's basis in a comment. The seed is printed and
// can be set with MOE_EP_TEST_SEED so that any failure replays.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "formats/codecs.h"

namespace moe_ep::formats {
namespace {

constexpr uint64_t kDefaultSeed = 20261130;
constexpr int kSamples = 100000;  // per distribution

// The seed of this run: MOE_EP_TEST_SEED (decimal or 0x hex) or kDefaultSeed; printed per test.
uint64_t test_seed() {
  const char* env = std::getenv("MOE_EP_TEST_SEED");
  const uint64_t seed = (env && *env) ? std::strtoull(env, nullptr, 0) : kDefaultSeed;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("[   SEED   ] %s.%s: MOE_EP_TEST_SEED=%llu\n", info->test_suite_name(), info->name(),
              static_cast<unsigned long long>(seed));
  return seed;
}

// Deterministic generator; each test uses its own stream so tests replay independently.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) : gen_(seed ^ (stream * 0x9e3779b97f4a7c15ull)) {}
  uint32_t bits() { return static_cast<uint32_t>(gen_() >> 32); }
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1p-53; }  // [0, 1)
  int range(int lo, int hi) { return lo + static_cast<int>(uniform() * (hi - lo + 1)); }
  float sign() { return (gen_() & 1) ? -1.0f : 1.0f; }
  // Box-Muller, written out so the stream does not depend on the standard library.
  float normal(float sd) {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return static_cast<float>(sd * std::sqrt(-2.0 * std::log(u1)) *
                              std::cos(6.283185307179586 * u2));
  }

 private:
  std::mt19937_64 gen_;
};

// --- references from the OCP definitions ---------------------------------------------------------

// Non-negative finite e4m3 values by code 0..0x7e: e = code >> 3 (bias 7), m = code & 7.
std::vector<double> e4m3_grid() {
  std::vector<double> v;
  for (int c = 0; c <= 0x7e; ++c) {
    const int e = c >> 3, m = c & 7;
    v.push_back(e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7));
  }
  return v;
}
const std::vector<double> kE4m3Grid = e4m3_grid();
const std::vector<double> kE2m1Grid = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

// Code of the grid point nearest |x|, ties to the even code, saturating at the top; sign bit
// `sign_bit` added for negative x (including -0). `tie` reports an exact midpoint.
uint8_t ref_round(float x, const std::vector<double>& grid, uint8_t sign_bit, bool* tie = nullptr) {
  const double a = std::fabs(static_cast<double>(x));
  const uint8_t sign = std::signbit(x) ? sign_bit : 0;
  size_t hi = std::lower_bound(grid.begin(), grid.end(), a) - grid.begin();
  size_t code;
  if (hi == grid.size()) {
    code = grid.size() - 1;  // beyond the max: saturate
  } else if (grid[hi] == a || hi == 0) {
    code = hi;
  } else {
    const double below = a - grid[hi - 1], above = grid[hi] - a;
    if (tie) *tie = below == above;
    code = below < above ? hi - 1 : (above < below ? hi : ((hi - 1) % 2 == 0 ? hi - 1 : hi));
  }
  return static_cast<uint8_t>(sign | code);
}
uint8_t ref_e4m3(float x, bool* tie = nullptr) {
  return std::isnan(x) ? 0x7f : ref_round(x, kE4m3Grid, 0x80, tie);
}
uint8_t ref_e2m1(float x, bool* tie = nullptr) { return ref_round(x, kE2m1Grid, 0x8, tie); }
// Values of non-NaN codes, from the grids (not from the decoders under test).
float ref_value(uint8_t code, const std::vector<double>& grid, uint8_t sign_bit) {
  const float v = static_cast<float>(grid[code & (sign_bit - 1)]);
  return (code & sign_bit) ? -v : v;
}

// --- sample distributions ----------------------------------------------------------------------

enum class Dist { normal1, normal002, huge, tiny, e4m3_ties, any_bits };
const char* name(Dist d) {
  const char* names[] = {"normal sd 1", "normal sd 0.02", "huge", "tiny", "e4m3 ties", "any bits"};
  return names[static_cast<int>(d)];
}
const Dist kDists[] = {Dist::normal1, Dist::normal002, Dist::huge,
                       Dist::tiny,    Dist::e4m3_ties, Dist::any_bits};

float sample(Rng& rng, Dist d) {
  switch (d) {
    case Dist::normal1: return rng.normal(1.0f);
    case Dist::normal002: return rng.normal(0.02f);
    case Dist::huge:  // 2^-8 .. 2^128 with a random mantissa: saturation, overflow to FLT_MAX
      return rng.sign() * bits_float(static_cast<uint32_t>(rng.range(119, 254)) << 23 |
                                     (rng.bits() & 0x7fffffu));
    case Dist::tiny: {  // 3/4 around the e4m3 subnormals (2^-27 .. 2^-4), 1/4 float subnormals
      const int exp = (rng.bits() & 3) ? rng.range(100, 123) : rng.range(0, 2);
      return rng.sign() * bits_float(static_cast<uint32_t>(exp) << 23 | (rng.bits() & 0x7fffffu));
    }
    case Dist::e4m3_ties: {  // exact midpoint of two neighbouring codes (4 significant bits)
      const int c = rng.range(0, 0x7d);
      return rng.sign() * static_cast<float>((kE4m3Grid[c] + kE4m3Grid[c + 1]) / 2);
    }
    case Dist::any_bits: {
      uint32_t u = rng.bits();
      while (is_nan(bits_float(u))) u = rng.bits();
      return bits_float(u);
    }
  }
  return 0.0f;
}

// Collects mismatches; prints the first few with enough to replay them.
struct Mismatches {
  int count = 0;
  std::ostringstream first;
  template <typename A, typename B>
  void check(bool ok, const char* what, float x, A got, B want) {
    if (ok) return;
    if (++count <= 5) {
      first << "  " << what << ": x = " << std::hexfloat << x << " (bits 0x" << std::hex
            << float_bits(x) << ") got 0x" << +got << " want 0x" << +want << "\n";
    }
  }
};

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || float_bits(a) == float_bits(b);
}

// --- scalar conversions vs CUDA headers and OCP references ---------------------------------------

TEST(FormatsRandom, E4m3SatfiniteMatchesCudaAndOcp) {
  Rng rng(test_seed(), 1);
  for (Dist d : kDists) {
    Mismatches bad;
    int ties = 0;
    for (int i = 0; i < kSamples; ++i) {
      const float x = sample(rng, d);
      bool tie = false;
      const uint8_t got = e4m3_satfinite(x);
      const uint8_t cuda = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
      const uint8_t want = ref_e4m3(x, &tie);
      ties += tie;
      bad.check(got == cuda, "vs __nv_cvt_float_to_fp8", x, got, cuda);
      bad.check(got == want, "vs OCP nearest-even", x, got, want);
    }
    EXPECT_EQ(bad.count, 0) << name(d) << ":\n" << bad.first.str();
    if (d == Dist::e4m3_ties) {
      EXPECT_EQ(ties, kSamples) << "the tie distribution must produce exact midpoints";
    }
  }
}

TEST(FormatsRandom, E4m3DecodeAll256MatchesCuda) {
  for (int q = 0; q < 256; ++q) {
    const __half_raw raw = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(q), __NV_E4M3);
    const float cuda = __half2float(__half(raw));
    const float got = e4m3_to_float(static_cast<uint8_t>(q));
    EXPECT_TRUE(same_float(got, cuda)) << "code " << q << ": " << got << " vs " << cuda;
    if ((q & 0x7f) != 0x7f) {  // and the OCP value; rounding it back gives the same code
      const float ocp = static_cast<float>(kE4m3Grid[q & 0x7f]) * ((q & 0x80) ? -1.0f : 1.0f);
      EXPECT_TRUE(same_float(got, ocp)) << "code " << q;
      EXPECT_EQ(e4m3_satfinite(got), q) << "code " << q;
    }
  }
}

TEST(FormatsRandom, E2m1MatchesCudaAndOcp) {
  for (int q = 0; q < 16; ++q) {
    const __half_raw raw = __nv_cvt_fp4_to_halfraw(static_cast<__nv_fp4_storage_t>(q), __NV_E2M1);
    const float cuda = __half2float(__half(raw));
    EXPECT_TRUE(same_float(e2m1_to_float(static_cast<uint8_t>(q)), cuda)) << "code " << q;
    EXPECT_EQ(e2m1_rne(cuda), q) << "code " << q;
  }
  Rng rng(test_seed(), 2);
  Mismatches bad;
  int ties = 0;
  for (int i = 0; i < kSamples; ++i) {
    // Half of the samples uniform in (-8, 8) (past the 6 saturation), half exact midpoints.
    float x;
    if (i & 1) {
      x = static_cast<float>((rng.uniform() * 2 - 1) * 8);
    } else {
      const int c = rng.range(0, 6);
      x = rng.sign() * static_cast<float>((kE2m1Grid[c] + kE2m1Grid[c + 1]) / 2);
    }
    bool tie = false;
    const uint8_t got = e2m1_rne(x);
    const uint8_t cuda = __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
    const uint8_t want = ref_e2m1(x, &tie);
    ties += tie;
    bad.check(got == cuda, "vs __nv_cvt_float_to_fp4", x, got, cuda);
    bad.check(got == want, "vs OCP nearest-even", x, got, want);
  }
  EXPECT_EQ(bad.count, 0) << bad.first.str();
  EXPECT_GE(ties, kSamples / 2);
}

TEST(FormatsRandom, Bf16MatchesCudaRn) {
  Rng rng(test_seed(), 3);
  Mismatches bad;
  for (int i = 0; i < 10 * kSamples; ++i) {
    float x = sample(rng, kDists[i % 6]);
    if (i % 7 == 0) x = bits_float((float_bits(x) & 0xffff0000u) | 0x8000u);  // exact tie
    if (is_nan(x)) continue;  // (a tie pattern on Inf is a NaN; NaN is tested by hand)
    const uint16_t got = float_to_bf16(x);
    const uint16_t cuda = __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
    bad.check(got == cuda, "vs __float2bfloat16_rn", x, got, cuda);
  }
  EXPECT_EQ(bad.count, 0) << bad.first.str();
}

TEST(FormatsRandom, E8m0ScalesMatchIlogb) {
  for (int b = 0; b < 255; ++b) {
    EXPECT_EQ(e8m0_to_float(static_cast<uint8_t>(b)), std::ldexp(1.0f, b - 127)) << b;
  }
  Rng rng(test_seed(), 4);
  for (int i = 0; i < kSamples; ++i) {
    uint32_t u = 0;
    while (u == 0 || u >= 0x7f800000u) u = rng.bits() & 0x7fffffffu;  // finite, > 0
    const float amax = bits_float(u);
    ASSERT_EQ(floor_log2(amax), std::ilogb(amax)) << std::hexfloat << amax;
    // OCP MX: e = floor(log2(amax)) - emax(e2m1) = ... - 2, clamped to the e8m0 range.
    const int e = std::clamp(std::ilogb(amax) - 2, -127, 127);
    const Mxfp4Wire::Params p = Mxfp4Wire::block_params(amax, false);
    ASSERT_EQ(p.stored, e + 127) << std::hexfloat << amax;
    ASSERT_EQ(p.inv, std::ldexp(1.0f, -e)) << std::hexfloat << amax;
  }
}

// --- row codecs vs the DESIGN 4 formulas ---------------------------------------------------------

// A random bf16 row mixing distributions per block, with a few NaN/Inf sprinkled in.
std::vector<uint16_t> random_row(Rng& rng, int n, int block, bool nonfinite) {
  std::vector<uint16_t> x(n);  // [n] bf16
  for (int b0 = 0; b0 < n; b0 += block) {
    const Dist d = kDists[rng.range(0, 5)];
    const int kind = rng.range(0, 15);  // 1 in 16 blocks all zero, 1 in 16 bf16 subnormals
    for (int i = b0; i < b0 + block; ++i) {
      const uint16_t subnormal = static_cast<uint16_t>(rng.bits() & 0x807f);  // with some zeros
      x[i] = kind == 0 ? 0 : (kind == 1 ? subnormal : float_to_bf16(sample(rng, d)));
    }
  }
  for (int k = 0; nonfinite && k < 3; ++k) {
    const uint16_t specials[] = {0x7f80, 0xff80, 0x7fc0, 0xffc1};
    x[rng.range(0, n - 1)] = specials[rng.range(0, 3)];
  }
  return x;
}

TEST(FormatsRandom, Fp8BlockRowMatchesFormula) {
  Rng rng(test_seed(), 5);
  constexpr int kN = 1024;
  for (int row_idx = 0; row_idx < 200; ++row_idx) {
    const std::vector<uint16_t> x = random_row(rng, kN, kFp8BlockSize, row_idx % 2);
    std::vector<uint8_t> payload(kN);               // [kN] e4m3
    std::vector<float> scales(kN / kFp8BlockSize);  // [kN / 128]
    encode_row<Fp8BlockWire>(x.data(), kN, payload.data(), scales.data());
    for (int b = 0; b < kN / kFp8BlockSize; ++b) {
      float amax = 0.0f;  // DESIGN: max |x_i| skipping NaN
      for (int i = b * 128; i < (b + 1) * 128; ++i) {
        const float v = std::fabs(bf16_to_float(x[i]));
        if (!std::isnan(v)) amax = std::max(amax, v);
      }
      const float scale = amax == 0.0f ? 1.0f : amax / 448.0f;
      float inv = amax == 0.0f ? 1.0f : 448.0f / amax;
      if (std::isinf(inv)) inv = FLT_MAX;  // the documented deviation for amax < 448 / FLT_MAX
      ASSERT_TRUE(same_float(scales[b], scale)) << "row " << row_idx << " block " << b;
      for (int i = b * 128; i < (b + 1) * 128; ++i) {
        const uint8_t want = ref_e4m3(bf16_to_float(x[i]) * inv);
        ASSERT_EQ(payload[i], want) << "row " << row_idx << " elem " << i << std::hexfloat << " x "
                                    << bf16_to_float(x[i]) << " inv " << inv;
        const float out = decode_elem<Fp8BlockWire>(payload.data(), scales.data(), i);
        const float want_out = want == 0x7f ? NAN : ref_value(want, kE4m3Grid, 0x80) * scale;
        ASSERT_TRUE(same_float(out, want_out)) << "elem " << i;
        if (!is_finite(bf16_to_float(x[i]))) {
          ASSERT_TRUE(std::isnan(out)) << "elem " << i;
        }
      }
    }
  }
}

TEST(FormatsRandom, Mxfp4RowMatchesFormula) {
  Rng rng(test_seed(), 6);
  constexpr int kN = 1024;
  for (int row_idx = 0; row_idx < 200; ++row_idx) {
    const std::vector<uint16_t> x = random_row(rng, kN, kMxfp4BlockSize, row_idx % 2);
    std::vector<uint8_t> payload(kN / 2);               // [kN / 2] two e2m1 per byte
    std::vector<uint8_t> scales(kN / kMxfp4BlockSize);  // [kN / 32] e8m0
    encode_row<Mxfp4Wire>(x.data(), kN, payload.data(), scales.data());
    for (int b = 0; b < kN / kMxfp4BlockSize; ++b) {
      float amax = 0.0f;
      bool nonfinite = false;
      for (int i = b * 32; i < (b + 1) * 32; ++i) {
        const float v = bf16_to_float(x[i]);
        nonfinite = nonfinite || !std::isfinite(v);
        if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
      }
      const int e = amax == 0.0f ? 0 : std::clamp(std::ilogb(amax) - 2, -127, 127);
      ASSERT_EQ(scales[b], nonfinite ? 0xff : e + 127) << "row " << row_idx << " block " << b;
      for (int i = b * 32; i < (b + 1) * 32; ++i) {
        const float out = decode_elem<Mxfp4Wire>(payload.data(), scales.data(), i);
        if (nonfinite) {
          ASSERT_TRUE(std::isnan(out)) << "elem " << i;
          continue;
        }
        const uint8_t want = ref_e2m1(std::ldexp(bf16_to_float(x[i]), -e));  // exact scaling
        // Element 2i in the low nibble, 2i+1 in the high nibble.
        const uint8_t got = (payload[i / 2] >> (4 * (i % 2))) & 0xf;
        ASSERT_EQ(got, want) << "row " << row_idx << " elem " << i;
        const float want_out = ref_value(want, kE2m1Grid, 0x8) * std::ldexp(1.0f, e);
        ASSERT_TRUE(same_float(out, want_out)) << "elem " << i;
      }
    }
  }
}

// --- round-trip error on gaussian rows -----------------------------------------------------------

struct RoundTrip {
  double rel_l2 = 0;   // sqrt(sum (x' - x)^2 / sum x^2) over all rows
  int over_bound = 0;  // elements past the per-element bound
};

// Encodes and decodes `rows` rows of n gaussian values of sd `sd` (every 64th channel times
// `outlier`) and checks each element against bound(x, x', scale of its block).
template <typename F, typename Bound>
RoundTrip round_trip(uint64_t seed, uint64_t stream, float sd, float outlier, Bound bound) {
  Rng rng(seed, stream);
  constexpr int kRows = 32, kN = 4096;
  std::vector<uint16_t> x(kN);  // [kN] bf16
  std::vector<uint8_t> payload(payload_bytes_of<F>(kN));
  std::vector<typename F::Scale> scales(F::kBlock ? kN / F::kBlock : 1);
  std::vector<float> out(kN);  // [kN]
  double err2 = 0, ref2 = 0;
  RoundTrip r;
  for (int row = 0; row < kRows; ++row) {
    for (int i = 0; i < kN; ++i) x[i] = float_to_bf16(rng.normal(sd) * (i % 64 ? 1 : outlier));
    encode_row<F>(x.data(), kN, payload.data(), scales.data());
    decode_row<F>(payload.data(), scales.data(), kN, out.data());
    for (int i = 0; i < kN; ++i) {
      const double v = bf16_to_float(x[i]), d = out[i] - v;  // the codec's input is the bf16
      err2 += d * d;
      ref2 += v * v;
      typename F::Scale s{};
      if constexpr (F::kBlock != 0) s = scales[i / F::kBlock];
      if (!bound(std::fabs(static_cast<float>(v)), std::fabs(static_cast<float>(d)), s)) {
        ++r.over_bound;
      }
    }
  }
  r.rel_l2 = std::sqrt(err2 / ref2);
  return r;
}

TEST(FormatsRandom, RoundTripErrorWithinBounds) {
  const uint64_t seed = test_seed();
  // bf16 on the wire is the input itself: no error at all.
  const RoundTrip bf16 =
      round_trip<Bf16Wire>(seed, 7, 1.0f, 1.0f, [](float, float d, auto) { return d == 0.0f; });
  EXPECT_EQ(bf16.over_bound, 0);
  // fp8 blockwise: e4m3 keeps 3 mantissa bits, so rounding a normal value errs by at most half an
  // ulp, 2^-4 of its binade base (<= |x|); a subnormal (scaled |x| < 2^-6) by half the 2^-9 step,
  // i.e. 2^-10 * scale. The float products x * inv and q * scale add a few 2^-24 relative: 2^-20.
  const auto fp8_block_bound = [](float ax, float d, float scale) {
    return d <= std::max(0x1p-4f * ax, 0x1p-10f * scale) + 0x1p-20f * ax;
  };
  // fp8 direct cast on sd 1 (|x| < 448): one rounding, 2^-4 relative or 2^-10 absolute.
  const auto fp8_direct_bound = [](float ax, float d, uint8_t) {
    return d <= std::max(0x1p-4f * ax, 0x1p-10f);
  };
  // mxfp4: e2m1 has 1 mantissa bit: half an ulp is 2^-2 of the binade base (<= |x|); values of
  // |x / 2^e| in (6, 8) clip to 6, also under 2^-2 |x|; subnormals (|x / 2^e| < 1) err by half the
  // 0.5 step, 2^-2 * 2^e. Scaling by 2^-e is exact.
  const auto mxfp4_bound = [](float ax, float d, uint8_t scale) {
    return d <= std::max(0x1p-2f * ax, 0x1p-2f * e8m0_to_float(scale));
  };
  const RoundTrip block = round_trip<Fp8BlockWire>(seed, 8, 1.0f, 1.0f, fp8_block_bound);
  const RoundTrip direct = round_trip<Fp8DirectWire>(seed, 9, 1.0f, 1.0f, fp8_direct_bound);
  const RoundTrip mx = round_trip<Mxfp4Wire>(seed, 10, 1.0f, 1.0f, mxfp4_bound);
  EXPECT_EQ(block.over_bound, 0);
  EXPECT_EQ(direct.over_bound, 0);
  EXPECT_EQ(mx.over_bound, 0);
  std::printf("  sd 1: fp8 blockwise %.4f  fp8 direct cast %.4f  mxfp4 %.4f\n", block.rel_l2,
              direct.rel_l2, mx.rel_l2);
  // Relative L2 error: /work/shared/ANCHORS.md measured 2.6% (fp8 blockwise), 2.7% (direct) and
  // 11.5% (mxfp4) on gaussian sd 1. A uniform rounding error of half an ulp over a binade gives
  // about ulp/sqrt(12) relative to the value; bounds leave ~15% room above the measurement, and
  // the lower bounds catch a codec that stopped quantizing.
  EXPECT_LT(block.rel_l2, 0.030);
  EXPECT_GT(block.rel_l2, 0.020);
  EXPECT_LT(direct.rel_l2, 0.031);
  EXPECT_GT(direct.rel_l2, 0.020);
  EXPECT_LT(mx.rel_l2, 0.13);
  EXPECT_GT(mx.rel_l2, 0.09);
}

TEST(FormatsRandom, Fp8BlockwiseBeatsDirectCast) {
  const uint64_t seed = test_seed();
  const auto any = [](float, float, auto) { return true; };
  struct Case {
    const char* what;
    float sd, outlier;
  };
  // ANCHORS.md: sd 0.02 -> 2.6% vs 3.3% (direct loses bits to e4m3 subnormals); outlier
  // channels x30 -> 1.1% vs 2.6%; sd 200 -> 2.6% vs 7.8% (direct saturates at 448).
  for (const Case& c : {Case{"sd 0.02", 0.02f, 1.0f}, Case{"outliers x30", 1.0f, 30.0f},
                        Case{"sd 200", 200.0f, 1.0f}}) {
    const RoundTrip block = round_trip<Fp8BlockWire>(seed, 11, c.sd, c.outlier, any);
    const RoundTrip direct = round_trip<Fp8DirectWire>(seed, 11, c.sd, c.outlier, any);
    std::printf("  %-13s fp8 blockwise %.4f  fp8 direct cast %.4f\n", c.what, block.rel_l2,
                direct.rel_l2);
    EXPECT_LT(block.rel_l2, 0.9 * direct.rel_l2) << c.what;
  }
}

}  // namespace
}  // namespace moe_ep::formats

namespace moe_ep::formats {
namespace {

// The device's e2m1 rounding by midpoints against the CUDA header's conversion on a stride of
// the float bit patterns (every 4099th, ~1M values, all exponents and both signs); the GPU test
// test_gpu_formats.cu covers all 2^32 on the device.
TEST(FormatsRandom, E2m1MidpointsEqualHeaderOnStridedFloats) {
  int64_t checked = 0;
  for (uint64_t i = 0; i <= 0xffffffffull; i += 4099) {
    const float x = bits_float(static_cast<uint32_t>(i));
    if (is_nan(x)) continue;  // the device sends NaN to the header's own path
    ASSERT_EQ(e2m1_rne_by_midpoints(x), e2m1_rne_by_header(x))
        << "float bits 0x" << std::hex << static_cast<uint32_t>(i);
    ++checked;
  }
  EXPECT_GT(checked, 1000000);
}

}  // namespace
}  // namespace moe_ep::formats
