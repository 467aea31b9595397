// Builds the views a dispatch (or a low-latency dispatch) returns from the base pointers of one
// rank's receive buffers, the same way for every backend: shapes and types come from the
// configuration and the dispatch wire format (formats/row_format.h), so a backend only says where
// its rows are.
#pragma once

#include <cstdint>

#include "moe_ep/op.h"

namespace moe_ep {

// Where one rank's received rows live (host or device memory of `device`).
struct RecvBuffers {
  const void* payload = nullptr;                    // [R, payload bytes]
  const void* scales = nullptr;                     // [R, scale bytes], unused without scales
  const int32_t* topk_idx = nullptr;                // [R, K]
  const float* topk_weights = nullptr;              // [R, K]
  const int32_t* src_rank = nullptr;                // [R]
  const int32_t* src_token = nullptr;               // [R]
  const int32_t* count_per_local_expert = nullptr;  // [E / W]
  DeviceType device = DeviceType::kCpu;
  int device_index = 0;
};

DispatchResult make_dispatch_result(const OpConfig& config, int world_size,
                                    const RecvBuffers& buffers, int64_t num_recv,
                                    const Handle& handle);

// Where one rank's decode-mode slabs live: per local expert e, W*Tmax rows starting at row
// e * W*Tmax of each array.
struct LowLatencyRecvBuffers {
  const void* payload = nullptr;  // [E/W, W*Tmax, payload bytes]
  // [E/W, W*Tmax, scale bytes], or [E/W, scale_dim, W*Tmax] elements with
  // OpConfig::column_major_scales (SlabScales); unused without scales
  const void* scales = nullptr;
  const int32_t* count = nullptr;      // [E/W]
  const int32_t* src_rank = nullptr;   // [E/W, W*Tmax]
  const int32_t* src_token = nullptr;  // [E/W, W*Tmax]
  const int32_t* src_slot = nullptr;   // [E/W, W*Tmax]
  DeviceType device = DeviceType::kCpu;
  int device_index = 0;
};

// The views of a low-latency dispatch; every shape comes from the configuration alone.
LowLatencyDispatchResult make_low_latency_result(const OpConfig& config, int world_size,
                                                 const LowLatencyRecvBuffers& buffers,
                                                 const LowLatencyHandle& handle);

}  // namespace moe_ep
