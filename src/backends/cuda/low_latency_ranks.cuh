// The slot ranks of a one-node decode dispatch, computed by its step kernel (ll_step_kernel in
// low_latency.cuh): for slot k of token t naming expert e, the number of earlier tokens of this
// call naming e, with bit 31 set when an earlier slot of t names e too (-1 for a masked slot);
// and the call's count of tokens per expert. ll_send stores them with the rows (the receiver
// places token t's row of e at the earlier sources' counts of e plus this rank: canonical order
// without a scan there).
// Tokens go in windows of 32n: each valid slot sets its token's bit in e's n-word bitmask in
// shared memory (pass 1), then its rank is e's count of the earlier windows plus the bits below
// its token (pass 2); e's count grows by its window's bits. A token naming e twice sets one bit,
// so it counts once.
// The last window's pass 2 and the totals (ll_rank_slots_last) run beside the step's word
// exchange, on the threads that exchange nothing: they need only pass 1's bits, and the step
// word only pass 1's verdict on the ids. Measured (docs/perf-history.md, v32 runs G and H): they
// end about 0.3 us after the exchange whatever their size, as if its system-scope release and
// polls held the block's other memory operations; the dispatch gained 0.5-0.7 us at one token
// and nothing measurable at 32 to 256.
// Every pass runs on those threads (v55), so the last window's ids stay in the registers of the
// threads that rank them, and only the exchange threads wait for thread 0's reads of the state
// (a named barrier): docs/perf-history.md, v55 (one H200), the decode round 0.1-1.0 us faster at
// 1 to 256 tokens.
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/launch.h"
#include "backends/cuda/validate.cuh"

namespace moe_ep::cuda_backend {

// Shared words of the ranks: a count per expert and each expert's bitmask of a window of tokens
// (32 KiB: at E = 256 a window is 992 tokens, at the most experts, 4096, 32 tokens).
inline constexpr int kLlRankWords = 8192;
static_assert(kLlRankWords >= 2 * 4096, "a count and one bitmask word per expert at E = 4096");
__device__ __forceinline__ uint32_t* ll_rank_words() {
  __shared__ uint32_t words[kLlRankWords];
  return words;
}
// Nonzero once a slot of the call found its token's bit of its expert already set: a token names
// an expert twice, so pass 2 looks for earlier slots naming the same expert (else it need not).
__device__ __forceinline__ uint32_t& ll_rank_repeats() {
  __shared__ uint32_t repeats;
  return repeats;
}

// The ranks' sizes, from the kernel's parameters alone: n bitmask words an expert (a window of
// 32n tokens). 32-bit indices: T * K <= 2^20 * 64 slots (op.cc's limits), and a 64-bit division
// by K costs about 60 instructions a slot.
struct LlRankShape {
  uint32_t experts, k_slots, tokens, n;
};
__device__ __forceinline__ LlRankShape ll_rank_shape(const LowLatencyParams& p) {
  LlRankShape s;
  s.experts = static_cast<uint32_t>(p.info.num_experts);
  s.k_slots = static_cast<uint32_t>(p.info.topk);
  s.tokens = static_cast<uint32_t>(p.num_tokens);
  const uint32_t most = (kLlRankWords - s.experts) / s.experts;
  const uint32_t need = (s.tokens + 31) / 32;
  s.n = need < most ? (need < 1 ? 1 : need) : most;
  return s;
}

// Before the step kernel waits for the kernel before it: the counts and the first window's
// bitmasks zeroed (shared memory and the kernel's parameters only).
__device__ inline void ll_rank_slots_zero(const LowLatencyParams& p) {
  const LlRankShape s = ll_rank_shape(p);
  uint32_t* words = ll_rank_words();
  for (uint32_t i = threadIdx.x; i < s.experts * (1 + s.n); i += blockDim.x) words[i] = 0;
  if (threadIdx.x == 0) ll_rank_repeats() = 0;
}

// Ids i0 + u * stride of topk_idx for u < kBatch, -1 from `end` on: their loads in flight together.
template <int kBatch>
__device__ __forceinline__ void load_id_batch(const int32_t* topk_idx, uint32_t i0, uint32_t stride,
                                              uint32_t end, int32_t (&ids)[kBatch]) {
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
    const uint32_t i = i0 + u * stride;
    ids[u] = i < end ? topk_idx[i] : -1;
  }
}

// A thread's slots in a pass: lane l of a warp whose first batch starts at `first` takes slots
// first + l + u * stride + r * kBatch * stride (its loop uniform over the warp); the first
// batch's ids are loaded once by the caller, for both passes where one thread runs both (a
// window of at most kBatch * stride slots, 496 tokens of top-8 on the 992 threads past one warp
// of peers, is one batch).
inline constexpr int kLlRankBatch = 4;
struct LlRankPass {
  uint32_t first, stride, end;
};
using LlRankIds = int32_t[kLlRankBatch];

// Calls slot(i, e) for each of the thread's slots i < end with its id e.
template <typename Slot>
__device__ __forceinline__ void ll_rank_pass(const LowLatencyParams& p, const LlRankPass& r,
                                             const LlRankIds& first_ids, Slot slot) {
  const uint32_t lane = threadIdx.x % 32;
  for (uint32_t b0 = r.first; b0 < r.end; b0 += kLlRankBatch * r.stride) {
    int32_t ids[kLlRankBatch];
    if (b0 == r.first) {
#pragma unroll
      for (int u = 0; u < kLlRankBatch; ++u) ids[u] = first_ids[u];
    } else {
      load_id_batch(p.topk_idx, b0 + lane, r.stride, r.end, ids);
    }
#pragma unroll
    for (int u = 0; u < kLlRankBatch; ++u) {
      const uint32_t i = b0 + lane + u * r.stride;
      if (i < r.end) slot(i, ids[u]);
    }
  }
}

// `c` plus how many of the window's tokens name expert e: the set bits of e's n words.
__device__ __forceinline__ uint32_t ll_rank_bits_set(const uint32_t* bits, uint32_t e, uint32_t n,
                                                     uint32_t c) {
  for (uint32_t w = 0; w < n; ++w) c += __popc(bits[e * n + w]);
  return c;
}

// Pass 2 of the window from token w0 on: each slot's rank, from the counts and the bits that pass
// 1 left. With `any_repeat` (ll_rank_repeats), a slot reads its token's earlier slots.
__device__ inline void ll_rank_window(const LowLatencyParams& p, const LlRankShape& s, uint32_t w0,
                                      const LlRankPass& r, const LlRankIds& first_ids,
                                      bool any_repeat) {
  const uint32_t* counts = ll_rank_words();
  const uint32_t* bits = counts + s.experts;
  const uint32_t n = s.n;
  ll_rank_pass(p, r, first_ids, [&](uint32_t i, int32_t e) {
    if (e < 0 || e >= static_cast<int32_t>(s.experts)) {
      p.slot_ranks[i] = -1;
      return;
    }
    const uint32_t t = i / s.k_slots;
    bool repeat = false;
    if (any_repeat) {
      // An earlier slot of t naming e: its loads independent of each other (no short cut).
      for (uint32_t j = t * s.k_slots; j < i; ++j) repeat |= p.topk_idx[j] == e;
    }
    const uint32_t b = t - w0;
    uint32_t rank = counts[e];
    for (uint32_t w = 0; w < b / 32; ++w) rank += __popc(bits[e * n + w]);
    rank += __popc(bits[e * n + b / 32] & ((1u << (b % 32)) - 1u));
    p.slot_ranks[i] = static_cast<int32_t>(repeat ? rank | 0x80000000u : rank);
  });
}

// The threads of the ranks' passes: those from `skip` on (a multiple of 32, past the step
// exchange's threads, one a peer), in every window, so that the last window's ids that pass 1
// loads are in the registers of the threads that rank them in pass 2 (ll_rank_slots_last): no
// second load of them after the exchange's start.
__device__ __forceinline__ LlRankPass ll_rank_pass_of(const LlRankShape& s, uint32_t w0,
                                                      uint32_t end_token, uint32_t skip) {
  const uint32_t lane = threadIdx.x % 32;
  return LlRankPass{w0 * s.k_slots + (threadIdx.x - skip - lane), blockDim.x - skip,
                    end_token * s.k_slots};
}

// Every window but the last one's pass 2, on the threads from `skip` on (after
// ll_rank_slots_zero); returns the last window's first token for ll_rank_slots_last, and in
// `last_ids` the thread's first batch of that window's ids. With
// p.step_scans (outside validation mode, where validate_kernel scans instead) an id out of range
// is reported as validate_scan reports it (report_bad_expert): this rank then rejects the call in
// its step word. Ends with a barrier, after which the reports and the last window's bits stand.
__device__ inline uint32_t ll_rank_slots(const LowLatencyParams& p, uint32_t skip,
                                         LlRankIds& last_ids) {
  const RankInfo& info = p.info;
  const LlRankShape s = ll_rank_shape(p);
  const uint32_t n = s.n;
  if (p.step_scans && threadIdx.x == 0) *p.scan_started_ns = global_timer_ns();
  uint32_t* counts = ll_rank_words();   // [E]
  uint32_t* bits = counts + s.experts;  // [E][n]
  const uint32_t lane = threadIdx.x % 32;
  const bool ranks = threadIdx.x >= skip;  // warp-uniform
  for (uint32_t w0 = 0;; w0 += 32 * n) {   // uniform over the block
    const bool last = s.tokens - w0 <= 32 * n;
    const LlRankPass r = ll_rank_pass_of(s, w0, last ? s.tokens : w0 + 32 * n, skip);
    if (w0 != 0) {  // (the first window's were zeroed before the wait)
      for (uint32_t i = threadIdx.x; i < s.experts * n; i += blockDim.x) bits[i] = 0;
    }
    __syncthreads();
    if (ranks) {
      load_id_batch(p.topk_idx, r.first + lane, r.stride, r.end, last_ids);
      // Pass 1: the bits (and the range check).
      ll_rank_pass(p, r, last_ids, [&](uint32_t i, int32_t e) {
        if (e == -1) return;
        const uint32_t t = i / s.k_slots;
        if (e < -1 || e >= static_cast<int32_t>(s.experts)) {
          if (p.step_scans) report_bad_expert(p.err, info, e, t, i - t * s.k_slots);
          return;
        }
        const uint32_t b = t - w0;
        const uint32_t bit = 1u << (b % 32);
        if (atomicOr(&bits[e * n + b / 32], bit) & bit) ll_rank_repeats() = 1;
      });
    }
    __syncthreads();
    if (last) return w0;
    if (ranks) ll_rank_window(p, s, w0, r, last_ids, ll_rank_repeats() != 0);
    __syncthreads();
    // Each count grows by its window's bits.
    for (uint32_t e = threadIdx.x; e < s.experts; e += blockDim.x) {
      counts[e] += ll_rank_bits_set(bits, e, n, 0);
    }
    __syncthreads();
  }
}

// The last window's pass 2 (window w0, from ll_rank_slots, whose `first_ids` these are) and the
// call's per-expert totals, on the threads from `skip` on (the threads below it return at once).
// Reads the shared words only, so it runs beside anything that does not write them.
__device__ inline void ll_rank_slots_last(const LowLatencyParams& p, uint32_t w0, uint32_t skip,
                                          const LlRankIds& first_ids) {
  if (threadIdx.x < skip) return;
  const LlRankShape s = ll_rank_shape(p);
  const LlRankPass r = ll_rank_pass_of(s, w0, s.tokens, skip);
  ll_rank_window(p, s, w0, r, first_ids, ll_rank_repeats() != 0);
  const uint32_t* counts = ll_rank_words();
  const uint32_t* bits = counts + s.experts;
  for (uint32_t e = threadIdx.x - skip; e < s.experts; e += r.stride) {
    p.send_counts[e] = static_cast<int32_t>(ll_rank_bits_set(bits, e, s.n, counts[e]));
  }
}

}  // namespace moe_ep::cuda_backend
