// Host checks of the dispatch and combine arguments shared by every backend (DESIGN 6): shapes,
// dtypes, devices and handles, O(1), always on. Each failure throws InvalidArgument naming the
// argument, what it got and what was expected. Data scans (expert ids, non-finite values) are
// the backends' own: the CPU scans on the host, the CUDA backend in its validate kernel.
#pragma once

#include <cstdint>

#include "moe_ep/op.h"

namespace moe_ep {

// Where an op's tensors must live.
struct ArgDevice {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
};

// `name` must be a matrix of `dtype` with `rows` x `cols` on `device`; `rows_what` and
// `cols_what` say where the expected sizes come from ("num_tokens of x", "hidden").
void check_matrix(const char* name, const TensorView& t, ScalarType dtype, int64_t rows,
                  const char* rows_what, int64_t cols, const char* cols_what, ArgDevice device);

// Checks x (bf16, or pre-quantized in the dispatch wire format with its scales), topk_idx and
// topk_weights; returns T and tells whether x is pre-quantized.
int64_t check_dispatch_args(const OpConfig& config, const DispatchArgs& args, ArgDevice device,
                            bool* prequantized);

// Checks that `handle` is `latest`, the handle of this op's latest dispatch (call_seq 0 when
// the op has not dispatched yet), and that y and out match it.
void check_combine_args(const OpConfig& config, const Handle& latest, const Handle& handle,
                        const TensorView& y, const TensorView& out, ArgDevice device);

}  // namespace moe_ep
