// Host-side interface of the CUDA kernels: trivially copyable parameter structs and the
// launchers, callable from plain C++ (cuda_op.cc). The kernels live in the .cuh files beside
// this one and are instantiated per wire format in the thin .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/device_error.h"
#include "backends/cuda/tuning.h"
#include "core/layout.h"
#include "moe_ep/dtypes.h"

namespace moe_ep::cuda_backend {

// Base address of every rank's symmetric buffer, as seen from this GPU.
struct PeerTable {
  char* base[kMaxWorldSize];
};

struct RankInfo {
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t num_experts = 1;
  int32_t experts_per_rank = 1;
  int32_t topk = 1;
  int32_t hidden = 0;
  int32_t max_tokens = 0;
};

// Checks topk_idx (always: range; validation mode: duplicates) and, in validation mode, x and
// the weights for non-finite values. Reports into the error word.
struct ValidateParams {
  RankInfo info;
  const int32_t* topk_idx;    // [T, K]
  const uint16_t* x_bf16;     // [T, H] or nullptr (pre-quantized x is not scanned)
  const float* topk_weights;  // [T, K]
  int32_t num_tokens;
  bool validate;
  ErrorSink err;
};

// Counts exchange: per destination position of every token, send offsets, receive totals.
struct NotifyParams {
  RankInfo info;
  PeerTable peers;
  BufferLayout layout;
  const int32_t* topk_idx;  // [T, K]
  int32_t num_tokens;
  int32_t* pos;                // [W, max_tokens]: row of token t among those sent to d, or -1
  int32_t* send_offset;        // [W]: first row of this rank's block in destination d
  int32_t* recv_expert_count;  // [E / W]
  int64_t* host_num_recv;      // mapped host memory
  uint64_t seq;
  uint64_t timeout_ns;
  ErrorSink err;
};

struct DispatchParams {
  RankInfo info;
  PeerTable peers;
  BufferLayout layout;
  const void* x;              // [T, H] bf16, or pre-quantized payload [T, payload_bytes]
  const void* x_scales;       // pre-quantized scales [T, scale_bytes] or nullptr
  const int32_t* topk_idx;    // [T, K]
  const float* topk_weights;  // [T, K]
  int32_t num_tokens;
  const int32_t* pos;          // [W, max_tokens]
  const int32_t* send_offset;  // [W]
  unsigned int* block_counter;
  uint64_t seq;
  uint64_t timeout_ns;
  ErrorSink err;
};

struct CombineParams {
  RankInfo info;
  PeerTable peers;
  BufferLayout layout;
  const uint16_t* y;  // [R, H] bf16
  int64_t num_recv;
  uint16_t* out;  // [T, H] bf16
  int32_t num_tokens;
  const int32_t* pos;  // [W, max_tokens] from the matching dispatch
  uint64_t seq;
  uint64_t timeout_ns;
  ErrorSink err;
};

cudaError_t launch_validate(const ValidateParams& p, cudaStream_t stream);
cudaError_t launch_notify(const NotifyParams& p, cudaStream_t stream);
cudaError_t launch_dispatch(DispatchDtype dtype, bool prequantized, const DispatchParams& p,
                            int num_blocks, cudaStream_t stream);
// num_blocks must not exceed combine_max_coresident_blocks: the combine kernel's receiving
// warps wait for rows that other warps of the same grid send.
cudaError_t launch_combine(CombineDtype dtype, const CombineParams& p, int num_blocks,
                           cudaStream_t stream);
// Blocks of the combine kernel that fit on the device at once (occupancy x SMs), or -1.
int combine_max_coresident_blocks(CombineDtype dtype, int device);
// Resolves the peer base addresses of a registered NCCL window (symmetric.cu).
cudaError_t resolve_peer_pointers(void* window, int world_size, char** out_device,
                                  cudaStream_t stream);

}  // namespace moe_ep::cuda_backend
