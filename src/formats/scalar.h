// Scalar conversions shared bit for bit by the CPU reference and the CUDA kernels
// (docs/design.md#wire-formats).
// Rounding conversions to e4m3 and e2m1 call the CUDA headers' functions (they run on the host
// too); exact decodes, the bf16 rounding and the int8 and e3m4 roundings (round to nearest even
// integer: the host's nearbyint, the GPU's cvt.rni) are written out here so both sides run the
// same code.
// The CUDA build uses -fmad=false, so no a*b+c in this file is contracted to an FMA on the GPU.
#pragma once

#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace moe_ep::formats {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kE2m1Max = 6.0f;
inline constexpr float kE3m4Max = 124.0f;  // (16 + 15) * 2^2, the largest e3m4 (bias 1) value
inline constexpr float kInt8Max = 127.0f;  // symmetric int8: codes -127 .. 127
// int8/e3m4 codes a block in e3m4 when the sum of the squares of its int8 codes is below this,
// 2 * 127^2: about two elements' worth at the block's maximum (docs/formats.md says why 2).
inline constexpr float kInt8E3m4EnergyLimit = 2.0f * kInt8Max * kInt8Max;
inline constexpr uint8_t kE4m3NaN = 0x7f;
inline constexpr uint8_t kE8m0NaN = 0xff;
inline constexpr uint8_t kE8m0One = 127;  // 2^0
inline constexpr uint16_t kBf16NaN = 0x7fc0;

MOE_EP_HD uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}

MOE_EP_HD float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
#endif
}

MOE_EP_HD bool is_nan(float x) { return (float_bits(x) & 0x7fffffffu) > 0x7f800000u; }
MOE_EP_HD bool is_finite(float x) { return (float_bits(x) & 0x7f800000u) != 0x7f800000u; }
MOE_EP_HD float abs_f(float x) { return bits_float(float_bits(x) & 0x7fffffffu); }
// max(a, b) where a is never NaN and a NaN b is skipped. Written as a comparison rather than
// fmaxf: glibc's fmaxf returns NaN for a signalling-NaN operand (IEEE 754-2008 maxNum), which
// would make the host forget the running maximum while the GPU's max.f32 skips it.
MOE_EP_HD float max_skip_nan(float a, float b) { return b > a ? b : a; }

MOE_EP_HD float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Round to nearest even; every NaN becomes the canonical 0x7fc0.
MOE_EP_HD uint16_t float_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if (is_nan(x)) return kBf16NaN;
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

// OCP e4m3 with saturation to +-448; NaN (either sign) -> 0x7f. Inf saturates to 448 here;
// formats that must not turn Inf into a finite value handle it before calling this.
MOE_EP_HD uint8_t e4m3_satfinite(float x) {
  if (is_nan(x)) return kE4m3NaN;
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// Exact: every e4m3 value is a float. 0x7f and 0xff are NaN.
MOE_EP_HD float e4m3_to_float(uint8_t q) {
  const uint32_t sign = static_cast<uint32_t>(q & 0x80) << 24;
  const uint32_t exp = (q >> 3) & 0xf;
  const uint32_t man = q & 0x7;
  if (exp == 0xf && man == 0x7) return bits_float(0x7fc00000u | sign);
  if (exp == 0) {
    // subnormal: man * 2^-9, exact in float
    float v = static_cast<float>(man) * 0.001953125f;
    return bits_float(float_bits(v) | sign);
  }
  return bits_float(sign | ((exp + 120u) << 23) | (man << 20));
}

// OCP e2m1, round to nearest even, saturating at +-6, by comparisons with the midpoints of the e2m1
// grid (ties go to the even code). sm_90 has no e2m1 conversion instruction, and the header's
// emulation is ~4x slower than this in the dispatch kernel; tests/test_gpu_formats.cu checks on the
// GPU that the two agree on all 2^32 float bit patterns.
MOE_EP_HD uint8_t e2m1_rne_by_midpoints(float x) {
  const float a = abs_f(x);
  const uint32_t sign = (float_bits(x) >> 28) & 0x8u;
  // Branch-free: count the midpoints below |x|. Strict > where the tie goes down to the even
  // code (0.25 -> 0, 1.25 -> 1, 2.5 -> 2, 5 -> 4), >= where it goes up (0.75 -> 1, 1.75 -> 2,
  // 3.5 -> 4). Above 5 everything saturates to code 7 (6.0), Inf included.
  const uint32_t code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                        (a >= 3.5f) + (a > 5.0f);
  return static_cast<uint8_t>(sign | code);
}

// The CUDA header's conversion: the definition of e2m1 rounding that both paths must match.
MOE_EP_HD uint8_t e2m1_rne_by_header(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)) & 0xf;
}

#ifdef __CUDACC__
// Out of line on the device so that the rare NaN path is a branch, not if-converted code that
// every element pays for (it tripled the mxfp4 dispatch kernel's time).
__device__ __noinline__ inline uint8_t e2m1_rne_nan_path(float x) { return e2m1_rne_by_header(x); }
#endif

MOE_EP_HD uint8_t e2m1_rne(float x) {
#ifdef __CUDA_ARCH__
  return is_nan(x) ? e2m1_rne_nan_path(x) : e2m1_rne_by_midpoints(x);
#else
  return e2m1_rne_by_header(x);
#endif
}

MOE_EP_HD float e2m1_to_float(uint8_t q) {
  // magnitudes of codes 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6
  // codes 4..7 are 2^((m >> 1) - 1) * (1 or 1.5): 2, 3, 4, 6
  const uint32_t m = q & 0x7;
  float v = m < 4 ? 0.5f * static_cast<float>(m)
                  : static_cast<float>(1u << ((m >> 1) - 1)) * (m & 1 ? 1.5f : 1.0f);
  return (q & 0x8) ? -v : v;
}

// 2^(b-127); 0xff is NaN; b = 0 is the subnormal 2^-127.
MOE_EP_HD float e8m0_to_float(uint8_t b) {
  if (b == kE8m0NaN) return bits_float(0x7fc00000u);
  if (b == 0) return bits_float(0x00400000u);
  return bits_float(static_cast<uint32_t>(b) << 23);
}

// 2^n for -126 <= n <= 127, exact.
MOE_EP_HD float exp2i(int n) { return bits_float(static_cast<uint32_t>(n + 127) << 23); }

// The smallest bf16 at or above a float x >= 0 (finite, below the largest bf16): a scale rounded
// up, so that amax / scale never exceeds the code range. Exact when x is a bf16 value.
MOE_EP_HD uint16_t bf16_round_up(float x) {
  return static_cast<uint16_t>((float_bits(x) + 0xffffu) >> 16);
}

// 1 / s for s > 0, clamped to FLT_MAX where it overflows (s < 2^-128): an encode multiplier that
// keeps zeros zero.
MOE_EP_HD float clamped_reciprocal(float s) {
  const float r = 1.0f / s;
  return is_finite(r) ? r : 3.40282347e38f;
}

// Round to the nearest integer, ties to even, for |y| <= 2^22: the GPU's cvt.rni, the host's
// nearbyint in the default rounding mode.
MOE_EP_HD int rne_int(float y) {
#ifdef __CUDA_ARCH__
  return __float2int_rn(y);
#else
  return static_cast<int>(std::nearbyint(y));
#endif
}

// Symmetric int8: y rounded to the nearest integer (ties to even) after clamping to [-127, 127],
// as a two's complement byte; NaN gives 0. The byte 0x80 (-128) is never produced.
MOE_EP_HD uint8_t int8_satfinite(float y) {
  if (is_nan(y)) return 0;
  y = y > kInt8Max ? kInt8Max : (y < -kInt8Max ? -kInt8Max : y);
  return static_cast<uint8_t>(static_cast<int8_t>(rne_int(y)));
}

MOE_EP_HD float int8_to_float(uint8_t q) { return static_cast<float>(static_cast<int8_t>(q)); }

// e3m4 with bias 1 and no Inf or NaN: bit 7 the sign, then eee mmmm. e = 0: m * 2^-4 (subnormal,
// step 1/16); e >= 1: (16 + m) * 2^(e - 5), i.e. (1 + m/16) * 2^(e - 1), up to 124. As a
// magnitude code, c = 16k + round(|x| * 2^(4 - k)) with k = max(floor(log2 |x|), 0): the
// subnormal/normal boundary and a mantissa carrying into the next exponent need no special case.
// Rounds to nearest, ties to the even code; |x| above 124 saturates to 124, and so does NaN (only
// the discarded e3m4 candidate of a non-finite block passes one). The multiply by 2^(4 - k) is
// exact.
MOE_EP_HD uint8_t e3m4_satfinite(float x) {
  const uint32_t sign = (float_bits(x) >> 24) & 0x80u;
  float a = abs_f(x);
  a = a <= kE3m4Max ? a : kE3m4Max;
  const int biased = static_cast<int>(float_bits(a) >> 23);  // the sign bit is clear
  const int k = biased > 127 ? biased - 127 : 0;             // 0 .. 6
  const int code = 16 * k + rne_int(a * exp2i(4 - k));       // 0 .. 127
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(code));
}

// Exact: every e3m4 value is a float.
MOE_EP_HD float e3m4_to_float(uint8_t q) {
  const int e = (q >> 4) & 7, m = q & 15;
  const float v = static_cast<float>(e != 0 ? 16 + m : m) * exp2i((e != 0 ? e : 1) - 5);
  return (q & 0x80) ? -v : v;
}

// --- roundings by one addition, for the kernels' int8/e3m4 encoder -------------------------------
// The device's float-to-int conversions (cvt.rni) and int-to-float conversions issue at a
// fraction of the rate of a float add, and the int8/e3m4 encoder rounds every element with both
// codes. These helpers round with float additions instead and give the same code and the same
// decoded value as int8_satfinite / e3m4_satfinite with int8_to_float / e3m4_to_float on their
// domains (tests/test_formats_int8_e3m4.cc compares them on every float of those domains, up to the
// low byte, which cannot move a float across a rounding boundary).

// a + b and a - b rounded to nearest even, never fused or reassociated (the intrinsics on the
// device; the host build has no -ffast-math): the roundings below depend on the exact sum being
// rounded once.
MOE_EP_HD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
MOE_EP_HD float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// 1.5 * 2^23: for |y| < 2^22, t = y + this lies in [2^23, 2^24), where floats are the integers,
// so the addition rounds y to the nearest integer q, ties to even (this constant is even), and
// float_bits(t) = 0x4b400000 + q: its low byte is q as a two's complement byte.
inline constexpr float kRoundToIntOffset = 12582912.0f;

// The int8 code of y, for |y| < 127.5 (where clamping to [-127, 127] cannot change the rounded
// value): t = int8_rounding_sum(y) has int8_satfinite(y) in the low byte of its bits, and
// t - kRoundToIntOffset is exactly int8_to_float of that code.
MOE_EP_HD float int8_rounding_sum(float y) { return add_rn(y, kRoundToIntOffset); }

// The offset c that rounds a magnitude 0 <= a <= 124 to the e3m4 grid by one addition. e3m4
// rounds a to r * 2^(k - 4), r an integer (nearest, ties to even), k = max(floor(log2 a), 0),
// and codes it as 16k + r (e3m4_satfinite). c is 2^(k + 19) plus 16k units of 2^(k - 4) in its
// low mantissa bits; the floats of its binade [2^(k + 19), 2^(k + 20)) are the multiples of
// 2^(k - 4), and a < 2^(k + 1) keeps a + c in it. So t = a + c is c + r * 2^(k - 4) (ties to
// even r, as 16k is even), and
//   float_bits(t) & 0xff = 16k + r, the magnitude code; t - c = r * 2^(k - 4), its value.
// From the biased exponent E = max(exponent of a, 127), k = E - 127:
//   float_bits(c) = (E + 19) << 23 | (E - 127) << 4 = E * (2^23 + 16) + 19 * 2^23 - 127 * 16.
MOE_EP_HD float e3m4_rounding_offset(float a) {
  const uint32_t biased = float_bits(a) >> 23;  // a >= 0: no sign bit
  const uint32_t e = biased > 127u ? biased : 127u;
  return bits_float(e * 0x800010u + (0x09800000u - 127u * 16u));
}

// The int8 scale word of a block, bf16_round_up(amax / 127), with a multiplication instead of
// the division: the same word for every bf16 amax >= 0 (tests/test_formats_int8_e3m4.cc checks all
// of them), though the two floats before the rounding up may differ.
inline constexpr float kInt8MaxReciprocal = 1.0f / kInt8Max;  // rounded to nearest
MOE_EP_HD uint16_t int8_scale_word(float amax) { return bf16_round_up(amax * kInt8MaxReciprocal); }

// floor(log2(a)) for finite a > 0, subnormals included.
MOE_EP_HD int floor_log2(float a) {
  const uint32_t u = float_bits(a);
  const int exp = static_cast<int>((u >> 23) & 0xff);
  if (exp != 0) return exp - 127;
  const uint32_t man = u & 0x7fffffu;
#ifdef __CUDA_ARCH__
  const int top = 31 - __clz(man);
#else
  const int top = 31 - __builtin_clz(man);
#endif
  return top - 149;
}

}  // namespace moe_ep::formats
