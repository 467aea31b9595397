// Decode mode's expand kernel: the receive part of a dispatch (the kernel family and its
// protocol: low_latency.cuh).
#pragma once

#include "backends/cuda/low_latency.cuh"

namespace moe_ep::cuda_backend {

// Waits (bounded) for the done words of this step of sources [first, end); returns false when a
// wait gave up. Fills tokens[s] (in shared memory) with each of those sources' T. Every thread of
// the block calls it.
__device__ __forceinline__ bool ll_wait_sources(const LowLatencyParams& p, uint64_t step,
                                                int* tokens, int first, int end) {
  __shared__ int gave_up;
  if (threadIdx.x == 0) gave_up = 0;
  __syncthreads();
  const int s = first + static_cast<int>(threadIdx.x);
  if (s < end) {
    uint64_t word = 0;
    const auto* done =
        reinterpret_cast<const uint64_t*>(p.peers.base[p.info.rank] + p.layout.ll_done_offset(s));
    if (wait_tagged(done, 32, step, p.timeout_ns, p.err, kPhaseDispatchWait, p.info.rank, s,
                    &word)) {
      tokens[s] = static_cast<int>(word & 0xffffffffu);
    } else {
      gave_up = 1;
    }
  }
  __syncthreads();
  return gave_up == 0;
}

// One node: waits (bounded) until token t of source s has landed here: its flag carries this
// step (its metadata is in), and when the token comes here, so does every slice's landed word
// (ll_mark_landed). Returns 1 when it came, 0 when it did not, -1 when the wait gave up (a
// timeout, reported, or another thread's error). Every lane of the warp calls it; the lanes poll
// the slices' words side by side, and every lane polls the flag. (A flag of this step never
// changes again within it, so one lane's sight of "not here" is final for the warp.)
__device__ __forceinline__ int ll_wait_token(const LowLatencyParams& p, uint64_t step, int s,
                                             int64_t t, int lane) {
  const char* self = p.peers.base[p.info.rank];
  const auto* flag = reinterpret_cast<const uint64_t*>(self + p.layout.ll_flag_offset(s, t));
  const int64_t slices = p.layout.ll_slices;
  const uint64_t start = global_timer_ns();
  uint64_t seen = 0;
  for (uint32_t spins = 1;; ++spins) {
    seen = ld_acquire_sys(flag);
    bool landed = seen == (step << 1 | 1);
    for (int64_t j = lane; j < slices; j += 32) {
      landed = landed && ld_acquire_sys(reinterpret_cast<const uint64_t*>(
                             self + p.layout.ll_landed_offset(s, t, j))) == step;
    }
    if (__any_sync(0xffffffffu, seen == step << 1)) return 0;
    if (__all_sync(0xffffffffu, landed)) return 1;
    if ((spins & 1023u) == 0) {  // warp-uniform
      if (ld_volatile(p.err.flag) != 0) return -1;
      if (global_timer_ns() - start > p.timeout_ns) {
        // expected: the step; seen: the flag's step (the slices' words may lag behind it).
        if (lane == 0) {
          report_error(p.err, kDevTimeout, kPhaseDispatchWait, p.info.rank, s,
                       static_cast<int64_t>(step), static_cast<int64_t>(seen >> 1), t, -1, 0);
        }
        return -1;
      }
    }
  }
}

// The expand's row copy: units (16-byte vectors of payload, or scale words) a lane loads before
// it stores any, and the units of one work item (a part of a row) for a warp.
inline constexpr int kLlCopyUnroll = 4;
inline constexpr int kLlCopyPart = 32 * kLlCopyUnroll;

// Loads part `part` of a row of `units` units into v (each lane kLlCopyUnroll units, all in
// flight together; units past the row are left as they are). The stage rows were written by
// peers: L2-only loads, so no stale L1 line serves them.
template <typename U>
__device__ __forceinline__ void ll_load_part(const U* src, int64_t units, int64_t part, int lane,
                                             U (&v)[kLlCopyUnroll]) {
  const int64_t first = part * kLlCopyPart + lane;
#pragma unroll
  for (int u = 0; u < kLlCopyUnroll; ++u) {
    const int64_t i = first + u * 32;
    if (i < units) v[u] = __ldcg(src + i);
  }
}

template <typename U>
__device__ __forceinline__ void ll_store_part(U* dst, int64_t units, int64_t part, int lane,
                                              const U (&v)[kLlCopyUnroll]) {
  const int64_t first = part * kLlCopyPart + lane;
#pragma unroll
  for (int u = 0; u < kLlCopyUnroll; ++u) {
    const int64_t i = first + u * 32;
    if (i < units) dst[i] = v[u];
  }
}

// One expand work item: part `part` (units of U) of token t of source s, copied from its stage
// row (`src`, `units` units) into the slab row of every local expert the token names (`slab`:
// expert 0's row 0, rows `units` apart). Everything the item reads is issued before any of
// it is used: the token's flag, its slots' local ids and ranks, and the part (read whether or
// not the token came; the stage row exists either way). The slab row of slot k is the number
// of the token's earlier sources' tokens naming its expert plus the slot's rank (both sent with
// the rows), so no item waits for another. `record`: this item also writes the token's
// slot_rows and its experts' sources (one item per token does).
// kLanded (one node): the caller waited for the token, which came (ll_wait_token); across nodes
// the whole call has landed before any item starts (ll_wait_sources), and the flag says whether
// the token came.
template <bool kLanded, typename U>
__device__ __forceinline__ void ll_expand_item(const LowLatencyParams& p, uint64_t step, int s,
                                               int64_t t, const U* src, U* slab, int64_t units,
                                               int64_t part, bool record, int lane) {
  const RankInfo& info = p.info;
  const char* self = p.peers.base[info.rank];
  const int k_slots = info.topk;
  const int64_t slab_rows = static_cast<int64_t>(info.world_size) * info.max_tokens;
  const uint64_t flag =
      kLanded ? (step << 1 | 1)
              : __ldcg(reinterpret_cast<const uint64_t*>(self + p.layout.ll_flag_offset(s, t)));
  const auto* meta = reinterpret_cast<const int32_t*>(self + p.layout.ll_meta_offset(s, t));
  int32_t id[2] = {-1, -1};
  int32_t rank[2] = {0, 0};
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // lane l holds slots l and 32 + l (topk <= 64)
    const int k = h * 32 + lane;
    if (k < k_slots) {
      id[h] = __ldcg(meta + k);
      rank[h] = __ldcg(meta + 2 * k_slots + k);
    }
  }
  U v[kLlCopyUnroll];
  ll_load_part(src, units, part, lane, v);
  if (flag != (step << 1 | 1)) return;  // warp-uniform: token t of s did not come here
  int64_t row[2] = {-1, -1};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (id[h] < 0) continue;
    int64_t r = rank[h] & 0x7fffffff;
    for (int q = 0; q < s; ++q) {
      r += __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.ll_counts_offset(q, id[h])));
    }
    row[h] = id[h] * slab_rows + r;
  }
  if (record) {
    const int64_t token = static_cast<int64_t>(s) * info.max_tokens + t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = h * 32 + lane;
      if (k >= k_slots) continue;
      p.slot_rows[token * k_slots + k] = static_cast<int32_t>(row[h]);
      if (id[h] >= 0 && rank[h] >= 0) {  // the first slot naming its expert
        p.src_rank[row[h]] = s;
        p.src_token[row[h]] = static_cast<int32_t>(t);
        p.src_slot[row[h]] = k;
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // One copy per expert: the first slot naming it.
    for (uint32_t firsts = __ballot_sync(0xffffffffu, id[h] >= 0 && rank[h] >= 0); firsts != 0;
         firsts &= firsts - 1) {
      const int k = __ffs(firsts) - 1;
      const int64_t r = __shfl_sync(0xffffffffu, row[h], k);
      ll_store_part(slab + r * units, units, part, lane, v);
    }
  }
}

// The expand's work items (ll_expand_kernel): fills, (local expert, chunk of kFillRows slab rows)
// pairs, then per_token items for each token received: `parts` parts of kLlCopyPart 16-byte
// payload vectors (rows are whole 16-byte units), then `scale_parts` parts of 4-byte scale words
// (of bytes when a scale row is not whole words, as mxfp4's e8m0 rows can be). The launcher
// sizes the grid for the most items a call can have (every source sends Tmax tokens).
struct LlExpandItems {
  static constexpr int64_t kFillRows = 256;
  int64_t fill_chunks, fills, vectors, scale_units, parts, scale_parts, per_token;
  bool scale_words;

  __host__ __device__ static LlExpandItems of(const LowLatencyParams& p) {
    LlExpandItems s{};
    const int64_t slab_rows = static_cast<int64_t>(p.info.world_size) * p.info.max_tokens;
    s.fill_chunks = (slab_rows + kFillRows - 1) / kFillRows;
    s.fills = p.info.experts_per_rank * s.fill_chunks;
    s.vectors = p.layout.dispatch_payload_bytes / 16;
    s.scale_words = p.layout.dispatch_scale_bytes % 4 == 0;
    s.scale_units =
        s.scale_words ? p.layout.dispatch_scale_bytes / 4 : p.layout.dispatch_scale_bytes;
    s.parts = (s.vectors + kLlCopyPart - 1) / kLlCopyPart;
    s.scale_parts = (s.scale_units + kLlCopyPart - 1) / kLlCopyPart;
    s.per_token = s.parts + s.scale_parts;
    return s;
  }
  // Items per own token when the expand encodes this rank's rows itself (ll_expand_own): a
  // slice's encode each, or for pre-quantized x the parts of a copy.
  __host__ __device__ int64_t own_per_token(const LowLatencyParams& p) const {
    return p.prequantized ? per_token : p.layout.ll_slices;
  }
  __host__ __device__ int64_t most_items(const LowLatencyParams& p) const {
    const int64_t per = per_token > own_per_token(p) ? per_token : own_per_token(p);
    return fills + static_cast<int64_t>(p.info.world_size) * p.info.max_tokens * per;
  }
};

// One node without the hooks (p.own_direct): item `item` of this rank's own token t, written
// from x straight into its slab rows rather than through its stage row. The same bytes as the
// stage route: a slice of kDispatchSliceElems elements encoded as ll_send encodes it (the same
// loads, encode_lane and store_lane at the same offsets, into each slab row instead of the stage
// row), or for pre-quantized x a part of its wire row copied as ll_expand_item copies a stage
// row. The slab rows come from the token's ids and ll_rank_slots's ranks (this rank's own, not
// its metadata row) and the earlier sources' counts (their done words are in). The token's first
// item also records slot_rows and the rows' sources, then waits for the token's flag here:
// ll_send's metadata item wrote the row of weights and token_mask that the combine reads, and
// nothing else orders that before this kernel's end. Every lane of the warp calls it; returns
// false when that wait gave up.
template <typename F>
__device__ __forceinline__ bool ll_expand_own(const LowLatencyParams& p, uint64_t step, int64_t t,
                                              int64_t item, int lane) {
  const RankInfo& info = p.info;
  const char* self = p.peers.base[info.rank];
  const int k_slots = info.topk;
  const int64_t slab_rows = static_cast<int64_t>(info.world_size) * info.max_tokens;
  int32_t id[2] = {-1, -1};
  int32_t rank[2] = {0, 0};
  int64_t row[2] = {-1, -1};
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // lane l holds slots l and 32 + l (topk <= 64)
    const int k = h * 32 + lane;
    const int32_t e = k < k_slots ? p.topk_idx[t * k_slots + k] : -1;
    if (e < 0 || e >= info.num_experts || e / info.experts_per_rank != info.rank) continue;
    id[h] = e - info.rank * info.experts_per_rank;
    rank[h] = p.slot_ranks[t * k_slots + k];
    int64_t r = rank[h] & 0x7fffffff;
    for (int q = 0; q < info.rank; ++q) {
      r += __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.ll_counts_offset(q, id[h])));
    }
    row[h] = id[h] * slab_rows + r;
  }
  const uint32_t firsts[2] = {__ballot_sync(0xffffffffu, id[0] >= 0 && rank[0] >= 0),
                              __ballot_sync(0xffffffffu, id[1] >= 0 && rank[1] >= 0)};
  const int64_t payload_bytes = p.layout.dispatch_payload_bytes;
  const int64_t scale_bytes = p.layout.dispatch_scale_bytes;
  if (p.prequantized) {
    const LlExpandItems shape = LlExpandItems::of(p);
    const char* wire = static_cast<const char*>(p.x) + t * payload_bytes;
    const char* wire_scales = static_cast<const char*>(p.x_scales) + t * scale_bytes;
    const auto copy = [&](auto* src, auto* slab, int64_t units, int64_t part) {
      using U = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
      U v[kLlCopyUnroll];
      ll_load_part(src, units, part, lane, v);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        for (uint32_t f = firsts[h]; f != 0; f &= f - 1) {
          const int64_t r = __shfl_sync(0xffffffffu, row[h], __ffs(f) - 1);
          ll_store_part(slab + r * units, units, part, lane, v);
        }
      }
    };
    if (item < shape.parts) {
      copy(reinterpret_cast<const uint4*>(wire), reinterpret_cast<uint4*>(p.slab_payload),
           shape.vectors, item);
    } else if (shape.scale_words) {
      copy(reinterpret_cast<const uint32_t*>(wire_scales),
           reinterpret_cast<uint32_t*>(p.slab_scales), shape.scale_units, item - shape.parts);
    } else {
      copy(reinterpret_cast<const uint8_t*>(wire_scales), reinterpret_cast<uint8_t*>(p.slab_scales),
           shape.scale_units, item - shape.parts);
    }
  } else {
    const int hidden = info.hidden;
    const uint16_t* src = static_cast<const uint16_t*>(p.x) + t * hidden;
    const int64_t begin = item * Policy::kDispatchSliceElems;
    uint4 v[Policy::kUnroll];
#pragma unroll
    for (int u = 0; u < Policy::kUnroll; ++u) {
      v[u] = load_lane(src, begin + u * kElemsPerWarpStep + lane * kElemsPerLane, hidden);
    }
    // The slice encoded once (its loads, then its words, as ll_send's first item holds them),
    // then stored into each row.
    LaneWord<F> word[Policy::kUnroll];
    typename F::Params params[Policy::kUnroll];
#pragma unroll
    for (int u = 0; u < Policy::kUnroll; ++u) {
      if (begin + u * kElemsPerWarpStep >= hidden) break;  // warp-uniform
      formats::encode_lane<F>(v[u], word[u], params[u]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      for (uint32_t f = firsts[h]; f != 0; f &= f - 1) {
        const int64_t r = __shfl_sync(0xffffffffu, row[h], __ffs(f) - 1);
        char* payload = p.slab_payload + r * payload_bytes;
        char* scales = p.slab_scales + r * scale_bytes;
#pragma unroll
        for (int u = 0; u < Policy::kUnroll; ++u) {
          if (begin + u * kElemsPerWarpStep >= hidden) break;  // warp-uniform
          const int64_t elem = begin + u * kElemsPerWarpStep + lane * kElemsPerLane;
          if (elem < hidden) store_lane<F>(payload, scales, elem, word[u], params[u]);
        }
      }
    }
  }
  if (item != 0) return true;
  const int64_t token = static_cast<int64_t>(info.rank) * info.max_tokens + t;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = h * 32 + lane;
    if (k >= k_slots) continue;
    p.slot_rows[token * k_slots + k] = static_cast<int32_t>(row[h]);
    if (id[h] >= 0 && rank[h] >= 0) {  // the first slot naming its expert
      p.src_rank[row[h]] = info.rank;
      p.src_token[row[h]] = static_cast<int32_t>(t);
      p.src_slot[row[h]] = k;
    }
  }
  __shared__ int gave_up[Policy::kDataThreads / 32];
  if (lane == 0) {
    uint64_t word = 0;
    gave_up[threadIdx.x / 32] =
        wait_tagged(reinterpret_cast<const uint64_t*>(self + p.layout.ll_flag_offset(info.rank, t)),
                    1, step, p.timeout_ns, p.err, kPhaseDispatchWait, info.rank, info.rank, &word)
            ? 0
            : 1;
  }
  __syncwarp();
  return gave_up[threadIdx.x / 32] == 0;
}

// kLanded: one node (the items wait for their tokens, ll_wait_token); else several nodes (the
// done words order everything).
template <typename F, bool kLanded>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    ll_expand_kernel(LowLatencyParams p) {
  // One node, right after this call's ll_send: no wait for ll_send's grid. Its done word, which
  // ll_wait_sources acquires as a peer's, orders the source's counts; each token's flag and
  // landed words order its metadata and row (ll_wait_token), so the copies begin while the sends
  // still run. What the step kernel wrote was visible before ll_send began, so before this
  // kernel was launched. A deferred receive (the hooks) waits: the kernel before it may still
  // read the slabs. Across nodes the kernel before it (the settle) sets the verdict, and the
  // done words order every row.
  if (p.deferred_receive || p.nodes.several()) wait_previous_kernel();
  let_next_kernel_launch();
  __shared__ int tokens[Policy::kMaxPeers];
  __shared__ int64_t first_token[Policy::kMaxPeers + 1];
  if (block_sees_error(p.err)) return;
  const RankInfo& info = p.info;
  // The step of the dispatch being received; with overlap hooks, calls rejected since its send
  // part have taken later steps.
  const uint64_t step = p.state->dispatch_step;
  if (!ll_receive_has_its_send(p, step, kPhaseDispatchWait)) return;
  const WarpCoord c = warp_coord();
  // With own_direct this rank's own tokens are not among the copies (first_token skips them):
  // their own items (ll_expand_own) come first, after the done words of the earlier sources
  // only (their counts place the rows; none at rank 0), so at world size 1 they wait for nothing.
  // Each warp's items are one sequence (c.warp, then every c.num_warps-th) in two loops, the own
  // items' and the rest, with the rest's shapes computed after the first loop so that they are
  // not live in it.
  const bool own_direct = kLanded && p.own_direct;
  if (!ll_wait_sources(p, step, tokens, 0, own_direct ? info.rank : info.world_size)) return;
  const int64_t own_per_token = LlExpandItems::of(p).own_per_token(p);
  const int64_t owns = own_direct ? static_cast<int64_t>(p.num_tokens) * own_per_token : 0;
  int64_t item = c.warp;
  bool own_done = true;
  for (; item < owns; item += c.num_warps) {
    const int64_t t = item / own_per_token;
    own_done = ll_expand_own<F>(p, step, t, item - t * own_per_token, c.lane);
    if (!own_done) break;
  }
  // (Every warp takes the block's barriers below; one whose wait gave up set the error flag,
  // which ends the other waits.)
  if (own_direct && !ll_wait_sources(p, step, tokens, info.rank, info.world_size)) return;
  if (!own_done) return;
  if (threadIdx.x == 0) {
    int64_t at = 0;
    for (int s = 0; s < info.world_size; ++s) {
      first_token[s] = at;
      at += own_direct && s == info.rank ? 0 : tokens[s];
    }
    first_token[info.world_size] = at;
  }
  __syncthreads();
  const char* self = p.peers.base[info.rank];
  const int64_t slab_rows = static_cast<int64_t>(info.world_size) * info.max_tokens;
  const int64_t payload_bytes = p.layout.dispatch_payload_bytes;
  // Work items (LlExpandItems), spread over every warp of the grid, none waiting for another:
  // fills write an expert's count (the sum of the sources' counts) and -1 sources past it;
  // copies are (token of any source, part), the tokens of all sources one after another.
  const LlExpandItems shape = LlExpandItems::of(p);
  const int64_t fills = owns + shape.fills;  // the own items, then the fills: [owns, fills)
  const int64_t parts = shape.parts;
  const int64_t items = fills + first_token[info.world_size] * shape.per_token;
  for (; item < items; item += c.num_warps) {
    if (item < fills) {
      const int64_t fill = item - owns;
      const int e = static_cast<int>(fill / shape.fill_chunks);
      const int64_t chunk = fill - e * shape.fill_chunks;
      int n = 0;
      for (int s = c.lane; s < info.world_size; s += 32) {
        n += __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.ll_counts_offset(s, e)));
      }
      n = __reduce_add_sync(0xffffffffu, n);
      if (chunk == 0 && c.lane == 0) p.count[e] = n;
      const int64_t end = (chunk + 1) * LlExpandItems::kFillRows < slab_rows
                              ? (chunk + 1) * LlExpandItems::kFillRows
                              : slab_rows;
      const int64_t begin =
          chunk * LlExpandItems::kFillRows > n ? chunk * LlExpandItems::kFillRows : n;
      for (int64_t row = begin + c.lane; row < end; row += 32) {
        p.src_rank[e * slab_rows + row] = -1;
        p.src_token[e * slab_rows + row] = -1;
        p.src_slot[e * slab_rows + row] = -1;
      }
      continue;
    }
    const int64_t token = (item - fills) / shape.per_token;
    const int64_t part = (item - fills) - token * shape.per_token;
    int s = 0;
    while (token >= first_token[s + 1]) ++s;
    const int64_t t = token - first_token[s];
    if constexpr (kLanded) {
      const int came = ll_wait_token(p, step, s, t, c.lane);
      if (came < 0) break;
      if (came == 0) continue;
    }
    const char* stage = self + p.layout.ll_stage_offset(s, t);
    if (part < parts) {
      ll_expand_item<kLanded>(p, step, s, t, reinterpret_cast<const uint4*>(stage),
                              reinterpret_cast<uint4*>(p.slab_payload), shape.vectors, part,
                              part == 0, c.lane);
    } else if (shape.scale_words) {
      ll_expand_item<kLanded>(p, step, s, t,
                              reinterpret_cast<const uint32_t*>(stage + payload_bytes),
                              reinterpret_cast<uint32_t*>(p.slab_scales), shape.scale_units,
                              part - parts, false, c.lane);
    } else {
      ll_expand_item<kLanded>(p, step, s, t,
                              reinterpret_cast<const uint8_t*>(stage + payload_bytes),
                              reinterpret_cast<uint8_t*>(p.slab_scales), shape.scale_units,
                              part - parts, false, c.lane);
    }
  }
}

}  // namespace moe_ep::cuda_backend
