// Pieces shared by the dispatch and combine data kernels: warp coordinates of a persistent
// grid, warp-level work tickets, the destination set of a token read from the notify positions,
// and chunk addressing.
#pragma once

#include <cstdint>

#include "backends/cuda/common.cuh"
#include "backends/cuda/launch.h"
#include "formats/packed.cuh"
#include "formats/packed_fast.cuh"

namespace moe_ep::cuda_backend {

using formats::kElemsPerLane;
using formats::lane_block_params;
using formats::lane_decode_add;
using formats::lane_encode;
using formats::lane_pack_bf16;
using formats::LaneWord;

inline constexpr int kElemsPerWarpStep = Policy::kElemsPerWarpStep;

// Plain (weak) 16-byte global load that bypasses L1, for rows read exactly once.
__device__ __forceinline__ uint4 load_stream(const uint4* p) { return __ldcs(p); }

struct WarpCoord {
  int lane;
  int64_t warp;
  int64_t num_warps;
};

// The next work item of this warp: lane 0 takes a ticket, every lane gets it.
__device__ __forceinline__ unsigned int take_ticket(unsigned int* counter, int lane) {
  unsigned int t = 0;
  if (lane == 0) t = atomicAdd(counter, 1u);
  return __shfl_sync(0xffffffffu, t, 0);
}

// The first item of the last wave of tickets: of N items (`end`) on a grid of n warps that all
// take tickets, the last n, [N - n, N). A warp stops after the first last-wave item it processes
// instead of taking the ticket that would tell it nothing is left (a round trip that every warp
// made at about the same time, on one counter). Every item is still taken: a warp stops only
// after a last-wave item (distinct tickets: all n warps stopping so have taken the whole wave)
// or at a ticket of N or more (taken after every ticket below N). A warp that skips an item and
// goes on (a decode send for a token that did not come here) may take several last-wave
// tickets; the warps left then go on to a ticket past N and stop there.
__device__ __forceinline__ int64_t last_wave_of_tickets(int64_t end, int64_t num_warps) {
  return end - num_warps;
}

__device__ __forceinline__ WarpCoord warp_coord() {
  WarpCoord c;
  c.lane = static_cast<int>(threadIdx.x & 31);
  c.warp = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  c.num_warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  return c;
}

// Where token t goes: lane d (and d + 32) holds the row of token t in destination d's receive
// buffer (send_offset[d] + pos[d][t]) or -1; `mask` has bit d set for every destination. W <= 64.
struct TokenRoutes {
  uint64_t mask;
  int64_t row_lo;  // destination `lane`
  int64_t row_hi;  // destination `lane + 32`
  // Row in destination d (warp-uniform d; every lane must call it: it shuffles).
  __device__ __forceinline__ int64_t row(int d) const {
    const int64_t mine = d < 32 ? row_lo : row_hi;
    return __shfl_sync(0xffffffffu, mine, d & 31);
  }
};

__device__ __forceinline__ TokenRoutes token_routes(const int32_t* pos, const int32_t* offsets,
                                                    int max_tokens, int world, int64_t t,
                                                    int lane) {
  TokenRoutes r{0, -1, -1};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int d = lane + 32 * half;
    int64_t row = -1;
    if (d < world) {
      // Both loads at once: behind the branch on p, the offset's load waited for the
      // position's (v23: 10.6% of the 128-token dispatch kernel's warp samples).
      const int32_t p = __ldcg(pos + static_cast<int64_t>(d) * max_tokens + t);
      const int32_t offset = offsets ? __ldcg(offsets + d) : 0;
      if (p >= 0) row = static_cast<int64_t>(offset) + p;
    }
    (half == 0 ? r.row_lo : r.row_hi) = row;
    r.mask |= static_cast<uint64_t>(__ballot_sync(0xffffffffu, row >= 0)) << (32 * half);
  }
  return r;
}

// The ranks of this rank's node, as a destination mask (every rank with one node).
__device__ __forceinline__ uint64_t own_node_mask(const NodeInfo& nodes) {
  const uint64_t ones = nodes.node_size >= 64 ? ~uint64_t{0} : (uint64_t{1} << nodes.node_size) - 1;
  return ones << nodes.first_rank();
}

__device__ __forceinline__ int next_dest(uint64_t& m) {
  const int d = __ffsll(static_cast<long long>(m)) - 1;
  m &= m - 1;
  return d;
}

// Load 8 bf16 of a row starting at element `elem` (zeros past the end of the row).
__device__ __forceinline__ uint4 load_lane(const uint16_t* row, int64_t elem, int hidden) {
  if (elem >= hidden) return make_uint4(0, 0, 0, 0);
  return load_stream(reinterpret_cast<const uint4*>(row + elem));
}

// Asks L2 to fetch [ptr, ptr + bytes) from HBM (one bulk-prefetch instruction, sm_90): a hint
// with nothing to wait for, no register and no shared memory held. ptr 16-byte aligned, bytes a
// multiple of 16. A warp that reads a row in several sequential steps prefetches the steps after
// the first, so that those hit L2 instead of waiting for HBM each (docs/cuda-backend.md,
// "Prefetching rows into L2").
__device__ __forceinline__ void prefetch_l2(const void* ptr, int64_t bytes) {
  if (bytes <= 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(ptr)),
               "r"(static_cast<uint32_t>(bytes)));  // orders nothing: no memory clobber
}

// Asks L1 for the line holding p (prefetch.global.L1): a hint with nothing to wait for and no
// register held. The dispatch's warps, which read a row slice by slice, ask for the next slice's
// lines while they encode and store the current one, so that its loads (ld.global.cs, which L1
// caches) hit L1 (docs/perf-history.md, v39: 2-7 us of 62-78 at 32 SMs; the same in the combine's
// whole-row groups lost 1-2 us).
__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(__cvta_generic_to_global(p)));
}

// Store one lane's encoded elements and, for the first lane of a block, the block's scale
// (the stored word of its Params).
template <typename F>
__device__ __forceinline__ void store_lane(char* payload, char* scales, int64_t elem,
                                           const LaneWord<F>& word, typename F::Scale stored) {
  *reinterpret_cast<LaneWord<F>*>(payload + formats::payload_bytes_of<F>(elem)) = word;
  if constexpr (F::kBlock != 0) {
    if (elem % F::kBlock == 0)
      reinterpret_cast<typename F::Scale*>(scales)[elem / F::kBlock] = stored;
  }
}

template <typename F>
__device__ __forceinline__ void store_lane(char* payload, char* scales, int64_t elem,
                                           const LaneWord<F>& word, typename F::Params params) {
  store_lane<F>(payload, scales, elem, word, params.stored);
}

template <typename F>
__device__ __forceinline__ LaneWord<F> load_word(const char* payload, int64_t elem) {
  // L2-only load: the data was written by peers, so no stale L1 line may serve it.
  return __ldcg(reinterpret_cast<const LaneWord<F>*>(payload + formats::payload_bytes_of<F>(elem)));
}

}  // namespace moe_ep::cuda_backend
