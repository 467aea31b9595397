// Decode mode's send kernel: the send part of a dispatch, after the step kernel (the kernel
// family and its protocol: low_latency.cuh).
#pragma once

#include "backends/cuda/low_latency.cuh"

namespace moe_ep::cuda_backend {

// The destinations of token t: bit d set when one of its unmasked slots names an expert of d.
__device__ __forceinline__ uint64_t token_destinations(const int32_t* slots, const RankInfo& info,
                                                       int lane) {
  uint64_t mask = 0;
  for (int k = lane; k < info.topk; k += 32) {
    const int32_t e = slots[k];
    if (e >= 0 && e < info.num_experts) mask |= 1ull << (e / info.experts_per_rank);
  }
  return warp_or64(mask);
}

// One node's send, a block's end: this rank's done word {step, T} into every destination (the
// same value from every block, stored before the block's barrier), then the block's add to this
// rank's done count of the dispatch call's parity (`parity`, the send's) in every destination
// (count_block_done). ll_wait_sources takes the rows once the count is complete.
__device__ inline void ll_add_block_done(const LowLatencyParams& p, uint64_t step, int parity) {
  const RankInfo& info = p.info;
  for (int q = threadIdx.x; q < info.world_size; q += blockDim.x) {
    st_relaxed_sys(
        reinterpret_cast<uint64_t*>(p.peers.base[q] + p.layout.ll_done_offset(info.rank)),
        step << 32 | static_cast<uint64_t>(p.num_tokens));
  }
  count_block_done(p.peers.base, info.world_size, p.layout.ll_done_count_offset(parity, info.rank));
}

// kNodes: the op spans several nodes (p.nodes.several()); the one-node instantiation of the send
// has none of the branches across nodes (they cost about 1 us per decode dispatch decided at run
// time: docs/perf-history.md, v20).
template <bool kNodes>
__device__ __forceinline__ bool ll_by_store(const LowLatencyParams& p, int d) {
  return !kNodes || p.nodes.same_node(d);
}

// Where token t's encoded row goes for destination d of `mask` (its destinations): d's stage
// row of `parity` (ll_send_kernel) when d is reached by stores; else, for the lowest destination
// of d's node only, row t of this rank's message for that node (nullptr for the node's other
// destinations: one row per node crosses the network).
template <bool kNodes>
__device__ __forceinline__ char* ll_send_row(const LowLatencyParams& p, int parity, int d,
                                             int64_t t, uint64_t mask) {
  if (ll_by_store<kNodes>(p, d)) {
    return p.peers.base[d] + p.layout.ll_stage_offset(parity, p.info.rank, t);
  }
  const int n = d / p.nodes.node_size;
  const uint64_t below = mask & ((1ull << d) - 1);
  const uint64_t node_bits = (p.nodes.node_size >= 64 ? ~0ull : (1ull << p.nodes.node_size) - 1)
                             << (n * p.nodes.node_size);
  if ((below & node_bits) != 0) return nullptr;
  return ll_message_out(p, n) + p.msg.row(t);
}

// The rank of each slot of token t among this rank's tokens naming the same expert (how many
// earlier tokens name it), stored in the slot's meta word at its destination, with bit 31 set
// when an earlier slot of the token names the same expert; each expert a token names once adds
// one to this rank's count of it (send_counts). The destination places the token's row of
// expert e at the sum of the earlier sources' counts of e plus this rank: canonical order
// (source, then token) without a scan on the receiving side. Every lane of the warp calls it.
// Several nodes only: on one node the step kernel ranks the slots (low_latency_ranks.cuh) and the
// metadata item stores its ranks (ll_send_meta_one_node).
template <bool kNodes>
__device__ __forceinline__ void ll_send_slot_ranks(const LowLatencyParams& p, int64_t t,
                                                   const int32_t* slots, int lane) {
  const RankInfo& info = p.info;
  const int k_slots = info.topk;
  // Lane l holds slots l and 32 + l (topk <= 64); a slot names a valid expert or counts nothing.
  int32_t mine[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = h * 32 + lane;
    const int32_t e = k < k_slots ? slots[k] : -1;
    mine[h] = e >= 0 && e < info.num_experts ? e : -1;
  }
  // Earlier tokens 32 at a time, one per lane: each lane reads its token's ids once, in groups of
  // kGroup loads in flight, and sets bit k of `names` when one of them is slot k's expert; a
  // ballot per slot counts the chunk's tokens naming it (each token once).
  constexpr int kGroup = 8;
  int rank[2] = {0, 0};
  for (int64_t base = 0; base < t; base += 32) {
    const int64_t u = base + lane;
    uint64_t names = 0;
    for (int j0 = 0; j0 < k_slots; j0 += kGroup) {
      int32_t id[kGroup];
#pragma unroll
      for (int i = 0; i < kGroup; ++i) {
        id[i] = u < t && j0 + i < k_slots ? p.topk_idx[u * k_slots + j0 + i] : -1;
      }
      for (int k = 0; k < k_slots; ++k) {
        const int32_t e = __shfl_sync(0xffffffffu, k < 32 ? mine[0] : mine[1], k & 31);
        bool hit = false;
#pragma unroll
        for (int i = 0; i < kGroup; ++i) hit = hit || id[i] == e;
        if (hit && e >= 0) names |= 1ull << k;
      }
    }
    for (int k = 0; k < k_slots; ++k) {
      const int n = __popc(__ballot_sync(0xffffffffu, (names >> k) & 1));
      if (k == lane) rank[0] += n;
      if (k == lane + 32) rank[1] += n;
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = h * 32 + lane;
    const int32_t e = mine[h];
    if (k >= k_slots || e < 0) continue;
    bool first = true;
    for (int j = 0; j < k; ++j) first = first && slots[j] != e;
    const int d = e / info.experts_per_rank;
    const int32_t value =
        first ? rank[h] : static_cast<int32_t>(static_cast<uint32_t>(rank[h]) | 0x80000000u);
    if (ll_by_store<kNodes>(p, d)) {
      char* meta = p.peers.base[d] + p.layout.ll_meta_offset(info.rank, t);
      reinterpret_cast<int32_t*>(meta)[2 * k_slots + k] = value;
    } else {
      // Another node: the slot's rank goes into the message for that node (its forwarder stores
      // it into d's meta, as above).
      char* row = ll_message_out(p, d / p.nodes.node_size) + p.msg.row(t);
      reinterpret_cast<int32_t*>(row + p.msg.row_ranks)[k] = value;
    }
    if (first) atomicAdd(p.send_counts + e, 1);
  }
}

// A metadata item's inputs: lane l holds slots l and 32 + l of token t (ids as given, -1 past
// top-k) and their weights, the caller's; and their slot ranks (ll_rank_slots), which the step
// kernel wrote (ll_load_meta_ranks, after the wait for it).
struct LlMetaLanes {
  int32_t e[2];
  float w[2];
  int32_t rank[2];
};
__device__ __forceinline__ LlMetaLanes ll_load_meta_lanes(const LowLatencyParams& p, int64_t t,
                                                          int lane) {
  LlMetaLanes m;
  const int k_slots = p.info.topk;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = h * 32 + lane;
    m.e[h] = k < k_slots ? p.topk_idx[t * k_slots + k] : -1;
    m.w[h] = k < k_slots ? p.topk_weights[t * k_slots + k] : 0.0f;
    m.rank[h] = -1;
  }
  return m;
}
__device__ __forceinline__ void ll_load_meta_ranks(const LowLatencyParams& p, int64_t t, int lane,
                                                   LlMetaLanes& m) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const bool valid = m.e[h] >= 0 && m.e[h] < p.info.num_experts;
    m.rank[h] = valid ? p.slot_ranks[t * p.info.topk + h * 32 + lane] : -1;
  }
}

// One node: token t's metadata item from its lanes (m): its destinations' flags, and for each
// destination its meta row: the slots' local ids (-1 for another rank's or a masked slot), the
// weights, and the slot ranks of ll_rank_slots (m.rank). Every lane of the warp calls it.
__device__ __forceinline__ void ll_send_meta_one_node(const LowLatencyParams& p, int64_t t,
                                                      const LlMetaLanes& m, uint64_t step,
                                                      int lane) {
  const RankInfo& info = p.info;
  const int k_slots = info.topk;
  uint64_t lane_mask = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int32_t e = m.e[h];
    if (e >= 0 && e < info.num_experts) lane_mask |= 1ull << (e / info.experts_per_rank);
  }
  const uint64_t mask = warp_or64(lane_mask);
  if (lane == 0) p.token_mask[t] = mask;
  for (int d = lane; d < info.world_size; d += 32) {
    // Plain stores: the block's done-count add, a release after its barrier, orders them.
    *reinterpret_cast<uint64_t*>(p.peers.base[d] + p.layout.ll_flag_offset(info.rank, t)) =
        step << 1 | ((mask >> d) & 1);
  }
  for (uint64_t dests = mask; dests != 0;) {
    const int d = next_dest(dests);
    auto* meta =
        reinterpret_cast<int32_t*>(p.peers.base[d] + p.layout.ll_meta_offset(info.rank, t));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = h * 32 + lane;
      if (k >= k_slots) continue;
      const int32_t e = m.e[h];
      const bool mine = e >= 0 && e < info.num_experts && e / info.experts_per_rank == d;
      meta[k] = mine ? e - d * info.experts_per_rank : -1;
      reinterpret_cast<float*>(meta)[k_slots + k] = m.w[h];
      if (mine) meta[2 * k_slots + k] = m.rank[h];
    }
  }
}

template <typename F, bool kPrequantized, bool kNodes>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    ll_send_kernel(LowLatencyParams p) {
  const WarpCoord c = warp_coord();
  const RankInfo& info = p.info;
  const int64_t slices =
      kPrequantized ? 1
                    : (info.hidden + Policy::kDispatchSliceElems - 1) / Policy::kDispatchSliceElems;
  const int64_t tokens = p.num_tokens;
  // A warp's first row slice is loaded and encoded, and its token's destinations found, as soon
  // as the kernel starts (beside the step kernel, which lets it launch once it has waited for
  // the kernels before it): x and topk_idx are the caller's, complete by then. One node stores
  // every row before its wait for the step kernel, into the stage of the call's parity (below);
  // the step kernel's own writes (the step, the slot ranks, the counts, the error flag) are read
  // only after that wait. The first item is stored before the loops below, which start at the
  // warp's second item, so its registers are free again there.
  LaneWord<F> first_word[Policy::kUnroll];
  typename F::Params first_params[Policy::kUnroll];
  uint64_t first_mask = 0;
  int64_t first_t = 0, first_begin = 0;
  bool have_first = false;
  // One node: a warp whose first item is a metadata item loads its ids and weights here too.
  LlMetaLanes first_meta{};
  if constexpr (!kNodes) {
    if (c.warp < tokens) first_meta = ll_load_meta_lanes(p, c.warp, c.lane);
  }
  if constexpr (!kPrequantized && !kNodes) {  // (across nodes its registers would spill)
    if (c.warp >= tokens && c.warp < tokens + tokens * slices) {
      first_t = (c.warp - tokens) / slices;
      first_begin = (c.warp - tokens - first_t * slices) * Policy::kDispatchSliceElems;
      const uint16_t* src = static_cast<const uint16_t*>(p.x) + first_t * info.hidden;
      uint4 v[Policy::kUnroll];
#pragma unroll
      for (int u = 0; u < Policy::kUnroll; ++u) {
        v[u] = load_lane(src, first_begin + u * kElemsPerWarpStep + c.lane * kElemsPerLane,
                         info.hidden);
      }
      first_mask = token_destinations(p.topk_idx + first_t * info.topk, info, c.lane);
#pragma unroll
      for (int u = 0; u < Policy::kUnroll; ++u) {
        if (first_begin + u * kElemsPerWarpStep >= info.hidden) break;  // warp-uniform
        formats::encode_lane<F>(v[u], first_word[u], first_params[u]);
      }
      have_first = true;
    }
  }
  const int64_t payload_bytes = p.layout.dispatch_payload_bytes;
  // One node: the rows go into the stage of the parity of this call's number, before the step's
  // verdict. The number is the one the call takes if it runs: one more than dispatch_calls as
  // this block of the previous send saw it after its step kernel (p.sent_calls, stored below;
  // no dispatch ran since, since each that runs has a send, and a call that did not run left
  // dispatch_calls as it was).
  // A peer reads that parity only in its expand of this call or of the call after next; it has
  // ended the expand two calls back before this rank's step kernel could begin (this rank's
  // expand of the previous call waited for the peer's done count, which the peer adds only after
  // its own step kernel, which began after its expand before). Several nodes: parity 0, and the
  // rows wait for the agreement as the rest does.
  uint64_t call = 0;
  if constexpr (!kNodes) call = ld_relaxed_sys(&p.sent_calls[blockIdx.x]) + 1;
  const int parity = static_cast<int>(call & 1);
  // Warp step u (an encoded lane) of token t's row slice from element `begin` into every
  // destination's stage row (mask: the token's destinations).
  const auto store_step = [&](int64_t t, uint64_t mask, int64_t begin, int u,
                              const LaneWord<F>& word, const typename F::Params& params) {
    const int64_t elem = begin + u * kElemsPerWarpStep + c.lane * kElemsPerLane;
    for (uint64_t m = mask; m != 0;) {
      const int d = next_dest(m);
      char* row = ll_send_row<kNodes>(p, parity, d, t, mask);
      if (row != nullptr && elem < info.hidden) {
        store_lane<F>(row, row + payload_bytes, elem, word, params);
      }
    }
  };
  // Items [0, T): a token's flags and metadata (ids, weights, slot ranks) for its destinations;
  // then [T, T + T * slices): (token, slice) rows. A row item reads only the caller's x and ids.
  const int64_t items = tokens + tokens * slices;
  const auto send_row = [&](int64_t item) {
    const int64_t t = (item - tokens) / slices;
    const int64_t slice = (item - tokens) - t * slices;
    const int32_t* slots = p.topk_idx + t * info.topk;
    const uint64_t mask = token_destinations(slots, info, c.lane);
    if constexpr (kPrequantized) {
      const auto* src =
          reinterpret_cast<const uint4*>(static_cast<const char*>(p.x) + t * payload_bytes);
      const int64_t vectors = payload_bytes / 16;
      const int64_t scale_bytes = p.layout.dispatch_scale_bytes;
      const auto* src_scales = static_cast<const uint8_t*>(p.x_scales) + t * scale_bytes;
      for (uint64_t m = mask; m != 0;) {
        const int d = next_dest(m);
        char* row = ll_send_row<kNodes>(p, parity, d, t, mask);
        if (row == nullptr) continue;
        for (int64_t i = c.lane; i < vectors; i += 32) {
          reinterpret_cast<uint4*>(row)[i] = load_stream(src + i);
        }
        for (int64_t i = c.lane; i < scale_bytes; i += 32) row[payload_bytes + i] = src_scales[i];
      }
    } else {
      const int hidden = info.hidden;
      const uint16_t* src = static_cast<const uint16_t*>(p.x) + t * hidden;
      const int64_t begin = slice * Policy::kDispatchSliceElems;
      uint4 v[Policy::kUnroll];
#pragma unroll
      for (int u = 0; u < Policy::kUnroll; ++u) {
        v[u] = load_lane(src, begin + u * kElemsPerWarpStep + c.lane * kElemsPerLane, hidden);
      }
#pragma unroll
      for (int u = 0; u < Policy::kUnroll; ++u) {
        if (begin + u * kElemsPerWarpStep >= hidden) break;  // warp-uniform
        typename F::Params params;
        LaneWord<F> word;
        formats::encode_lane<F>(v[u], word, params);
        store_step(t, mask, begin, u, word, params);
      }
    }
  };
  if constexpr (!kNodes) {
    // The rows first, while the step kernel ranks the slots and agrees with the peers: the
    // warp's first item if it is a row (loaded and encoded above), then its other row items.
    int64_t first_row_item = c.warp;
    if (have_first) {
#pragma unroll
      for (int u = 0; u < Policy::kUnroll; ++u) {
        if (first_begin + u * kElemsPerWarpStep >= info.hidden) break;  // warp-uniform
        store_step(first_t, first_mask, first_begin, u, first_word[u], first_params[u]);
      }
      first_row_item += c.num_warps;
    }
    for (int64_t item = first_row_item; item < items; item += c.num_warps) {
      if (item >= tokens) send_row(item);
    }
    // Then the step kernel's verdict, its slot ranks and counts. A call that did not run (the
    // error flag) adds nothing to the done counts: its rows stay in a stage no expand reads.
    wait_previous_kernel();
    let_next_kernel_launch();
    // What this block reads of the step kernel's words, loaded together before the block's
    // barrier (block_sees_error): the call that ran and its step, the warp's first metadata
    // token's slot ranks, and block 0's first expert count. Used only if the call ran.
    const uint64_t ran = p.state->dispatch_calls;
    const uint64_t step = p.state->dispatch_step;
    if (c.warp < tokens) ll_load_meta_ranks(p, c.warp, c.lane, first_meta);
    const int32_t first_count =
        blockIdx.x == 0 && threadIdx.x < info.num_experts ? p.send_counts[threadIdx.x] : 0;
    // For the next send: this block's slot and those of the blocks a larger grid has beyond this
    // one (the grid follows T), stored whether or not the call ran, a slot a thread (a one-token
    // send's single block stores them all). Only this block reads its slot, every thread before
    // its wait above; block_sees_error's barrier keeps the stores after all of those reads (a
    // warp that read the new value would store into the other parity).
    const bool stopped = block_sees_error(p.err);
    for (int64_t b = blockIdx.x + static_cast<int64_t>(threadIdx.x) * gridDim.x; b < p.send_blocks;
         b += static_cast<int64_t>(blockDim.x) * gridDim.x) {
      p.sent_calls[b] = ran;
    }
    if (stopped) return;
    if (ran != call) {
      // The rows went to a parity other than the call's: never expanded, reported instead.
      if (threadIdx.x == 0) {
        report_error(p.err, kDevSendCall, kPhaseStep, info.rank, -1, static_cast<int64_t>(call),
                     static_cast<int64_t>(ran), -1, -1, 0);
      }
      return;
    }
    if (blockIdx.x == 0) {
      // This call's per-expert token counts (ll_rank_slots) into every destination's counts
      // row, before the blocks' ends release the done counts.
      for (int e = threadIdx.x; e < info.num_experts; e += blockDim.x) {
        const int d = e / info.experts_per_rank;
        *reinterpret_cast<int32_t*>(
            p.peers.base[d] + p.layout.ll_counts_offset(info.rank, e - d * info.experts_per_rank)) =
            e == static_cast<int>(threadIdx.x) ? first_count : p.send_counts[e];
      }
    }
    for (int64_t t = c.warp; t < tokens; t += c.num_warps) {
      LlMetaLanes m = first_meta;
      if (t != c.warp) {
        m = ll_load_meta_lanes(p, t, c.lane);
        ll_load_meta_ranks(p, t, c.lane, m);
      }
      ll_send_meta_one_node(p, t, m, step, c.lane);
    }
    // Each block's done word and its add to the done counts (the counts went out first, above).
    ll_add_block_done(p, step, static_cast<int>(ran & 1));  // ran == call
    return;
  }
  ll_follow_previous_kernel();
  if (block_sees_error(p.err)) return;
  // Several nodes: the step in flight, whose verdict the settle gives only after the exchange;
  // the node agreed first (ll_node_step_kernel), and when it did not, nothing is sent (the
  // message's `sent` step stays old, so its rows are not forwarded).
  const uint64_t step = p.state->step;
  if (p.state->send_step != step) return;  // every block alike
  for (int64_t item = c.warp; item < items; item += c.num_warps) {
    if (item >= tokens) {
      send_row(item);
      continue;
    }
    const int64_t t = item;
    const int32_t* slots = p.topk_idx + t * info.topk;
    const uint64_t mask = token_destinations(slots, info, c.lane);
    if (c.lane == 0) p.token_mask[t] = mask;
    for (int d = c.lane; d < info.world_size; d += 32) {
      if (!ll_by_store<kNodes>(p, d)) continue;  // another node's forwarder stores its flags
      const bool here = (mask >> d) & 1;
      // Plain stores: the done word released after them orders them.
      *reinterpret_cast<uint64_t*>(p.peers.base[d] + p.layout.ll_flag_offset(info.rank, t)) =
          step << 1 | (here ? 1 : 0);
    }
    // Every other node's message carries the token's global ids and weights (whether or not it
    // goes there): its forwarder derives each of its ranks' flags and metadata from them.
    for (int n = 0; n < p.nodes.num_nodes; ++n) {
      if (n == p.nodes.node) continue;
      char* row = ll_message_out(p, n) + p.msg.row(t);
      for (int k = c.lane; k < info.topk; k += 32) {
        const int32_t e = slots[k];
        reinterpret_cast<int32_t*>(row + p.msg.row_ids)[k] =
            e >= 0 && e < info.num_experts ? e : -1;
        reinterpret_cast<float*>(row + p.msg.row_weights)[k] = p.topk_weights[t * info.topk + k];
      }
    }
    for (uint64_t m = mask; m != 0;) {
      const int d = next_dest(m);
      if (!ll_by_store<kNodes>(p, d)) continue;
      char* meta = p.peers.base[d] + p.layout.ll_meta_offset(info.rank, t);
      for (int k = c.lane; k < info.topk; k += 32) {
        const int32_t e = slots[k];
        const bool mine = e >= 0 && e < info.num_experts && e / info.experts_per_rank == d;
        reinterpret_cast<int32_t*>(meta)[k] = mine ? e - d * info.experts_per_rank : -1;
        reinterpret_cast<float*>(meta)[info.topk + k] = p.topk_weights[t * info.topk + k];
      }
    }
    ll_send_slot_ranks<kNodes>(p, t, slots, c.lane);
  }
  // The last block stores this rank's per-expert token counts (the slots' atomics, resetting
  // them for the next call): those of this node's experts into every destination's counts row,
  // those of another node's experts into the message for it, then its header's T and `sent`
  // step; the done words go to this node's ranks only. A destination that sees its done word
  // sees the counts and the rows.
  signal_when_grid_done(
      p.tickets + 2, p.peers.base + p.nodes.first_rank(), p.nodes.node_size,
      p.layout.ll_done_offset(info.rank), step << 32 | p.num_tokens, [&] {
        for (int e = threadIdx.x; e < info.num_experts; e += blockDim.x) {
          const int d = e / info.experts_per_rank;
          const int32_t n = atomicExch(p.send_counts + e, 0);
          if (ll_by_store<kNodes>(p, d)) {
            *reinterpret_cast<int32_t*>(
                p.peers.base[d] +
                p.layout.ll_counts_offset(info.rank, e - d * info.experts_per_rank)) = n;
          } else {
            const int node = d / p.nodes.node_size;
            const int64_t node_first_expert =
                static_cast<int64_t>(node) * p.nodes.node_size * info.experts_per_rank;
            reinterpret_cast<int32_t*>(ll_message_out(p, node) +
                                       p.msg.counts)[e - node_first_expert] = n;
          }
        }
        for (int n = threadIdx.x; n < p.nodes.num_nodes; n += blockDim.x) {
          if (n == p.nodes.node) continue;
          char* msg = ll_message_out(p, n);
          *reinterpret_cast<int32_t*>(msg + p.msg.num_tokens) = p.num_tokens;
          *reinterpret_cast<uint64_t*>(msg + p.msg.sent) = step;
        }
      });
}
}  // namespace moe_ep::cuda_backend
