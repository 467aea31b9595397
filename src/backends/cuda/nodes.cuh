// Several nodes (docs/multi-node.md, "The CUDA path across nodes"): the kernels the hierarchical
// path adds to normal mode. Ranks [n*L, (n+1)*L) form node n; a token of source s bound for
// another node n crosses once, as one staged row (StageLayout), to the forwarder n*L + s%L.
// - node_positions_kernel (dispatch, after notify): block n scans this rank's tokens for node n
//   (any of its ranks), giving each token its staged row for that node and the node's count.
// - forward_kernel (dispatch, after the transport brought the staged rows): every staged row is
//   independent: for each rank of this node it names, the row is stored at the receive row the
//   source computed (send offset + position, so no scan here), with the source's fields and the
//   staged index (fwd_row); the last block releases each forwarded source's done word in every
//   rank of the node.
// - node_partial_kernel (combine, forwarder): per staged row, wait for the rows this node's ranks
//   sent back (combine slots of the source's node, layout.h), sum them in fp32 from +0 in
//   ascending rank, round to bf16 and encode in the combine format, for the transport.
// - node_reduce_kernel (combine, source): per token, the sum over nodes in ascending order of
//   this node's fp32 sum (its ranks' rows, ascending) and the other nodes' decoded partials,
//   rounded once to bf16: the order of docs/design.md#several-nodes.
// None of them waits for another warp of its own grid, so any resident subset finishes it.
#pragma once

#include <cub/block/block_scan.cuh>

#include "backends/cuda/combine.cuh"

namespace moe_ep::cuda_backend {

__global__ void __launch_bounds__(Policy::kNotifyThreads)
    node_positions_kernel(NodePositionsParams p) {
  if (block_sees_error(p.err)) return;
  using Scan = cub::BlockScan<int, Policy::kNotifyThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const int n = static_cast<int>(blockIdx.x);
  const int size = p.nodes.node_size;
  const int64_t max_tokens = p.info.max_tokens;
  int running = 0;
  for (int base = 0; base < p.num_tokens; base += Policy::kNotifyThreads) {
    const int t = base + static_cast<int>(threadIdx.x);
    int flag = 0;
    if (t < p.num_tokens) {
      for (int q = 0; q < size && flag == 0; ++q) {
        flag = p.pos[static_cast<int64_t>(n * size + q) * max_tokens + t] >= 0 ? 1 : 0;
      }
    }
    int prefix = 0, chunk_total = 0;
    Scan(scan_storage).ExclusiveSum(flag, prefix, chunk_total);
    if (t < p.num_tokens) p.node_pos[n * max_tokens + t] = flag ? running + prefix : -1;
    running += chunk_total;
    __syncthreads();  // scan_storage is reused
  }
  if (threadIdx.x == 0) {
    p.node_rows[n] = running;
    *reinterpret_cast<volatile int32_t*>(p.host_rows + n) = running;
    __threadfence_system();
  }
}

// Work items over the staged rows of every remote node slot: (slot, row). Returns false past
// the end.
__device__ __forceinline__ bool staged_item(const NodeParams& p, int64_t item, int* slot,
                                            int64_t* row) {
  for (int m = 0; m + 1 < p.nodes.num_nodes; ++m) {
    if (item < p.rows_in[m]) {
      *slot = m;
      *row = item;
      return true;
    }
    item -= p.rows_in[m];
  }
  return false;
}

__device__ __forceinline__ const char* staged_row_in(const NodeParams& p, int slot, int64_t j) {
  return p.stage_in + (static_cast<int64_t>(slot) * p.info.max_tokens + j) * p.stage_layout.stride;
}

// One warp stores staged row j of slot m into the receive rows of every rank of this node that
// it names.
__device__ __forceinline__ void forward_row(const NodeParams& p, int m, int64_t j, int lane) {
  const RankInfo& info = p.info;
  const StageLayout& s = p.stage_layout;
  const BufferLayout& l = p.layout;
  const char* staged = staged_row_in(p, m, j);
  const int src = p.nodes.rail_peer(info.rank, p.nodes.node_of_slot(m));
  const int32_t token = __ldcg(reinterpret_cast<const int32_t*>(staged + s.meta));
  const int64_t vectors = s.payload_bytes / 16;
  for (int q = 0; q < p.nodes.node_size; ++q) {
    const int64_t row = __ldcg(reinterpret_cast<const int32_t*>(staged + s.rows) + q);
    if (row < 0) continue;  // warp-uniform
    const int dest = p.nodes.first_rank() + q;
    char* peer = p.peers.base[dest];
    const auto* from = reinterpret_cast<const uint4*>(staged);
    auto* to = reinterpret_cast<uint4*>(peer + l.recv_payload_offset(row));
    for (int64_t i = lane; i < vectors; i += 32) to[i] = __ldcg(from + i);
    const auto* scales_from = reinterpret_cast<const uint8_t*>(staged + s.payload_bytes);
    auto* scales_to = reinterpret_cast<uint8_t*>(peer + l.recv_scales_offset(row));
    for (int64_t i = lane; i < s.scale_bytes; i += 32) scales_to[i] = scales_from[i];
    const int32_t first = dest * info.experts_per_rank;
    for (int k = lane; k < info.topk; k += 32) {
      const int32_t e = __ldcg(reinterpret_cast<const int32_t*>(staged + s.ids) + k);
      const bool mine = e >= first && e < first + info.experts_per_rank;
      reinterpret_cast<int32_t*>(peer + l.recv_topk_idx_offset(row))[k] = mine ? e - first : -1;
      reinterpret_cast<float*>(peer + l.recv_topk_weights_offset(row))[k] =
          __ldcg(reinterpret_cast<const float*>(staged + s.weights) + k);
    }
    if (lane == 0) {
      *reinterpret_cast<int32_t*>(peer + l.recv_src_rank_offset(row)) = src;
      *reinterpret_cast<int32_t*>(peer + l.recv_src_token_offset(row)) = token;
      *reinterpret_cast<int32_t*>(peer + l.recv_fwd_row_offset(row)) = static_cast<int32_t>(j);
    }
  }
}

__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    forward_kernel(NodeParams p) {
  if (block_sees_error(p.err)) return;
  const WarpCoord c = warp_coord();
  for (int64_t item = c.warp;; item += c.num_warps) {
    int m = 0;
    int64_t j = 0;
    if (!staged_item(p, item, &m, &j)) break;
    forward_row(p, m, j, c.lane);
  }
  // Every forwarded source's done word, in every rank of this node (also for a source that sent
  // this node nothing: its receivers wait for the word all the same).
  const NodeInfo& nodes = p.nodes;
  when_grid_done(p.block_counter, [&] {
    const int words = (nodes.num_nodes - 1) * nodes.node_size;
    for (int i = static_cast<int>(threadIdx.x); i < words; i += static_cast<int>(blockDim.x)) {
      const int src = nodes.rail_peer(p.info.rank, nodes.node_of_slot(i / nodes.node_size));
      char* peer = p.peers.base[nodes.first_rank() + i % nodes.node_size];
      st_release_sys(reinterpret_cast<uint64_t*>(peer + p.layout.done_offset(src)), p.step);
    }
  });
}

template <typename F>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    node_partial_kernel(NodeParams p) {
  if (block_sees_error(p.err)) return;
  const WarpCoord c = warp_coord();
  const RankInfo& info = p.info;
  const int hidden = info.hidden;
  const int64_t max_tokens = info.max_tokens;
  for (int64_t item = c.warp;; item += c.num_warps) {
    int m = 0;
    int64_t j = 0;
    if (!staged_item(p, item, &m, &j)) break;
    // The ranks of this node holding the row: combine slots (source node * L + q, j).
    const char* staged = staged_row_in(p, m, j);
    const int base_slot = p.nodes.node_of_slot(m) * p.nodes.node_size;
    uint64_t mask = 0;
    for (int q = 0; q < p.nodes.node_size; ++q) {
      if (__ldcg(reinterpret_cast<const int32_t*>(staged + p.stage_layout.rows) + q) >= 0) {
        mask |= uint64_t{1} << (base_slot + q);
      }
    }
    uint16_t* partial = p.partial_bf16 + static_cast<int64_t>(m) * max_tokens * hidden;
    const ReduceArgs sum{
        p.peers.base[info.rank], p.layout, hidden, info.rank, partial, p.step, p.timeout_ns, p.err};
    const auto flag_offset = [&](int r) { return p.layout.combine_flag_offset(r, j); };
    if (!reduce_combine_range<F>(sum, j, mask, 0, hidden, flag_offset, c.lane)) break;
    __syncwarp();
    const uint16_t* rounded = partial + j * hidden;
    send_combine_range<F>([&](int64_t elem) { return load_lane(rounded, elem, hidden); }, 0, hidden,
                          hidden, p.partial_out + (m * max_tokens + j) * p.layout.combine_row_bytes,
                          p.scratch_flag, p.step, c.lane);
  }
}

// Warp steps per pass of the node-ordered sum: two accumulators of 2 x 8 floats per lane (the
// sum over nodes and this node's own) stay within the data kernels' 64 registers.
inline constexpr int kNodeReduceUnroll = 2;

template <typename F>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    node_reduce_kernel(NodeParams p) {
  if (block_sees_error(p.err)) return;
  constexpr int kU = kNodeReduceUnroll;
  const WarpCoord c = warp_coord();
  const RankInfo& info = p.info;
  const NodeInfo& nodes = p.nodes;
  const int hidden = info.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  const char* self = p.peers.base[info.rank];
  const int lane = c.lane;
  const ReduceArgs flags{self, p.layout, hidden, info.rank, p.out, p.step, p.timeout_ns, p.err};
  for (int64_t t = c.warp; t < p.num_tokens; t += c.num_warps) {
    const TokenRoutes ranks =
        token_routes(p.pos, nullptr, info.max_tokens, info.world_size, t, lane);
    const uint64_t own = ranks.mask & own_node_mask(nodes);
    const TokenRoutes staged =
        token_routes(p.node_pos, nullptr, info.max_tokens, nodes.num_nodes, t, lane);
    const auto flag_offset = [&](int r) { return p.layout.combine_flag_offset(r, t); };
    if (!wait_ready_flags(flags, own, flag_offset)) break;  // reported; the other warps stop too
    for (int64_t base = 0; base < hidden; base += kElemsPerWarpStep * kU) {
      float acc[kU][kElemsPerLane];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
#pragma unroll
        for (int e = 0; e < kElemsPerLane; ++e) acc[u][e] = 0.0f;
      }
      for (int n = 0; n < nodes.num_nodes; ++n) {
        if (n == nodes.node) {
          if (own == 0) continue;
          float mine[kU][kElemsPerLane];
#pragma unroll
          for (int u = 0; u < kU; ++u) {
#pragma unroll
            for (int e = 0; e < kElemsPerLane; ++e) mine[u][e] = 0.0f;
          }
          for (uint64_t m = own; m != 0;) {  // ascending rank order
            const int r = next_dest(m);
            add_row_steps<F, kU>(self + p.layout.combine_row_offset(r, t), payload_bytes, base,
                                 hidden, lane, mine);
          }
#pragma unroll
          for (int u = 0; u < kU; ++u) {
#pragma unroll
            for (int e = 0; e < kElemsPerLane; ++e) acc[u][e] = acc[u][e] + mine[u][e];
          }
        } else {
          const int64_t j = staged.row(n);  // every lane: it shuffles
          if (((staged.mask >> n) & 1) == 0) continue;
          const char* row =
              p.partial_in + (static_cast<int64_t>(nodes.slot(n)) * info.max_tokens + j) *
                                 p.layout.combine_row_bytes;
          add_row_steps<F, kU>(row, payload_bytes, base, hidden, lane, acc);
        }
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t elem = base + u * kElemsPerWarpStep + lane * kElemsPerLane;
        if (elem < hidden) {
          *reinterpret_cast<uint4*>(p.out + t * hidden + elem) = lane_pack_bf16(acc[u]);
        }
      }
    }
  }
}

}  // namespace moe_ep::cuda_backend
