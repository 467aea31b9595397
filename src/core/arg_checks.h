// Host checks of the dispatch and combine arguments shared by every backend (DESIGN 6): shapes,
// dtypes, devices and handles, O(1), always on. Each failure throws InvalidArgument naming the
// argument, the value and the rule.
#pragma once

#include <cstdint>

#include "moe_ep/op.h"

namespace moe_ep {

struct ArgDevice {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
};

// Returns T, the number of tokens; tells whether x is pre-quantized.
int64_t check_dispatch_args(const OpConfig& config, const DispatchArgs& args, ArgDevice device,
                            bool* prequantized);

// Checks that `handle` is the latest dispatch of op `op_uid` (`last_seq`) and that y / out
// match it.
void check_combine_args(const OpConfig& config, uint64_t op_uid, uint64_t last_seq,
                        const Handle& handle, const TensorView& y, const TensorView& out,
                        ArgDevice device);

}  // namespace moe_ep
