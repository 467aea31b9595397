// Host checks of dispatch and combine arguments; see arg_checks.h.
#include "core/arg_checks.h"

#include "core/check.h"

namespace moe_ep {
namespace {

const char* device_name(DeviceType type) { return type == DeviceType::kCpu ? "cpu" : "cuda"; }

void check_tensor(const char* name, const TensorView& t, ScalarType dtype, int64_t rows,
                  int64_t cols, int ndim, ArgDevice device) {
  MOE_EP_CHECK_ARG(t.defined(), name, " is undefined: expected ", to_string(dtype), "[", rows,
                   ndim == 2 ? ", " + std::to_string(cols) : std::string(), "]");
  MOE_EP_CHECK_ARG(t.dtype == dtype, name, " has dtype ", to_string(t.dtype), ": expected ",
                   to_string(dtype));
  MOE_EP_CHECK_ARG(t.ndim == ndim, name, " has ", t.ndim, " dimensions: expected ", ndim);
  MOE_EP_CHECK_ARG(t.rows() == rows, name, " has ", t.rows(), " rows: expected ", rows);
  MOE_EP_CHECK_ARG(ndim == 1 || t.cols() == cols, name, " has ", t.cols(), " columns: expected ",
                   cols);
  MOE_EP_CHECK_ARG(t.device == device.type &&
                       (device.type == DeviceType::kCpu || t.device_index == device.index),
                   name, " is on ", t.describe(), ": this op runs on ", device_name(device.type),
                   device.type == DeviceType::kCuda ? ":" + std::to_string(device.index) : "");
  MOE_EP_CHECK_ARG(rows * cols == 0 || t.data != nullptr, name, " is null with ", rows * cols,
                   " elements");
}

}  // namespace

int64_t check_dispatch_args(const OpConfig& config, const DispatchArgs& args, ArgDevice device,
                            bool* prequantized) {
  MOE_EP_CHECK_ARG(args.x.defined() && args.x.ndim == 2, "x must be a 2-D tensor [num_tokens, ",
                   "hidden]; got ", args.x.describe());
  const int64_t num_tokens = args.x.rows();
  MOE_EP_CHECK_ARG(num_tokens <= config.max_tokens_per_rank, "num_tokens=", num_tokens,
                   " exceeds max_tokens_per_rank=", config.max_tokens_per_rank);
  const int64_t hidden = config.hidden;
  *prequantized = args.x.dtype != ScalarType::kBFloat16;
  if (!*prequantized) {
    check_tensor("x", args.x, ScalarType::kBFloat16, num_tokens, hidden, 2, device);
    MOE_EP_CHECK_ARG(!args.x_scales.defined(), "x_scales is given with bf16 x: scales go only ",
                     "with pre-quantized x");
  } else {
    switch (config.dispatch_dtype) {
      case DispatchDtype::fp8:
        check_tensor("x", args.x, ScalarType::kFloat8E4M3, num_tokens, hidden, 2, device);
        check_tensor("x_scales", args.x_scales, ScalarType::kFloat32, num_tokens,
                     scale_dim(config.dispatch_dtype, hidden), 2, device);
        break;
      case DispatchDtype::fp4:
        check_tensor("x", args.x, ScalarType::kFloat4E2M1, num_tokens, hidden / 2, 2, device);
        check_tensor("x_scales", args.x_scales, ScalarType::kFloat8E8M0, num_tokens,
                     scale_dim(config.dispatch_dtype, hidden), 2, device);
        break;
      case DispatchDtype::bf16:
        MOE_EP_CHECK_ARG(false, "x has dtype ", to_string(args.x.dtype),
                         ": the dispatch dtype is bfloat16, which takes bf16 x only");
    }
  }
  check_tensor("topk_idx", args.topk_idx, ScalarType::kInt32, num_tokens, config.topk, 2, device);
  check_tensor("topk_weights", args.topk_weights, ScalarType::kFloat32, num_tokens, config.topk, 2,
               device);
  return num_tokens;
}

void check_combine_args(const OpConfig& config, uint64_t op_uid, uint64_t last_seq,
                        const Handle& handle, const TensorView& y, const TensorView& out,
                        ArgDevice device) {
  MOE_EP_CHECK_ARG(handle.op_uid == op_uid, "handle belongs to op ", handle.op_uid,
                   ", not to this op ", op_uid, ": pass the handle of this op's dispatch");
  MOE_EP_CHECK_ARG(handle.call_seq == last_seq, "handle is from dispatch call ", handle.call_seq,
                   " of this op, but the latest dispatch is call ", last_seq,
                   ": combine needs the handle of the latest dispatch");
  check_tensor("y", y, ScalarType::kBFloat16, handle.num_recv, config.hidden, 2, device);
  check_tensor("out", out, ScalarType::kBFloat16, handle.num_tokens, config.hidden, 2, device);
}

}  // namespace moe_ep
