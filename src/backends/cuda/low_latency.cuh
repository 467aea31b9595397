// Decode mode on the GPU (docs/decode-mode.md): kernels with fixed shapes and no host wait, so a
// whole low-latency dispatch -> expert -> low-latency combine can be captured in a CUDA graph and
// replayed. The call's step number and call numbers live in device memory (LowLatencyState):
// the decode step kernel reads them, agrees with the peers (the same word exchange as the step
// kernel of normal mode, in decode mode's own words) and advances them, and the later kernels of
// the call read the step from there.
//   ll_send:    (low_latency_send.cuh) a warp per (token, 1024-element slice); the token's
//               destination ranks come from its expert ids; the row is encoded once and stored into
//               every destination's stage row [this rank][token], with the token's local expert
//               ids, weights and slot ranks (how many earlier tokens of this rank name the slot's
//               expert) for that destination; every destination also gets the token's flag word
//               (step, comes here or not). One node: the rows go out beside the step kernel, into
//               the stage of the parity of the number the call takes if it runs (sent_calls),
//               everything else after its verdict; block 0 stores this rank's per-expert token
//               counts into every destination's counts row, and every block ends by storing
//               {step, T} in its done word and adding itself to this rank's done count there
//               (ll_add_block_done). Several nodes: after the verdict, stage parity 0; the last
//               block stores the counts, then releases the done word.
//   ll_expand:  (low_latency_expand.cuh) once every source's done count (one node) and done
//               word are in, every warp of the grid takes work items, none waiting for
//               another: (token of a source, part of its row) copies the part from the stage
//               row into the slab row of every local expert the token names, that row being
//               the sum of the earlier sources' counts of the expert plus the slot's rank
//               (canonical order, source rank then token, with no scan here); the first part's
//               item also records slot_rows[s][t][k] (the slab row of each local slot) and the
//               row's sources; (expert, chunk of rows) items write counts and -1 sources past
//               them.
//   ll_combine: (low_latency_combine.cuh) warps take tickets for slices of rows
//               (kDispatchSliceElems elements), so one token spreads over several warps: items
//               [0, W*Tmax*slices) are (source, token, slice) candidates, sends for those that
//               came here: p = bf16(sum over the token's local slots k ascending of
//               w_k * y[e_k][row]), product then add in fp32, the slots' rows and weights read
//               once and each half of 4 slots' loads issued before the half before it is
//               summed (SlotSumPipe), encoded and stored at (this
//               rank, token) of the source with a ready flag per slice; items after that are
//               this rank's own (token, slice) pairs, reduced exactly as in normal mode. Sends
//               are ticketed before any reduce, so the kernel finishes with any resident subset
//               of its blocks. In one launch (no hooks) this rank's part of its own tokens is
//               not sent to itself: the reduce computes it and encodes and decodes it in
//               registers, the same bits without the round trip through the buffer.
// Overlap hooks (docs/decode-mode.md#overlap-hooks): a dispatch's send part is the step kernel and
// ll_send, its receive part ll_expand; a combine's send part is the step kernel and ll_combine
// launched for the sends only (kLlCombineSend), its receive part ll_combine for this rank's own
// tokens only (kLlCombineReceive). The later kernels of a call find its step in dispatch_step or
// combine_step, which only a call that ran sets, so a call rejected in between (it takes a step
// on every rank) leaves the deferred part its own step.
#pragma once

#include "backends/cuda/data_common.cuh"
#include "backends/cuda/low_latency_ranks.cuh"
#include "backends/cuda/step_exchange.cuh"

namespace moe_ep::cuda_backend {

// Combine flags of decode mode carry this bit, so they never equal a normal-mode step.
inline constexpr uint64_t kDecodeTag = 1ull << 63;

// Programmatic dependent launch: the decode kernels are launched so that a call's next kernel is
// scheduled while the one before it runs (its launch and block setup overlap that kernel instead
// of following it). Every decode kernel starts here: it waits until the kernel before it on the
// stream has completed and its memory operations are visible, then lets the kernel after it be
// scheduled. Launched without the attribute (or after a kernel that never signals), both
// instructions change nothing: the wait returns at once and the next kernel follows this one.
__device__ __forceinline__ void ll_follow_previous_kernel() {
  wait_previous_kernel();
  let_next_kernel_launch();
}

// A decode call that ran at `step`: a dispatch becomes the latest (its number `call`, and the
// step by which the expand and the combine find its rows); a combine's step tags its rows.
__device__ inline void ll_record_call(LowLatencyState* state, bool dispatch, uint64_t step,
                                      uint64_t call) {
  if (dispatch) {
    state->dispatch_calls = call;
    state->dispatch_step = step;
  } else {
    state->combine_step = step;
  }
}

// The decode step word's kind and verdict; the call number comes from LowLatencyState. A one-node
// dispatch's step kernel first ranks its slots (ll_rank_slots, p.step_ranks), which scans the
// expert ids outside validation mode (p.step_scans): a bad id sets the error flag, which makes
// this rank reject the call in its word, as validate_kernel's scan would have before it, one
// kernel boundary later.
// kRanks: a one-node dispatch's (p.step_ranks), the only instantiation with the ranks' 32 KiB of
// shared memory. Its last window's ranks and the totals run during the exchange, on the warps
// that have no peer (low_latency_ranks.cuh).
template <bool kRanks>
__global__ void __launch_bounds__(Policy::kNotifyThreads, 1) ll_step_kernel(LowLatencyParams p) {
  static_assert(Policy::kNotifyThreads - Policy::kMaxPeers >= 512, "warps left for the ranks");
  const RankInfo& info = p.info;
  // The ranks' threads: from the first warp without a peer on (exchange_step_words: thread q,
  // peer q); the others exchange. Without the ranks, every thread is an exchange thread.
  const uint32_t skip = kRanks ? static_cast<uint32_t>(info.world_size + 31) / 32 * 32 : blockDim.x;
  if constexpr (kRanks) ll_rank_slots_zero(p);
  ll_follow_previous_kernel();
  uint32_t last_window = 0;
  LlRankIds last_ids;
  if constexpr (kRanks) last_window = ll_rank_slots(p, skip, last_ids);
  LowLatencyState* state = p.state;
  __shared__ uint64_t step, call;
  __shared__ StepVotes votes;
  const bool dispatch = p.kind == static_cast<int>(CallKind::kLowLatencyDispatch);
  uint64_t peer_info = 0;
  if (threadIdx.x < skip) {  // warp-uniform
    if (threadIdx.x == 0) {
      step = state->step + 1;
      call = dispatch ? state->dispatch_calls + 1 : state->dispatch_calls;
      init_step_votes(votes, p.err, info.world_size);
    }
    // The exchange threads alone wait for thread 0's words (barrier 1, `skip` threads): the
    // ranks' threads go on to the last window's pass 2 meanwhile, which reads none of them.
    if constexpr (kRanks) {
      asm volatile("bar.sync 1, %0;" ::"r"(skip) : "memory");
    } else {
      __syncthreads();
    }
    // One node's dispatch: the previous dispatch call's done counts are cleared for the call after
    // this one (ll_add_block_done). Its expand has read them (every kernel of that call ran before
    // this one), and a peer adds to them again only in the call after this one, after this rank's
    // step word of that call, which a later kernel stores.
    if (dispatch && !p.nodes.several() && threadIdx.x < info.world_size) {
      *reinterpret_cast<uint64_t*>(
          p.peers.base[info.rank] +
          p.layout.ll_done_count_offset(static_cast<int>((call - 1) & 1), threadIdx.x)) = 0;
    }
    const bool rejected = p.host_rejected || votes.scan_rejected;
    const uint64_t my_info = StepInfo::with_step(StepInfo::pack(p.kind, rejected, call), step);
    peer_info = exchange_step_words(info, p.peers, p.layout, StepWords::kDecode, step, my_info,
                                    p.my_reason, p.timeout_ns, p.err, votes);
  } else if constexpr (kRanks) {
    ll_rank_slots_last(p, last_window, skip, last_ids);
  }
  __syncthreads();
  const bool rejected = p.host_rejected || votes.scan_rejected;
  const bool agreed = step_votes_agree(votes, rejected, info.world_size);
  if (threadIdx.x == 0) {
    // The step happened on every rank whatever its outcome; the call counts only if it ran.
    state->step = step;
    if (agreed) ll_record_call(state, dispatch, step, call);
    if (p.hooked_send) state->hooked_step = step;
  }
  // A dispatch that does not run leaves every slab's count at 0, not at the previous call's
  // (its expand moves nothing): a host that accepted the call learns of the failure only at its
  // next call, and what it queued after the call (Python's cumulative_local_expert_recv_stats
  // add) then adds nothing for it.
  if (dispatch && !agreed) {
    for (int e = threadIdx.x; e < info.experts_per_rank; e += blockDim.x) p.count[e] = 0;
  }
  settle_step_votes(info, p.peers, p.layout, step, peer_info, p.outcome, p.err, votes);
}

// A receive part (overlap hooks) takes the rows of the latest call of its kind that ran (step
// `ran`). That call is its send part unless the send part's step failed: then this rank's host
// may not know yet (the failure is raised by whichever call looks first, and a call made while
// the receive was pending can raise it without dropping the receive). So the receive checks
// that its send part ran, and otherwise reports an error and moves nothing. Every thread of
// every block reads the same two words, written by earlier kernels on the op's order.
__device__ inline bool ll_receive_has_its_send(const LowLatencyParams& p, uint64_t ran,
                                               int32_t phase) {
  if (!p.deferred_receive) return true;
  const uint64_t sent = p.state->hooked_step;
  if (sent == ran) return true;
  if (threadIdx.x == 0) {
    // value: the call number of the latest dispatch that ran, which the host makes the latest.
    report_error(p.err, kDevReceiveWithoutSend, phase, p.info.rank, -1, static_cast<int64_t>(sent),
                 static_cast<int64_t>(ran), -1, -1, static_cast<int64_t>(p.state->dispatch_calls));
  }
  return false;
}

// Several nodes (low_latency_nodes.cuh): this rank's message of the leg in flight for node `n`
// (another node), and whether a destination rank is reached by stores (this node's ranks; with
// one node, every rank).
__device__ __forceinline__ char* ll_message_out(const LowLatencyParams& p, int n) {
  return p.msg_out + static_cast<int64_t>(p.nodes.slot(n)) * p.msg.bytes;
}

}  // namespace moe_ep::cuda_backend
