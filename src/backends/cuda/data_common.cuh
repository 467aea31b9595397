// Pieces shared by the dispatch and combine data kernels: warp coordinates of a persistent
// grid, the destination set of a token read from the notify positions, and chunk addressing.
#pragma once

#include <cstdint>

#include "backends/cuda/common.cuh"
#include "backends/cuda/launch.h"
#include "backends/cuda/lane_codec.cuh"

namespace moe_ep::cuda_backend {

struct WarpCoord {
  int lane;
  int64_t warp;
  int64_t num_warps;
};

__device__ __forceinline__ WarpCoord warp_coord() {
  WarpCoord c;
  c.lane = static_cast<int>(threadIdx.x & 31);
  c.warp = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  c.num_warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  return c;
}

// Bit d set when token t goes to rank d (pos >= 0); every lane gets the same mask. W <= 64.
__device__ __forceinline__ uint64_t dest_mask(const int32_t* pos, int max_tokens, int world,
                                              int64_t t, int lane) {
  uint64_t mask = 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int d = lane + 32 * half;
    const bool hit = d < world && __ldcg(pos + static_cast<int64_t>(d) * max_tokens + t) >= 0;
    mask |= static_cast<uint64_t>(__ballot_sync(0xffffffffu, hit)) << (32 * half);
  }
  return mask;
}

// Load 8 bf16 of a row starting at element `elem` (zeros past the end of the row).
__device__ __forceinline__ uint4 load_lane(const uint16_t* row, int64_t elem, int hidden) {
  if (elem >= hidden) return make_uint4(0, 0, 0, 0);
  return load_stream(reinterpret_cast<const uint4*>(row + elem));
}

// Store one lane's encoded elements and, for the first lane of a block, the block's scale.
template <typename F>
__device__ __forceinline__ void store_lane(char* payload, char* scales, int64_t elem,
                                           const LaneWord<F>& word, typename F::Params params) {
  const int64_t byte = F::kElemsPerByte == 0 ? 2 * elem : elem / (F::kElemsPerByte);
  *reinterpret_cast<LaneWord<F>*>(payload + byte) = word;
  if constexpr (F::kBlock != 0) {
    if (elem % F::kBlock == 0) {
      reinterpret_cast<typename F::Scale*>(scales)[elem / F::kBlock] = params.stored;
    }
  }
}

template <typename F>
__device__ __forceinline__ LaneWord<F> load_word(const char* payload, int64_t elem) {
  const int64_t byte = F::kElemsPerByte == 0 ? 2 * elem : elem / (F::kElemsPerByte);
  const auto* p = reinterpret_cast<const LaneWord<F>*>(payload + byte);
  if constexpr (sizeof(LaneWord<F>) == 16) {
    return __ldcg(p);
  } else if constexpr (sizeof(LaneWord<F>) == 8) {
    return __ldcg(p);
  } else {
    return __ldcg(p);
  }
}

}  // namespace moe_ep::cuda_backend
