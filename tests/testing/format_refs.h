// Shared by the random-input tests of the wire codecs (test_formats_random.cc,
// test_formats_int8_e3m4.cc): the printed, replayable seed, a deterministic generator, references
// written from the OCP definitions and the sample distributions.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "formats/codecs.h"

namespace moe_ep::formats {

inline constexpr uint64_t kDefaultSeed = 20261130;
inline constexpr int kSamples = 100000;  // per distribution

// The seed of this run: MOE_EP_TEST_SEED (decimal or 0x hex) or kDefaultSeed; printed per test.
inline uint64_t test_seed() {
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
  // Student-t with `dof` degrees of freedom times `scale`: a gaussian over sqrt(chi-square / dof).
  float student_t(int dof, float scale) {
    double chi2 = 0;
    for (int i = 0; i < dof; ++i) {
      const double z = normal(1.0f);
      chi2 += z * z;
    }
    return static_cast<float>(scale * normal(1.0f) / std::sqrt(chi2 / dof));
  }

 private:
  std::mt19937_64 gen_;
};

// --- references from the OCP definitions ---------------------------------------------------------

// Non-negative finite e4m3 values by code 0..0x7e: e = code >> 3 (bias 7), m = code & 7.
inline std::vector<double> e4m3_grid() {
  std::vector<double> v;
  for (int c = 0; c <= 0x7e; ++c) {
    const int e = c >> 3, m = c & 7;
    v.push_back(e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7));
  }
  return v;
}
const std::vector<double> kE4m3Grid = e4m3_grid();
const std::vector<double> kE2m1Grid = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
// Non-negative e3m4 (bias 1) values by code 0..0x7f: e = code >> 4, m = code & 15;
// e = 0: m / 16, else (1 + m / 16) * 2^(e - 1).
inline std::vector<double> e3m4_grid() {
  std::vector<double> v;
  for (int c = 0; c <= 0x7f; ++c) {
    const int e = c >> 4, m = c & 15;
    v.push_back(e == 0 ? m / 16.0 : std::ldexp(1.0 + m / 16.0, e - 1));
  }
  return v;
}
const std::vector<double> kE3m4Grid = e3m4_grid();

// Code of the grid point nearest |x|, ties to the even code, saturating at the top; sign bit
// `sign_bit` added for negative x (including -0). `tie` reports an exact midpoint.
inline uint8_t ref_round(float x, const std::vector<double>& grid, uint8_t sign_bit,
                         bool* tie = nullptr) {
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
inline uint8_t ref_e4m3(float x, bool* tie = nullptr) {
  return std::isnan(x) ? 0x7f : ref_round(x, kE4m3Grid, 0x80, tie);
}
uint8_t ref_e2m1(float x, bool* tie = nullptr) { return ref_round(x, kE2m1Grid, 0x8, tie); }
uint8_t ref_e3m4(float x, bool* tie = nullptr) { return ref_round(x, kE3m4Grid, 0x80, tie); }
// Nearest integer, ties to the even one, clamped to [-127, 127]; NaN -> 0. Worked in double from
// the floor, not with the rounding functions the codec uses.
inline int ref_int8(float x) {
  if (std::isnan(x)) return 0;
  const double v = std::clamp(static_cast<double>(x), -127.0, 127.0);
  const double f = std::floor(v), frac = v - f;
  const double r = frac > 0.5 ? f + 1 : (frac < 0.5 ? f : (std::fmod(f, 2.0) == 0 ? f : f + 1));
  return static_cast<int>(r);
}
// Values of non-NaN codes, from the grids (not from the decoders under test).
inline float ref_value(uint8_t code, const std::vector<double>& grid, uint8_t sign_bit) {
  const float v = static_cast<float>(grid[code & (sign_bit - 1)]);
  return (code & sign_bit) ? -v : v;
}

// --- sample distributions ----------------------------------------------------------------------

enum class Dist { normal1, normal002, huge, tiny, e4m3_ties, any_bits };
inline const char* name(Dist d) {
  const char* names[] = {"normal sd 1", "normal sd 0.02", "huge", "tiny", "e4m3 ties", "any bits"};
  return names[static_cast<int>(d)];
}
const Dist kDists[] = {Dist::normal1, Dist::normal002, Dist::huge,
                       Dist::tiny,    Dist::e4m3_ties, Dist::any_bits};

inline float sample(Rng& rng, Dist d) {
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

inline bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || float_bits(a) == float_bits(b);
}

}  // namespace moe_ep::formats
