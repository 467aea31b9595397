// Combine: one kernel whose warps take work items by ticket (docs/cuda-backend.md).
// Items [0, R) are sends (expert side, rank r): a warp takes a received row i, reads y[i] once,
// encodes it to the combine wire format, stores it into the source rank's combine buffer at
// [r][source token] and release-stores the row's ready flag there (the combine's step number).
// Items [R, R + T) are reduces (token side): for one of this rank's tokens, a warp waits for the
// ready flag of every destination rank's row, then decodes the rows in ascending rank order, sums
// in fp32 and rounds once to bf16. Every send ticket is handed out before any reduce ticket, and
// sends never wait, so the warps a reduce waits for (here or on a peer) are running or done:
// the kernel finishes with any number of its blocks resident, whatever else occupies the GPU.
// A token's reduce starts as soon as its rows have landed, overlapping the sends still in flight.
// Both roles keep four 256-element chunks of loads in flight per warp.
#pragma once

#include "backends/cuda/data_common.cuh"

namespace moe_ep::cuda_backend {

inline constexpr int kCombineUnroll = Policy::kUnroll;

// Sender role for received row i.
template <typename F>
__device__ __forceinline__ void send_combine_row(const CombineParams& p, int64_t i, int lane) {
  const RankInfo& info = p.info;
  const char* self = p.peers.base[info.rank];
  const int hidden = info.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  const int src = __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.recv_src_rank_offset(i)));
  const int token =
      __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.recv_src_token_offset(i)));
  char* row = p.peers.base[src] + p.layout.combine_row_offset(info.rank, token);
  const uint16_t* y = p.y + i * hidden;
  for (int64_t base = 0; base < hidden; base += kElemsPerWarpStep * kCombineUnroll) {
    uint4 v[kCombineUnroll];
#pragma unroll
    for (int u = 0; u < kCombineUnroll; ++u) {
      v[u] = load_lane(y, base + u * kElemsPerWarpStep + lane * kElemsPerLane, hidden);
    }
#pragma unroll
    for (int u = 0; u < kCombineUnroll; ++u) {
      if (base + u * kElemsPerWarpStep >= hidden) break;  // warp-uniform
      const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
      typename F::Params params;
      LaneWord<F> word;
      formats::encode_lane<F>(v[u], word, params);
      if (elem < hidden) store_lane<F>(row, row + payload_bytes, elem, word, params);
    }
  }
  // Every lane's stores of the row are visible system-wide before lane 0 flags it ready.
  __threadfence_system();
  __syncwarp();
  if (lane == 0) {
    st_release_sys(reinterpret_cast<uint64_t*>(p.peers.base[src] +
                                               p.layout.combine_flag_offset(info.rank, token)),
                   p.step);
  }
}

// Receiver role for token t. Returns false when a wait gave up (timeout or another error).
template <typename F>
__device__ __forceinline__ bool reduce_combine_token(const CombineParams& p, int64_t t, int lane) {
  const RankInfo& info = p.info;
  const char* self = p.peers.base[info.rank];
  const int hidden = info.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  const TokenRoutes routes =
      token_routes(p.pos, nullptr, info.max_tokens, info.world_size, t, lane);
  // Every lane acquires every flag itself, so its own loads of the rows are ordered after.
  bool ready = true;
  for (uint64_t m = routes.mask; m != 0 && ready;) {
    const int r = next_dest(m);
    uint64_t word = 0;
    ready =
        wait_tagged(reinterpret_cast<const uint64_t*>(self + p.layout.combine_flag_offset(r, t)), 0,
                    p.step, p.timeout_ns, p.err, kPhaseCombineWait, info.rank, r, &word);
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
      const char* row = self + p.layout.combine_row_offset(r, t);
      LaneWord<F> words[kCombineUnroll];
      typename F::Scale scales[kCombineUnroll];
#pragma unroll
      for (int u = 0; u < kCombineUnroll; ++u) {
        const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
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
        const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
        if (elem < hidden) lane_decode_add<F>(words[u], scales[u], acc[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kCombineUnroll; ++u) {
      const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
      if (elem < hidden) {
        *reinterpret_cast<uint4*>(p.out + t * hidden + elem) = lane_pack_bf16(acc[u]);
      }
    }
  }
  return true;
}

template <typename F>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    combine_kernel(CombineParams p) {
  // The step agreement failed or this rank rejected: nothing moves, on every rank.
  if (block_sees_error(p.err)) return;
  const WarpCoord c = warp_coord();
  const int64_t num_send = p.num_recv;
  const int64_t total = num_send + p.num_tokens;
  // Received rows are grouped by source rank; rank r starts near its own group (about r/W of
  // the way in) so that every rank's tokens see rows arriving from the start, not rank 0's first.
  const int64_t rotation = num_send * p.info.rank / p.info.world_size;
  while (true) {
    const int64_t item = take_ticket(&p.tickets[0], c.lane);
    if (item >= total) break;
    if (item < num_send) {
      const int64_t i = item + rotation < num_send ? item + rotation : item + rotation - num_send;
      send_combine_row<F>(p, i, c.lane);
    } else if (!reduce_combine_token<F>(p, item - num_send, c.lane)) {
      break;  // reported; the other warps see the flag and stop too
    }
  }
  // The last warp out resets the tickets for the op's next combine.
  if (c.lane == 0 && atomicAdd(&p.tickets[1], 1u) == static_cast<unsigned int>(c.num_warps) - 1) {
    p.tickets[0] = 0;
    p.tickets[1] = 0;
  }
}

}  // namespace moe_ep::cuda_backend
