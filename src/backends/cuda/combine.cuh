// Combine: one kernel in which every warp first sends, then reduces (docs/cuda-backend.md, v9).
// Sender role (expert side, rank r): a warp takes a received row i, reads y[i] once, encodes it
// to the combine wire format, stores it into the source rank's combine buffer at
// [r][source token] and release-stores the row's ready flag there (the combine's sequence
// number). Receiver role (token side): for each of its tokens, a warp waits for the ready flag
// of every destination rank's row, then decodes the rows in ascending rank order, sums in fp32
// and rounds once to bf16. The reduce of a token starts as soon as its rows have landed, so it
// overlaps the sends still in flight instead of following all of them. Waiting warps rely on
// every warp of the grid being resident (the launcher sizes the grid by occupancy) and every
// wait is bounded. Both roles keep four 256-element chunks of loads in flight per warp.
#pragma once

#include "backends/cuda/data_common.cuh"

namespace moe_ep::cuda_backend {

inline constexpr int kCombineUnroll = 4;

template <typename F>
__device__ __forceinline__ void send_combine_rows(const CombineParams& p, const WarpCoord& c) {
  const RankInfo& info = p.info;
  const char* self = p.peers.base[info.rank];
  const int hidden = info.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  const auto* src_rank = reinterpret_cast<const int32_t*>(self + p.layout.recv_src_rank_offset(0));
  const auto* src_token =
      reinterpret_cast<const int32_t*>(self + p.layout.recv_src_token_offset(0));
  const int64_t combine_base = p.layout.combine_row_offset(info.rank, 0);
  const int64_t flag_base = p.layout.combine_flag_offset(info.rank, 0);
  // Received rows are grouped by source rank; rank r starts near its own group (about r/W of
  // the way in) so that every rank's tokens see rows arriving from the start, not rank 0's first.
  const int64_t rotation = p.num_recv * info.rank / info.world_size;
  for (int64_t k = c.warp; k < p.num_recv; k += c.num_warps) {
    const int64_t i = k + rotation < p.num_recv ? k + rotation : k + rotation - p.num_recv;
    const int src = __ldcg(src_rank + i);
    const int token = __ldcg(src_token + i);
    char* row = p.peers.base[src] + combine_base + token * p.layout.combine_row_bytes;
    const uint16_t* y = p.y + i * hidden;
    for (int64_t base = 0; base < hidden; base += kElemsPerWarpStep * kCombineUnroll) {
      uint4 v[kCombineUnroll];
#pragma unroll
      for (int u = 0; u < kCombineUnroll; ++u) {
        v[u] = load_lane(y, base + u * kElemsPerWarpStep + c.lane * kElemsPerLane, hidden);
      }
#pragma unroll
      for (int u = 0; u < kCombineUnroll; ++u) {
        if (base + u * kElemsPerWarpStep >= hidden) break;  // warp-uniform
        const int64_t elem = base + u * kElemsPerWarpStep + c.lane * kElemsPerLane;
        const typename F::Params params = lane_block_params<F>(v[u]);
        const LaneWord<F> word = lane_encode<F>(v[u], params);
        if (elem < hidden) store_lane<F>(row, row + payload_bytes, elem, word, params);
      }
    }
    // Every lane's stores of the row are visible system-wide before lane 0 flags it ready.
    __threadfence_system();
    __syncwarp();
    if (c.lane == 0) {
      st_release_sys(reinterpret_cast<uint64_t*>(p.peers.base[src] + flag_base) + token, p.seq);
    }
  }
}

// Returns false when a wait gave up (timeout or another error); the caller then stops.
template <typename F>
__device__ __forceinline__ bool reduce_combine_rows(const CombineParams& p, const WarpCoord& c) {
  const RankInfo& info = p.info;
  const char* self = p.peers.base[info.rank];
  const int hidden = info.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  const int64_t row_bytes = p.layout.combine_row_bytes;
  const char* rows = self + p.layout.combine_row_offset(0, 0);  // [W][max_tokens][row_bytes]
  const auto* flags = reinterpret_cast<const uint64_t*>(self + p.layout.combine_flag_offset(0, 0));
  for (int64_t t = c.warp; t < p.num_tokens; t += c.num_warps) {
    const TokenRoutes routes =
        token_routes(p.pos, nullptr, info.max_tokens, info.world_size, t, c.lane);
    // Every lane acquires every flag itself, so its own loads of the rows are ordered after.
    bool ready = true;
    for (uint64_t m = routes.mask; m != 0 && ready;) {
      const int r = next_dest(m);
      uint64_t word = 0;
      ready = wait_tagged(flags + static_cast<int64_t>(r) * info.max_tokens + t, 0, p.seq,
                          p.timeout_ns, p.err, kPhaseCombineWait, info.rank, r, &word);
    }
    if (!__all_sync(0xffffffffu, ready)) return false;
    for (int64_t base = 0; base < hidden; base += kElemsPerWarpStep * kCombineUnroll) {
      float acc[kCombineUnroll][kElemsPerLane];
#pragma unroll
      for (int u = 0; u < kCombineUnroll; ++u) {
#pragma unroll
        for (int j = 0; j < kElemsPerLane; ++j) acc[u][j] = 0.0f;
      }
      for (uint64_t m = routes.mask; m != 0;) {  // ascending rank order
        const int r = next_dest(m);
        const char* row = rows + (static_cast<int64_t>(r) * info.max_tokens + t) * row_bytes;
        LaneWord<F> words[kCombineUnroll];
        typename F::Scale scales[kCombineUnroll];
#pragma unroll
        for (int u = 0; u < kCombineUnroll; ++u) {
          const int64_t elem = base + u * kElemsPerWarpStep + c.lane * kElemsPerLane;
          if (elem < hidden) {
            words[u] = load_word<F>(row, elem);
            if constexpr (F::kBlock != 0) {
              scales[u] = __ldcg(reinterpret_cast<const typename F::Scale*>(row + payload_bytes) +
                                 elem / F::kBlock);
            } else {
              scales[u] = typename F::Scale{};
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kCombineUnroll; ++u) {
          const int64_t elem = base + u * kElemsPerWarpStep + c.lane * kElemsPerLane;
          if (elem < hidden) lane_decode_add<F>(words[u], scales[u], acc[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < kCombineUnroll; ++u) {
        const int64_t elem = base + u * kElemsPerWarpStep + c.lane * kElemsPerLane;
        if (elem < hidden) {
          *reinterpret_cast<uint4*>(p.out + t * hidden + elem) = lane_pack_bf16(acc[u]);
        }
      }
    }
  }
  return true;
}

template <typename F>
__global__ void __launch_bounds__(kDataThreads, kCombineMinBlocksPerSm)
    combine_kernel(CombineParams p) {
  if (block_sees_error(p.err)) return;
  const WarpCoord c = warp_coord();
  send_combine_rows<F>(p, c);  // never waits, so every row is eventually sent
  reduce_combine_rows<F>(p, c);
}

}  // namespace moe_ep::cuda_backend
