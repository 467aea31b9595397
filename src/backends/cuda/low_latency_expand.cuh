// Decode mode's expand kernel: the receive part of a dispatch (the kernel family and its
// protocol: low_latency.cuh).
#pragma once

#include "backends/cuda/low_latency.cuh"

namespace moe_ep::cuda_backend {

// Waits (bounded) for every source's done word of this step; returns false when a wait gave up.
// Fills tokens[s] (in shared memory) with each source's T. One node: first for the source's done
// count of the dispatch call (every block of its send added itself, ll_add_block_done; every block
// of this kernel reads it, the next dispatch's step kernel clears it); its done word, stored by
// each block before its barrier and release add, is then in place. The word is loaded beside
// each poll of the count: tagged with its step, the load beside the complete count is this
// call's word when the tag says so, without a round trip after the count's (else it is read
// again, as across nodes). Several nodes: the done word alone, which the forwarder releases.
// `parity`: the dispatch call's (one node).
__device__ __forceinline__ bool ll_wait_sources(const LowLatencyParams& p, uint64_t step,
                                                int parity, int* tokens) {
  __shared__ int gave_up;
  if (threadIdx.x == 0) gave_up = 0;
  __syncthreads();
  const int s = threadIdx.x;
  if (s < p.info.world_size) {
    uint64_t word = 0;
    const char* self = p.peers.base[p.info.rank];
    const auto* done = reinterpret_cast<const uint64_t*>(self + p.layout.ll_done_offset(s));
    bool counted = true;
    if (!p.nodes.several()) {
      const auto* count =
          reinterpret_cast<const uint64_t*>(self + p.layout.ll_done_count_offset(parity, s));
      counted = wait_done_count(count, p.timeout_ns, p.err, kPhaseDispatchWait, p.info.rank, s,
                                done, &word);
    }
    // After a complete count the word holds this step already (or the wait names the step it
    // found instead, at the timeout: never rows taken from another call).
    if (counted &&
        ((word >> 32) == step || wait_tagged(done, 32, step, p.timeout_ns, p.err,
                                             kPhaseDispatchWait, p.info.rank, s, &word))) {
      tokens[s] = static_cast<int>(word & 0xffffffffu);
    } else {
      gave_up = 1;
    }
  }
  __syncthreads();
  return gave_up == 0;
}

// Loads part `part` of a row of `units` units into v (each lane kLlCopyUnroll units, all in
// flight together; units past the row are left as they are). The stage rows were written by
// peers: L2-only loads, so no stale L1 line serves them.
template <typename U>
__device__ __forceinline__ void ll_load_part(const U* src, int64_t units, int64_t part, int lane,
                                             U (&v)[kLlCopyUnroll]) {
#pragma unroll
  for (int u = 0; u < kLlCopyUnroll; ++u) {
    const int64_t i = ll_copy_unit(part, lane, u);
    if (i < units) v[u] = __ldcg(src + i);
  }
}

template <typename U>
__device__ __forceinline__ void ll_store_part(U* dst, int64_t units, int64_t part, int lane,
                                              const U (&v)[kLlCopyUnroll]) {
#pragma unroll
  for (int u = 0; u < kLlCopyUnroll; ++u) {
    const int64_t i = ll_copy_unit(part, lane, u);
    if (i < units) dst[i] = v[u];
  }
}

// Where an expand item stores its part: slab rows of `units` units (payload, scale rows), or
// column-major scales (`columns`, a unit being one scale; LlExpandItems, ll_slab_column_first).
template <typename U>
struct LlSlabStore {
  U* slab;            // expert 0's row 0
  int64_t units;      // of a row
  int64_t slab_rows;  // W * Tmax
  bool columns;

  // Part `part` of v (ll_load_part's) into local expert e's row `row` (e * slab_rows + its row).
  __device__ __forceinline__ void operator()(int e, int64_t row, int64_t part, int lane,
                                             const U (&v)[kLlCopyUnroll]) const {
    if (!columns) {
      ll_store_part(slab + row * units, units, part, lane, v);
      return;
    }
    const int64_t first = ll_slab_column_first(units, slab_rows, e, row);
#pragma unroll
    for (int u = 0; u < kLlCopyUnroll; ++u) {
      const int64_t i = ll_copy_unit(part, lane, u);
      if (i < units) slab[first + i * slab_rows] = v[u];
    }
  }
};

// One expand work item: part `part` (units of U) of token t of source s, copied from its stage
// row (`src`, `store.units` units) into the slab row of every local expert the token names
// (`store`). Everything the item reads is issued before any of
// it is used: the token's flag, its slots' local ids and ranks, and the part (read whether or
// not the token came; the stage row exists either way). The slab row of slot k is the number
// of the token's earlier sources' tokens naming its expert plus the slot's rank (both sent with
// the rows), so no item waits for another. `record`: this item also writes the token's
// slot_rows and its experts' sources (one item per token does).
template <typename U>
__device__ __forceinline__ void ll_expand_item(const LowLatencyParams& p, uint64_t step, int s,
                                               int64_t t, const U* src, const LlSlabStore<U>& store,
                                               int64_t part, bool record, int lane) {
  const RankInfo& info = p.info;
  const char* self = p.peers.base[info.rank];
  const int k_slots = info.topk;
  const int64_t slab_rows = static_cast<int64_t>(info.world_size) * info.max_tokens;
  const uint64_t flag =
      __ldcg(reinterpret_cast<const uint64_t*>(self + p.layout.ll_flag_offset(s, t)));
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
  ll_load_part(src, store.units, part, lane, v);
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
      const int e = store.columns ? __shfl_sync(0xffffffffu, id[h], k) : 0;  // warp-uniform
      store(e, r, part, lane, v);
    }
  }
}

// The expand's items (low_latency_items.h) of the op's shape; column_scale_bytes is
// p.column_scale_bytes, or 0 where the code is that of scale rows.
__host__ __device__ inline LlExpandItems ll_expand_items(const LowLatencyParams& p,
                                                         int64_t column_scale_bytes) {
  return LlExpandItems::of(p.info.world_size, p.info.max_tokens, p.info.experts_per_rank,
                           p.layout.dispatch_payload_bytes, p.layout.dispatch_scale_bytes,
                           column_scale_bytes);
}

// kColumnScales: the op's scales are column-major (p.column_scale_bytes > 0, formats with
// scales only); a template argument so that the scale rows' kernel stays as it was.
template <typename F, bool kColumnScales>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    ll_expand_kernel(LowLatencyParams p) {
  // One node, right after this call's ll_send: no wait for ll_send's grid. Every row, flag, count
  // and metadata word it stores here is ordered by its done count, which ll_wait_sources acquires
  // as a peer's; what the step kernel wrote was visible to ll_send once its wait for the step
  // kernel returned, and ll_send lets this kernel launch only after that wait. A deferred
  // receive (the hooks) waits: the kernel before it may still read the slabs. Across nodes the
  // kernel before it (the settle) sets the verdict.
  if (p.deferred_receive || p.nodes.several()) wait_previous_kernel();
  let_next_kernel_launch();
  __shared__ int tokens[Policy::kMaxPeers];
  __shared__ int64_t first_token[Policy::kMaxPeers + 1];
  // The step of the dispatch being received; with overlap hooks, calls rejected since its send
  // part have taken later steps. One node: the parity of the dispatch call's number, of its done
  // counts and of its stage (the sends store there, ll_send_kernel). Several nodes: stage parity
  // 0 (the forwarders'), no counts. Both loaded beside the error flag (block_sees_error).
  const uint64_t step = p.state->dispatch_step;
  const int parity = p.nodes.several() ? 0 : static_cast<int>(p.state->dispatch_calls & 1);
  if (block_sees_error(p.err)) return;
  const RankInfo& info = p.info;
  if (!ll_receive_has_its_send(p, step, kPhaseDispatchWait)) return;
  if (!ll_wait_sources(p, step, parity, tokens)) return;
  if (threadIdx.x == 0) {
    int64_t at = 0;
    for (int s = 0; s < info.world_size; ++s) {
      first_token[s] = at;
      at += tokens[s];
    }
    first_token[info.world_size] = at;
  }
  __syncthreads();
  const WarpCoord c = warp_coord();
  const char* self = p.peers.base[info.rank];
  const int64_t payload_bytes = p.layout.dispatch_payload_bytes;
  // Work items (LlExpandItems), spread over every warp of the grid, none waiting for another:
  // fills write an expert's count (the sum of the sources' counts) and -1 sources past it;
  // copies are (token of any source, part), the tokens of all sources one after another.
  const LlExpandItems shape = ll_expand_items(p, kColumnScales ? p.column_scale_bytes : 0);
  const int64_t slab_rows = shape.slab_rows;
  const int64_t fills = shape.fills;
  const int64_t parts = shape.parts;
  const int64_t items = shape.items(first_token[info.world_size]);
  for (int64_t item = c.warp; item < items; item += c.num_warps) {
    if (item < fills) {
      const int e = shape.fill_expert(item);
      int n = 0;
      for (int s = c.lane; s < info.world_size; s += 32) {
        n += __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.ll_counts_offset(s, e)));
      }
      n = __reduce_add_sync(0xffffffffu, n);
      const LlExpandItems::Fill f = shape.fill(item, e, n);
      if (f.chunk == 0 && c.lane == 0) p.count[e] = n;
      for (int64_t row = f.begin + c.lane; row < f.end; row += 32) {
        p.src_rank[e * slab_rows + row] = -1;
        p.src_token[e * slab_rows + row] = -1;
        p.src_slot[e * slab_rows + row] = -1;
      }
      continue;
    }
    const auto [token, part] = shape.copy(item);
    int s = 0;
    while (token >= first_token[s + 1]) ++s;
    const int64_t t = token - first_token[s];
    const char* stage = self + p.layout.ll_stage_offset(parity, s, t);
    if (part < parts) {
      const LlSlabStore<uint4> store{reinterpret_cast<uint4*>(p.slab_payload), shape.vectors,
                                     slab_rows, false};
      ll_expand_item(p, step, s, t, reinterpret_cast<const uint4*>(stage), store, part, part == 0,
                     c.lane);
    } else if (shape.scale_words) {
      const LlSlabStore<uint32_t> store{reinterpret_cast<uint32_t*>(p.slab_scales),
                                        shape.scale_units, slab_rows, kColumnScales};
      ll_expand_item(p, step, s, t, reinterpret_cast<const uint32_t*>(stage + payload_bytes), store,
                     part - parts, false, c.lane);
    } else {
      const LlSlabStore<uint8_t> store{reinterpret_cast<uint8_t*>(p.slab_scales), shape.scale_units,
                                       slab_rows, kColumnScales};
      ll_expand_item(p, step, s, t, reinterpret_cast<const uint8_t*>(stage + payload_bytes), store,
                     part - parts, false, c.lane);
    }
  }
}

}  // namespace moe_ep::cuda_backend
