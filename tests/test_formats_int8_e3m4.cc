// The int8 and e3m4 roundings of the wire codecs (src/formats/scalar.h) against references
// written from their definitions: int8_satfinite and e3m4_satfinite on every bf16 value and
// every tie, the device's rounding by float additions (int8_rounding_sum, e3m4_rounding_offset)
// against them on every float of their domains, and the int8 scale word on every bf16 amax.
// Exhaustive: no random input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "formats/codecs.h"
#include "testing/format_refs.h"

namespace moe_ep::formats {
namespace {

// --- int8 and e3m4 vs references ----------------------------------------------------------------

// Inputs for the int8 and e3m4 roundings: every non-NaN bf16 value times a few powers of two
// (both codes' ranges and ties with few significant bits), every 4099th float bit pattern (all
// exponents and mantissa bits), and each exact midpoint of neighbouring codes with the floats
// just below and above it.
std::vector<float> rounding_inputs(const std::vector<double>& midpoints) {
  std::vector<float> in;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float v = bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(v)) continue;
    for (int e : {0, -4, 4, -8, -20}) in.push_back(std::ldexp(v, e));
  }
  for (uint64_t i = 0; i <= 0xffffffffull; i += 4099) {
    const float x = bits_float(static_cast<uint32_t>(i));
    if (!std::isnan(x)) in.push_back(x);
  }
  for (double m : midpoints) {
    for (float sign : {1.0f, -1.0f}) {
      const float t = sign * static_cast<float>(m);
      in.push_back(t);
      in.push_back(std::nextafter(t, 0.0f));
      in.push_back(std::nextafter(t, sign * INFINITY));
    }
  }
  return in;
}

TEST(FormatsRandom, Int8RoundingMatchesReferenceOnEveryBf16AndTie) {
  std::vector<double> ties;
  for (int k = -128; k < 128; ++k) ties.push_back(k + 0.5);
  Mismatches bad;
  int64_t checked = 0;
  for (const float x : rounding_inputs(ties)) {
    const uint8_t got = int8_satfinite(x);
    const int want = ref_int8(x);
    bad.check(static_cast<int8_t>(got) == want, "int8_satfinite", x,
              static_cast<int>(static_cast<int8_t>(got)), want);
    ++checked;
  }
  EXPECT_EQ(bad.count, 0) << bad.first.str();
  EXPECT_GT(checked, 1000000);
  for (int q = 0; q < 256; ++q) {
    EXPECT_EQ(int8_to_float(static_cast<uint8_t>(q)), static_cast<float>(q < 128 ? q : q - 256));
  }
  EXPECT_EQ(int8_satfinite(NAN), 0);
}

TEST(FormatsRandom, E3m4RoundingMatchesGridOnEveryBf16AndTie) {
  std::vector<double> midpoints;
  for (size_t c = 0; c + 1 < kE3m4Grid.size(); ++c) {
    midpoints.push_back((kE3m4Grid[c] + kE3m4Grid[c + 1]) / 2);
  }
  midpoints.push_back(126.0);  // between the max 124 and the 128 e3m4 cannot hold: saturates
  Mismatches bad;
  int ties = 0;
  for (const float x : rounding_inputs(midpoints)) {
    bool tie = false;
    const uint8_t got = e3m4_satfinite(x);
    const uint8_t want = ref_e3m4(x, &tie);
    ties += tie;
    bad.check(got == want, "e3m4_satfinite vs grid nearest-even", x, got, want);
  }
  EXPECT_EQ(bad.count, 0) << bad.first.str();
  EXPECT_GE(ties, 2 * 127);
  for (int q = 0; q < 256; ++q) {  // decode: the grid's value; rounding it back gives the code
    const float want = static_cast<float>(kE3m4Grid[q & 0x7f]) * ((q & 0x80) ? -1.0f : 1.0f);
    EXPECT_TRUE(same_float(e3m4_to_float(static_cast<uint8_t>(q)), want)) << "code " << q;
    EXPECT_EQ(e3m4_satfinite(want), q) << "code " << q;
  }
}

// The roundings by one addition of the kernels' int8/e3m4 encoder (scalar.h) against the scalar
// conversions, on every float of their domains whose low byte is 0x00, 0x01, 0x80 or 0xff. The
// rounding boundaries (the integers and half-integers for int8, the e3m4 grid and its midpoints)
// are multiples of 2^16 units in the last place of every float in the domains, so a float's low
// byte decides only whether it lies on a boundary (0x00) or strictly between two (any other
// value): these four patterns give every outcome, ties included.
template <typename Fn>
void for_each_float_up_to(float max, Fn fn) {
  const uint32_t top = float_bits(max);
  for (uint32_t high = 0; high <= (top >> 8); ++high) {
    for (const uint32_t low : {0x00u, 0x01u, 0x80u, 0xffu}) {
      const uint32_t bits = high << 8 | low;
      if (bits <= top) fn(bits_float(bits));
    }
  }
}

TEST(FormatsRandom, Int8RoundingSumEqualsInt8SatfiniteBelow127AndAHalf) {
  Mismatches bad;
  int64_t checked = 0;
  for_each_float_up_to(std::nextafter(127.5f, 0.0f), [&](float magnitude) {
    for (const float y : {magnitude, -magnitude}) {
      const float t = int8_rounding_sum(y);
      const uint8_t code = static_cast<uint8_t>(float_bits(t) & 0xffu);
      bad.check(code == int8_satfinite(y), "int8_rounding_sum code", y, +code, +int8_satfinite(y));
      bad.check(float_bits(t - kRoundToIntOffset) == float_bits(int8_to_float(code)),
                "int8_rounding_sum value", y, t - kRoundToIntOffset, int8_to_float(code));
      ++checked;
    }
  });
  EXPECT_EQ(bad.count, 0) << bad.first.str();
  EXPECT_GT(checked, 30000000);
}

TEST(FormatsRandom, E3m4RoundingOffsetEqualsE3m4SatfiniteUpTo124) {
  Mismatches bad;
  int64_t checked = 0;
  for_each_float_up_to(kE3m4Max, [&](float a) {
    const float c = e3m4_rounding_offset(a);
    const float t = a + c;
    const uint8_t code = static_cast<uint8_t>(float_bits(t) & 0xffu);
    bad.check(code == e3m4_satfinite(a), "e3m4_rounding_offset code", a, +code, +e3m4_satfinite(a));
    bad.check(float_bits(t - c) == float_bits(e3m4_to_float(code)), "e3m4_rounding_offset value", a,
              t - c, e3m4_to_float(code));
    ++checked;
  });
  EXPECT_EQ(bad.count, 0) << bad.first.str();
  EXPECT_GT(checked, 15000000);
}

// The multiplication that replaces the division of the int8 scale, on every finite bf16 amax.
TEST(FormatsRandom, Int8ScaleWordEqualsRoundedUpQuotientOnEveryBf16) {
  for (uint32_t b = 0; b < 0x7f80; ++b) {
    const float amax = bf16_to_float(static_cast<uint16_t>(b));
    ASSERT_EQ(int8_scale_word(amax), bf16_round_up(amax / kInt8Max))
        << "amax bf16 0x" << std::hex << b;
  }
}

}  // namespace
}  // namespace moe_ep::formats
