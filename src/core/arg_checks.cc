// Host checks of the arguments of dispatch, combine and decode mode; see arg_checks.h.
#include "core/arg_checks.h"

#include <cstdint>
#include <sstream>
#include <string>

#include "core/check.h"
#include "formats/row_format.h"

namespace moe_ep {
namespace {

std::string device_name(ArgDevice device) {
  return device.type == DeviceType::kCpu ? "cpu" : "cuda:" + std::to_string(device.index);
}

void check_device(const char* name, const TensorView& t, ArgDevice device) {
  const bool same = t.device == device.type &&
                    (device.type == DeviceType::kCpu || t.device_index == device.index);
  MOE_EP_CHECK_ARG(same, name, "=", t.describe(), " is not on ", device_name(device),
                   "; this op takes tensors on ", device_name(device));
}

// The CUDA backend moves rows 16 bytes a lane (x, y and out, and the payload of a pre-quantized
// x) and reads every other tensor by its element type; a misaligned vector access would end the
// CUDA context with an error that names no argument, so the pointers are checked here. The CPU
// backend reads bytes wherever they are.
constexpr int64_t kCudaRowAlignBytes = 16;
enum class Access { kRows, kElements };

void check_alignment(const char* name, const TensorView& t, ArgDevice device, Access access) {
  if (device.type != DeviceType::kCuda || t.data == nullptr) return;
  const int64_t align = access == Access::kRows ? kCudaRowAlignBytes : element_size(t.dtype);
  const auto address = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t.data));
  if (align <= 1 || address % static_cast<uint64_t>(align) == 0) return;
  std::ostringstream hex;
  hex << "0x" << std::hex << address;
  MOE_EP_CHECK_ARG(false, name, "=", t.describe(), " starts at address ", hex.str(),
                   ", not a multiple of ", align, " bytes",
                   access == Access::kRows
                       ? "; the CUDA backend moves its rows 16 bytes at a time, so it must start "
                         "on a 16-byte boundary"
                       : "; the CUDA backend reads it element by element, so it must be aligned "
                         "to its element size");
}

}  // namespace

void check_matrix(const char* name, const TensorView& t, ScalarType dtype, int64_t rows,
                  const char* rows_what, int64_t cols, const char* cols_what, ArgDevice device) {
  MOE_EP_CHECK_ARG(t.defined(), name, " is undefined; expected ", to_string(dtype), "[", rows, ", ",
                   cols, "]");
  check_device(name, t, device);
  MOE_EP_CHECK_ARG(t.dtype == dtype, name, " has dtype ", to_string(t.dtype), ", expected ",
                   to_string(dtype));
  MOE_EP_CHECK_ARG(t.ndim == 2, name, "=", t.describe(), " must be 2-D");
  MOE_EP_CHECK_ARG(t.rows() == rows, name, " has ", t.rows(), " rows, expected ", rows, " (",
                   rows_what, ")");
  MOE_EP_CHECK_ARG(t.cols() == cols, name, " has ", t.cols(), " columns, expected ", cols, " (",
                   cols_what, ")");
  MOE_EP_CHECK_ARG(rows * cols == 0 || t.data != nullptr, name, " is a null pointer with ", rows,
                   " rows");
}

int64_t check_dispatch_args(const OpConfig& config, const DispatchArgs& args, ArgDevice device,
                            bool* prequantized) {
  const int64_t h = config.hidden;
  const int k = config.topk;
  const TensorView& x = args.x;
  MOE_EP_CHECK_ARG(x.defined(), "x is undefined; expected bf16[num_tokens, ", h, "]");
  check_device("x", x, device);
  MOE_EP_CHECK_ARG(x.ndim == 2, "x=", x.describe(), " must be 2-D [num_tokens, hidden]");
  const int64_t t = x.rows();
  MOE_EP_CHECK_ARG(t >= 0, "num_tokens=", t, " must be >= 0");
  MOE_EP_CHECK_ARG(t <= config.max_tokens_per_rank, "num_tokens=", t,
                   " exceeds max_tokens_per_rank=", config.max_tokens_per_rank);

  // Pre-quantized x is the wire format itself: payload and scales as they travel.
  const formats::RowFormat wire = formats::row_format(config.dispatch_dtype, h);
  const bool can_prequantize = wire.bits_per_elem < 16;
  *prequantized = false;
  if (x.dtype == ScalarType::kBFloat16) {
    check_matrix("x", x, ScalarType::kBFloat16, t, "num_tokens", h, "hidden", device);
    MOE_EP_CHECK_ARG(!args.x_scales.defined(), "x_scales=", args.x_scales.describe(),
                     " must be undefined when x is bf16 (the op quantizes x itself)");
  } else if (can_prequantize && x.dtype == wire.payload_type) {
    *prequantized = true;
    check_matrix("x", x, wire.payload_type, t, "num_tokens", wire.payload_cols,
                 wire.payload_cols == h ? "hidden" : "hidden / 2", device);
    check_matrix("x_scales", args.x_scales, wire.scale_type, t, "num_tokens of x", wire.scale_cols,
                 detail::concat("hidden / ", wire.block).c_str(), device);
  } else {
    std::string accepted = "bf16";
    if (can_prequantize) {
      accepted += detail::concat(" or pre-quantized ", to_string(wire.payload_type), " with ",
                                 to_string(wire.scale_type), " x_scales");
    }
    MOE_EP_CHECK_ARG(false, "x has dtype ", to_string(x.dtype), "; dispatch dtype ",
                     to_string(config.dispatch_dtype), " takes ", accepted);
  }
  check_matrix("topk_idx", args.topk_idx, ScalarType::kInt32, t, "num_tokens of x", k, "topk",
               device);
  check_matrix("topk_weights", args.topk_weights, ScalarType::kFloat32, t, "num_tokens of x", k,
               "topk", device);
  check_alignment("x", x, device, Access::kRows);
  if (*prequantized) check_alignment("x_scales", args.x_scales, device, Access::kElements);
  check_alignment("topk_idx", args.topk_idx, device, Access::kElements);
  check_alignment("topk_weights", args.topk_weights, device, Access::kElements);
  return t;
}

void check_combine_args(const OpConfig& config, const Handle& latest, const Handle& handle,
                        const TensorView& y, const TensorView& out, ArgDevice device) {
  MOE_EP_CHECK_ARG(handle.op_uid == latest.op_uid, "handle belongs to op uid ", handle.op_uid,
                   ", not to this op (uid ", latest.op_uid, ")");
  MOE_EP_CHECK_ARG(latest.call_seq > 0, "handle.call_seq=", handle.call_seq, " but op uid ",
                   latest.op_uid, " has not dispatched yet");
  MOE_EP_CHECK_ARG(handle.call_seq == latest.call_seq, "handle is from dispatch call ",
                   handle.call_seq, " of op uid ", latest.op_uid,
                   ", but the latest dispatch is call ", latest.call_seq,
                   "; combine takes the handle of the latest dispatch");
  MOE_EP_CHECK_ARG(handle.num_tokens == latest.num_tokens && handle.num_recv == latest.num_recv,
                   "handle has num_tokens=", handle.num_tokens, ", num_recv=", handle.num_recv,
                   " but dispatch call ", latest.call_seq, " had num_tokens=", latest.num_tokens,
                   ", num_recv=", latest.num_recv);
  check_matrix("y", y, ScalarType::kBFloat16, handle.num_recv, "handle.num_recv", config.hidden,
               "hidden", device);
  check_matrix("out", out, ScalarType::kBFloat16, handle.num_tokens, "handle.num_tokens",
               config.hidden, "hidden", device);
  check_alignment("y", y, device, Access::kRows);
  check_alignment("out", out, device, Access::kRows);
}

void check_low_latency_enabled(const OpConfig& config) {
  MOE_EP_CHECK_ARG(config.low_latency, "this op was created with low_latency=false (",
                   config.describe(),
                   "); decode mode needs an op created with OpConfig::"
                   "low_latency=true, which allocates its per-expert slabs");
}

void check_low_latency_combine_args(const OpConfig& config, int world_size,
                                    const LowLatencyHandle& latest, const LowLatencyHandle& handle,
                                    const TensorView& y, const TensorView& out, ArgDevice device) {
  check_low_latency_enabled(config);
  MOE_EP_CHECK_ARG(handle.op_uid == latest.op_uid, "handle belongs to op uid ", handle.op_uid,
                   ", not to this op (uid ", latest.op_uid, ")");
  MOE_EP_CHECK_ARG(latest.call_seq > 0, "handle.call_seq=", handle.call_seq, " but op uid ",
                   latest.op_uid, " has not made a low-latency dispatch yet");
  MOE_EP_CHECK_ARG(handle.call_seq == latest.call_seq, "handle is from low-latency dispatch call ",
                   handle.call_seq, " of op uid ", latest.op_uid,
                   ", but the latest low-latency dispatch is call ", latest.call_seq,
                   "; low_latency_combine takes the handle of the latest low-latency dispatch");
  MOE_EP_CHECK_ARG(handle.num_tokens == latest.num_tokens,
                   "handle has num_tokens=", handle.num_tokens, " but low-latency dispatch call ",
                   latest.call_seq, " had num_tokens=", latest.num_tokens);

  const int64_t local_experts = config.num_experts / world_size;
  const int64_t slab_rows = static_cast<int64_t>(world_size) * config.max_tokens_per_rank;
  const std::string expected =
      detail::concat("bf16[", local_experts, ", ", slab_rows, ", ", config.hidden,
                     "] ([E/W, W*Tmax, hidden] with E/W=", local_experts, ", W*Tmax=", slab_rows,
                     ", hidden=", config.hidden, ")");
  MOE_EP_CHECK_ARG(y.defined(), "y is undefined; expected ", expected);
  check_device("y", y, device);
  MOE_EP_CHECK_ARG(y.dtype == ScalarType::kBFloat16, "y has dtype ", to_string(y.dtype),
                   ", expected ", expected);
  const bool shape_ok = y.ndim == 3 && y.shape[0] == local_experts && y.shape[1] == slab_rows &&
                        y.shape[2] == config.hidden;
  MOE_EP_CHECK_ARG(shape_ok, "y=", y.describe(), " has the wrong shape, expected ", expected);
  MOE_EP_CHECK_ARG(y.data != nullptr, "y is a null pointer; expected ", expected);
  check_matrix("out", out, ScalarType::kBFloat16, handle.num_tokens, "handle.num_tokens",
               config.hidden, "hidden", device);
  check_alignment("y", y, device, Access::kRows);
  check_alignment("out", out, device, Access::kRows);
}

}  // namespace moe_ep
