// Dispatch data kernel: each warp takes a token's row, or a 1024-element slice of it when there
// are too few tokens to keep the grid busy (whole rows for pre-quantized input). It reads the
// bf16 once (16 bytes a lane, four 256-element steps in flight), encodes it to the wire format
// in registers and stores the result straight into the receive buffer of every destination
// rank at its canonical row (computed by notify); the warp with a row's first slice also writes
// the row's metadata. With several nodes only this node's ranks are stored into; a token bound
// for another node is written once per such node into a staged row (StageLayout) that the
// transport carries to the forwarder there (nodes.cuh). Slices keep small batches from waiting
// on one warp per row. Nothing in the kernel waits, so any resident subset of its blocks
// finishes it. On one node's SM path each block adds itself to this source's done count in every
// destination (count_block_done); with several nodes the last block releases the per-source done
// flag in this node's destinations; dispatch_wait_kernel waits for all sources'.
#pragma once

#include "backends/cuda/data_common.cuh"

namespace moe_ep::cuda_backend {

inline constexpr int kDispatchUnroll = Policy::kUnroll;
// Elements of a row one warp encodes as one work item: one unrolled step. A multiple of both
// block sizes (128, 32), so no scale block straddles two warps.
inline constexpr int kDispatchSliceElems = Policy::kDispatchSliceElems;
static_assert(kDispatchSliceElems == kElemsPerWarpStep * kDispatchUnroll,
              "a slice is one unrolled step of a warp");
static_assert(kDispatchSliceElems % kFp8BlockSize == 0 &&
                  kDispatchSliceElems % kMxfp4BlockSize == 0,
              "a dispatch slice must hold whole scale blocks");

// Receive-buffer fields as offsets from a rank's base: the layout is the same on every rank.
struct RecvFields {
  int64_t payload, scales, topk_idx, topk_weights, src_rank, src_token;
  __device__ __forceinline__ explicit RecvFields(const BufferLayout& l)
      : payload(l.recv_payload_offset(0)),
        scales(l.recv_scales_offset(0)),
        topk_idx(l.recv_topk_idx_offset(0)),
        topk_weights(l.recv_topk_weights_offset(0)),
        src_rank(l.recv_src_rank_offset(0)),
        src_token(l.recv_src_token_offset(0)) {}
};

// Sender role, metadata: local expert ids for the destination's slots, weights, source.
__device__ __forceinline__ void send_metadata(const DispatchParams& p, const RecvFields& f,
                                              char* peer, int dest, int64_t row, int64_t t,
                                              int lane) {
  const RankInfo& info = p.info;
  for (int k = lane; k < info.topk; k += 32) {
    const int32_t e = p.topk_idx[t * info.topk + k];
    const bool mine = e >= 0 && e / info.experts_per_rank == dest;
    reinterpret_cast<int32_t*>(peer + f.topk_idx)[row * info.topk + k] =
        mine ? e - dest * info.experts_per_rank : -1;
    reinterpret_cast<float*>(peer + f.topk_weights)[row * info.topk + k] =
        p.topk_weights[t * info.topk + k];
  }
  if (lane == 0) {
    reinterpret_cast<int32_t*>(peer + f.src_rank)[row] = info.rank;
    reinterpret_cast<int32_t*>(peer + f.src_token)[row] = static_cast<int32_t>(t);
  }
}

// Several nodes: where token t's staged row for remote node n goes, its j-th for that node.
__device__ __forceinline__ char* stage_row(const DispatchParams& p, int n, int64_t j) {
  return p.stage +
         (static_cast<int64_t>(p.nodes.slot(n)) * p.info.max_tokens + j) * p.stage_layout.stride;
}

// The nodes other than this rank's that token t goes to (bit n), and its staged row for each
// (row(n)): a TokenRoutes over nodes, read from the node positions.
__device__ __forceinline__ TokenRoutes staged_routes(const DispatchParams& p, int64_t t, int lane) {
  if (!p.nodes.several()) return TokenRoutes{0, -1, -1};
  TokenRoutes r = token_routes(p.node_pos, nullptr, p.info.max_tokens, p.nodes.num_nodes, t, lane);
  r.mask &= ~(uint64_t{1} << p.nodes.node);
  return r;
}

// Sender role, several nodes: a staged row's metadata (StageLayout), for remote node n. Every
// lane must call it (routes.row shuffles).
__device__ __forceinline__ void stage_metadata(const DispatchParams& p, char* row, int n,
                                               const TokenRoutes& routes, int64_t t, int lane) {
  const RankInfo& info = p.info;
  const StageLayout& s = p.stage_layout;
  for (int k = lane; k < info.topk; k += 32) {
    reinterpret_cast<int32_t*>(row + s.ids)[k] = p.topk_idx[t * info.topk + k];
    reinterpret_cast<float*>(row + s.weights)[k] = p.topk_weights[t * info.topk + k];
  }
  for (int q = 0; q < p.nodes.node_size; ++q) {
    const int64_t dest_row = routes.row(n * p.nodes.node_size + q);
    if (lane == 0) reinterpret_cast<int32_t*>(row + s.rows)[q] = static_cast<int32_t>(dest_row);
  }
  if (lane == 0) *reinterpret_cast<int32_t*>(row + s.meta) = static_cast<int32_t>(t);
}

// Whether each warp of the dispatch kernel takes whole rows, slice after slice (the tokens alone
// fill at least half the grid's warps), rather than 1024-element slices of the rows. Computed
// where it is needed rather than held: the kernel sits at its cap of 64 registers.
__device__ __forceinline__ bool warp_takes_whole_rows(const DispatchParams& p) {
  return 2 * p.num_tokens >= warp_coord().num_warps;
}

// Sender role, payload from bf16: encode the slice [begin, begin + 1024) of row t (clipped to
// the row) 256 elements a step, each step once, and store it to every destination. With one
// node the slice is stored destination by destination, the destination's row and base found
// once per slice (v21: once per step and destination, most of the bf16 kernel's 2150
// instructions a row; v22: bf16 kernel 57 -> 45 us under ncu); quantized formats first encode the
// whole slice (4 lane words and stored scales; ptxas spills 20 bytes for fp8 and 12 for mxfp4
// under the cap of 64 registers). With several nodes (staged rows) each step is stored as it is
// encoded.
template <typename F, bool kNodes>
__device__ __forceinline__ void send_encoded(const DispatchParams& p, const RecvFields& f,
                                             int64_t t, int64_t begin, const TokenRoutes& routes,
                                             uint64_t direct, const TokenRoutes& staged, int lane) {
  const int hidden = p.info.hidden;
  const int64_t payload_bytes = p.layout.dispatch_payload_bytes;
  const int64_t scale_bytes = p.layout.dispatch_scale_bytes;
  const uint16_t* src = static_cast<const uint16_t*>(p.x) + t * hidden;
  uint4 v[kDispatchUnroll];
#pragma unroll
  for (int u = 0; u < kDispatchUnroll; ++u) {
    v[u] = load_lane(src, begin + u * kElemsPerWarpStep + lane * kElemsPerLane, hidden);
  }
  if constexpr (F::kBitsPerElem != 16 && !kNodes) {  // quantized, one node: encode, then store
    const int64_t first_elem = begin + lane * kElemsPerLane;
    LaneWord<F> words[kDispatchUnroll];
    typename F::Scale stored[kDispatchUnroll];  // only the stored word of each step's Params
#pragma unroll
    for (int u = 0; u < kDispatchUnroll; ++u) {
      if (begin + u * kElemsPerWarpStep < hidden) {  // warp-uniform
        typename F::Params params;
        formats::encode_lane<F>(v[u], words[u], params);
        stored[u] = params.stored;
      }
    }
    for (uint64_t m = direct; m != 0;) {
      const int d = next_dest(m);
      const int64_t row = routes.row(d);
      char* payload_row = p.peers.base[d] + f.payload + row * payload_bytes;
      char* scale_row = p.peers.base[d] + f.scales + row * scale_bytes;
#pragma unroll
      for (int u = 0; u < kDispatchUnroll; ++u) {
        const int64_t elem = first_elem + u * kElemsPerWarpStep;
        if (elem < hidden) store_lane<F>(payload_row, scale_row, elem, words[u], stored[u]);
      }
    }
  } else if constexpr (F::kBitsPerElem == 16 && !kNodes) {  // bf16: the payload is the input
    const int64_t first_elem = begin + lane * kElemsPerLane;
    // The row's next slice into L1 while this one is stored, when this warp takes it next.
    if (warp_takes_whole_rows(p)) {
#pragma unroll
      for (int u = 0; u < kDispatchUnroll; ++u) {
        const int64_t next = first_elem + kDispatchSliceElems + u * kElemsPerWarpStep;
        if (next < hidden) prefetch_l1(src + next);
      }
    }
    const auto store_slice = [&](char* payload_row) {
#pragma unroll
      for (int u = 0; u < kDispatchUnroll; ++u) {
        const int64_t elem = first_elem + u * kElemsPerWarpStep;
        if (elem < hidden) reinterpret_cast<uint4*>(payload_row)[elem / kElemsPerLane] = v[u];
      }
    };
    for (uint64_t m = direct; m != 0;) {
      const int d = next_dest(m);
      store_slice(p.peers.base[d] + f.payload + routes.row(d) * payload_bytes);
    }
  } else {
#pragma unroll
    for (int u = 0; u < kDispatchUnroll; ++u) {
      if (begin + u * kElemsPerWarpStep >= hidden) break;  // warp-uniform
      const int64_t elem = begin + u * kElemsPerWarpStep + lane * kElemsPerLane;
      typename F::Params params;
      LaneWord<F> word;
      formats::encode_lane<F>(v[u], word, params);
      for (uint64_t m = direct; m != 0;) {
        const int d = next_dest(m);
        const int64_t row = routes.row(d);
        char* peer = p.peers.base[d];
        if (elem < hidden) {
          store_lane<F>(peer + f.payload + row * payload_bytes, peer + f.scales + row * scale_bytes,
                        elem, word, params);
        }
      }
      for (uint64_t m = staged.mask; m != 0;) {
        const int n = next_dest(m);
        char* row = stage_row(p, n, staged.row(n));
        if (elem < hidden) store_lane<F>(row, row + payload_bytes, elem, word, params);
      }
    }
  }
}

// Sender role, payload from bf16 in a quantized format, one node, for a slice that lies wholly
// inside the row (hidden a multiple of the slice, as 7168 is): send_encoded's bits without its
// per-step bounds tests, zeroed loads and 64-bit element arithmetic (elements and scale indices
// in 32 bits: hidden <= 65536), and with one fast-range vote a slice (encode_lanes). v25: of the
// fp8 kernel's 502 instructions a slice, 60-80 served those (docs/perf-notes.md, open leads).
template <typename F>
__device__ __forceinline__ void send_encoded_whole(const DispatchParams& p, const RecvFields& f,
                                                   int64_t t, int begin, const TokenRoutes& routes,
                                                   uint64_t direct, int lane) {
  const int hidden = p.info.hidden;
  const int64_t payload_bytes = p.layout.dispatch_payload_bytes;
  const int64_t scale_bytes = p.layout.dispatch_scale_bytes;
  const uint16_t* src =
      static_cast<const uint16_t*>(p.x) + t * hidden + begin + lane * kElemsPerLane;
  uint4 v[kDispatchUnroll];
#pragma unroll
  for (int u = 0; u < kDispatchUnroll; ++u) {
    v[u] = load_stream(reinterpret_cast<const uint4*>(src + u * kElemsPerWarpStep));
  }
  // The row's next slice into L1 while this one is encoded and stored, when this warp takes it
  // next.
  if (begin + kDispatchSliceElems < hidden && warp_takes_whole_rows(p)) {
#pragma unroll
    for (int u = 0; u < kDispatchUnroll; ++u) {
      prefetch_l1(src + kDispatchSliceElems + u * kElemsPerWarpStep);
    }
  }
  LaneWord<F> words[kDispatchUnroll];
  typename F::Scale stored[kDispatchUnroll];
  formats::encode_lanes<F, kDispatchUnroll>(v, words, stored);
  // This lane's first element in the slice; a block's first lane stores its scale.
  const int first = begin + lane * kElemsPerLane;
  constexpr int kLanesPerBlock = F::kBlock / kElemsPerLane;
  const bool scale_lane = lane % kLanesPerBlock == 0;
  for (uint64_t m = direct; m != 0;) {
    const int d = next_dest(m);
    const int64_t row = routes.row(d);
    char* payload_row = p.peers.base[d] + f.payload + row * payload_bytes;
    auto* scale_row =
        reinterpret_cast<typename F::Scale*>(p.peers.base[d] + f.scales + row * scale_bytes);
#pragma unroll
    for (int u = 0; u < kDispatchUnroll; ++u) {
      const int elem = first + u * kElemsPerWarpStep;
      *reinterpret_cast<LaneWord<F>*>(payload_row + elem * F::kBitsPerElem / 8) = words[u];
      if (scale_lane) scale_row[elem / F::kBlock] = stored[u];
    }
  }
}

// Sender role, pre-quantized payload and scales: 16-byte copies of the payload, byte copies of
// the scales (a few dozen bytes per row).
__device__ __forceinline__ void send_bytes(const DispatchParams& p, const RecvFields& f, int64_t t,
                                           const TokenRoutes& routes, uint64_t direct,
                                           const TokenRoutes& staged, int lane) {
  const int64_t payload = p.layout.dispatch_payload_bytes;
  const int64_t scale_bytes = p.layout.dispatch_scale_bytes;
  const auto* src = reinterpret_cast<const uint4*>(static_cast<const char*>(p.x) + t * payload);
  const auto* src_scales = static_cast<const uint8_t*>(p.x_scales) + t * scale_bytes;
  const int64_t vectors = payload / 16;
  for (int64_t base = 0; base < vectors; base += 32 * kDispatchUnroll) {
    uint4 v[kDispatchUnroll];
#pragma unroll
    for (int u = 0; u < kDispatchUnroll; ++u) {
      const int64_t i = base + u * 32 + lane;
      if (i < vectors) v[u] = load_stream(src + i);
    }
    const auto store = [&](uint4* dst) {
#pragma unroll
      for (int u = 0; u < kDispatchUnroll; ++u) {
        const int64_t i = base + u * 32 + lane;
        if (i < vectors) dst[i] = v[u];
      }
    };
    for (uint64_t m = direct; m != 0;) {
      const int d = next_dest(m);
      store(reinterpret_cast<uint4*>(p.peers.base[d] + f.payload + routes.row(d) * payload));
    }
    for (uint64_t m = staged.mask; m != 0;) {
      const int n = next_dest(m);
      store(reinterpret_cast<uint4*>(stage_row(p, n, staged.row(n))));
    }
  }
  const auto store_scales = [&](uint8_t* dst) {
    for (int64_t i = lane; i < scale_bytes; i += 32) dst[i] = src_scales[i];
  };
  for (uint64_t m = direct; m != 0;) {
    const int d = next_dest(m);
    store_scales(
        reinterpret_cast<uint8_t*>(p.peers.base[d] + f.scales + routes.row(d) * scale_bytes));
  }
  for (uint64_t m = staged.mask; m != 0;) {
    const int n = next_dest(m);
    store_scales(reinterpret_cast<uint8_t*>(stage_row(p, n, staged.row(n)) + payload));
  }
}

// kNodes: several nodes (staged rows); the one-node instantiation keeps the registers it had
// before the path across nodes existed (64 is the cap at 2 blocks of 512 threads a SM, or at 4 of
// 256).
// kWhole (dispatch_whole_slices: one node, from bf16 to a quantized format, every slice inside
// the row): the slices take send_encoded_whole, in an instantiation of their own so that the
// general path's registers do not weigh on it.
template <typename F, bool kPrequantized, bool kNodes, bool kWhole = false>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    dispatch_kernel(DispatchParams p) {
  static_assert(!kWhole || (!kPrequantized && !kNodes && F::kBitsPerElem != 16),
                "the whole-slice path is for one node, from bf16, to a quantized format");
  // Following notify (dispatch.cu); nothing here waits on a peer, so the wait kernel may launch.
  wait_previous_kernel();
  let_next_kernel_launch();
  // Launched before the host has looked at the step's outcome: a rejected or failed call stops
  // here on every rank (the step kernel set the flag), so no data moves.
  if (block_sees_error(p.err)) return;
  const WarpCoord c = warp_coord();
  const RankInfo& info = p.info;
  const RecvFields fields(p.layout);
  // Whole rows per warp when the tokens alone fill at least half the grid's warps; 1024-element
  // slices otherwise (docs/perf-notes.md: slices help small batches, cost large ones).
  const int64_t row_slices =
      kPrequantized ? 1 : (info.hidden + kDispatchSliceElems - 1) / kDispatchSliceElems;
  const int64_t slices_per_item = warp_takes_whole_rows(p) ? row_slices : 1;
  const int64_t items_per_row = row_slices / slices_per_item;  // 1 or row_slices
  for (int64_t item = c.warp; item < p.num_tokens * items_per_row; item += c.num_warps) {
    const int64_t t = item / items_per_row;
    const int64_t first = (item - t * items_per_row) * slices_per_item;
    const TokenRoutes routes =
        token_routes(p.pos, p.send_offset, info.max_tokens, info.world_size, t, c.lane);
    // Several nodes: stores reach this node's ranks; other nodes get one staged row each.
    const uint64_t direct = kNodes ? routes.mask & own_node_mask(p.nodes) : routes.mask;
    const TokenRoutes staged = kNodes ? staged_routes(p, t, c.lane) : TokenRoutes{0, -1, -1};
    if (first == 0) {
      for (uint64_t m = direct; m != 0;) {
        const int d = next_dest(m);
        send_metadata(p, fields, p.peers.base[d], d, routes.row(d), t, c.lane);
      }
      for (uint64_t m = staged.mask; m != 0;) {
        const int n = next_dest(m);
        stage_metadata(p, stage_row(p, n, staged.row(n)), n, routes, t, c.lane);
      }
    }
    if constexpr (kPrequantized) {
      send_bytes(p, fields, t, routes, direct, staged, c.lane);
    } else {
      for (int64_t slice = first; slice < first + slices_per_item; ++slice) {
        if constexpr (kWhole) {
          send_encoded_whole<F>(p, fields, t, static_cast<int>(slice * kDispatchSliceElems), routes,
                                direct, c.lane);
        } else {
          send_encoded<F, kNodes>(p, fields, t, slice * kDispatchSliceElems, routes, direct, staged,
                                  c.lane);
        }
      }
    }
  }
  // Copy-engine path: the rows are in the staging area (and this rank's own in place); the
  // host's copies and then ce_signal_kernel release the done words (copy_engine.cuh).
  if (p.copy_engine) return;
  if constexpr (!kNodes) {  // this rank's done count of the call's parity, in every rank
    count_block_done(p.peers.base, info.world_size,
                     p.layout.done_count_offset(static_cast<int>(p.step & 1), info.rank));
    return;
  }
  // This rank's done word in its node's ranks; the other nodes' ranks get it from their
  // forwarder (nodes.cuh).
  signal_when_grid_done(p.block_counter, p.peers.base + p.nodes.first_rank(), p.nodes.node_size,
                        p.layout.done_offset(info.rank), p.step);
}

// Whether a dispatch takes dispatch_kernel's kWhole instantiation.
template <typename F>
inline bool dispatch_whole_slices(const DispatchParams& p, bool prequantized) {
  return F::kBitsPerElem != 16 && !prequantized && !p.nodes.several() &&
         p.info.hidden % kDispatchSliceElems == 0;
}

// Receiver role: wait until every source's rows have landed: one node's SM path by its done
// count (count_block_done), which it then clears for the call after next of its parity (a peer
// adds to it again only after this rank's step word of that call, stored after this kernel);
// the copy-engine path and several nodes by the source's done word.
// One node's SM path waits for the done counts only, not for the data kernel's end (as decode's
// expand does not wait for ll_send's): this kernel launches only once every data block has
// passed its own wait for count_kernel (each lets it launch after that wait), so the step's
// verdict (the error flag) is in, and the counts' acquires make every source's rows visible.
// This rank's own count is every one of its data blocks' last act but the exit, so at this
// kernel's end they have read all of x, pos and send_offset (what the caller or the next call
// may overwrite). Work queued after this kernel still waits for the data kernel's end (v64's
// probe). v64 in docs/perf-notes.md: 0.1-1.6 us off each dispatch (the most at 4096 tokens).
__global__ void dispatch_wait_kernel(DispatchParams p) {
  const int src = threadIdx.x;
  if (!p.copy_engine && !p.nodes.several()) {
    if (!block_sees_error(p.err) && src < p.info.world_size) {
      auto* count = reinterpret_cast<uint64_t*>(
          p.peers.base[p.info.rank] +
          p.layout.done_count_offset(static_cast<int>(p.step & 1), src));
      if (wait_done_count(count, p.timeout_ns, p.err, kPhaseDispatchWait, p.info.rank, src)) {
        *count = 0;
      }
    }
    return;
  }
  wait_previous_kernel();
  if (block_sees_error(p.err)) return;
  if (src >= p.info.world_size) return;
  const auto* flag =
      reinterpret_cast<const uint64_t*>(p.peers.base[p.info.rank] + p.layout.done_offset(src));
  uint64_t word = 0;
  wait_tagged(flag, 0, p.step, p.timeout_ns, p.err, kPhaseDispatchWait, p.info.rank, src, &word);
}

}  // namespace moe_ep::cuda_backend
