// Wire-format traits (docs/design.md#wire-formats), one struct per format, used unchanged by
// the CPU reference and by the CUDA kernels. Each trait owns every fact about its format:
//   kBitsPerElem            payload bits per element (16, 8 or 4)
//   kBlock                  elements per scale; 0 means no scales (one "block" is the whole row)
//   kIsFp8                  the payload is e4m3 codes (the kernels decode those in pairs)
//   kPayloadType, kElemsPerPayloadScalar
//                           the ScalarType a payload row is viewed as, and how many elements one
//                           of its scalars holds (2 for e2m1 pairs), so columns = elems / that
//   kScaleType, Scale       the scale's ScalarType and C++ type
//   kPicksCode              the encoder picks one of two codes per block (int8/e3m4 blockwise)
// and encodes one block of kBlock elements at a time:
//   params = Format::block_params(amax, any_nonfinite)  // what the scale carries
//   params = pick_code<Format>(block, params)           // only where kPicksCode
//   code_i = Format::encode(x_i, params)
//   x_i'   = Format::decode(code_i, params.stored)
// src/formats/row_format.h turns a runtime dtype into these facts; src/formats/packed.cuh holds
// the kernels' packed versions of encode and decode, which must give the same bits.
#pragma once

#include <cstdint>
#include <string>

#include "formats/scalar.h"
#include "moe_ep/dtypes.h"
#include "moe_ep/errors.h"
#include "moe_ep/tensor.h"

namespace moe_ep::formats {

// bf16 on the wire: the row as is.
struct Bf16Wire {
  static constexpr int kBitsPerElem = 16;
  static constexpr int kBlock = 0;
  static constexpr bool kIsFp8 = false;
  static constexpr bool kPicksCode = false;
  static constexpr ScalarType kPayloadType = ScalarType::kBFloat16;
  static constexpr int kElemsPerPayloadScalar = 1;
  static constexpr ScalarType kScaleType = ScalarType::kUInt8;  // no scales
  using Code = uint16_t;
  using Scale = uint8_t;  // unused
  struct Params {
    Scale stored = 0;
  };
  MOE_EP_HD static Params block_params(float, bool) { return {}; }
  MOE_EP_HD static Code encode(uint16_t x_bf16, Params) { return x_bf16; }
  MOE_EP_HD static float decode(Code c, Scale) { return bf16_to_float(c); }
};

// fp8 e4m3 with one fp32 scale per 128 elements; every block is scaled to the full e4m3 range.
struct Fp8BlockWire {
  static constexpr int kBitsPerElem = 8;
  static constexpr int kBlock = kFp8BlockSize;
  static constexpr bool kIsFp8 = true;
  static constexpr bool kPicksCode = false;
  static constexpr ScalarType kPayloadType = ScalarType::kFloat8E4M3;
  static constexpr int kElemsPerPayloadScalar = 1;
  static constexpr ScalarType kScaleType = ScalarType::kFloat32;
  using Code = uint8_t;
  using Scale = float;
  struct Params {
    Scale stored = 1.0f;  // decode multiplier, amax / 448
    float inv = 1.0f;     // encode multiplier, 448 / amax
  };
  MOE_EP_HD static Params block_params(float amax, bool) {
    // amax comes from max_skip_nan, so it skips NaN (quiet or signalling) but keeps Inf. amax ==
    // Inf gives scale Inf and inv 0: finite values encode to 0 and decode to 0 * Inf = NaN, Inf/NaN
    // encode to NaN, so the whole block decodes to NaN. When 448/amax overflows (amax <
    // 448/FLT_MAX, ~1.3e-36) inv is clamped to FLT_MAX so that zeros stay zeros (docs/formats.md).
    if (amax == 0.0f) return {1.0f, 1.0f};
    float inv = kE4m3Max / amax;
    if (!is_finite(inv)) inv = 3.40282347e38f;
    return {amax / kE4m3Max, inv};
  }
  MOE_EP_HD static Code encode(uint16_t x_bf16, Params p) {
    return e4m3_satfinite(bf16_to_float(x_bf16) * p.inv);
  }
  MOE_EP_HD static float decode(Code c, Scale s) { return e4m3_to_float(c) * s; }
};

// Fp8BlockWire::block_params without a division, for the data kernels (packed_fast.cuh). A normal
// bf16 maximum is M * 2^E with M = 1 + m/128 (m its 7 mantissa bits), and 448 / (M * 2^E) is
// (448 / M) * 2^-E: rounding commutes with the power of two while the quotient stays a normal
// float. So the correctly rounded quotients are RN(448 / M) and RN(M / 448), from a 128-entry
// table, with E added to their exponent fields. They stay normal for E in [-117, 127]: 448 / M
// in (224, 448] times 2^-E lies in [2^-120, 2^126), M / 448 in [2^-9, 2^-7.8) times 2^E in
// [2^-126, 2^120). The table is built at compile time by the IEEE divisions block_params does.
// tests/test_formats_fp8_table.cc checks every finite bf16 maximum against block_params, and
// tests/test_gpu_fast_codecs.cu the kernels' encode.
struct Fp8Quotients {
  // q[2m] = RN(448 / M), q[2m + 1] = RN(M / 448): one 8-byte load a block on the device.
  alignas(8) float q[256];
};
constexpr Fp8Quotients make_fp8_quotients() {
  Fp8Quotients t{};
  for (int m = 0; m < 128; ++m) {
    const float mant = 1.0f + static_cast<float>(m) / 128.0f;  // exact
    t.q[2 * m] = kE4m3Max / mant;
    t.q[2 * m + 1] = mant / kE4m3Max;
  }
  return t;
}

// The table's range, on the block maximum's bf16 magnitude bits: zero, or a finite maximum with a
// biased exponent of at least 10 (2^-117). Inf, NaN and smaller maxima take block_params.
MOE_EP_HD constexpr bool fp8_by_table(uint32_t amax_bits) {
  return amax_bits - 0x0500u < 0x7f80u - 0x0500u || amax_bits == 0;
}

// block_params of a maximum in fp8_by_table's range, given its mantissa's table entries
// (inv_m = q[2m], stored_m = q[2m + 1]).
MOE_EP_HD Fp8BlockWire::Params fp8_params_by_table(float inv_m, float stored_m,
                                                   uint32_t amax_bits) {
  if (amax_bits == 0) return {1.0f, 1.0f};
  // E << 23, from the maximum's exponent field (bits 7..14 of its bf16 bits).
  const uint32_t e = ((amax_bits << 16) & 0x7f800000u) - 0x3f800000u;  // modulo 2^32
  return {bits_float(float_bits(stored_m) + e), bits_float(float_bits(inv_m) - e)};
}

// fp8 e4m3 cast with no scale; finite values beyond 448 saturate, Inf and NaN become NaN.
struct Fp8DirectWire {
  static constexpr int kBitsPerElem = 8;
  static constexpr int kBlock = 0;
  static constexpr bool kIsFp8 = true;
  static constexpr bool kPicksCode = false;
  static constexpr ScalarType kPayloadType = ScalarType::kFloat8E4M3;
  static constexpr int kElemsPerPayloadScalar = 1;
  static constexpr ScalarType kScaleType = ScalarType::kUInt8;  // no scales
  using Code = uint8_t;
  using Scale = uint8_t;  // unused
  struct Params {
    Scale stored = 0;
  };
  MOE_EP_HD static Params block_params(float, bool) { return {}; }
  MOE_EP_HD static Code encode(uint16_t x_bf16, Params) {
    const float x = bf16_to_float(x_bf16);
    return is_finite(x) ? e4m3_satfinite(x) : kE4m3NaN;
  }
  MOE_EP_HD static float decode(Code c, Scale) { return e4m3_to_float(c); }
};

// OCP MX fp4: e2m1 codes, two per byte (element 2i in the low nibble), one e8m0 per 32.
struct Mxfp4Wire {
  static constexpr int kBitsPerElem = 4;
  static constexpr int kBlock = kMxfp4BlockSize;
  static constexpr bool kIsFp8 = false;
  static constexpr bool kPicksCode = false;
  static constexpr ScalarType kPayloadType = ScalarType::kFloat4E2M1;
  static constexpr int kElemsPerPayloadScalar = 2;  // one byte holds elements 2i (low) and 2i+1
  static constexpr ScalarType kScaleType = ScalarType::kFloat8E8M0;
  using Code = uint8_t;  // one nibble
  using Scale = uint8_t;
  struct Params {
    Scale stored = kE8m0One;  // e8m0 byte of 2^e
    float inv = 1.0f;         // 2^-e, exact
  };
  // e = floor(log2(amax)) - 2 clamped to [-127, 127]; a block holding Inf or NaN gets the NaN
  // scale byte so that it decodes to NaN.
  MOE_EP_HD static Params block_params(float amax, bool any_nonfinite) {
    if (any_nonfinite) return {kE8m0NaN, 0.0f};
    if (amax == 0.0f) return {kE8m0One, 1.0f};
    int e = floor_log2(amax) - 2;
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
    const uint8_t stored = static_cast<uint8_t>(e + 127);
    return {stored, e8m0_to_float(static_cast<uint8_t>(254 - stored))};
  }
  MOE_EP_HD static Code encode(uint16_t x_bf16, Params p) {
    return e2m1_rne(bf16_to_float(x_bf16) * p.inv);
  }
  MOE_EP_HD static float decode(Code c, Scale s) { return e2m1_to_float(c) * e8m0_to_float(s); }
};

// int8 or e3m4 per block of 32, one bf16 scale word per block whose sign bit says which
// (docs/formats.md#per-block-rules), from two candidates:
//   int8: scale s = the smallest bf16 >= amax / 127, codes clamp(rne(x * (1 / s)), -127, 127)
//   e3m4: scale s = the smallest bf16 >= amax / 64 (exact for amax >= 2^-120, so amax codes as
//         64), codes e3m4_satfinite(x * (1 / s))
// The block takes e3m4 when its code energy, the sum of the squares of its int8 codes, is below
// kInt8E3m4EnergyLimit (2 * 127^2), int8 otherwise. Uniform int8 steps suit blocks of similar
// magnitudes (high energy); e3m4's relative steps keep the small elements of a block whose
// energy sits in one or two elements near its maximum (an outlier). Decode: code value * s, e3m4
// where bit 15 of the word is set.
struct Int8E3m4Wire {
  static constexpr int kBitsPerElem = 8;
  static constexpr int kBlock = kInt8E3m4BlockSize;
  static constexpr bool kIsFp8 = false;
  static constexpr bool kPicksCode = true;
  static constexpr ScalarType kPayloadType = ScalarType::kUInt8;  // int8 or e3m4 by block
  static constexpr int kElemsPerPayloadScalar = 1;
  static constexpr ScalarType kScaleType = ScalarType::kBFloat16;  // bf16 bits, sign = e3m4
  using Code = uint8_t;
  using Scale = uint16_t;
  static constexpr Scale kE3m4Bit = 0x8000;
  struct Params {
    Scale stored = 0;       // scale word of the chosen code: bf16 bits, bit 15 set for e3m4
    float inv = 0.0f;       // its encode multiplier, 1 / scale clamped to FLT_MAX
    Scale e3m4_stored = 0;  // the e3m4 candidate's word and multiplier
    float e3m4_inv = 0.0f;
  };
  // A block holding Inf or NaN gets the NaN word 0x7fc0 (int8, all codes 0) and decodes to NaN;
  // a zero block gets the word 0 (int8, codes 0) and decodes to +0. Neither has an e3m4
  // candidate: its e3m4 fields equal its int8 ones, so pick changes nothing.
  MOE_EP_HD static Params block_params(float amax, bool any_nonfinite) {
    if (any_nonfinite) return {kBf16NaN, 0.0f, kBf16NaN, 0.0f};
    if (amax == 0.0f) return {};
    const Scale s8 = bf16_round_up(amax / kInt8Max);
    const Scale s3 = bf16_round_up(amax * 0.015625f);  // amax * 2^-6, exact in float
    return {s8, clamped_reciprocal(bf16_to_float(s8)), static_cast<Scale>(s3 | kE3m4Bit),
            clamped_reciprocal(bf16_to_float(s3))};
  }
  MOE_EP_HD static bool is_e3m4(Scale s) { return (s & kE3m4Bit) != 0; }
  MOE_EP_HD static Code encode(uint16_t x_bf16, Params p) {
    const float v = bf16_to_float(x_bf16) * p.inv;
    return is_e3m4(p.stored) ? e3m4_satfinite(v) : int8_satfinite(v);
  }
  MOE_EP_HD static float decode(Code c, Scale s) {
    const float scale = bf16_to_float(static_cast<uint16_t>(s & 0x7fffu));
    return (is_e3m4(s) ? e3m4_to_float(c) : int8_to_float(c)) * scale;
  }
  // x's share of the block's code energy: the square of its int8 code (p holds the int8
  // candidate, as block_params gives it). A block's energy is the sum of its 32 shares, an
  // integer of at most 32 * 127^2 < 2^24, so fp32 adds it exactly in any order.
  MOE_EP_HD static float code_energy(uint16_t x_bf16, const Params& p) {
    const float q = int8_to_float(int8_satfinite(bf16_to_float(x_bf16) * p.inv));
    return q * q;
  }
  // The block's choice from its code energy: e3m4 when the energy is below kInt8E3m4EnergyLimit
  // (docs/formats.md: the block's energy sits in a few elements near its maximum, where e3m4's
  // relative steps keep the small ones that int8's uniform steps lose), int8 otherwise.
  MOE_EP_HD static Params pick(Params p, float energy) {
    if (energy < kInt8E3m4EnergyLimit) {
      p.stored = p.e3m4_stored;
      p.inv = p.e3m4_inv;
    }
    return p;
  }
};

// Bytes of payload for `n` elements, and the byte at which element `i` starts (n, i even for
// 4-bit formats: a row never starts or ends inside a byte).
template <typename F>
MOE_EP_HD constexpr int64_t payload_bytes_of(int64_t n) {
  return n * F::kBitsPerElem / 8;
}
// Scales per row of `n` elements.
template <typename F>
MOE_EP_HD constexpr int64_t scales_of(int64_t n) {
  return F::kBlock == 0 ? 0 : n / F::kBlock;
}

// The block's code choice of a kPicksCode format: x holds the block's kBlock elements.
template <typename F>
MOE_EP_HD typename F::Params pick_code(const uint16_t* x, typename F::Params p) {
  float energy = 0.0f;
  for (int i = 0; i < F::kBlock; ++i) energy = energy + F::code_energy(x[i], p);
  return F::pick(p, energy);
}

// Host and device row codec: the reference loops that kernels must match.
// x: [n] bf16 bits; payload: payload_bytes_of<F>(n) bytes; scales: n / kBlock values.
template <typename F>
MOE_EP_HD void encode_row(const uint16_t* x, int64_t n, uint8_t* payload,
                          typename F::Scale* scales) {
  const int64_t block = F::kBlock == 0 ? n : F::kBlock;
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    float amax = 0.0f;
    bool nonfinite = false;
    for (int64_t i = b0; i < b0 + block; ++i) {
      const float v = bf16_to_float(x[i]);
      amax = max_skip_nan(amax, abs_f(v));
      nonfinite = nonfinite || !is_finite(v);
    }
    typename F::Params p = F::block_params(amax, nonfinite);
    if constexpr (F::kPicksCode) p = pick_code<F>(x + b0, p);
    if (F::kBlock != 0) scales[b0 / block] = p.stored;
    for (int64_t i = b0; i < b0 + block; ++i) {
      const typename F::Code c = F::encode(x[i], p);
      if constexpr (F::kBitsPerElem == 16) {
        reinterpret_cast<uint16_t*>(payload)[i] = c;
      } else if constexpr (F::kBitsPerElem == 8) {
        payload[i] = c;
      } else {
        uint8_t& byte = payload[i / 2];
        byte = (i & 1) ? static_cast<uint8_t>((byte & 0x0f) | (c << 4)) : static_cast<uint8_t>(c);
      }
    }
  }
}

template <typename F>
MOE_EP_HD float decode_elem(const uint8_t* payload, const typename F::Scale* scales, int64_t i) {
  typename F::Scale s{};
  if constexpr (F::kBlock != 0) s = scales[i / F::kBlock];
  if constexpr (F::kBitsPerElem == 16) {
    return F::decode(reinterpret_cast<const uint16_t*>(payload)[i], s);
  } else if constexpr (F::kBitsPerElem == 8) {
    return F::decode(payload[i], s);
  } else {
    const uint8_t byte = payload[i / 2];
    return F::decode(static_cast<uint8_t>((i & 1) ? (byte >> 4) : (byte & 0xf)), s);
  }
}

template <typename F>
MOE_EP_HD void decode_row(const uint8_t* payload, const typename F::Scale* scales, int64_t n,
                          float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = decode_elem<F>(payload, scales, i);
}

// Map a runtime dtype to its trait type: calls fn(F{}) with the matching format, so code that
// depends on the format is written once as a generic lambda.
template <typename Fn>
decltype(auto) visit_format(DispatchDtype dtype, Fn&& fn) {
  switch (dtype) {
    case DispatchDtype::bf16: return fn(Bf16Wire{});
    case DispatchDtype::fp8: return fn(Fp8BlockWire{});
    case DispatchDtype::fp4: return fn(Mxfp4Wire{});
  }
  throw Internal("visit_format: dispatch dtype value " + std::to_string(static_cast<int>(dtype)) +
                 " is not one of bf16, fp8, fp4");
}

template <typename Fn>
decltype(auto) visit_format(CombineDtype dtype, Fn&& fn) {
  switch (dtype) {
    case CombineDtype::bf16: return fn(Bf16Wire{});
    case CombineDtype::fp8: return fn(Fp8BlockWire{});
    case CombineDtype::fp8_direct_cast: return fn(Fp8DirectWire{});
    case CombineDtype::int8_e3m4: return fn(Int8E3m4Wire{});
  }
  throw Internal("visit_format: combine dtype value " + std::to_string(static_cast<int>(dtype)) +
                 " is not one of bf16, fp8, fp8_direct_cast, int8_e3m4");
}

}  // namespace moe_ep::formats
