// Launch constants of the CUDA backend for Hopper (sm_90), worked out in comments. One place for
// every number a launcher uses (CUB-style policy header).
#pragma once

namespace moe_ep::cuda_backend {

// Data kernels: 512 threads = 16 warps per block, one warp per token row at a time. A row of
// hidden 7168 bf16 is 14 KB, so 16 warps keep ~224 KB of loads in flight per SM.
inline constexpr int kDataThreads = 512;
inline constexpr int kWarpsPerDataBlock = kDataThreads / 32;
// Default number of blocks for the data kernels: two per SM (264 on H200); MOE_EP_NUM_SMS
// overrides. Measured on 2 x H200 (docs/perf-notes.md, v4): 264 blocks vs 132 took mxfp4
// dispatch from 143 to 116 us and fp8 direct-cast combine from 208 to 185 us, others equal.
inline constexpr int kDefaultBlocksPerSm = 2;
// The fused combine kernel (combine.cuh) needs its whole grid resident, since receiving warps
// wait for rows that other warps send; at 88-108 registers only one 512-thread block fits per
// SM (132 blocks). Asking for two (64 registers, ~100 bytes of spills) measured better on
// 2 x H200 (docs/perf-notes.md, v9): fp8 combine 194 -> 168 us, direct cast 159 -> 151 us.
inline constexpr int kCombineMinBlocksPerSm = 2;
// Notify kernel: one block per destination rank, scanning the tokens 1024 at a time.
inline constexpr int kNotifyThreads = 1024;
// Elements a warp moves per step: 32 lanes x formats::kElemsPerLane (one 16-byte bf16 vector).
inline constexpr int kElemsPerWarpStep = 32 * 8;  // 256
// Largest world the backend accepts: the control region and notify grid scale with W*W.
inline constexpr int kMaxWorldSize = 64;

}  // namespace moe_ep::cuda_backend
