// The one place where a runtime dtype becomes the facts of its wire format for rows of `hidden`
// elements: payload and scale scalar types, columns and bytes. Everything that sizes a buffer,
// checks a tensor or builds a view of received rows asks this function, so the facts live only
// in the traits of formats/codecs.h.
#pragma once

#include <cstdint>

#include "formats/codecs.h"

namespace moe_ep::formats {

struct RowFormat {
  int bits_per_elem = 16;
  int block = 0;  // elements per scale, 0 without scales
  bool is_fp8 = false;
  ScalarType payload_type = ScalarType::kBFloat16;
  int64_t payload_cols = 0;   // columns of a payload row viewed as payload_type
  int64_t payload_bytes = 0;  // per row
  ScalarType scale_type = ScalarType::kUInt8;
  int64_t scale_cols = 0;   // scales per row, 0 without scales
  int64_t scale_bytes = 0;  // per row
  bool has_scales() const { return block != 0; }
};

template <typename F>
constexpr RowFormat row_format_of(int64_t hidden) {
  RowFormat f;
  f.bits_per_elem = F::kBitsPerElem;
  f.block = F::kBlock;
  f.is_fp8 = F::kIsFp8;
  f.payload_type = F::kPayloadType;
  f.payload_cols = hidden / F::kElemsPerPayloadScalar;
  f.payload_bytes = payload_bytes_of<F>(hidden);
  f.scale_type = F::kScaleType;
  f.scale_cols = scales_of<F>(hidden);
  f.scale_bytes = f.scale_cols * static_cast<int64_t>(sizeof(typename F::Scale));
  return f;
}

inline RowFormat row_format(DispatchDtype dtype, int64_t hidden) {
  return visit_format(dtype, [&](auto format) { return row_format_of<decltype(format)>(hidden); });
}

inline RowFormat row_format(CombineDtype dtype, int64_t hidden) {
  return visit_format(dtype, [&](auto format) { return row_format_of<decltype(format)>(hidden); });
}

}  // namespace moe_ep::formats
