// Dispatch data kernel: each warp takes a token, reads its bf16 row once (16 bytes a lane),
// encodes it to the wire format in registers and stores the result, with the row's metadata,
// straight into the receive buffer of every destination rank at its canonical row (computed by
// notify). Pre-quantized input is copied as bytes. The last block releases the per-source done
// flag in every destination; dispatch_wait_kernel then waits for all sources' flags.
#pragma once

#include "backends/cuda/data_common.cuh"

namespace moe_ep::cuda_backend {

inline constexpr int kDispatchUnroll = 4;  // chunks of 256 elements loaded before encoding

// Sender role, metadata: local expert ids for the destination's slots, weights, source.
__device__ __forceinline__ void send_metadata(const DispatchParams& p, char* peer, int dest,
                                              int64_t row, int64_t t, int lane) {
  const RankInfo& info = p.info;
  for (int k = lane; k < info.topk; k += 32) {
    const int32_t e = p.topk_idx[t * info.topk + k];
    const bool mine = e >= 0 && e / info.experts_per_rank == dest;
    reinterpret_cast<int32_t*>(peer + p.layout.recv_topk_idx_offset(row))[k] =
        mine ? e - dest * info.experts_per_rank : -1;
    reinterpret_cast<float*>(peer + p.layout.recv_topk_weights_offset(row))[k] =
        p.topk_weights[t * info.topk + k];
  }
  if (lane == 0) {
    *reinterpret_cast<int32_t*>(peer + p.layout.recv_src_rank_offset(row)) = info.rank;
    *reinterpret_cast<int32_t*>(peer + p.layout.recv_src_token_offset(row)) =
        static_cast<int32_t>(t);
  }
}

// Sender role, payload from bf16: encode each 256-element chunk once, store to every dest.
template <typename F>
__device__ __forceinline__ void send_encoded(const DispatchParams& p, int64_t t, uint64_t mask,
                                             const int64_t* rows, int lane) {
  const int hidden = p.info.hidden;
  const uint16_t* src = static_cast<const uint16_t*>(p.x) + t * hidden;
  for (int64_t base = 0; base < hidden; base += kElemsPerWarpStep * kDispatchUnroll) {
    uint4 v[kDispatchUnroll];
#pragma unroll
    for (int u = 0; u < kDispatchUnroll; ++u) {
      v[u] = load_lane(src, base + u * kElemsPerWarpStep + lane * kElemsPerLane, hidden);
    }
#pragma unroll
    for (int u = 0; u < kDispatchUnroll; ++u) {
      const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
      if (base + u * kElemsPerWarpStep >= hidden) break;  // warp-uniform
      const typename F::Params params = lane_block_params<F>(v[u]);
      const LaneWord<F> word = lane_encode<F>(v[u], params);
      if (elem >= hidden) continue;
      for (uint64_t m = mask; m != 0; m &= m - 1) {
        const int d = __ffsll(static_cast<long long>(m)) - 1;
        char* peer = p.peers.base[d];
        store_lane<F>(peer + p.layout.recv_payload_offset(rows[d]),
                      peer + p.layout.recv_scales_offset(rows[d]), elem, word, params);
      }
    }
  }
}

// Sender role, pre-quantized payload and scales: 16-byte copies of the payload, 4-byte copies
// of the scales (scale bytes per row are a multiple of 4 for fp8 and of 1 for mxfp4).
__device__ __forceinline__ void send_bytes(const DispatchParams& p, int64_t t, uint64_t mask,
                                           const int64_t* rows, int lane) {
  const int64_t payload = p.layout.dispatch_payload_bytes;
  const int64_t scale_bytes = p.layout.dispatch_scale_bytes;
  const auto* src = reinterpret_cast<const uint4*>(static_cast<const char*>(p.x) + t * payload);
  const auto* src_scales = static_cast<const uint8_t*>(p.x_scales) + t * scale_bytes;
  for (int64_t i = lane; i < payload / 16; i += 32) {
    const uint4 v = load_stream(src + i);
    for (uint64_t m = mask; m != 0; m &= m - 1) {
      const int d = __ffsll(static_cast<long long>(m)) - 1;
      reinterpret_cast<uint4*>(p.peers.base[d] + p.layout.recv_payload_offset(rows[d]))[i] = v;
    }
  }
  for (int64_t i = lane; i < scale_bytes; i += 32) {
    const uint8_t b = src_scales[i];
    for (uint64_t m = mask; m != 0; m &= m - 1) {
      const int d = __ffsll(static_cast<long long>(m)) - 1;
      reinterpret_cast<uint8_t*>(p.peers.base[d] + p.layout.recv_scales_offset(rows[d]))[i] = b;
    }
  }
}

template <typename F, bool kPrequantized>
__global__ void __launch_bounds__(kDataThreads) dispatch_kernel(DispatchParams p) {
  const WarpCoord c = warp_coord();
  const RankInfo& info = p.info;
  int64_t rows[kMaxWorldSize];
  for (int64_t t = c.warp; t < p.num_tokens; t += c.num_warps) {
    const uint64_t mask = dest_mask(p.pos, info.max_tokens, info.world_size, t, c.lane);
    for (uint64_t m = mask; m != 0; m &= m - 1) {
      const int d = __ffsll(static_cast<long long>(m)) - 1;
      rows[d] = static_cast<int64_t>(__ldcg(p.send_offset + d)) +
                __ldcg(p.pos + static_cast<int64_t>(d) * info.max_tokens + t);
      send_metadata(p, p.peers.base[d], d, rows[d], t, c.lane);
    }
    if constexpr (kPrequantized) {
      send_bytes(p, t, mask, rows, c.lane);
    } else {
      send_encoded<F>(p, t, mask, rows, c.lane);
    }
  }
  signal_when_grid_done(p.block_counter, p.peers.base, info.world_size,
                        p.layout.done_offset(0, info.rank), p.seq);
}

// Receiver role: wait until every source has released its done flag for this call.
__global__ void dispatch_wait_kernel(DispatchParams p) {
  const int src = threadIdx.x;
  if (src >= p.info.world_size) return;
  const auto* flag = reinterpret_cast<const uint64_t*>(p.peers.base[p.info.rank] +
                                                       p.layout.done_offset(0, src));
  uint64_t word = 0;
  wait_tagged(flag, 0, p.seq, p.timeout_ns, p.err, kPhaseDispatchWait, p.info.rank, src, &word);
}

}  // namespace moe_ep::cuda_backend
