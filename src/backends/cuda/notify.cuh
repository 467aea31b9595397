// Validation and counts exchange of a dispatch.
// validate (before the step agreement): range of expert ids always, duplicates and non-finite
// inputs in validation mode; a failure sets the error flag, which the step kernel turns into
// this rank's rejection of the call.
// notify (after it): blocks take tickets. Ticket d < W scans the tokens for destination d
// (canonical positions by block scan) and stores {step, rows s->d} into every peer's counts
// table and {step, rows naming local expert e} into d's expert table. Ticket W, handed out only
// after every sender ticket was taken by a running block, waits (bounded) for every rank's words
// and derives this rank's send offsets, receive total and per-local-expert counts. So the kernel
// finishes with any number of its blocks resident.
#pragma once

#include <cub/block/block_scan.cuh>

#include "backends/cuda/common.cuh"
#include "backends/cuda/launch.h"
#include "formats/scalar.h"

namespace moe_ep::cuda_backend {

__global__ void validate_kernel(ValidateParams p) {
  wait_previous_kernel();  // the call's first kernel: after whatever ran before on the stream
  let_next_kernel_launch();
  const RankInfo& info = p.info;
  if (p.started_ns != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    *p.started_ns = global_timer_ns();
  }
  const int64_t total_slots = static_cast<int64_t>(p.num_tokens) * info.topk;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total_slots;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / info.topk;
    const int k = static_cast<int>(i % info.topk);
    const int32_t e = p.topk_idx[i];
    if (e < -1 || e >= info.num_experts) {
      report_error(p.err, kDevBadExpert, 0, info.rank, -1, info.num_experts, e, t, k, e);
    } else if (p.validate && e >= 0) {
      for (int j = 0; j < k; ++j) {
        if (p.topk_idx[t * info.topk + j] == e) {
          report_error(p.err, kDevDupExpert, 0, info.rank, -1, j, k, t, k, e);
        }
      }
    }
    if (p.validate && !formats::is_finite(p.topk_weights[i])) {
      report_error(p.err, kDevNonfiniteW, 0, info.rank, -1, 0, 0, t, k, 0);
    }
  }
  if (!p.validate || p.x_bf16 == nullptr) return;
  const int64_t total = static_cast<int64_t>(p.num_tokens) * info.hidden;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!formats::is_finite(formats::bf16_to_float(p.x_bf16[i]))) {
      report_error(p.err, kDevNonfiniteX, 0, info.rank, -1, 0, 0, i / info.hidden, i % info.hidden,
                   0);
    }
  }
}

// Tokens per thread and chunk of notify_send, in the blocked arrangement of its scan (thread i:
// tokens 4i .. 4i + 3 of the chunk): a chunk covers 4 x 1024 tokens, so a 4096-token dispatch
// scans once per destination.
inline constexpr int kNotifyTokensPerThread = 4;

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
__device__ __forceinline__ void notify_flags_by_pass(const NotifyParams& p, int base, int32_t first,
                                                     int* expert_count, uint8_t* chunk_flags) {
  constexpr int kTokensPerPass = 32 / P;  // G
  constexpr int kBatch = 8;
  constexpr unsigned kGroupMask = P >= 32 ? ~0u : (1u << P) - 1u;  // a token's lanes, at g = 0
  const RankInfo& info = p.info;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  const int g = lane / P, k = lane % P;
  const int chunk_tokens =
      min(p.num_tokens - base, Policy::kNotifyThreads * kNotifyTokensPerThread);
  const int passes = (chunk_tokens + kTokensPerPass - 1) / kTokensPerPass;
  for (int pass0 = warp; pass0 < passes; pass0 += warps * kBatch) {  // warp-uniform
    int32_t e[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int pass = pass0 + b * warps;
      const int t = base + pass * kTokensPerPass + g;
      e[b] = pass < passes && k < info.topk && t < p.num_tokens
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

// The flags of a chunk's tokens for top-k <= 32 (notify_flags_by_pass with P = top-k rounded up
// to a power of two); thread i gets tokens 4i .. 4i + 3, 0 past the last token.
__device__ __forceinline__ void notify_flags_narrow(const NotifyParams& p, int base, int32_t first,
                                                    int* expert_count, uint8_t* chunk_flags,
                                                    int (&flag)[kNotifyTokensPerThread]) {
  const int topk = p.info.topk;
  if (topk <= 1) {
    notify_flags_by_pass<1>(p, base, first, expert_count, chunk_flags);
  } else if (topk <= 2) {
    notify_flags_by_pass<2>(p, base, first, expert_count, chunk_flags);
  } else if (topk <= 4) {
    notify_flags_by_pass<4>(p, base, first, expert_count, chunk_flags);
  } else if (topk <= 8) {
    notify_flags_by_pass<8>(p, base, first, expert_count, chunk_flags);
  } else if (topk <= 16) {
    notify_flags_by_pass<16>(p, base, first, expert_count, chunk_flags);
  } else {
    notify_flags_by_pass<32>(p, base, first, expert_count, chunk_flags);
  }
  __syncthreads();  // every pass's flags are written
  // Tokens 4i .. 4i + 3 of the chunk, one byte each.
  const uint32_t mine = reinterpret_cast<const uint32_t*>(chunk_flags)[threadIdx.x];
  const int t0 = base + static_cast<int>(threadIdx.x) * kNotifyTokensPerThread;
#pragma unroll
  for (int j = 0; j < kNotifyTokensPerThread; ++j) {
    flag[j] = t0 + j < p.num_tokens ? static_cast<int>((mine >> (8 * j)) & 1u) : 0;
  }
}

// Block d: canonical positions of the tokens sent to d, and the messages for d. Thread i holds
// the flags of the chunk's tokens 4i .. 4i + 3 (blocked), so one block scan of 4 items per
// thread gives every token's position in token order.
__device__ void notify_send(const NotifyParams& p, int dest, int* expert_count) {
  constexpr int kItems = kNotifyTokensPerThread;
  using Scan = cub::BlockScan<int, Policy::kNotifyThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  // One byte a token of the chunk (notify_flags_narrow), read as a word of 4 by each thread.
  __shared__ uint32_t chunk_flag_words[Policy::kNotifyThreads];
  auto* chunk_flags = reinterpret_cast<uint8_t*>(chunk_flag_words);
  const RankInfo& info = p.info;
  for (int e = threadIdx.x; e < info.experts_per_rank; e += blockDim.x) expert_count[e] = 0;
  __syncthreads();
  const int32_t first = dest * info.experts_per_rank;
  int running = 0;
  for (int base = 0; base < p.num_tokens; base += Policy::kNotifyThreads * kItems) {
    const int t0 = base + static_cast<int>(threadIdx.x) * kItems;
    int flag[kItems], prefix[kItems];
    if (info.topk <= 32) {
      notify_flags_narrow(p, base, first, expert_count, chunk_flags, flag);
    } else {
#pragma unroll
      for (int j = 0; j < kItems; ++j) {
        flag[j] = t0 + j < p.num_tokens
                      ? notify_token_wide(p.topk_idx + static_cast<int64_t>(t0 + j) * info.topk,
                                          info.topk, first, info.experts_per_rank, expert_count)
                      : 0;
      }
    }
    int chunk_total = 0;
    Scan(scan_storage).ExclusiveSum(flag, prefix, chunk_total);
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (t0 + j < p.num_tokens) {
        p.pos[static_cast<int64_t>(dest) * info.max_tokens + t0 + j] =
            flag[j] ? running + prefix[j] : -1;
      }
    }
    running += chunk_total;
    __syncthreads();  // scan_storage is reused
  }
  const uint64_t tag = p.step << 32;
  const uint64_t count_word = tag | static_cast<uint32_t>(running);
  const int parity = static_cast<int>(p.step & 1);
  // With several nodes only this node's ranks are stored into (this rank's own row included,
  // which the transport then carries to the other nodes' ranks).
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
  __syncthreads();  // expert_count is reused by this block's next ticket
}

// Ticket W: wait for every word addressed to this rank, then derive the layout.
__device__ void notify_receive(const NotifyParams& p, int* counts /* [W*W] */) {
  const RankInfo& info = p.info;
  const int world = info.world_size;
  const int parity = static_cast<int>(p.step & 1);
  const char* self = p.peers.base[info.rank];
  for (int i = threadIdx.x; i < world * world; i += blockDim.x) {
    const int src = i / world, dst = i % world;
    uint64_t word = 0;
    const auto* flag =
        reinterpret_cast<const uint64_t*>(self + p.layout.counts_offset(parity, src, dst));
    if (!wait_tagged<false>(flag, 32, p.step, p.timeout_ns, p.err, kPhaseNotify, info.rank, src,
                            &word)) {
      counts[i] = 0;
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
      }
    }
    p.recv_expert_count[e] = total;
  }
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
    *reinterpret_cast<volatile int64_t*>(p.host_num_recv) = num_recv;
    __threadfence_system();
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
  // kNotifySend hands out the sender tickets only; the receive runs in its own launch.
  const unsigned int last = p.phase == kNotifySend ? world - 1 : world;
  __shared__ unsigned int ticket;
  while (true) {
    if (threadIdx.x == 0) ticket = atomicAdd(&p.tickets[0], 1u);
    __syncthreads();
    const unsigned int t = ticket;
    __syncthreads();
    if (t > last) break;
    if (t < world) {
      notify_send(p, static_cast<int>(t), notify_smem);
    } else {
      notify_receive(p, notify_smem);
    }
  }
  let_next_kernel_launch();  // this block waits on no peer any more
  // The last block out resets the tickets for the op's next dispatch.
  if (threadIdx.x == 0 && atomicAdd(&p.tickets[1], 1u) == gridDim.x - 1) {
    p.tickets[0] = 0;
    p.tickets[1] = 0;
  }
}

}  // namespace moe_ep::cuda_backend
