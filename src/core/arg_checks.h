// Host checks of the arguments of dispatch, combine and their decode-mode counterparts, shared by
// every backend (docs/design.md#errors): shapes, dtypes, devices and handles, O(1), always on.
// Each failure throws InvalidArgument naming the argument, what it got and what was expected.
// On a CUDA device the pointers must also be aligned: 16 bytes for x, y and out (rows move 16
// bytes a lane), the element size for the other tensors.
// Data scans (expert ids, non-finite values) are the backends' own: the CPU scans on the host,
// the CUDA backend in its validate kernel.
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

// Decode mode needs an op created with OpConfig::low_latency (its slabs are allocated only then).
void check_low_latency_enabled(const OpConfig& config);

// Decode mode: low_latency_dispatch takes the arguments of dispatch (check_dispatch_args). For
// low_latency_combine, checks that `handle` is `latest`, the handle of this op's latest
// low-latency dispatch (call_seq 0 before the first), that y is [E/W, W*Tmax, H] bf16 and out
// [T, H] bf16 for the handle's T.
void check_low_latency_combine_args(const OpConfig& config, int world_size,
                                    const LowLatencyHandle& latest, const LowLatencyHandle& handle,
                                    const TensorView& y, const TensorView& out, ArgDevice device);

}  // namespace moe_ep
