// Combine kernels. Sender role (expert side, rank r): each warp takes a received row i, reads
// y[i] once, encodes it to the combine wire format and stores it into the source rank's combine
// buffer at [r][source token]; the last block releases r's done flag in every rank. Receiver
// role (token side): wait for every rank's flag, then for each token decode the rows of its
// destination ranks in ascending rank order, sum in fp32 and round once to bf16. Both roles
// keep four 256-element chunks of loads in flight per warp.
#pragma once

#include "backends/cuda/data_common.cuh"

namespace moe_ep::cuda_backend {

inline constexpr int kCombineUnroll = 4;

template <typename F>
__global__ void __launch_bounds__(kDataThreads) combine_send_kernel(CombineParams p) {
  if (block_sees_error(p.err)) return;
  const WarpCoord c = warp_coord();
  const RankInfo& info = p.info;
  const char* self = p.peers.base[info.rank];
  const int hidden = info.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  const auto* src_rank = reinterpret_cast<const int32_t*>(self + p.layout.recv_src_rank_offset(0));
  const auto* src_token =
      reinterpret_cast<const int32_t*>(self + p.layout.recv_src_token_offset(0));
  const int64_t combine_base = p.layout.combine_row_offset(info.rank, 0);
  for (int64_t i = c.warp; i < p.num_recv; i += c.num_warps) {
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
  }
  signal_when_grid_done(p.block_counter, p.peers.base, info.world_size,
                        p.layout.done_offset(1, info.rank), p.seq);
}

template <typename F>
__global__ void __launch_bounds__(kDataThreads) combine_reduce_kernel(CombineParams p) {
  const RankInfo& info = p.info;
  const char* self = p.peers.base[info.rank];
  if (threadIdx.x < info.world_size) {
    const auto* flag =
        reinterpret_cast<const uint64_t*>(self + p.layout.done_offset(1, threadIdx.x));
    uint64_t word = 0;
    wait_tagged(flag, 0, p.seq, p.timeout_ns, p.err, kPhaseCombineWait, info.rank, threadIdx.x,
                &word);
  }
  if (block_sees_error(p.err)) return;

  const WarpCoord c = warp_coord();
  const int hidden = info.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  const int64_t row_bytes = p.layout.combine_row_bytes;
  const char* rows = self + p.layout.combine_row_offset(0, 0);  // [W][max_tokens][row_bytes]
  for (int64_t t = c.warp; t < p.num_tokens; t += c.num_warps) {
    const TokenRoutes routes =
        token_routes(p.pos, nullptr, info.max_tokens, info.world_size, t, c.lane);
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
}

}  // namespace moe_ep::cuda_backend
