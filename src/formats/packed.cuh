// Packed device versions of the wire codecs of formats/codecs.h, for the data kernels: a warp
// walks a row 256 elements at a time, each lane holding 8 consecutive bf16 values (one 16-byte
// load). Blocks of 128 (fp8) or 32 (mxfp4, int8/e3m4) elements span 16 or 4 lanes, whose amax
// (and, for int8/e3m4, the code energy that picks the code) is combined with shuffles. The
// arithmetic per element is exactly F::block_params / pick_code / encode / decode, or (the
// decodes of e4m3 and int8/e3m4 codes) builds the same exact code values another way, so the
// result equals the scalar codec bit for bit (tests/test_gpu_formats.cu and
// tests/test_gpu_fast_codecs.cu check it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "formats/codecs.h"

namespace moe_ep::formats {

// Elements one lane holds: one 16-byte vector of bf16.
inline constexpr int kElemsPerLane = 8;

// What one lane's 8 elements occupy on the wire: 16, 8 or 4 bytes.
template <typename F>
using LaneWord = std::conditional_t<F::kBitsPerElem == 16, uint4,
                                    std::conditional_t<F::kBitsPerElem == 8, uint2, uint32_t>>;

template <typename F>
inline constexpr int kLaneWordBytes = static_cast<int>(sizeof(LaneWord<F>));

__device__ __forceinline__ uint16_t lane_elem(const uint4& v, int j) {
  const uint32_t w = j < 2 ? v.x : j < 4 ? v.y : j < 6 ? v.z : v.w;
  return static_cast<uint16_t>((j & 1) ? (w >> 16) : (w & 0xffffu));
}

// Block parameters of the block this lane's elements belong to. All 32 lanes must call it
// (shuffles); lanes past the end of the row pass zeros and their result is unused.
template <typename F>
__device__ __forceinline__ typename F::Params lane_block_params(const uint4& v) {
  if constexpr (F::kBlock == 0) {
    return F::block_params(0.0f, false);
  } else {
    float amax = 0.0f;
    int nonfinite = 0;
#pragma unroll
    for (int j = 0; j < kElemsPerLane; ++j) {
      const float f = bf16_to_float(lane_elem(v, j));
      amax = max_skip_nan(amax, abs_f(f));
      nonfinite |= is_finite(f) ? 0 : 1;
    }
    constexpr int kLanesPerBlock = F::kBlock / kElemsPerLane;  // 16 or 4
#pragma unroll
    for (int offset = kLanesPerBlock / 2; offset >= 1; offset /= 2) {
      amax = max_skip_nan(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
      nonfinite |= __shfl_xor_sync(0xffffffffu, nonfinite, offset);
    }
    typename F::Params p = F::block_params(amax, nonfinite != 0);
    if constexpr (F::kPicksCode) {
      // pick_code: the block's code energy, an integer sum that fp32 adds exactly in any order.
      float energy = 0.0f;
#pragma unroll
      for (int j = 0; j < kElemsPerLane; ++j) energy = energy + F::code_energy(lane_elem(v, j), p);
#pragma unroll
      for (int offset = 1; offset < kLanesPerBlock; offset *= 2) {
        energy = energy + __shfl_xor_sync(0xffffffffu, energy, offset);
      }
      p = F::pick(p, energy);
    }
    return p;
  }
}

template <typename F>
__device__ __forceinline__ LaneWord<F> lane_encode(const uint4& v, typename F::Params p) {
  if constexpr (F::kBitsPerElem == 16) {
    return v;  // bf16 travels as is
  } else if constexpr (F::kBitsPerElem == 8) {
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      lo |= static_cast<uint32_t>(F::encode(lane_elem(v, j), p)) << (8 * j);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      hi |= static_cast<uint32_t>(F::encode(lane_elem(v, 4 + j), p)) << (8 * j);
    }
    return make_uint2(lo, hi);
  } else {
    uint32_t w = 0;  // element 2i in the low nibble of byte i
#pragma unroll
    for (int j = 0; j < kElemsPerLane; ++j) {
      w |= static_cast<uint32_t>(F::encode(lane_elem(v, j), p) & 0xf) << (4 * j);
    }
    return w;
  }
}

// The f16x2 whose bits are `bits`.
__device__ __forceinline__ __half2 half2_of_bits(uint32_t bits) {
  __half2 h;
  memcpy(&h, &bits, sizeof(h));
  return h;
}

// Elements 2 pair and 2 pair + 1 of a lane's 8 e4m3 codes as floats, through the hardware
// e4m3x2 -> f16x2 conversion: exact (every e4m3 value is a half, and every half a float), so the
// values equal formats::e4m3_to_float's; only the bits of a NaN may differ.
__device__ __forceinline__ float2 e4m3_pair_of_lane(const uint2& w, int pair) {
  const uint32_t word = pair < 2 ? w.x : w.y;
  const auto two = static_cast<__nv_fp8x2_storage_t>(word >> (16 * (pair & 1)));
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3);
  __half_raw lo_raw, hi_raw;
  lo_raw.x = h.x;
  hi_raw.x = h.y;
  return make_float2(__half2float(__half(lo_raw)), __half2float(__half(hi_raw)));
}

// out[j] = 0 + decode(element j) for fp8 blockwise (the sum a reduce of one row starts from), by
// one fused multiply-add a value: 0 + RN(c * s) and RN(c * s + 0) round the same exact product
// once, so the bits are lane_decode_add's into zeros with 8 additions fewer. Only for a sum that
// starts at zero (a running sum would round differently), and only for scales s >= 2^-126 (every
// scale of fp8_by_table's range): then no nonzero product rounds to zero (the smallest, 2^-9 *
// 2^-126, is far above 2^-150), where the two forms differ (-0 + 0 is +0, a fused -tiny + 0 is -0).
__device__ __forceinline__ void lane_decode_from_zero(const uint2& w, float s,
                                                      float (&out)[kElemsPerLane]) {
#pragma unroll
  for (int pair = 0; pair < kElemsPerLane / 2; ++pair) {
    const float2 v = e4m3_pair_of_lane(w, pair);
    out[2 * pair] = __fmaf_rn(v.x, s, 0.0f);
    out[2 * pair + 1] = __fmaf_rn(v.y, s, 0.0f);
  }
}

// acc[j] = acc[j] + decode(element j): one rounding for the product, one for the sum. e4m3
// codes go through e4m3_pair_of_lane; a NaN sum leaves the kernel as the canonical bf16 NaN
// (lane_pack_bf16).
template <typename F>
__device__ __forceinline__ void lane_decode_add(const LaneWord<F>& w, typename F::Scale s,
                                                float (&acc)[kElemsPerLane]) {
  if constexpr (F::kIsFp8) {
#pragma unroll
    for (int pair = 0; pair < kElemsPerLane / 2; ++pair) {
      const float2 v = e4m3_pair_of_lane(w, pair);
      float lo = v.x;
      float hi = v.y;
      if constexpr (F::kBlock != 0) {
        lo = lo * s;
        hi = hi * s;
      }
      acc[2 * pair] = acc[2 * pair] + lo;
      acc[2 * pair + 1] = acc[2 * pair + 1] + hi;
    }
  } else if constexpr (std::is_same_v<F, Int8E3m4Wire>) {
    // Two codes at a time as an f16x2 pair of exact values (int8: integers to 128; e3m4: 5
    // significant bits from 2^-4 to 124), then per element the reference's product with the
    // scale and sum. The pair is built from bits with one packed instruction instead of an
    // int-to-float conversion per element, which issues at a fraction of the rate. With f = the
    // code with its sign bit flipped:
    //   int8: f16 bits 0x6400 | f are the value 1024 + f = 1152 + q (q the signed code), so
    //         subtracting 1152 gives q;
    //   e3m4: the magnitude bits eee mmmm at f16 bits 6-12 (exponent field e, mantissa m << 6)
    //         and the sign at bit 15 are the value times 2^-14, for e = 0 (an f16 subnormal
    //         m * 2^-18) too, so multiplying by 2^14 gives the value, -0 for the code 0x80.
    const float scale = bf16_to_float(static_cast<uint16_t>(s & 0x7fffu));
    const bool e3m4 = F::is_e3m4(s);
#pragma unroll
    for (int pair = 0; pair < kElemsPerLane / 2; ++pair) {
      // codes 2 pair and 2 pair + 1 with their sign bits flipped, in bytes (pair & 1) * 2 + 0, 1
      const uint32_t flipped = (pair < 2 ? w.x : w.y) ^ 0x80808080u;
      __half2 v;
      if (e3m4) {
        const uint32_t p = __byte_perm(flipped, 0u, (pair & 1) ? 0x3424u : 0x1404u);  // bytes 1, 3
        const uint32_t bits = (~p & 0x80008000u) | ((p >> 2) & 0x1fc01fc0u);
        v = __hmul2(half2_of_bits(bits), half2_of_bits(0x74007400u));  // times 2^14
      } else {
        // the codes in bytes 0 and 2, 0x64 in bytes 1 and 3
        const uint32_t bits = __byte_perm(flipped, 0x6464u, (pair & 1) ? 0x4342u : 0x4140u);
        v = __hsub2(half2_of_bits(bits), half2_of_bits(0x64806480u));  // minus 1152
      }
      acc[2 * pair] = acc[2 * pair] + __low2float(v) * scale;
      acc[2 * pair + 1] = acc[2 * pair + 1] + __high2float(v) * scale;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kElemsPerLane; ++j) {
      float d;
      if constexpr (F::kBitsPerElem == 16) {
        d = F::decode(lane_elem(w, j), s);
      } else if constexpr (F::kBitsPerElem == 8) {
        // byte j of the lane's 8 bytes: bytes 0-3 in .x, 4-7 in .y, lowest byte first
        const uint32_t word = j < 4 ? w.x : w.y;
        d = F::decode(static_cast<uint8_t>((word >> (8 * (j & 3))) & 0xffu), s);
      } else {
        d = F::decode(static_cast<uint8_t>((w >> (4 * j)) & 0xf), s);
      }
      acc[j] = acc[j] + d;
    }
  }
}

// Whether any of one lane's 8 bf16 values is Inf or NaN (its exponent field all ones).
__device__ __forceinline__ bool lane_has_inf_or_nan(const uint4& v) {
  constexpr uint32_t kExp = 0x7f807f80u;
  return (__vcmpeq2(v.x & kExp, kExp) | __vcmpeq2(v.y & kExp, kExp) | __vcmpeq2(v.z & kExp, kExp) |
          __vcmpeq2(v.w & kExp, kExp)) != 0;
}

// Two floats to bf16 with the hardware's round-to-nearest-even (cvt.rn.bf16x2.f32, the same
// rounding as float_to_bf16), for values that are never NaN: a fast-range round trip (a finite
// code times a finite scale, plus zero). Without the NaN tests of pack_bf16x2, two per pair and
// four to fix it up, which were 64 of the 229 instructions of the fp8 blockwise whole-row loop's
// fast path for two warp steps (v37, SASS of combine_kernel).
__device__ __forceinline__ uint32_t pack_bf16x2_no_nan(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
}

// pack_bf16x2_no_nan with NaN replaced by the reference's canonical 0x7fc0.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t u = pack_bf16x2_no_nan(lo, hi);
  if (is_nan(lo)) u = (u & 0xffff0000u) | kBf16NaN;
  if (is_nan(hi)) u = (u & 0x0000ffffu) | (static_cast<uint32_t>(kBf16NaN) << 16);
  return u;
}

__device__ __forceinline__ uint4 lane_pack_bf16(const float (&acc)[kElemsPerLane]) {
  return make_uint4(pack_bf16x2(acc[0], acc[1]), pack_bf16x2(acc[2], acc[3]),
                    pack_bf16x2(acc[4], acc[5]), pack_bf16x2(acc[6], acc[7]));
}

// bf16(0 + x) for each of a lane's 8 bf16 values x whose NaNs are kBf16NaN (as lane_pack_bf16
// writes them): x itself, but -0, which becomes +0. What lane_round_trip_add<Bf16Wire> into zeros
// and lane_pack_bf16 give (the wire keeps bf16 as it is), with three integer operations a pair
// instead of the decode, the additions and the NaN tests. Bit 15 of a half of `nonzero` is set
// where its magnitude is not zero (magnitude + 0x7fff reaches 0x8000; no sum leaves its half).
__device__ __forceinline__ uint32_t bf16x2_plus_zero(uint32_t u) {
  const uint32_t nonzero = ((u & 0x7fff7fffu) + 0x7fff7fffu) & 0x80008000u;
  return u & (nonzero | 0x7fff7fffu);
}
__device__ __forceinline__ uint4 lane_bf16_plus_zero(const uint4& v) {
  return make_uint4(bf16x2_plus_zero(v.x), bf16x2_plus_zero(v.y), bf16x2_plus_zero(v.z),
                    bf16x2_plus_zero(v.w));
}

__device__ __forceinline__ uint4 lane_pack_bf16_no_nan(const float (&acc)[kElemsPerLane]) {
  return make_uint4(pack_bf16x2_no_nan(acc[0], acc[1]), pack_bf16x2_no_nan(acc[2], acc[3]),
                    pack_bf16x2_no_nan(acc[4], acc[5]), pack_bf16x2_no_nan(acc[6], acc[7]));
}

// lane_pack_bf16's bits with one test of the lane's 8 values first (an unordered compare each,
// chained): the NaN fix-ups run only in a lane that has a NaN.
__device__ __forceinline__ uint4 lane_pack_bf16_tested(const float (&acc)[kElemsPerLane]) {
  bool nan = false;
#pragma unroll
  for (int j = 0; j < kElemsPerLane; ++j) nan |= acc[j] != acc[j];
  if (__builtin_expect(nan, 0)) return lane_pack_bf16(acc);
  return lane_pack_bf16_no_nan(acc);
}

}  // namespace moe_ep::formats
