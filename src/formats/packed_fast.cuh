// Instruction-lean encoders for the data kernels, with the same bits as the traits of codecs.h.
// encode_lane<F> is what a kernel calls for one lane's 8 bf16 values (all 32 lanes together: it
// shuffles). For finite blocks it takes fast paths; whenever a lane's block holds Inf or NaN (or,
// for mxfp4, a subnormal block maximum) the whole warp takes the reference path of packed.cuh for
// that step, so the rare cases keep exactly the scalar rules.
//   amax:  the largest bf16 magnitude as an integer (magnitude bits order like the values for
//          finite numbers), four packed max instructions and integer shuffles, instead of a float
//          max and a finiteness test per element;
//   fp8:   two-element conversions (cvt.rn.satfinite.e4m3x2.f32) of the products x * (448/amax),
//          each product rounded exactly as the scalar encode rounds it;
//   mxfp4: the scaled value v = x * 2^-e is exact (a power of two), so its e2m1 code is counted
//          from comparisons of two values at a time in f16x2 (exact for |v| < 8) against the
//          rounding midpoints of the e2m1 grid.
// tests/test_gpu_formats.cu checks each path against the scalar traits exhaustively.
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

// One lane's 8 values of a row in wire format F, with their block's parameters. All 32 lanes
// must call it. The fast paths give the bits of lane_block_params + lane_encode.
template <typename F>
__device__ __forceinline__ void encode_lane(const uint4& v, LaneWord<F>& word,
                                            typename F::Params& params) {
  if constexpr (std::is_same_v<F, Fp8BlockWire>) {
    const uint32_t a = block_amax_bits<F::kBlock / kElemsPerLane>(v);
    if (__any_sync(0xffffffffu, a >= 0x7f80u)) {  // a block holds Inf or NaN
      params = lane_block_params<F>(v);
      word = lane_encode<F>(v, params);
      return;
    }
    params = F::block_params(__uint_as_float(a << 16), false);
    word = e4m3x8(v, params.inv);
  } else if constexpr (std::is_same_v<F, Fp8DirectWire>) {
    // Inf must become NaN (the scalar rule), which satfinite would not do: such lanes (rare)
    // take the scalar encode, which needs no shuffle for a format without blocks.
    constexpr uint32_t kExp = 0x7f807f80u;
    const uint32_t special = __vcmpeq2(v.x & kExp, kExp) | __vcmpeq2(v.y & kExp, kExp) |
                             __vcmpeq2(v.z & kExp, kExp) | __vcmpeq2(v.w & kExp, kExp);
    params = F::block_params(0.0f, false);
    word = special != 0 ? lane_encode<F>(v, params) : e4m3x8(v, 1.0f);
  } else if constexpr (std::is_same_v<F, Mxfp4Wire>) {
    const uint32_t a = block_amax_bits<F::kBlock / kElemsPerLane>(v);
    // Fast when the block is all zeros or its maximum is normal with a biased exponent >= 2
    // (then e = exponent - 129 needs no clamping and 2^-e is a normal float).
    const bool fast = a == 0 || (a >= 0x0100u && a < 0x7f80u);
    if (!__all_sync(0xffffffffu, fast)) {
      params = lane_block_params<F>(v);
      word = lane_encode<F>(v, params);
      return;
    }
    if (a == 0) {
      params = F::block_params(0.0f, false);
    } else {
      const uint32_t stored = (a >> 7) - 2;  // e + 127 with e = floor(log2(amax)) - 2
      params.stored = static_cast<uint8_t>(stored);
      params.inv = __uint_as_float((254u - stored) << 23);  // 2^-e, exact
    }
    word = e2m1x2(v.x, params.inv) | (e2m1x2(v.y, params.inv) << 8) |
           (e2m1x2(v.z, params.inv) << 16) | (e2m1x2(v.w, params.inv) << 24);
  } else {
    params = lane_block_params<F>(v);
    word = lane_encode<F>(v, params);
  }
}

}  // namespace moe_ep::formats
