// Validation and counts exchange of a dispatch.
// validate (before the step agreement): range of expert ids always, duplicates and non-finite
// inputs in validation mode; a failure sets the error flag, which the step kernel turns into
// this rank's rejection of the call.
// notify (after it): blocks take tickets. Ticket (d, part) scans part `part` of the tokens for
// destination d (canonical positions by block scan, plus the rows of the parts before it, from
// their words; one part above 32768 tokens), and d's top part (its only one, or the last, which
// adds the lower parts' counts to its own) stores {step, rows s->d} into every peer's counts
// table and {step, rows naming local expert e} into d's expert table. The last ticket, handed
// out only after every sender ticket was taken by a running block, waits (bounded) for every
// rank's words and derives this rank's send offsets, receive total and per-local-expert counts.
// So the kernel finishes with any number of its blocks resident.
#pragma once

#include <cub/block/block_scan.cuh>

#include "backends/cuda/common.cuh"
#include "backends/cuda/launch.h"
#include "backends/cuda/step_block.cuh"
#include "backends/cuda/validate.cuh"

namespace moe_ep::cuda_backend {

__global__ void __launch_bounds__(Policy::kValidateThreads, Policy::kValidateBlocksPerSm)
    validate_kernel(ValidateParams p) {
  wait_previous_kernel();  // the call's first kernel: after whatever ran before on the stream
  let_next_kernel_launch();
  validate_scan<true>(p, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}

// notify_send's scan: kNotifyTokensPerThread tokens a thread in the blocked arrangement (thread
// i: tokens 4i .. 4i + 3 of the chunk), kNotifyChunkTokens a chunk (launch.h).

// A token's flag for destination d (1 when one of its slots names an expert of d, whose range
// is [first, first + experts_per_rank): a range test, no division), counting each expert it
// names once into expert_count (shared): a row counts once per expert it names, even if a slot
// repeats the expert (possible with validation off), as on the CPU. For a top-k above 32, one
// thread per token, reading its slots from memory.
__device__ __forceinline__ int notify_token_wide(const int32_t* slots, int topk, int32_t first,
                                                 int experts_per_rank, int* expert_count) {
  int flag = 0;
  for (int k = 0; k < topk; ++k) {
    const int32_t local = slots[k] - first;
    if (slots[k] >= 0 && local >= 0 && local < experts_per_rank) {
      flag = 1;
      bool repeated = false;
      for (int j = 0; j < k; ++j) repeated = repeated || slots[j] == slots[k];
      if (!repeated) atomicAdd(&expert_count[local], 1);
    }
  }
  return flag;
}

// The same for top-k <= 32, a pass at a time: a pass takes G = 32 / P tokens of the chunk, P =
// top-k rounded up to a power of two, lane l holding slot l % P of token l / P: neighbouring
// lanes read neighbouring slots (topk_idx is read once, in whole lines). Pass i goes to warp
// i % warps, each warp with up to 8 passes' loads in flight, so a short chunk is spread over the
// block (v22 run 3 gave each warp 128 consecutive tokens: at 128 tokens one warp ran all 32
// passes, and notify took 15.6 us under ncu against 12.2 for v21's thread per token). A slot
// repeating an earlier slot of its token is found by P - 1 shuffles within the token's lanes;
// lane 0 of each token writes the token's flag to chunk_flags[token] (shared, a byte a token).
// (v22: with __match_any_sync for the repeats and every pass run, notify took 59.6 us at 4096
// tokens; with a runtime P, 42.6; with P a template parameter, 22.7; v21's thread per token 34.7.)
template <int P>
__device__ __forceinline__ void notify_flags_by_pass(const NotifyParams& p, int base, int end,
                                                     int32_t first, int* expert_count,
                                                     uint8_t* chunk_flags) {
  constexpr int kTokensPerPass = 32 / P;  // G
  constexpr int kBatch = 8;
  constexpr unsigned kGroupMask = P >= 32 ? ~0u : (1u << P) - 1u;  // a token's lanes, at g = 0
  const RankInfo& info = p.info;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  const int g = lane / P, k = lane % P;
  const int chunk_tokens = end - base;  // <= kNotifyChunkTokens
  const int passes = (chunk_tokens + kTokensPerPass - 1) / kTokensPerPass;
  for (int pass0 = warp; pass0 < passes; pass0 += warps * kBatch) {  // warp-uniform
    int32_t e[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int pass = pass0 + b * warps;
      const int t = base + pass * kTokensPerPass + g;
      e[b] = pass < passes && k < info.topk && t < end
                 ? __ldg(p.topk_idx + static_cast<int64_t>(t) * info.topk + k)
                 : -1;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int pass = pass0 + b * warps;
      if (pass >= passes) break;  // warp-uniform
      const int32_t local = e[b] - first;
      const bool mine = e[b] >= 0 && local >= 0 && local < info.experts_per_rank;
      // Lane k of a token compares its expert with slots 0 .. k - 1 of the same token; the first
      // slot naming an expert counts it.
      bool repeated = false;
#pragma unroll
      for (int j = 1; j < P; ++j) {
        const int32_t earlier = __shfl_up_sync(0xffffffffu, e[b], j, P);
        repeated = repeated || (k >= j && earlier == e[b]);
      }
      if (mine && !repeated) atomicAdd(&expert_count[local], 1);
      const unsigned named = __ballot_sync(0xffffffffu, mine);
      if (k == 0) {
        chunk_flags[pass * kTokensPerPass + g] = ((named >> (g * P)) & kGroupMask) != 0 ? 1 : 0;
      }
    }
  }
}

// The flags of a chunk's tokens [base, end) for top-k <= 32 (notify_flags_by_pass with P = top-k
// rounded up to a power of two); thread i gets tokens base + 4i .. + 3, 0 from `end` on.
__device__ __forceinline__ void notify_flags_narrow(const NotifyParams& p, int base, int end,
                                                    int32_t first, int* expert_count,
                                                    uint8_t* chunk_flags,
                                                    int (&flag)[kNotifyTokensPerThread]) {
  const int topk = p.info.topk;
  if (topk <= 1) {
    notify_flags_by_pass<1>(p, base, end, first, expert_count, chunk_flags);
  } else if (topk <= 2) {
    notify_flags_by_pass<2>(p, base, end, first, expert_count, chunk_flags);
  } else if (topk <= 4) {
    notify_flags_by_pass<4>(p, base, end, first, expert_count, chunk_flags);
  } else if (topk <= 8) {
    notify_flags_by_pass<8>(p, base, end, first, expert_count, chunk_flags);
  } else if (topk <= 16) {
    notify_flags_by_pass<16>(p, base, end, first, expert_count, chunk_flags);
  } else {
    notify_flags_by_pass<32>(p, base, end, first, expert_count, chunk_flags);
  }
  __syncthreads();  // every pass's flags are written
  // Tokens 4i .. 4i + 3 of the chunk, one byte each.
  const uint32_t mine = reinterpret_cast<const uint32_t*>(chunk_flags)[threadIdx.x];
  const int t0 = base + static_cast<int>(threadIdx.x) * kNotifyTokensPerThread;
#pragma unroll
  for (int j = 0; j < kNotifyTokensPerThread; ++j) {
    flag[j] = t0 + j < end ? static_cast<int>((mine >> (8 * j)) & 1u) : 0;
  }
}

// This rank's words for destination d: {step, rows s->d} into every peer's counts table and
// {step, rows naming local expert e} into d's expert table (relaxed 64-bit stores: the words
// carry their own step, so they order nothing else). With several nodes only this node's ranks
// are stored into (this rank's own row included, which the transport then carries to the other
// nodes' ranks); the expert words for another node's rank wait in remote_experts.
__device__ void notify_publish(const NotifyParams& p, int dest, int rows, const int* expert_count) {
  const RankInfo& info = p.info;
  const uint64_t tag = p.step << 32;
  const uint64_t count_word = tag | static_cast<uint32_t>(rows);
  const int parity = static_cast<int>(p.step & 1);
  const int first_peer = p.nodes.first_rank();
  const int last_peer = first_peer + p.nodes.node_size;
  for (int peer = first_peer + threadIdx.x; peer < last_peer; peer += blockDim.x) {
    st_relaxed_sys(reinterpret_cast<uint64_t*>(p.peers.base[peer] +
                                               p.layout.counts_offset(parity, info.rank, dest)),
                   count_word);
  }
  const bool dest_stored = dest >= first_peer && dest < last_peer;
  for (int e = threadIdx.x; e < info.experts_per_rank; e += blockDim.x) {
    const uint64_t word = tag | static_cast<uint32_t>(expert_count[e]);
    if (dest_stored) {
      st_relaxed_sys(reinterpret_cast<uint64_t*>(p.peers.base[dest] +
                                                 p.layout.experts_offset(parity, info.rank, e)),
                     word);
    } else {
      p.remote_experts[static_cast<int64_t>(dest) * info.experts_per_rank + e] = word;
    }
  }
}

// Part `part` of destination d's scan: the rows sent to d before this part's tokens, the sum of
// the lower parts' own row counts. Thread 0 stores this part's count as its word, and lane j <
// part of the first warp waits for part j's word: the words are waited for together, one round
// trip once they are in (a look-back through inclusive prefixes, the nearest part first, read
// them one after another: docs/perf-notes.md, v59). A part waits only on parts with lower
// tickets, taken by running blocks that store their word before they wait, so no wait depends
// on a block that is not resident. The words carry the step (a word of an earlier call is not
// one of this call's). -1 when a wait gave up (reported: the call fails on every rank), so that
// the part publishes nothing.
__device__ int notify_part_prefix(const NotifyParams& p, int dest, int part, int rows) {
  static_assert(kNotifyMaxParts <= 32, "a lane a lower part");
  __shared__ int exclusive;
  if (threadIdx.x < 32) {  // warp 0
    uint64_t* words = p.part_words + static_cast<int64_t>(dest) * kNotifyMaxParts;
    if (threadIdx.x == 0) st_relaxed_sys(words + part, p.step << 32 | static_cast<uint32_t>(rows));
    int before = 0;
    const int j = static_cast<int>(threadIdx.x);
    uint64_t word = 0;
    const bool failed =
        j < part && !wait_tagged<false>(words + j, 32, p.step, p.timeout_ns, p.err, kPhaseNotify,
                                        p.info.rank, p.info.rank, &word);
    if (j < part && !failed) before = static_cast<int>(static_cast<uint32_t>(word));
    before = __reduce_add_sync(0xffffffffu, before);
    const bool any_failed = __any_sync(0xffffffffu, failed);  // every lane of the warp votes
    if (threadIdx.x == 0) exclusive = any_failed ? -1 : before;
  }
  __syncthreads();
  const int result = exclusive;
  __syncthreads();  // `exclusive` is reused by this block's next ticket
  return result;
}

// The top part's sum of the lower parts' per-expert counts (their expert words, tagged with the
// step: notify_send) into expert_count (shared), word j * local + e holding lower part j's count
// of expert e. Thread x takes words x, x + blockDim.x, ...; the loads of kBatch words are all in
// flight before any is waited for, so the words cost one round trip once they are in. False,
// for the whole block, when a wait gave up (reported: the call fails on every rank). Ends with a
// barrier.
__device__ bool notify_add_lower_parts(const NotifyParams& p, const uint64_t* words, int lower,
                                       int* expert_count) {
  constexpr int kBatch = 4;
  const int local = p.info.experts_per_rank;
  const int n = lower * local;
  const int stride = static_cast<int>(blockDim.x);
  bool failed = false;
  for (int i0 = static_cast<int>(threadIdx.x); i0 < n; i0 += kBatch * stride) {
    uint64_t w[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * stride;
      w[b] = i < n ? ld_relaxed_sys(words + i) : 0;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * stride;
      if (i >= n) break;
      const bool ok = (w[b] >> 32) == p.step ||
                      wait_tagged<false>(words + i, 32, p.step, p.timeout_ns, p.err, kPhaseNotify,
                                         p.info.rank, p.info.rank, &w[b]);
      failed = failed || !ok;
      const int count = ok ? static_cast<int>(static_cast<uint32_t>(w[b])) : 0;
      if (count != 0) atomicAdd(&expert_count[i % local], count);
    }
  }
  return __syncthreads_or(failed) == 0;
}

// Ticket (d, part): canonical positions of part `part` of the tokens (notify_part_range), as
// sent to d, and, from d's top part (parts - 1), the words for d. Thread i holds the flags of a
// chunk's tokens 4i .. 4i + 3 (blocked), so one block scan of 4 items per thread gives every
// token's position in token order within the chunk. With several parts (one chunk each, none
// above it), the rows before the part come from notify_part_prefix; a lower part stores its
// per-expert counts as words tagged with the step into part_experts[d], and the top part adds
// them to its own (notify_add_lower_parts) and publishes: its rows before plus its own are d's
// rows. No sums by atomics, fences or count of finished parts (docs/perf-notes.md, v60's
// part-experts.patch).
__device__ void notify_send(const NotifyParams& p, int dest, int part, int parts,
                            int* expert_count) {
  constexpr int kItems = kNotifyTokensPerThread;
  using Scan = cub::BlockScan<int, Policy::kNotifyThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  // One byte a token of the chunk (notify_flags_narrow), read as a word of 4 by each thread.
  __shared__ uint32_t chunk_flag_words[Policy::kNotifyThreads];
  auto* chunk_flags = reinterpret_cast<uint8_t*>(chunk_flag_words);
  const RankInfo& info = p.info;
  const int local = info.experts_per_rank;
  for (int e = threadIdx.x; e < local; e += blockDim.x) expert_count[e] = 0;
  __syncthreads();
  const int32_t first = dest * local;
  const NotifyPartRange range = notify_part_range(p.num_tokens, parts, part);
  const bool top = part == parts - 1;
  uint64_t* part_experts =
      p.part_experts + static_cast<int64_t>(dest) * (kNotifyMaxParts - 1) * local;
  // One pass with several parts, even over an empty part (not made by notify_part_range for a
  // part count from notify_parts, but a later part must not wait for it): its words all 0.
  int running = 0;
  bool waits_failed = false;  // a wait for a lower part's word gave up: publish nothing
  for (int base = range.begin; base < range.end || (parts > 1 && base == range.begin);
       base += kNotifyChunkTokens) {
    const int end = min(range.end, base + kNotifyChunkTokens);
    const int t0 = base + static_cast<int>(threadIdx.x) * kItems;
    int flag[kItems], prefix[kItems];
    if (info.topk <= 32) {
      notify_flags_narrow(p, base, end, first, expert_count, chunk_flags, flag);
    } else {
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        flag[j] = t0 + j < end
                      ? notify_token_wide(p.topk_idx + static_cast<int64_t>(t0 + j) * info.topk,
                                          info.topk, first, info.experts_per_rank, expert_count)
                      : 0;
      }
      __syncthreads();  // every token's expert counts are in
    }
    if (parts > 1 && !top) {  // this part's counts, before its scan and its wait
      const uint64_t tag = p.step << 32;
      for (int e = threadIdx.x; e < local; e += blockDim.x) {
        st_relaxed_sys(part_experts + static_cast<int64_t>(part) * local + e,
                       tag | static_cast<uint32_t>(expert_count[e]));
      }
    }
    int chunk_total = 0;
    Scan(scan_storage).ExclusiveSum(flag, prefix, chunk_total);
    // Several parts: one chunk each, so the part's rows are chunk_total.
    const int before = parts > 1 ? notify_part_prefix(p, dest, part, chunk_total) : running;
    waits_failed = waits_failed || before < 0;  // block-uniform
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (t0 + j < end) {
        p.pos[static_cast<int64_t>(dest) * info.max_tokens + t0 + j] =
            flag[j] ? before + prefix[j] : -1;
      }
    }
    running = before + chunk_total;  // with several parts: the rows up to this part's end
    __syncthreads();                 // scan_storage is reused
  }
  if (parts > 1 && !top) return;  // expert_count is not read after the last barrier
  if (parts > 1 && !notify_add_lower_parts(p, part_experts, parts - 1, expert_count)) {
    waits_failed = true;
  }
  // A part that met a wait that gave up publishes nothing: its rows would be wrong, and the
  // receivers, who never get the words, store no num_recv (the host's wait, CudaOp::dispatch).
  if (!waits_failed) notify_publish(p, dest, running, expert_count);
  __syncthreads();  // expert_count is reused by this block's next ticket
}

// Ticket W: wait for every word addressed to this rank, then derive the layout.
__device__ void notify_receive(const NotifyParams& p, int* counts /* [W*W] */) {
  const RankInfo& info = p.info;
  const int world = info.world_size;
  const int parity = static_cast<int>(p.step & 1);
  const char* self = p.peers.base[info.rank];
  bool failed = false;  // a wait gave up: num_recv is not stored
  for (int i = threadIdx.x; i < world * world; i += blockDim.x) {
    const int src = i / world, dst = i % world;
    uint64_t word = 0;
    const auto* flag =
        reinterpret_cast<const uint64_t*>(self + p.layout.counts_offset(parity, src, dst));
    if (!wait_tagged<false>(flag, 32, p.step, p.timeout_ns, p.err, kPhaseNotify, info.rank, src,
                            &word)) {
      counts[i] = 0;
      failed = true;
      continue;
    }
    counts[i] = static_cast<int>(static_cast<uint32_t>(word));
  }
  __syncthreads();
  for (int e = threadIdx.x; e < info.experts_per_rank; e += blockDim.x) {
    int total = 0;
    for (int src = 0; src < world; ++src) {
      uint64_t word = 0;
      const auto* flag =
          reinterpret_cast<const uint64_t*>(self + p.layout.experts_offset(parity, src, e));
      if (wait_tagged<false>(flag, 32, p.step, p.timeout_ns, p.err, kPhaseNotify, info.rank, src,
                             &word)) {
        total += static_cast<int>(static_cast<uint32_t>(word));
      } else {
        failed = true;
      }
    }
    p.recv_expert_count[e] = total;
  }
  const bool complete = __syncthreads_or(failed) == 0;
  for (int dst = threadIdx.x; dst < world; dst += blockDim.x) {
    int offset = 0;
    for (int src = 0; src < info.rank; ++src) offset += counts[src * world + dst];
    p.send_offset[dst] = offset;
    if (p.ce_counts != nullptr) {  // copy-engine path: sizes for the host's copies
      p.ce_counts->send_count[dst] = counts[info.rank * world + dst];
      p.ce_counts->send_offset[dst] = offset;
      p.ce_counts->recv_count[dst] = counts[dst * world + info.rank];  // from source dst
      p.ce_stage_offset[dst] =
          dst == info.rank ? offset : dst * info.max_tokens;  // own rows land in place
    }
  }
  if (threadIdx.x == 0) {
    if (p.recv_from_self != nullptr) {
      *p.recv_from_self = counts[info.rank * world + info.rank];
    }
    int64_t num_recv = 0;
    for (int src = 0; src < world; ++src) num_recv += counts[src * world + info.rank];
    // No system fence after it: the host reads no other word that this call stores (it polls
    // this one, or waits on an event, which makes the call's stores visible), and the store
    // reaches it by the kernel's end at the latest.
    if (complete) *reinterpret_cast<volatile int64_t*>(p.host_num_recv) = num_recv;
  }
}

// The block's next ticket from the dispenser tickets[0], the same for every thread.
__device__ inline unsigned int take_ticket(unsigned int* tickets) {
  __shared__ unsigned int ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(&tickets[0], 1u);
  __syncthreads();
  const unsigned int t = ticket;
  __syncthreads();  // `ticket` is rewritten by the next take
  return t;
}

// A block's end in notify_kernel and count_kernel: it waits on no peer any more, so the next
// kernel may launch; the last block out resets the tickets for the op's next dispatch.
__device__ inline void notify_leave(const NotifyParams& p) {
  let_next_kernel_launch();
  if (threadIdx.x == 0 && atomicAdd(&p.tickets[1], 1u) == gridDim.x - 1) {
    p.tickets[0] = 0;
    p.tickets[1] = 0;
  }
}

__global__ void __launch_bounds__(Policy::kNotifyThreads) notify_kernel(NotifyParams p) {
  extern __shared__ int notify_smem[];  // [max(E/W, W*W)]
  wait_previous_kernel();
  // The step agreement failed or this rank rejected: nothing moves, on every rank.
  if (block_sees_error(p.err)) return;
  if (p.phase == kNotifyReceive) {  // one block, after the transport (several nodes)
    notify_receive(p, notify_smem);
    return;
  }
  const unsigned int world = static_cast<unsigned int>(p.info.world_size);
  // Sender tickets (d, part) = d * parts + part, then the receiver's: tickets of lower parts go
  // first, so a part's wait for the lower parts' words waits only on running blocks. kNotifySend
  // hands out the sender tickets only; the receive runs in its own launch.
  const int parts = notify_parts(p.num_tokens);
  const unsigned int senders = world * static_cast<unsigned int>(parts);
  const unsigned int last = p.phase == kNotifySend ? senders - 1 : senders;
  while (true) {
    const unsigned int t = take_ticket(p.tickets);
    if (t > last) break;
    if (t < senders) {
      notify_send(p, static_cast<int>(t) / parts, static_cast<int>(t) % parts, parts, notify_smem);
    } else {
      notify_receive(p, notify_smem);
    }
    // The last ticket's block knows none is left: it skips the take that would tell it so (a
    // round trip after the receive, the end of notify's longest path).
    if (t == last) break;
  }
  notify_leave(p);
}

// An accepted one-node dispatch's first kernel: the input scan, the step agreement and notify in
// one launch, by tickets in this order: c.scan_tickets shares of the scan (validate_scan), then
// notify's sender tickets (d, part), then its receiver's. The block that finishes the last share
// of the scan (all shares were handed out before any later ticket) runs the step agreement
// (step_block), this rank rejecting the call when the scan failed, and then stores the step in
// *c.step_done. The senders do not wait for it: what they store is harmless when the call fails
// (positions into the op's spare half, which a failed call leaves spare; count words tagged with
// the step, which no receiver reads then; part words and the lower parts' expert words, tagged
// too), so they scan while the step runs, and an invalid id only counts nowhere. The
// receiver, the one ticket whose stores a failed call must not make, waits for the word and
// moves nothing if the error flag is set, as notify_kernel after the step kernel. So only the
// step block and the receiver wait on peers, as with the three kernels: senders that waited for
// the step would hold SMs while a peer's step is pending, which ranks sharing a GPU may need
// (v28: an earlier version did so; no stall was traced to it; the concern of common.cuh's launch
// rule). Every other wait is for a lower ticket, taken by a running block, so the kernel
// finishes with any number of its blocks resident.
// kValidate: launched in validation mode (c.scan.validate), the only instantiation with the scan
// of x (validate_scan).
template <bool kValidate>
__global__ void __launch_bounds__(Policy::kNotifyThreads) count_kernel(CountParams c) {
  extern __shared__ int notify_smem[];  // [max(E/W, W*W)]
  wait_previous_kernel();               // the call's first kernel
  const NotifyParams& p = c.notify;
  const unsigned int scans = static_cast<unsigned int>(c.scan_tickets);
  const int parts = notify_parts(p.num_tokens);
  const unsigned int senders = static_cast<unsigned int>(p.info.world_size * parts);
  const unsigned int last = scans + senders;  // the receiver's ticket
  __shared__ bool last_share;
  __shared__ bool go;
  while (true) {
    const unsigned int t = take_ticket(p.tickets);
    if (t > last) break;
    if (t < scans) {
      validate_scan<kValidate>(c.scan, static_cast<int>(t), c.scan_tickets);
      // The barrier puts every thread's reports (the error flag) before thread 0's count of the
      // share, an acquire-release add (cumulative), so the last share's block sees every share's
      // reports (step_block reads the flag) without a fence on every thread.
      __syncthreads();
      if (threadIdx.x == 0) {
        last_share = atomic_add_acq_rel_gpu(c.scans_done, 1u) == scans - 1u;
      }
      __syncthreads();
      if (last_share) {
        if (threadIdx.x == 0) *c.scans_done = 0;  // for the op's next dispatch
        step_block(c.step, /*let_next=*/false);
        __syncthreads();  // the outcome and the error flag are stored
        // Only this GPU's receiver (below) reads the word: a release at GPU scope, which the
        // barrier makes cumulative over the block's stores.
        if (threadIdx.x == 0) st_release_gpu(c.step_done, c.step.step);
      }
    } else if (t < last) {
      notify_send(p, static_cast<int>(t - scans) / parts, static_cast<int>(t - scans) % parts,
                  parts, notify_smem);
    } else {
      // The receiver: after the step. Bounded at twice the step's own bound, so that a peer that
      // never comes is reported by the step agreement's wait, not this one; false at once when
      // the error flag is set (a failed step sets it before it stores the word).
      if (threadIdx.x == 0) {
        uint64_t word = 0;
        go = wait_tagged(c.step_done, 0, c.step.step, 2 * p.timeout_ns, p.err, kPhaseStep,
                         p.info.rank, p.info.rank, &word) &&
             ld_volatile(p.err.flag) == 0;
      }
      __syncthreads();
      if (go) notify_receive(p, notify_smem);
    }
    if (t == last) break;  // as in notify_kernel
  }
  notify_leave(p);
}

}  // namespace moe_ep::cuda_backend
