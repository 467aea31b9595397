// Hand-worked, bit-exact vectors for the wire codecs of docs/design.md#wire-formats (src/formats/): the scalar
// conversions (e4m3, e2m1, e8m0, bf16, int8, e3m4) at their edges (ties, subnormals, saturation,
// clamping) and whole rows through encode_row/decode_row for each format, including the rule
// that non-finite input never becomes finite on the wire. Every expected byte and float is written
// out here with the arithmetic that gives it, from the OCP FP8 / MX v1.0 definitions; nothing is
// computed by the code under test. Random comparisons against the CUDA headers and error bounds
// live in test_formats_random.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "formats/codecs.h"

namespace moe_ep::formats {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kHidden = 256;  // 2 fp8 blocks, 8 mxfp4 or int8/e3m4 blocks

float p2(int e) { return std::ldexp(1.0f, e); }

// bf16 bits of x; the hand vectors only use values that bf16 holds exactly.
uint16_t bf(float x) {
  const uint16_t b = float_to_bf16(x);
  if (!std::isnan(x)) {
    EXPECT_EQ(bf16_to_float(b), x) << x << " is not exact in bf16";
  }
  return b;
}

// Float equality that also holds for two NaNs and tells -0 from +0.
::testing::AssertionResult same_float(float expected, float actual) {
  if ((std::isnan(expected) && std::isnan(actual)) || float_bits(expected) == float_bits(actual)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << std::hexfloat << "expected " << expected << ", got " << actual;
}

// A row codec run: input bits in, payload/scales/decoded floats out.
template <typename F>
struct Row {
  std::vector<uint16_t> x;                // [n] bf16 bits
  std::vector<uint8_t> payload;           // [payload_bytes_of<F>(n)]
  std::vector<typename F::Scale> scales;  // [n / kBlock]
  std::vector<float> out;                 // [n] decoded
  explicit Row(int n) : x(n, 0), payload(payload_bytes_of<F>(n), 0xaa), out(n) {
    scales.assign(F::kBlock == 0 ? 1 : n / F::kBlock, typename F::Scale{});
  }
  void run() {
    const int64_t n = static_cast<int64_t>(x.size());
    encode_row<F>(x.data(), n, payload.data(), scales.data());
    decode_row<F>(payload.data(), scales.data(), n, out.data());
  }
};

// --- scalar conversions ------------------------------------------------------------------------

// e4m3: s eeee mmm, bias 7. Normal 2^(e-7) * (1 + m/8); subnormal (e = 0) m * 2^-9.
TEST(E4m3, EncodeHandVectors) {
  EXPECT_EQ(e4m3_satfinite(1.0f), 0x38);      // e = 7, m = 0
  EXPECT_EQ(e4m3_satfinite(448.0f), 0x7e);    // 2^8 * 1.75: e = 15, m = 6 (m = 7 is NaN)
  EXPECT_EQ(e4m3_satfinite(500.0f), 0x7e);    // beyond max: saturate
  EXPECT_EQ(e4m3_satfinite(464.0f), 0x7e);    // midpoint of 448 and the missing 480: saturate
  EXPECT_EQ(e4m3_satfinite(-1000.0f), 0xfe);  // sign bit | 0x7e
  EXPECT_EQ(e4m3_satfinite(1.0625f), 0x38);   // tie 1.0 (m=0) / 1.125 (m=1) -> even m=0
  EXPECT_EQ(e4m3_satfinite(1.1875f), 0x3a);   // tie 1.125 (m=1) / 1.25 (m=2) -> even m=2
  EXPECT_EQ(e4m3_satfinite(-1.0625f), 0xb8);  // ties are symmetric in sign
  EXPECT_EQ(e4m3_satfinite(240.0f), 0x77);    // 2^7 * 1.875: e = 14, m = 7
  EXPECT_EQ(e4m3_satfinite(p2(-6)), 0x08);    // smallest normal: e = 1, m = 0
  // Subnormals, step 2^-9.
  EXPECT_EQ(e4m3_satfinite(p2(-9)), 0x01);
  EXPECT_EQ(e4m3_satfinite(3 * p2(-9)), 0x03);
  EXPECT_EQ(e4m3_satfinite(-3 * p2(-9)), 0x83);
  EXPECT_EQ(e4m3_satfinite(p2(-10)), 0x00);               // 0.5 * 2^-9: tie 0 / 1 -> 0
  EXPECT_EQ(e4m3_satfinite(p2(-10) * 1.0000001f), 0x01);  // just above the tie
  EXPECT_EQ(e4m3_satfinite(1.5f * p2(-9)), 0x02);         // tie 1 / 2 -> 2
  EXPECT_EQ(e4m3_satfinite(2.5f * p2(-9)), 0x02);         // tie 2 / 3 -> 2
  EXPECT_EQ(e4m3_satfinite(7.5f * p2(-9)), 0x08);         // tie 7 / 8 (= 2^-6, 0x08) -> 0x08
  EXPECT_EQ(e4m3_satfinite(1e-30f), 0x00);                // underflow keeps the sign
  EXPECT_EQ(e4m3_satfinite(-1e-30f), 0x80);
  EXPECT_EQ(e4m3_satfinite(-0.0f), 0x80);
  // Not finite: NaN -> 0x7f whatever its sign; Inf saturates (callers handle Inf first).
  EXPECT_EQ(e4m3_satfinite(kNaN), kE4m3NaN);
  EXPECT_EQ(e4m3_satfinite(-kNaN), kE4m3NaN);
  EXPECT_EQ(e4m3_satfinite(kInf), 0x7e);
  EXPECT_EQ(e4m3_satfinite(-kInf), 0xfe);
}

TEST(E4m3, DecodeHandVectors) {
  EXPECT_TRUE(same_float(1.0f, e4m3_to_float(0x38)));
  EXPECT_TRUE(same_float(448.0f, e4m3_to_float(0x7e)));
  EXPECT_TRUE(same_float(-448.0f, e4m3_to_float(0xfe)));
  EXPECT_TRUE(same_float(240.0f, e4m3_to_float(0x77)));
  EXPECT_TRUE(same_float(1.125f, e4m3_to_float(0x39)));
  EXPECT_TRUE(same_float(p2(-6), e4m3_to_float(0x08)));
  EXPECT_TRUE(same_float(p2(-9), e4m3_to_float(0x01)));
  EXPECT_TRUE(same_float(7 * p2(-9), e4m3_to_float(0x07)));
  EXPECT_TRUE(same_float(-5 * p2(-9), e4m3_to_float(0x85)));
  EXPECT_TRUE(same_float(0.0f, e4m3_to_float(0x00)));
  EXPECT_TRUE(same_float(-0.0f, e4m3_to_float(0x80)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
}

// e2m1 magnitudes by code 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
TEST(E2m1, EncodeTiesAndSaturation) {
  EXPECT_EQ(e2m1_rne(0.25f), 0x0);  // tie 0 (code 0) / 0.5 (code 1) -> even code 0
  EXPECT_EQ(e2m1_rne(0.2500001f), 0x1);
  EXPECT_EQ(e2m1_rne(0.75f), 0x2);  // tie 0.5 (1) / 1.0 (2) -> code 2
  EXPECT_EQ(e2m1_rne(1.25f), 0x2);  // tie 1.0 (2) / 1.5 (3) -> code 2
  EXPECT_EQ(e2m1_rne(1.75f), 0x4);  // tie 1.5 (3) / 2.0 (4) -> code 4
  EXPECT_EQ(e2m1_rne(2.5f), 0x4);   // tie 2 (4) / 3 (5) -> 2.0, code 4
  EXPECT_EQ(e2m1_rne(3.5f), 0x6);   // tie 3 (5) / 4 (6) -> 4.0, code 6
  EXPECT_EQ(e2m1_rne(5.0f), 0x6);   // tie 4 (6) / 6 (7) -> 4.0, code 6
  EXPECT_EQ(e2m1_rne(5.0001f), 0x7);
  EXPECT_EQ(e2m1_rne(6.0f), 0x7);
  EXPECT_EQ(e2m1_rne(7.0f), 0x7);  // beyond 6: saturate
  EXPECT_EQ(e2m1_rne(-100.0f), 0xf);
  EXPECT_EQ(e2m1_rne(-0.75f), 0xa);  // sign | code 2
  EXPECT_EQ(e2m1_rne(-0.0f), 0x8);
  EXPECT_EQ(e2m1_rne(0.1f), 0x0);
}

TEST(E2m1, DecodeAllCodes) {
  const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int q = 0; q < 16; ++q) {
    const float expected = (q & 8) ? -magnitude[q & 7] : magnitude[q & 7];
    EXPECT_TRUE(same_float(expected, e2m1_to_float(static_cast<uint8_t>(q)))) << "code " << q;
  }
}

TEST(E8m0, DecodeAndFloorLog2) {
  EXPECT_TRUE(same_float(1.0f, e8m0_to_float(127)));
  EXPECT_TRUE(same_float(0.25f, e8m0_to_float(125)));
  EXPECT_TRUE(same_float(p2(-126), e8m0_to_float(1)));   // smallest normal float
  EXPECT_EQ(float_bits(e8m0_to_float(0)), 0x00400000u);  // 2^-127: float subnormal
  EXPECT_EQ(std::fpclassify(e8m0_to_float(0)), FP_SUBNORMAL);
  EXPECT_TRUE(same_float(p2(127), e8m0_to_float(254)));
  EXPECT_TRUE(std::isnan(e8m0_to_float(0xff)));
  EXPECT_EQ(floor_log2(1.0f), 0);
  EXPECT_EQ(floor_log2(6.0f), 2);
  EXPECT_EQ(floor_log2(7.99f), 2);
  EXPECT_EQ(floor_log2(0.75f), -1);
  EXPECT_EQ(floor_log2(std::numeric_limits<float>::max()), 127);
  EXPECT_EQ(floor_log2(bf16_to_float(0x0001)), -133);   // bf16 min subnormal 2^-133
  EXPECT_EQ(floor_log2(bits_float(1)), -149);           // float min subnormal
  EXPECT_EQ(floor_log2(bits_float(0x00600000)), -127);  // 1.5 * 2^-127
}

TEST(Bf16, RoundNearestEvenAndNaN) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + p2(-8)), 0x3f80);      // tie 0x3f80 / 0x3f81 -> even 0x3f80
  EXPECT_EQ(float_to_bf16(1.0f + 3 * p2(-8)), 0x3f82);  // tie 0x3f81 / 0x3f82 -> even 0x3f82
  EXPECT_EQ(float_to_bf16(1.0f + 1.5f * p2(-8)), 0x3f81);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(kInf), 0x7f80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to Inf
  EXPECT_EQ(float_to_bf16(bf16_to_float(0x7f7f)), 0x7f7f);              // bf16 max, 3.39e38
  // Every NaN -> canonical 0x7fc0. 0x7f800001 would become Inf (0x7f80) if truncated.
  EXPECT_EQ(float_to_bf16(kNaN), kBf16NaN);
  EXPECT_EQ(float_to_bf16(bits_float(0x7f800001u)), kBf16NaN);
  EXPECT_EQ(float_to_bf16(bits_float(0xffffffffu)), kBf16NaN);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(kNaN))));
}

// --- fp8 blockwise ---------------------------------------------------------------------------

TEST(Fp8Block, ZeroBlockHasScaleOne) {
  Row<Fp8BlockWire> row(kHidden);
  row.x[5] = 0x8000;      // -0.0: amax is still 0
  row.x[200] = bf(1.0f);  // block 1 is not zero
  row.run();
  EXPECT_EQ(row.scales[0], 1.0f);
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(row.payload[i], i == 5 ? 0x80 : 0x00) << i;  // -0 keeps its sign bit
    EXPECT_EQ(row.out[i], 0.0f) << i;
  }
  EXPECT_TRUE(same_float(-0.0f, row.out[5]));
}

TEST(Fp8Block, AmaxTwo) {
  // amax 2: inv = 448 / 2 = 224 exactly; scale = fl(2 / 448) = 0x1.24924ap-8 = (1/224)(1 + 4.5e-8).
  Row<Fp8BlockWire> row(kHidden);
  const float in[] = {2.0f, 1.0f, 0.5f, p2(-7), -2.0f, 0.0f, p2(-14), p2(-15), p2(-17), p2(-18)};
  for (int i = 0; i < 10; ++i) row.x[i] = bf(in[i]);
  row.run();
  const float scale = 0x1.24924ap-8f;
  EXPECT_EQ(row.scales[0], scale);
  const uint8_t codes[] = {
      0x7e,  // 2 * 224 = 448
      0x76,  // 224 = 2^7 * 1.75: e = 14, m = 6
      0x6e,  // 112 = 2^6 * 1.75: e = 13, m = 6
      0x3e,  // 2^-7 * 224 = 1.75: e = 7, m = 6
      0xfe,  // -448
      0x00,  // 0
      0x07,  // 2^-14 * 224 = 7 * 2^-9: subnormal m = 7
      0x04,  // 2^-15 * 224 = 3.5 * 2^-9: tie 3 / 4 -> 4
      0x01,  // 2^-17 * 224 = 0.875 * 2^-9 -> 1
      0x00,  // 2^-18 * 224 = 0.4375 * 2^-9 -> 0
  };
  for (int i = 0; i < 10; ++i) EXPECT_EQ(row.payload[i], codes[i]) << i;
  // 448 * scale = 2(1 + 4.5e-8) is within half an ulp of 2 (2^-23 relative), so it decodes to
  // exactly 2.0; likewise 224 * scale to 1.0. Powers of two times the scale are exact products.
  EXPECT_TRUE(same_float(2.0f, row.out[0]));
  EXPECT_TRUE(same_float(1.0f, row.out[1]));
  EXPECT_TRUE(same_float(0.5f, row.out[2]));
  EXPECT_TRUE(same_float(p2(-7), row.out[3]));
  EXPECT_TRUE(same_float(-2.0f, row.out[4]));
  EXPECT_TRUE(same_float(0.0f, row.out[5]));
  EXPECT_TRUE(same_float(p2(-14), row.out[6]));          // 7 * 2^-9 * scale = 2^-14 exactly
  EXPECT_TRUE(same_float(0x1.24924ap-15f, row.out[7]));  // 4 * 2^-9 * scale = 2^-7 * scale
  EXPECT_TRUE(same_float(0x1.24924ap-17f, row.out[8]));  // 2^-9 * scale
  EXPECT_TRUE(same_float(0.0f, row.out[9]));
  // Block 1 is all zeros: scale 1.
  EXPECT_EQ(row.scales[1], 1.0f);
}

TEST(Fp8Block, SignallingNaNIsSkippedByAmaxLikeAnyNaN) {
  // glibc's fmaxf(2, sNaN) is NaN, after which fmaxf(NaN, 1) = 1 would forget the 2; the GPU's
  // max skips the sNaN. amax must be 2 on both: element 0 keeps code 0x7e (448 = 2 * 224).
  for (const uint16_t nan_bits : {uint16_t{0x7f81}, uint16_t{0xffc0}}) {
    Row<Fp8BlockWire> row(kHidden);
    for (int i = 0; i < kHidden; ++i) row.x[i] = bf(1.0f);
    row.x[0] = bf(2.0f);
    row.x[64] = nan_bits;
    row.run();
    EXPECT_EQ(row.scales[0], 0x1.24924ap-8f) << std::hex << nan_bits;  // fl(2 / 448)
    EXPECT_EQ(row.payload[0], 0x7e) << std::hex << nan_bits;
    EXPECT_EQ(row.payload[64] & 0x7f, 0x7f) << std::hex << nan_bits;  // NaN stays NaN
  }
}

TEST(Fp8Block, SubnormalsAtScaleOne) {
  // amax 448: inv = 1, scale = 1, so codes are plain e4m3 roundings of the inputs.
  Row<Fp8BlockWire> row(kHidden);
  const float in[] = {448.0f, 3 * p2(-9), p2(-10), 1.5f * p2(-9), 7.5f * p2(-9), -p2(-9)};
  const uint8_t codes[] = {0x7e, 0x03, 0x00, 0x02, 0x08, 0x81};
  const float decoded[] = {448.0f, 3 * p2(-9), 0.0f, 2 * p2(-9), p2(-6), -p2(-9)};
  for (int i = 0; i < 6; ++i) row.x[130 + i] = bf(in[i]);  // block 1
  row.run();
  EXPECT_EQ(row.scales[1], 1.0f);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(row.payload[130 + i], codes[i]) << i;
    EXPECT_TRUE(same_float(decoded[i], row.out[130 + i])) << i;
  }
}

TEST(Fp8Block, TinyAmaxClampsEncodeMultiplier) {
  // amax = 2^-133 (bf16 0x0001): 448 / amax = 1.75 * 2^141 overflows float, and 0 * Inf would
  // make the zeros NaN. inv is clamped to FLT_MAX = (2 - 2^-23) * 2^127 (docs/formats.md).
  // scale = fl(2^-133 / 448) = 0x1.24p-142 (a float subnormal, 146 * 2^-149).
  // The element: 2^-133 * FLT_MAX = (2 - 2^-23) * 2^-6 -> e4m3 rounds up to 2^-5 = 0x10;
  // decode 2^-5 * 146 * 2^-149 = 4.5625 * 2^-149 -> float subnormal 5 * 2^-149 = 0x1.4p-147.
  Row<Fp8BlockWire> row(kHidden);
  row.x[7] = 0x0001;
  row.run();
  EXPECT_EQ(float_bits(row.scales[0]), 146u);
  EXPECT_EQ(row.payload[7], 0x10);
  EXPECT_TRUE(same_float(0x1.4p-147f, row.out[7]));
  for (int i = 0; i < 128; ++i) {
    if (i == 7) continue;
    EXPECT_EQ(row.payload[i], 0x00) << i;
    EXPECT_TRUE(same_float(0.0f, row.out[i])) << i;
  }
}

TEST(Fp8Block, NonFiniteNeverBecomesFinite) {
  // Block 0: NaN at 5 (amax skips it) -> only that element decodes NaN.
  // Block 1: +Inf at 130 -> scale Inf, inv 0: finite * 0 = 0 decodes 0 * Inf = NaN, Inf * 0 is
  // NaN -> 0x7f. The whole block decodes to NaN.
  Row<Fp8BlockWire> row(kHidden);
  for (int i = 0; i < kHidden; ++i) row.x[i] = bf(static_cast<float>(i % 7) - 3.0f);
  row.x[5] = bf(kNaN);
  row.x[130] = bf(kInf);
  row.run();
  EXPECT_EQ(row.scales[0], 3.0f / 448.0f);  // amax 3 from the finite elements
  EXPECT_EQ(row.payload[5], kE4m3NaN);
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(std::isnan(row.out[i]), i == 5) << i;
  }
  EXPECT_TRUE(std::isinf(row.scales[1]));
  EXPECT_EQ(row.payload[130], kE4m3NaN);
  for (int i = 128; i < kHidden; ++i) EXPECT_TRUE(std::isnan(row.out[i])) << i;

  Row<Fp8BlockWire> neg(kHidden);  // -Inf: amax = |x| = +Inf, same outcome
  neg.x[1] = bf(-kInf);
  neg.run();
  for (int i = 0; i < 128; ++i) EXPECT_TRUE(std::isnan(neg.out[i])) << i;
  for (int i = 128; i < kHidden; ++i) EXPECT_EQ(neg.out[i], 0.0f) << i;
}

// --- fp8 direct cast -------------------------------------------------------------------------

TEST(Fp8Direct, SaturationAndNonFinite) {
  Row<Fp8DirectWire> row(kHidden);
  const float in[] = {448.0f, 500.0f, -1000.0f, 1.0625f, kInf, -kInf, kNaN, 3 * p2(-9), p2(-20)};
  const uint8_t codes[] = {0x7e, 0x7e, 0xfe, 0x38, kE4m3NaN, kE4m3NaN, kE4m3NaN, 0x03, 0x00};
  const float decoded[] = {448.0f, 448.0f, -448.0f, 1.0f, kNaN, kNaN, kNaN, 3 * p2(-9), 0.0f};
  for (int i = 0; i < 9; ++i) row.x[100 + i] = bf(in[i]);
  row.run();
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(row.payload[100 + i], codes[i]) << i;
    EXPECT_TRUE(same_float(decoded[i], row.out[100 + i])) << i;
  }
  EXPECT_EQ(row.payload[0], 0x00);
  EXPECT_EQ(row.payload.size(), static_cast<size_t>(kHidden));
}

// --- mxfp4 -----------------------------------------------------------------------------------

TEST(Mxfp4, HandWorkedBlocks) {
  Row<Mxfp4Wire> row(kHidden);
  auto set = [&](int block, std::initializer_list<float> values) {
    int i = block * 32;
    for (float v : values) row.x[i++] = bf(v);
  };
  // Block 0: zeros -> byte 127, codes 0.
  // Block 1: amax 6 -> e = floor(log2 6) - 2 = 0 -> byte 127; codes are e2m1(x).
  set(1, {6.0f, 5.0f, 3.5f, 2.5f, 0.75f, 0.25f, -1.75f, -6.0f});
  // Block 2: amax 1 -> e = 0 - 2 = -2 -> byte 125; x / 2^-2 = 4x.
  set(2, {1.0f, 0.5f, 0.125f, 0.0625f, -0.375f});
  // Block 3: amax = bf16 max (2 - 2^-7) * 2^127 -> e = 125 -> byte 252; x / 2^125 = 7.97 -> 6.
  row.x[3 * 32] = 0x7f7f;
  // Block 4: amax 2^-128 -> e = -130, clamped to -127 -> byte 0; x / 2^-127 = 2x.
  set(4, {p2(-128), 3 * p2(-129), p2(-129)});
  // Block 5: Inf; block 6: NaN -> byte 0xff, every element decodes NaN.
  set(5, {1.0f, kInf});
  set(6, {kNaN, 2.0f});
  // Block 7: amax 7 -> e = 0 -> 7 saturates to 6 (the OCP MX rule clips amax in [6, 8)).
  set(7, {7.0f, -7.0f});
  row.run();

  const uint8_t scales[8] = {127, 127, 125, 252, 0, 0xff, 0xff, 127};
  for (int b = 0; b < 8; ++b) EXPECT_EQ(row.scales[b], scales[b]) << "block " << b;

  auto code = [&](int i) { return (row.payload[i / 2] >> (4 * (i & 1))) & 0xf; };
  for (int i = 0; i < 32; ++i) EXPECT_EQ(code(i), 0) << i;
  // 6 -> 7; 5 tie 4/6 -> 6 (4.0); 3.5 tie 3/4 -> 6 (4.0); 2.5 tie 2/3 -> 4 (2.0);
  // 0.75 -> 2 (1.0); 0.25 -> 0; -1.75 tie 1.5/2 -> 0x8|4; -6 -> 0xf.
  const int codes1[8] = {0x7, 0x6, 0x6, 0x4, 0x2, 0x0, 0xc, 0xf};
  const float out1[8] = {6.0f, 4.0f, 4.0f, 2.0f, 1.0f, 0.0f, -2.0f, -6.0f};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(code(32 + i), codes1[i]) << i;
    EXPECT_TRUE(same_float(out1[i], row.out[32 + i])) << i;
  }
  // Nibble order: element 2i low, 2i+1 high. Elements 32, 33 = codes 7, 6 -> byte 0x67.
  EXPECT_EQ(row.payload[16], 0x67);
  EXPECT_EQ(row.payload[17], 0x46);  // elements 34, 35: codes 6 (low), 4 (high)
  // 4x: 4 -> 6; 2 -> 4; 0.5 -> 1; 0.25 -> tie 0/0.5 -> 0; -1.5 -> 0xb. Decode * 2^-2.
  const int codes2[5] = {0x6, 0x4, 0x1, 0x0, 0xb};
  const float out2[5] = {1.0f, 0.5f, 0.125f, 0.0f, -0.375f};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(code(64 + i), codes2[i]) << i;
    EXPECT_TRUE(same_float(out2[i], row.out[64 + i])) << i;
  }
  EXPECT_EQ(code(96), 0x7);
  EXPECT_TRUE(same_float(1.5f * p2(127), row.out[96]));  // 6 * 2^125
  // 2x: 2^-128 -> 0.5, code 1; 3 * 2^-129 -> 0.75, tie 0.5/1 -> code 2 (1.0); 2^-129 -> 0.25,
  // tie 0/0.5 -> code 0. Decode * 2^-127 (e8m0 byte 0, a float subnormal).
  EXPECT_EQ(code(128), 0x1);
  EXPECT_EQ(code(129), 0x2);
  EXPECT_EQ(code(130), 0x0);
  EXPECT_TRUE(same_float(p2(-128), row.out[128]));  // 0.5 * 2^-127, exact subnormal
  EXPECT_TRUE(same_float(p2(-127), row.out[129]));
  EXPECT_TRUE(same_float(0.0f, row.out[130]));
  for (int i = 160; i < 224; ++i) EXPECT_TRUE(std::isnan(row.out[i])) << i;
  EXPECT_EQ(code(224), 0x7);
  EXPECT_EQ(code(225), 0xf);
  EXPECT_TRUE(same_float(6.0f, row.out[224]));
  EXPECT_TRUE(same_float(-6.0f, row.out[225]));
  EXPECT_EQ(row.payload.size(), static_cast<size_t>(kHidden / 2));
}

// --- int8 / e3m4 blockwise -----------------------------------------------------------------------

TEST(Int8, RoundNearestEvenClampAndNaN) {
  EXPECT_EQ(int8_satfinite(0.0f), 0x00);
  EXPECT_EQ(int8_satfinite(-0.0f), 0x00);  // no -0 in int8
  EXPECT_EQ(int8_satfinite(0.5f), 0x00);   // tie 0 / 1 -> even 0
  EXPECT_EQ(int8_satfinite(0.5000001f), 0x01);
  EXPECT_EQ(int8_satfinite(1.5f), 0x02);    // tie 1 / 2 -> 2
  EXPECT_EQ(int8_satfinite(2.5f), 0x02);    // tie 2 / 3 -> 2
  EXPECT_EQ(int8_satfinite(-2.5f), 0xfe);   // -2, two's complement
  EXPECT_EQ(int8_satfinite(126.5f), 0x7e);  // tie 126 / 127 -> 126
  EXPECT_EQ(int8_satfinite(127.0f), 0x7f);
  EXPECT_EQ(int8_satfinite(127.49f), 0x7f);
  EXPECT_EQ(int8_satfinite(1000.0f), 0x7f);   // clamped to 127
  EXPECT_EQ(int8_satfinite(-1000.0f), 0x81);  // -127: the byte 0x80 (-128) is never written
  EXPECT_EQ(int8_satfinite(-127.5f), 0x81);
  EXPECT_EQ(int8_satfinite(kInf), 0x7f);
  EXPECT_EQ(int8_satfinite(kNaN), 0x00);
  EXPECT_TRUE(same_float(-127.0f, int8_to_float(0x81)));
  EXPECT_TRUE(same_float(-128.0f, int8_to_float(0x80)));
  EXPECT_TRUE(same_float(127.0f, int8_to_float(0x7f)));
  EXPECT_TRUE(same_float(0.0f, int8_to_float(0x00)));
}

// e3m4, bias 1: e = 0 -> m/16; e >= 1 -> (16 + m) * 2^(e - 5). Magnitude codes 0..16 are
// multiples of 1/16 up to 1; each further group of 16 codes is one binade.
TEST(E3m4, EncodeHandVectors) {
  EXPECT_EQ(e3m4_satfinite(0.0f), 0x00);
  EXPECT_EQ(e3m4_satfinite(-0.0f), 0x80);
  EXPECT_EQ(e3m4_satfinite(1.0f / 16), 0x01);   // smallest subnormal
  EXPECT_EQ(e3m4_satfinite(1.0f / 32), 0x00);   // tie 0 / 1/16 -> even 0
  EXPECT_EQ(e3m4_satfinite(3.0f / 32), 0x02);   // tie 1/16 / 2/16 -> even 2
  EXPECT_EQ(e3m4_satfinite(15.0f / 16), 0x0f);  // largest subnormal
  EXPECT_EQ(e3m4_satfinite(31.0f / 32), 0x10);  // tie 15/16 / 1 -> even code 0x10 (1.0)
  EXPECT_EQ(e3m4_satfinite(1.0f), 0x10);        // e = 1, m = 0
  EXPECT_EQ(e3m4_satfinite(33.0f / 32), 0x10);  // tie 1 / 17/16 -> 0x10
  EXPECT_EQ(e3m4_satfinite(63.0f / 32), 0x20);  // tie 31/16 / 2 -> 0x20 (2.0): carry into e
  EXPECT_EQ(e3m4_satfinite(2.0f), 0x20);
  EXPECT_EQ(e3m4_satfinite(64.0f), 0x70);   // e = 7, m = 0
  EXPECT_EQ(e3m4_satfinite(66.0f), 0x70);   // tie 64 / 68 -> 64
  EXPECT_EQ(e3m4_satfinite(70.0f), 0x72);   // tie 68 / 72 -> 72 (m = 2)
  EXPECT_EQ(e3m4_satfinite(122.0f), 0x7e);  // tie 120 / 124 -> 120 (m = 14)
  EXPECT_EQ(e3m4_satfinite(124.0f), 0x7f);  // max: (16 + 15) * 4
  EXPECT_EQ(e3m4_satfinite(126.0f), 0x7f);  // saturates (128 is not a code)
  EXPECT_EQ(e3m4_satfinite(1e30f), 0x7f);
  EXPECT_EQ(e3m4_satfinite(-1e30f), 0xff);
  EXPECT_EQ(e3m4_satfinite(kInf), 0x7f);
  EXPECT_EQ(e3m4_satfinite(-1.0f), 0x90);
  EXPECT_EQ(e3m4_satfinite(p2(-130)), 0x00);  // float subnormal input
}

TEST(E3m4, DecodeHandVectors) {
  EXPECT_TRUE(same_float(0.0f, e3m4_to_float(0x00)));
  EXPECT_TRUE(same_float(-0.0f, e3m4_to_float(0x80)));
  EXPECT_TRUE(same_float(1.0f / 16, e3m4_to_float(0x01)));
  EXPECT_TRUE(same_float(15.0f / 16, e3m4_to_float(0x0f)));
  EXPECT_TRUE(same_float(1.0f, e3m4_to_float(0x10)));
  EXPECT_TRUE(same_float(31.0f / 16, e3m4_to_float(0x1f)));
  EXPECT_TRUE(same_float(2.0f, e3m4_to_float(0x20)));
  EXPECT_TRUE(same_float(64.0f, e3m4_to_float(0x70)));
  EXPECT_TRUE(same_float(124.0f, e3m4_to_float(0x7f)));
  EXPECT_TRUE(same_float(-124.0f, e3m4_to_float(0xff)));
  EXPECT_TRUE(same_float(-1.5f, e3m4_to_float(0x98)));
}

TEST(Int8E3m4, ScaleHelpers) {
  EXPECT_EQ(bf16_round_up(1.0f), 0x3f80);            // exact: unchanged
  EXPECT_EQ(bf16_round_up(1.0f + p2(-23)), 0x3f81);  // any bit below bf16 rounds up
  EXPECT_EQ(bf16_round_up(1.0f + p2(-8)), 0x3f81);   // where nearest-even would go down
  EXPECT_EQ(bf16_round_up(0.0f), 0x0000);
  EXPECT_EQ(bf16_round_up(bits_float(1)), 0x0001);  // float subnormal -> bf16 2^-133
  EXPECT_EQ(clamped_reciprocal(0.5f), 2.0f);
  EXPECT_EQ(clamped_reciprocal(bf16_to_float(0x0001)), 3.40282347e38f);  // 2^133 overflows
}

TEST(Int8E3m4, HandWorkedBlocks) {
  using F = Int8E3m4Wire;
  Row<F> row(kHidden);
  auto set = [&](int block, std::initializer_list<float> values) {
    int i = block * 32;
    for (float v : values) row.x[i++] = bf(v);
  };
  // The code energy of a block is the sum of the squares of its int8 codes; e3m4 when it is
  // below 2 * 127^2 = 32258.
  // Block 0: amax 127 -> int8 scale 127/127 = 1 (0x3f80), multiplier 1: codes are the
  // nearest-even integers, and the odd integers 65..113 that fill the block give an energy far
  // above the limit: int8.
  set(0, {127.0f, 0.5f, 1.5f, 2.5f, -2.5f, 126.5f, -0.0f});
  for (int i = 7; i < 32; ++i) row.x[i] = bf(static_cast<float>(65 + 2 * (i - 7)));
  // Block 1: one element of 64 and small ones. int8 (scale: 64/127 = 0.50394 rounded up to bf16
  // 0.5078125) codes them 126, 0, 0, 2, 2, 4, -2, 0, 0, 0: energy 15904, below the limit, so
  // e3m4 (scale 64 * 2^-6 = 1, exact), which codes 64 as 0x70 and the small ones to the 1/16
  // grid.
  set(1, {64.0f, 1.0f / 32, 3.0f / 32, 31.0f / 32, 33.0f / 32, 63.0f / 32, -1.0f, -0.0f, 0.25f,
          3.0f / 1024});
  // Block 2: zeros and -0 -> word 0, codes 0, decoded +0.
  row.x[64 + 3] = 0x8000;
  // Block 3: bf16 max alone: energy 127^2, e3m4, which codes it exactly as 0x70 with the scale
  // (2 - 2^-7) * 2^121 (0x7c7f): word 0xfc7f.
  row.x[96] = 0x7f7f;
  // Block 4: NaN; block 5: -Inf -> word 0x7fc0, codes 0, every element decodes to NaN.
  set(4, {1.0f, kNaN, 2.0f});
  set(5, {-kInf, 1.0f});
  // Block 6: amax 2^-133 (bf16 0x0001): both scales round up to 2^-133, whose reciprocal 2^133
  // overflows and is clamped to FLT_MAX: 2^-133 * FLT_MAX = (2 - 2^-23) * 2^-6 rounds to int8
  // code 0 (energy 0: e3m4) and to e3m4 code 0 (below the midpoint 2^-5): word 0x8001, the
  // element decodes to 0 (the documented tiny-block deviation).
  row.x[192 + 5] = 0x0001;
  // Block 7: -127 and 127 with integers between: scale 1, energy 2 * 127^2 + 9 + 25, just above
  // the limit: int8, codes 0x81 / 0x7f.
  set(7, {-127.0f, 127.0f, 3.0f, -5.0f});
  row.run();

  const uint16_t words[8] = {0x3f80, 0xbf80, 0x0000, 0xfc7f, 0x7fc0, 0x7fc0, 0x8001, 0x3f80};
  for (int b = 0; b < 8; ++b) EXPECT_EQ(row.scales[b], words[b]) << "block " << b;

  const uint8_t codes0[7] = {0x7f, 0x00, 0x02, 0x02, 0xfe, 0x7e, 0x00};
  const float out0[7] = {127.0f, 0.0f, 2.0f, 2.0f, -2.0f, 126.0f, 0.0f};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(row.payload[i], codes0[i]) << i;
    EXPECT_TRUE(same_float(out0[i], row.out[i])) << i;
  }
  for (int i = 7; i < 32; ++i) EXPECT_EQ(row.payload[i], 65 + 2 * (i - 7)) << i;

  const uint8_t codes1[10] = {0x70, 0x00, 0x02, 0x10, 0x10, 0x20, 0x90, 0x80, 0x04, 0x00};
  const float out1[10] = {64.0f, 0.0f, 0.125f, 1.0f, 1.0f, 2.0f, -1.0f, -0.0f, 0.25f, 0.0f};
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(row.payload[32 + i], codes1[i]) << i;
    EXPECT_TRUE(same_float(out1[i], row.out[32 + i])) << i;
  }
  for (int i = 64; i < 96; ++i) {
    EXPECT_EQ(row.payload[i], 0x00) << i;
    EXPECT_TRUE(same_float(0.0f, row.out[i])) << i;  // -0 comes back as +0
  }
  EXPECT_EQ(row.payload[96], 0x70);
  EXPECT_TRUE(same_float(bf16_to_float(0x7f7f), row.out[96]));  // 64 * 0x7c7f, exact
  for (int i = 128; i < 192; ++i) {
    EXPECT_EQ(row.payload[i], 0x00) << i;
    EXPECT_TRUE(std::isnan(row.out[i])) << i;
  }
  EXPECT_EQ(row.payload[197], 0x00);
  EXPECT_TRUE(same_float(0.0f, row.out[197]));
  EXPECT_EQ(row.payload[224], 0x81);
  EXPECT_EQ(row.payload[225], 0x7f);
  EXPECT_TRUE(same_float(-127.0f, row.out[224]));
  EXPECT_TRUE(same_float(-5.0f, row.out[227]));
  EXPECT_EQ(row.payload.size(), static_cast<size_t>(kHidden));
  EXPECT_EQ(row.scales.size(), static_cast<size_t>(kHidden / 32));
}

// --- bf16 --------------------------------------------------------------------------------------

TEST(Bf16Wire, PassesBitsThroughIncludingNaN) {
  Row<Bf16Wire> row(kHidden);
  for (int i = 0; i < kHidden; ++i) row.x[i] = static_cast<uint16_t>(0x3f00 + i);
  row.x[3] = 0x7fc1;  // a NaN payload is carried as is
  row.x[4] = 0xff80;  // -Inf
  row.run();
  for (int i = 0; i < kHidden; ++i) {
    const uint16_t wire = static_cast<uint16_t>(row.payload[2 * i] | (row.payload[2 * i + 1] << 8));
    EXPECT_EQ(wire, row.x[i]) << i;
  }
  EXPECT_TRUE(std::isnan(row.out[3]));
  EXPECT_TRUE(same_float(-kInf, row.out[4]));
  EXPECT_TRUE(same_float(bf16_to_float(0x3f00), row.out[0]));
}

}  // namespace
}  // namespace moe_ep::formats
