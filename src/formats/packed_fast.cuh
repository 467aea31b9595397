// Instruction-lean encoders for the data kernels, with the same bits as the traits of codecs.h.
// encode_lane<F> is what a kernel calls for one lane's 8 bf16 values (all 32 lanes together: it
// shuffles). For finite blocks it takes fast paths; whenever a lane's block holds Inf or NaN (or
// a subnormal or tiny block maximum) the whole warp takes the reference path of packed.cuh for
// that step, so the rare cases keep exactly the scalar rules.
//   amax:  the largest bf16 magnitude as an integer (magnitude bits order like the values for
//          finite numbers), four packed max instructions and integer shuffles, instead of a float
//          max and a finiteness test per element (two warp steps share one packed reduction
//          where a kernel has both at hand);
//   fp8:   the block's quotients 448/amax and amax/448 from a 128-entry table by the maximum's
//          mantissa, scaled by its exponent (no division); two-element conversions
//          (cvt.rn.satfinite.e4m3x2.f32) of the products x * (448/amax), each product rounded
//          exactly as the scalar encode rounds it;
//   mxfp4: rounding x to the e2m1 grid scaled by 2^e is one bf16x2 addition of a power of two
//          whose last place is the grid's step at x (e2m1x8_by_steps), and the code is the sum's
//          mantissa plus twice x's binade above 2^e, all on two elements at a time in integer
//          registers; for block maxima outside [2^-101, 2^122) the codes are counted from
//          comparisons in f16x2 against the e2m1 grid's rounding midpoints (e2m1x2);
//   int8/e3m4: the int8 codes and the block's code energy by float additions instead of
//          float-int conversions; the e3m4 codes only in the lanes whose block picks e3m4.
// tests/test_gpu_fast_codecs.cu and tests/test_gpu_formats.cu check each path against the scalar
// traits exhaustively.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "formats/packed.cuh"

namespace moe_ep::formats {

// bf16 bits of both halves of a word as floats: element 2i (low half) and 2i+1 (high half).
__device__ __forceinline__ float low_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float high_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// The largest bf16 magnitude (as 16-bit bits) of the block this lane belongs to, blocks of
// kLanes consecutive lanes. Finite magnitudes are below 0x7f80; Inf is 0x7f80, NaN above.
template <int kLanes>
__device__ __forceinline__ uint32_t block_amax_bits(const uint4& v) {
  constexpr uint32_t kAbs = 0x7fff7fffu;
  const uint32_t m = __vmaxu2(__vmaxu2(v.x & kAbs, v.y & kAbs), __vmaxu2(v.z & kAbs, v.w & kAbs));
  uint32_t a = max(m & 0xffffu, m >> 16);
#pragma unroll
  for (int offset = kLanes / 2; offset >= 1; offset /= 2) {
    a = max(a, __shfl_xor_sync(0xffffffffu, a, offset));
  }
  return a;
}

// block_amax_bits for two warp steps at once: step 0's maximum in the low half, step 1's in the
// high half. The two steps' lane maxima share one packed word, so the reduction over the block's
// lanes is one shuffle and one packed max an offset for both steps instead of two each.
template <int kLanes>
__device__ __forceinline__ uint32_t block_amax_bits_x2(const uint4& v0, const uint4& v1) {
  constexpr uint32_t kAbs = 0x7fff7fffu;
  const uint32_t m0 =
      __vmaxu2(__vmaxu2(v0.x & kAbs, v0.y & kAbs), __vmaxu2(v0.z & kAbs, v0.w & kAbs));
  const uint32_t m1 =
      __vmaxu2(__vmaxu2(v1.x & kAbs, v1.y & kAbs), __vmaxu2(v1.z & kAbs, v1.w & kAbs));
  // Low halves of both steps in one word, high halves in the other.
  uint32_t a = __vmaxu2(__byte_perm(m0, m1, 0x5410), __byte_perm(m0, m1, 0x7632));
#pragma unroll
  for (int offset = kLanes / 2; offset >= 1; offset /= 2) {
    a = __vmaxu2(a, __shfl_xor_sync(0xffffffffu, a, offset));
  }
  return a;
}

// Two products, converted with one instruction; byte 0 is `lo`'s code.
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
  return static_cast<uint32_t>(
      __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3));
}

// 8 finite values times `scale`, as e4m3 codes (element j in byte j).
__device__ __forceinline__ uint2 e4m3x8(const uint4& v, float scale) {
  const uint32_t p0 = e4m3x2(low_bf16(v.x) * scale, high_bf16(v.x) * scale);
  const uint32_t p1 = e4m3x2(low_bf16(v.y) * scale, high_bf16(v.y) * scale);
  const uint32_t p2 = e4m3x2(low_bf16(v.z) * scale, high_bf16(v.z) * scale);
  const uint32_t p3 = e4m3x2(low_bf16(v.w) * scale, high_bf16(v.w) * scale);
  return make_uint2(p0 | (p1 << 16), p2 | (p3 << 16));
}

// The quotient table of fp8_params_by_table (codecs.h) in constant memory, one copy per
// translation unit (no relocatable device code): 1 KiB each.
static __constant__ Fp8Quotients kFp8Quotients = make_fp8_quotients();

// Fp8BlockWire::block_params for a maximum (bf16 magnitude bits) in fp8_by_table's range: a
// table load and integer additions instead of a division (v29).
__device__ __forceinline__ Fp8BlockWire::Params fp8_block_params_by_table(uint32_t amax_bits) {
  const float2 q = reinterpret_cast<const float2*>(kFp8Quotients.q)[amax_bits & 0x7fu];
  return fp8_params_by_table(q.x, q.y, amax_bits);
}

// e2m1 codes of two values |v| < 8 held in f16x2, counted as the midpoints below them: strict
// where the tie goes down to the even code (0.25, 1.25, 2.5, 5), inclusive where it goes up
// (0.75, 1.75, 3.5): the same rule as e2m1_rne_by_midpoints. Returns the codes in f16x2.
__device__ __forceinline__ __half2 e2m1_magnitude_codes(__half2 a) {
  const auto above = [](__half2 x, float t) { return __hgt2(x, __float2half2_rn(t)); };
  const auto at_or_above = [](__half2 x, float t) { return __hge2(x, __float2half2_rn(t)); };
  __half2 c = above(a, 0.25f);
  c = __hadd2(c, at_or_above(a, 0.75f));
  c = __hadd2(c, above(a, 1.25f));
  c = __hadd2(c, at_or_above(a, 1.75f));
  c = __hadd2(c, above(a, 2.5f));
  c = __hadd2(c, at_or_above(a, 3.5f));
  c = __hadd2(c, above(a, 5.0f));
  return c;
}

// Codes of one word's two elements scaled by 2^-e (inv): nibble 0 is element 2i, nibble 1 2i+1.
__device__ __forceinline__ uint32_t e2m1x2(uint32_t w, float inv) {
  const float lo = low_bf16(w) * inv;
  const float hi = high_bf16(w) * inv;
  // |v| < 8: exact in f16 down to 2^-24; anything smaller is below the first midpoint either way.
  const __half2 mag = __floats2half2_rn(fabsf(lo), fabsf(hi));
  const __half2 c = e2m1_magnitude_codes(mag);
  const uint32_t code_lo = static_cast<uint32_t>(__low2float(c));
  const uint32_t code_hi = static_cast<uint32_t>(__high2float(c));
  // The sign comes from the scaled value's sign bit, as in the scalar rule (-0 gives code 8).
  const uint32_t sign_lo = (__float_as_uint(lo) >> 28) & 0x8u;
  const uint32_t sign_hi = (__float_as_uint(hi) >> 28) & 0x8u;
  return (code_lo | sign_lo) | ((code_hi | sign_hi) << 4);
}

// e2m1 codes of a lane's 8 bf16 values in a block with e = floor(log2(amax)) - 2, for block
// maxima in [2^-101, 2^122) (mxfp4_by_steps) or a zero block, with `one` = the bf16 bits of 2^e
// in both halves (0 for a zero block). Per element, on both halves of a word at once:
//   B   = max(binade of |x|, 2^e): the grid's step at x is B / 2 (e2m1 steps 0.5, 1, 2 on the
//         scaled binades below 2, [2, 4), [4, 8));
//   M   = 64 B, whose last place (bf16 keeps 7 mantissa bits) is that step;
//   t   = |x| + M in bf16, rounded to nearest even: |x| < 2B, so t stays in M's binade and its
//         mantissa is n = |x| / step rounded, ties to the even n (0 .. 4);
//   code = n + 2 log2(B / 2^e), at most 7: n on [0, 2), n + 2 on [2, 4), n + 4 on [4, 8) (8
//         saturates to 6.0's code 7), with the code's parity n's: the scalar rule (nearest,
//         ties to the even code, saturating). The sign is x's sign bit, -0 included.
// Exact because M and t are normal and finite: B <= amax's binade < 2^122 keeps M below 2^128,
// and from amax >= 2^-101 the step is at least 2^-104, so a subnormal |x| (< 2^-126) rounds to
// n = 0 whether or not the addition keeps it. 12 to 13 integer instructions a word, against
// about 30 for e2m1x2's comparisons and conversions.
inline constexpr uint32_t kMxfp4StepsMinAmax = 0x0d00;  // bf16 bits of 2^-101
inline constexpr uint32_t kMxfp4StepsEndAmax = 0x7c80;  // bf16 bits of 2^122

__device__ __forceinline__ bool mxfp4_by_steps(uint32_t amax_bits) {
  return amax_bits == 0 || (amax_bits >= kMxfp4StepsMinAmax && amax_bits < kMxfp4StepsEndAmax);
}

// The e2m1 codes of one word's two elements: element 2i's in bits 0-3, 2i+1's in bits 16-19.
__device__ __forceinline__ uint32_t e2m1_pair_by_steps(uint32_t w, uint32_t one) {
  const uint32_t binade = __vmaxu2(w & 0x7f807f80u, one);
  const uint32_t m = binade + 0x03000300u;  // 64 B: six binades up
  uint32_t t;
  asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(t) : "r"(w & 0x7fff7fffu), "r"(m));
  // (binade - one) >> 6 is 2 log2(B / 2^e) in each half: 0, 0x80 or 0x100 before the shift,
  // whose low bits are zero, so the high half shifts nothing into the low one.
  const uint32_t code = __vminu2(t - m + ((binade - one) >> 6), 0x00070007u);
  return code | ((w >> 12) & 0x00080008u);
}

__device__ __forceinline__ uint32_t e2m1x8_by_steps(const uint4& v, uint32_t one) {
  // Two words' codes side by side: y holds elements 0 and 2 in bits 0-3 and 8-11, 1 and 3 in
  // bits 16-19 and 24-27; folding the high half down by 12 bits puts 1 and 3 in bits 4-7 and
  // 12-15, and the low halves of two folds are the word (element 2i in the low nibble).
  const auto fold = [one](uint32_t a, uint32_t b) {
    const uint32_t y = e2m1_pair_by_steps(a, one) | (e2m1_pair_by_steps(b, one) << 8);
    return y | (y >> 12);
  };
  return __byte_perm(fold(v.x, v.y), fold(v.z, v.w), 0x5410);
}

// The block's scale byte and 2^-e for a zero block (the trait's zero-block parameters) or a
// maximum whose biased exponent is at least 2 (then e = exponent - 129 needs no clamping and
// 2^-e is a normal float), and 2^e's bf16 bits in both halves (0 for a zero block).
__device__ __forceinline__ Mxfp4Wire::Params mxfp4_fast_params(uint32_t a) {
  if (a == 0) return Mxfp4Wire::block_params(0.0f, false);
  Mxfp4Wire::Params params;
  const uint32_t stored = (a >> 7) - 2;  // e + 127 with e = floor(log2(amax)) - 2
  params.stored = static_cast<uint8_t>(stored);
  params.inv = __uint_as_float((254u - stored) << 23);  // 2^-e, exact
  return params;
}
__device__ __forceinline__ uint32_t mxfp4_one(uint32_t a) {
  return a == 0 ? 0u : (((a >> 7) - 2) << 7) * 0x00010001u;
}

// --- int8/e3m4 ---------------------------------------------------------------------------------
// The reference (lane_block_params + lane_encode) codes each element to int8 for the code energy
// and again for the output, with a float-to-int conversion each time, and the chosen candidate's
// decode converts back; the conversions issue at a fraction of the rate of float arithmetic. The
// fast path codes each element to int8 once, by a float addition (int8_rounding_sum of scalar.h),
// takes the code, its exact value q (for the energy, one exact fused multiply-add: q^2 and the
// running integer sum are below 2^24) and its decoded value from the same sum, and codes the
// elements of e3m4 blocks by another addition (e3m4_rounding_offset) only in the lanes whose
// block picked e3m4: on activation-like rows almost no block does, so the warp skips that branch.
//
// It covers blocks of zeros and finite blocks with 2^-119 <= amax < 2^120: there
//   - amax / 127 and amax * 2^-6 are normal floats, the latter exact, so the e3m4 scale is
//     s3 = amax / 64; both scales and their reciprocals are normal (no FLT_MAX clamp);
//   - |x * m8| <= amax * m8 (1 + u) < 127 (1 + u)^2 / (1 - u) < 127.5 (u = 2^-24, m8 = fl(1/s8),
//     s8 >= fl(amax / 127)), so clamping to [-127, 127] would not change the rounded integer and
//     int8_rounding_sum gives int8_satfinite's code;
//   - |x * m3| <= amax * fl(64 / amax) (1 + u) < 64 (1 + u)^2 < 124: e3m4's clamp is inactive;
//   - no product of a code and a scale overflows.
// The rest (Inf or NaN, tiny maxima, maxima from 2^120 up) sends the warp to the reference path.
inline constexpr uint32_t kInt8E3m4FastMinAmax = 0x0400;  // bf16 bits of 2^-119
inline constexpr uint32_t kInt8E3m4FastEndAmax = 0x7b80;  // bf16 bits of 2^120

__device__ __forceinline__ bool int8_e3m4_in_fast_range(uint32_t amax_bits) {
  return amax_bits == 0 || (amax_bits >= kInt8E3m4FastMinAmax && amax_bits < kInt8E3m4FastEndAmax);
}

// The four low bytes of t0..t3's bits as one word, t0's in byte 0.
__device__ __forceinline__ uint32_t low_bytes(float t0, float t1, float t2, float t3) {
  const uint32_t lo = __byte_perm(__float_as_uint(t0), __float_as_uint(t1), 0x0040);
  const uint32_t hi = __byte_perm(__float_as_uint(t2), __float_as_uint(t3), 0x0040);
  return __byte_perm(lo, hi, 0x5410);
}

// The sign bits of the four bf16 values of w0 (elements 0, 1) and w1 (2, 3) at bit 7 of bytes
// 0-3: the high byte of each bf16, masked.
__device__ __forceinline__ uint32_t sign_bytes(uint32_t w0, uint32_t w1) {
  return __byte_perm(w0, w1, 0x7531) & 0x80808080u;
}

// 1 / s rounded to nearest even, for s and 1 / s normal floats: rcp.rn.ftz is IEEE's correctly
// rounded reciprocal there (flushing to zero only touches subnormal inputs and results), so it
// equals clamped_reciprocal(s), without the out-of-line subnormal handling of 1.0f / s (whose
// call made the combine kernel spill registers).
__device__ __forceinline__ float rcp_normal(float s) {
  float r;
  asm("rcp.rn.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
  return r;
}

// One lane's int8/e3m4 encode for a block in the fast range (see above), amax_bits its bf16 amax.
// With kValues, values[j] is also 0 + element j's decoded value under the chosen code, the bits
// of 0 + F::decode(code, word), taken from the encode's own sums, so a round trip in registers
// (lane_round_trip_add) needs no decode. The int8 values need no addition for it: q8 is never -0
// (t8 - offset is +0 where they are equal), so q8 * s8 is never -0 either; the e3m4 values
// carry x's sign and add the zero. tests/test_gpu_formats.cu checks both variants against
// the trait on every bf16 in every position of a block.
template <bool kValues = false>
__device__ __forceinline__ void int8_e3m4_fast(const uint4& v, uint32_t amax_bits, uint2& word,
                                               Int8E3m4Wire::Params& params,
                                               float* values = nullptr) {
  using F = Int8E3m4Wire;
  // A zero block computes with the scales of amax = 1: its elements (+-0) code as int8 0 and
  // decode to +0, and it never takes e3m4 (F::block_params gives it no e3m4 candidate); its
  // word and multipliers are set to F::block_params' zeros at the end.
  const float amax = __uint_as_float((amax_bits != 0 ? amax_bits : 0x3f80u) << 16);
  // The int8 scale and multiplier of F::block_params: the same word (int8_scale_word equals
  // bf16_round_up(amax / 127)) and the same reciprocal. e3m4's are computed only in the lanes
  // whose block takes e3m4 (only F::pick reads a candidate's fields; the result's e3m4 fields
  // are left 0 otherwise).
  const uint16_t w8 = int8_scale_word(amax);
  const float s8 = bf16_to_float(w8);
  const float m8 = rcp_normal(s8);
  float energy = 0.0f;
  uint32_t codes[2];
  // Each loop below unpacks a half of the lane's words where it uses it: unpacking all 8 values
  // once, for both loops, made combine_kernel and ce_reduce_kernel spill 32 bytes (ptxas).
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint32_t w0 = half == 0 ? v.x : v.z, w1 = half == 0 ? v.y : v.w;
    const float x[4] = {low_bf16(w0), high_bf16(w0), low_bf16(w1), high_bf16(w1)};
    float t8[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // F::code_energy: int8_satfinite(x * m8) as a float, squared and added (exact).
      t8[j] = int8_rounding_sum(x[j] * m8);
      const float q8 = sub_rn(t8[j], kRoundToIntOffset);
      energy = __fmaf_rn(q8, q8, energy);
      if constexpr (kValues) values[4 * half + j] = q8 * s8;
    }
    codes[half] = low_bytes(t8[0], t8[1], t8[2], t8[3]);
  }
  // The block's energy over its 4 lanes (exact, so in any order).
#pragma unroll
  for (int offset = 1; offset < F::kBlock / kElemsPerLane; offset *= 2) {
    energy = energy + __shfl_xor_sync(0xffffffffu, energy, offset);
  }
  params = F::Params{w8, m8, 0, 0.0f};
  if (amax_bits != 0 && energy < kInt8E3m4EnergyLimit) {  // F::pick
    const uint16_t w3 = bf16_round_up(amax * 0.015625f);
    const float s3 = bf16_to_float(w3);
    const float m3 = rcp_normal(s3);
    params = F::Params{static_cast<uint16_t>(w3 | F::kE3m4Bit), m3,
                       static_cast<uint16_t>(w3 | F::kE3m4Bit), m3};
    // e3m4: the code's sign is x's (m3 > 0); its magnitude code and value come from
    // a = |x * m3| and one addition (e3m4_rounding_offset).
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t w0 = half == 0 ? v.x : v.z, w1 = half == 0 ? v.y : v.w;
      const float x[4] = {low_bf16(w0), high_bf16(w0), low_bf16(w1), high_bf16(w1)};
      float t3[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float a = fabsf(x[j] * m3);
        const float c = e3m4_rounding_offset(a);
        t3[j] = add_rn(a, c);
        if constexpr (kValues) {
          // 0 + e3m4_to_float(code) * s3 with x's sign: a -0 comes out +0 (see below).
          values[4 * half + j] = add_rn(0.0f, copysignf(sub_rn(t3[j], c) * s3, x[j]));
        }
      }
      codes[half] = low_bytes(t3[0], t3[1], t3[2], t3[3]) | sign_bytes(w0, w1);
    }
  }
  word = make_uint2(codes[0], codes[1]);
  if (amax_bits == 0) params = F::Params{};
}

// One lane's 8 values of a row in wire format F, with their block's parameters. All 32 lanes
// must call it. The fast paths give the bits of lane_block_params + lane_encode.
template <typename F>
__device__ __forceinline__ void encode_lane(const uint4& v, LaneWord<F>& word,
                                            typename F::Params& params) {
  if constexpr (std::is_same_v<F, Fp8BlockWire>) {
    const uint32_t a = block_amax_bits<F::kBlock / kElemsPerLane>(v);
    if (!__all_sync(0xffffffffu, fp8_by_table(a))) {  // Inf, NaN or a tiny maximum: rare
      params = lane_block_params<F>(v);
      word = lane_encode<F>(v, params);
      return;
    }
    params = fp8_block_params_by_table(a);
    word = e4m3x8(v, params.inv);
  } else if constexpr (std::is_same_v<F, Fp8DirectWire>) {
    // Inf must become NaN (the scalar rule), which satfinite would not do: such lanes (rare)
    // take the scalar encode, which needs no shuffle for a format without blocks.
    params = F::block_params(0.0f, false);
    word = lane_has_inf_or_nan(v) ? lane_encode<F>(v, params) : e4m3x8(v, 1.0f);
  } else if constexpr (std::is_same_v<F, Mxfp4Wire>) {
    const uint32_t a = block_amax_bits<F::kBlock / kElemsPerLane>(v);
    if (__all_sync(0xffffffffu, mxfp4_by_steps(a))) {
      params = mxfp4_fast_params(a);
      word = e2m1x8_by_steps(v, mxfp4_one(a));
      return;
    }
    // Else fast when the block is all zeros or its maximum is normal with a biased exponent >= 2
    // (mxfp4_fast_params).
    const bool fast = a == 0 || (a >= 0x0100u && a < 0x7f80u);
    if (!__all_sync(0xffffffffu, fast)) {
      params = lane_block_params<F>(v);
      word = lane_encode<F>(v, params);
      return;
    }
    params = mxfp4_fast_params(a);
    word = e2m1x2(v.x, params.inv) | (e2m1x2(v.y, params.inv) << 8) |
           (e2m1x2(v.z, params.inv) << 16) | (e2m1x2(v.w, params.inv) << 24);
  } else if constexpr (std::is_same_v<F, Int8E3m4Wire>) {
    const uint32_t a = block_amax_bits<F::kBlock / kElemsPerLane>(v);
    if (!__all_sync(0xffffffffu, int8_e3m4_in_fast_range(a))) {
      params = lane_block_params<F>(v);
      word = lane_encode<F>(v, params);
      return;
    }
    int8_e3m4_fast(v, a, word, params);
  } else {
    params = lane_block_params<F>(v);
    word = lane_encode<F>(v, params);
  }
}

// block_amax_bits of kChunks warp steps, two steps a packed reduction (block_amax_bits_x2).
template <int kLanes, int kChunks>
__device__ __forceinline__ void block_amax_bits_of_steps(const uint4 (&v)[kChunks],
                                                         uint32_t (&a)[kChunks]) {
#pragma unroll
  for (int u = 0; u + 1 < kChunks; u += 2) {
    const uint32_t both = block_amax_bits_x2<kLanes>(v[u], v[u + 1]);
    a[u] = both & 0xffffu;
    a[u + 1] = both >> 16;
  }
  if constexpr (kChunks % 2 != 0) a[kChunks - 1] = block_amax_bits<kLanes>(v[kChunks - 1]);
}

// encode_lane for the kChunks warp steps of a slice at once, for the formats whose fast path
// needs a block maximum in a range (fp8 blockwise: fp8_by_table; mxfp4: mxfp4_by_steps): the
// block maxima of every step first (two steps a packed reduction), then one vote for the whole
// slice; if any lane's block of any step leaves the fast range, every step takes encode_lane
// (which votes again and, for such a step, takes the reference path; the reference gives the
// fast path's bits wherever both apply). One vote and one branch a slice instead of one a step.
// All 32 lanes must call it. Other formats: encode_lane step by step.
template <typename F, int kChunks>
__device__ __forceinline__ void encode_lanes(const uint4 (&v)[kChunks],
                                             LaneWord<F> (&word)[kChunks],
                                             typename F::Scale (&stored)[kChunks]) {
  if constexpr (std::is_same_v<F, Fp8BlockWire> || std::is_same_v<F, Mxfp4Wire>) {
    uint32_t a[kChunks];
    block_amax_bits_of_steps<F::kBlock / kElemsPerLane>(v, a);
    bool fast = true;
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      if constexpr (std::is_same_v<F, Fp8BlockWire>) {
        fast = fast && fp8_by_table(a[u]);
      } else {
        fast = fast && mxfp4_by_steps(a[u]);
      }
    }
    if (__all_sync(0xffffffffu, fast)) {
#pragma unroll
      for (int u = 0; u < kChunks; ++u) {
        if constexpr (std::is_same_v<F, Fp8BlockWire>) {
          const typename F::Params params = fp8_block_params_by_table(a[u]);
          stored[u] = params.stored;
          word[u] = e4m3x8(v[u], params.inv);
        } else {
          stored[u] = mxfp4_fast_params(a[u]).stored;
          word[u] = e2m1x8_by_steps(v[u], mxfp4_one(a[u]));
        }
      }
      return;
    }
  }
#pragma unroll
  for (int u = 0; u < kChunks; ++u) {
    typename F::Params params;
    encode_lane<F>(v[u], word[u], params);
    stored[u] = params.stored;
  }
}

// A round trip in registers: adds decode(encode(v)) element by element to acc, the bits that
// encode_lane, a store, a load and lane_decode_add would give, where `add` is true (all 32 lanes
// must call it: the encode shuffles). Combine's own rows take it (they are never sent). For
// int8/e3m4 in the fast range the decoded values are the encode's own (int8_e3m4_fast<true>),
// so there is no decode; every other case encodes and decodes.
template <typename F>
__device__ __forceinline__ void lane_round_trip_add(const uint4& v, bool add,
                                                    float (&acc)[kElemsPerLane]) {
  if constexpr (std::is_same_v<F, Int8E3m4Wire>) {
    const uint32_t a = block_amax_bits<F::kBlock / kElemsPerLane>(v);
    if (__all_sync(0xffffffffu, int8_e3m4_in_fast_range(a))) {
      typename F::Params params;
      LaneWord<F> word;
      float values[kElemsPerLane];
      int8_e3m4_fast<true>(v, a, word, params, values);
      if (add) {
        // acc + (0 + d) is acc + d for every acc but -0, which a sum from +0 never is.
#pragma unroll
        for (int j = 0; j < kElemsPerLane; ++j) acc[j] = acc[j] + values[j];
      }
      return;
    }
  }
  typename F::Params params;
  LaneWord<F> word;
  encode_lane<F>(v, word, params);
  typename F::Scale scale{};
  if constexpr (F::kBlock != 0) scale = params.stored;  // what the send stores
  if (add) lane_decode_add<F>(word, scale, acc);
}

}  // namespace moe_ep::formats
