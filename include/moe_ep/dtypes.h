// Wire-format dtypes of the two legs (docs/design.md#wire-formats, #configuration): the typed
// enums, their string values, block sizes and the per-row sizes of payload and scales. Parsing
// accepts the short names (bf16, fp8, fp4, fp8_direct_cast, int8_e3m4) and the string values
// (bfloat16, float8_blockwise, ...); an unknown name raises InvalidArgument listing the valid
// values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moe_ep {

enum class DispatchDtype : uint8_t { bf16, fp8, fp4 };
enum class CombineDtype : uint8_t { bf16, fp8, fp8_direct_cast, int8_e3m4 };
// Dtype of the expert weights, which drives the `auto` rule.
enum class WeightDtype : uint8_t { bf16, fp8, fp4 };

inline constexpr int kFp8BlockSize = 128;      // elements per fp32 scale, fp8 blockwise
inline constexpr int kMxfp4BlockSize = 32;     // elements per e8m0 scale, mxfp4
inline constexpr int kInt8E3m4BlockSize = 32;  // elements per bf16 scale word, int8/e3m4 blockwise
inline constexpr int kRowAlignBytes = 16;      // every payload row is a whole number of 16 B

inline constexpr DispatchDtype kAllDispatchDtypes[] = {DispatchDtype::bf16, DispatchDtype::fp8,
                                                       DispatchDtype::fp4};
inline constexpr CombineDtype kAllCombineDtypes[] = {
    CombineDtype::bf16, CombineDtype::fp8, CombineDtype::fp8_direct_cast, CombineDtype::int8_e3m4};

// String values of docs/design.md#wire-formats ("bfloat16", "float8_blockwise", ...).
const char* to_string(DispatchDtype dtype);
const char* to_string(CombineDtype dtype);
const char* to_string(WeightDtype dtype);
// Short names ("bf16", "fp8", "fp4", "fp8_direct_cast", "int8_e3m4").
const char* short_name(DispatchDtype dtype);
const char* short_name(CombineDtype dtype);

// Parse a short name or string value; throws InvalidArgument naming `what`, the value and the
// valid values. The *_choice variants also accept "auto" and return nullopt for it.
DispatchDtype parse_dispatch_dtype(std::string_view text, std::string_view what = "dispatch dtype");
CombineDtype parse_combine_dtype(std::string_view text, std::string_view what = "combine dtype");
WeightDtype parse_weight_dtype(std::string_view text, std::string_view what = "weight dtype");
std::optional<DispatchDtype> parse_dispatch_choice(std::string_view text,
                                                   std::string_view what = "dispatch dtype");
std::optional<CombineDtype> parse_combine_choice(std::string_view text,
                                                 std::string_view what = "combine dtype");
// "bf16|fp8|fp4" style lists of the accepted values, for messages and --help.
std::string valid_dispatch_values();
std::string valid_combine_values();

// Elements per scale (0 for formats without scales).
int block_size(DispatchDtype dtype);
int block_size(CombineDtype dtype);
// Number of scales per row: 0, H/128 or H/32.
int64_t scale_dim(DispatchDtype dtype, int64_t hidden);
int64_t scale_dim(CombineDtype dtype, int64_t hidden);
// Bytes of payload and of scales per row on the wire.
int64_t payload_bytes(DispatchDtype dtype, int64_t hidden);
int64_t payload_bytes(CombineDtype dtype, int64_t hidden);
int64_t scale_bytes(DispatchDtype dtype, int64_t hidden);
int64_t scale_bytes(CombineDtype dtype, int64_t hidden);

}  // namespace moe_ep
