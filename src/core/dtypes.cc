// Dtype names, parsing and per-row sizes (docs/design.md#wire-formats, #configuration).
#include "moe_ep/dtypes.h"

#include <iterator>

#include "core/check.h"
#include "formats/row_format.h"

namespace moe_ep {
namespace {

struct Name {
  const char* short_name;
  const char* value;
};

constexpr Name kDispatchNames[] = {
    {"bf16", "bfloat16"}, {"fp8", "float8_blockwise"}, {"fp4", "mxfp4_blockwise"}};
constexpr Name kCombineNames[] = {{"bf16", "bfloat16"},
                                  {"fp8", "float8_blockwise"},
                                  {"fp8_direct_cast", "float8_direct_cast"},
                                  {"int8_e3m4", "int8_e3m4_blockwise"}};
constexpr Name kWeightNames[] = {{"bf16", "bfloat16"}, {"fp8", "float8"}, {"fp4", "mxfp4"}};
// One name per enum value, in enum order.
static_assert(std::size(kDispatchNames) == std::size(kAllDispatchDtypes));
static_assert(std::size(kCombineNames) == std::size(kAllCombineDtypes));

template <size_t N>
std::string valid_values(const Name (&names)[N], bool with_auto) {
  std::string out = with_auto ? "auto" : "";
  for (const Name& n : names) {
    if (!out.empty()) out += "|";
    out += n.short_name;
  }
  for (const Name& n : names) out += std::string("|") + n.value;
  return out;
}

template <size_t N>
int find_name(const Name (&names)[N], std::string_view text) {
  for (size_t i = 0; i < N; ++i) {
    if (text == names[i].short_name || text == names[i].value) return static_cast<int>(i);
  }
  return -1;
}

template <typename Enum, size_t N>
Enum parse(const Name (&names)[N], std::string_view text, std::string_view what) {
  const int i = find_name(names, text);
  MOE_EP_CHECK_ARG(i >= 0, what, "='", text,
                   "' is not a valid value; valid values: ", valid_values(names, false));
  return static_cast<Enum>(i);
}

template <typename Enum, size_t N>
std::optional<Enum> parse_choice(const Name (&names)[N], std::string_view text,
                                 std::string_view what) {
  if (text == "auto") return std::nullopt;
  const int i = find_name(names, text);
  MOE_EP_CHECK_ARG(i >= 0, what, "='", text,
                   "' is not a valid value; valid values: ", valid_values(names, true));
  return static_cast<Enum>(i);
}

}  // namespace

const char* to_string(DispatchDtype dtype) { return kDispatchNames[static_cast<int>(dtype)].value; }
const char* to_string(CombineDtype dtype) { return kCombineNames[static_cast<int>(dtype)].value; }
const char* to_string(WeightDtype dtype) { return kWeightNames[static_cast<int>(dtype)].value; }
const char* short_name(DispatchDtype dtype) {
  return kDispatchNames[static_cast<int>(dtype)].short_name;
}
const char* short_name(CombineDtype dtype) {
  return kCombineNames[static_cast<int>(dtype)].short_name;
}

DispatchDtype parse_dispatch_dtype(std::string_view text, std::string_view what) {
  return parse<DispatchDtype>(kDispatchNames, text, what);
}
CombineDtype parse_combine_dtype(std::string_view text, std::string_view what) {
  return parse<CombineDtype>(kCombineNames, text, what);
}
WeightDtype parse_weight_dtype(std::string_view text, std::string_view what) {
  return parse<WeightDtype>(kWeightNames, text, what);
}
std::optional<DispatchDtype> parse_dispatch_choice(std::string_view text, std::string_view what) {
  return parse_choice<DispatchDtype>(kDispatchNames, text, what);
}
std::optional<CombineDtype> parse_combine_choice(std::string_view text, std::string_view what) {
  return parse_choice<CombineDtype>(kCombineNames, text, what);
}
std::string valid_dispatch_values() { return valid_values(kDispatchNames, false); }
std::string valid_combine_values() { return valid_values(kCombineNames, false); }

// Sizes come from the format traits (formats/row_format.h), the one place that knows them.
int block_size(DispatchDtype dtype) { return formats::row_format(dtype, 0).block; }
int block_size(CombineDtype dtype) { return formats::row_format(dtype, 0).block; }
int64_t scale_dim(DispatchDtype dtype, int64_t hidden) {
  return formats::row_format(dtype, hidden).scale_cols;
}
int64_t scale_dim(CombineDtype dtype, int64_t hidden) {
  return formats::row_format(dtype, hidden).scale_cols;
}
int64_t payload_bytes(DispatchDtype dtype, int64_t hidden) {
  return formats::row_format(dtype, hidden).payload_bytes;
}
int64_t payload_bytes(CombineDtype dtype, int64_t hidden) {
  return formats::row_format(dtype, hidden).payload_bytes;
}
int64_t scale_bytes(DispatchDtype dtype, int64_t hidden) {
  return formats::row_format(dtype, hidden).scale_bytes;
}
int64_t scale_bytes(CombineDtype dtype, int64_t hidden) {
  return formats::row_format(dtype, hidden).scale_bytes;
}

}  // namespace moe_ep
