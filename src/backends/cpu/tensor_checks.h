// Host checks of the tensors a CPU op call receives (DESIGN 6: always on, O(1)). Each check
// throws InvalidArgument naming the argument, what it got and what was expected; the op turns the
// message into its published verdict (cpu_op.h, step 1).
#pragma once

#include <cstdint>

#include "core/check.h"
#include "moe_ep/tensor.h"

namespace moe_ep::cpu_backend {

// `name` must be a host matrix of `dtype` with `rows` x `cols`; `rows_what` and `cols_what` say
// where the expected sizes come from ("num_tokens of x", "hidden").
inline void check_matrix(const char* name, const TensorView& t, ScalarType dtype, int64_t rows,
                         const char* rows_what, int64_t cols, const char* cols_what) {
  MOE_EP_CHECK_ARG(t.defined(), name, " is undefined; expected ", to_string(dtype), "[", rows, ", ",
                   cols, "]");
  MOE_EP_CHECK_ARG(t.device == DeviceType::kCpu, name, "=", t.describe(),
                   " is not on cpu; the cpu backend takes host tensors");
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

}  // namespace moe_ep::cpu_backend
