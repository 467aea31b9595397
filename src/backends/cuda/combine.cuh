// Combine kernels. Sender role (expert side, rank r): each warp takes a received row i, reads
// y[i] once, encodes it to the combine wire format and stores it into the source rank's combine
// buffer at [r][source token]; the last block releases r's done flag in every rank. Receiver
// role (token side): wait for every rank's flag, then for each token decode the rows of its
// destination ranks in ascending rank order, sum in fp32 and round once to bf16.
#pragma once

#include "backends/cuda/data_common.cuh"

namespace moe_ep::cuda_backend {

template <typename F>
__global__ void __launch_bounds__(kDataThreads) combine_send_kernel(CombineParams p) {
  const WarpCoord c = warp_coord();
  const RankInfo& info = p.info;
  const char* self = p.peers.base[info.rank];
  const int hidden = info.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  for (int64_t i = c.warp; i < p.num_recv; i += c.num_warps) {
    const int src = __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.recv_src_rank_offset(i)));
    const int token =
        __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.recv_src_token_offset(i)));
    char* row = p.peers.base[src] + p.layout.combine_row_offset(info.rank, token);
    const uint16_t* y = p.y + i * hidden;
    for (int64_t base = 0; base < hidden; base += kElemsPerWarpStep) {
      const int64_t elem = base + c.lane * kElemsPerLane;
      const uint4 v = load_lane(y, elem, hidden);
      const typename F::Params params = lane_block_params<F>(v);
      const LaneWord<F> word = lane_encode<F>(v, params);
      if (elem < hidden) store_lane<F>(row, row + payload_bytes, elem, word, params);
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
  // The error word is in host memory: one read per block, not one per thread, over PCIe.
  __shared__ bool failed;
  if (threadIdx.x == 0) failed = ld_volatile(&p.err->code) != 0;
  __syncthreads();
  if (failed) return;

  const WarpCoord c = warp_coord();
  const int hidden = info.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  for (int64_t t = c.warp; t < p.num_tokens; t += c.num_warps) {
    const uint64_t mask = dest_mask(p.pos, info.max_tokens, info.world_size, t, c.lane);
    for (int64_t base = 0; base < hidden; base += kElemsPerWarpStep) {
      const int64_t elem = base + c.lane * kElemsPerLane;
      if (elem >= hidden) continue;
      float acc[kElemsPerLane];
#pragma unroll
      for (int j = 0; j < kElemsPerLane; ++j) acc[j] = 0.0f;
      for (uint64_t m = mask; m != 0; m &= m - 1) {  // ascending rank order
        const int r = __ffsll(static_cast<long long>(m)) - 1;
        const char* row = self + p.layout.combine_row_offset(r, t);
        typename F::Scale scale{};
        if constexpr (F::kBlock != 0) {
          scale = __ldcg(reinterpret_cast<const typename F::Scale*>(row + payload_bytes) +
                         elem / F::kBlock);
        }
        lane_decode_add<F>(load_word<F>(row, elem), scale, acc);
      }
      *reinterpret_cast<uint4*>(p.out + t * hidden + elem) = lane_pack_bf16(acc);
    }
  }
}

}  // namespace moe_ep::cuda_backend
