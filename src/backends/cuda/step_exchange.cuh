// The step word exchange shared by normal mode's step_kernel (agreement.cuh) and decode mode's
// ll_step_kernel (low_latency.cuh); they differ only in where the step number, the call number
// and the words live. One block, thread q for peer q:
//   exchange_step_words: stores this rank's {info, tag = step} into peer q's buffer, with the
//     reason first when this rank rejected, then waits (bounded) for peer q's word of the same
//     step and votes: a peer in another call, a peer that rejected, or a timeout.
//   settle_step_votes: the thread of the chosen peer (a peer in another call first, then the
//     lowest peer that rejected) fills the outcome record and sets the error flag, so the call's
//     later kernels move nothing and the host reads the outcome.
#pragma once

#include <cstdint>

#include "backends/cuda/common.cuh"
#include "backends/cuda/launch.h"

namespace moe_ep::cuda_backend {

// Block-shared votes of one exchange; init_step_votes by thread 0 before a __syncthreads().
struct StepVotes {
  int scan_rejected;  // this rank's data scan already failed
  int out_of_step;    // lowest peer in another call, or world_size
  int rejected_by;    // lowest peer that rejected, or world_size
  int gave_up;        // a wait timed out (already reported)
};

__device__ inline void init_step_votes(StepVotes& v, const ErrorSink& err, int world_size) {
  v.scan_rejected = ld_volatile(err.flag) != 0;
  v.out_of_step = world_size;
  v.rejected_by = world_size;
  v.gave_up = 0;
}

// Whether the exchange agreed on the call: no wait gave up, this rank did not reject it, and no
// peer was in another call or rejected it.
__device__ inline bool step_votes_agree(const StepVotes& v, bool rejected, int world_size) {
  return !v.gave_up && !rejected && v.out_of_step == world_size && v.rejected_by == world_size;
}

// Where the words of one kind of step live: normal mode's or decode mode's step words.
enum class StepWords { kNormal, kDecode };

__device__ inline int64_t step_word_offset(const BufferLayout& layout, StepWords words, int parity,
                                           int src) {
  return words == StepWords::kNormal ? layout.step_offset(parity, src)
                                     : layout.ll_step_offset(parity, src);
}

// The info word of a step slot whose tag already reads `step` (wait_tagged). A rank that does
// not reject stores its info word and tag without a fence, so the tag may land first: poll the
// info word until it carries the step's bits (StepInfo::of_step), within the same bound.
__device__ inline bool step_info_of(const uint64_t* info_word, uint64_t step, uint64_t timeout_ns,
                                    const ErrorSink& err, int32_t rank, int32_t peer,
                                    uint64_t* info_out) {
  return wait_field<false>(
      info_word, [](uint64_t word) { return (word >> StepInfo::kStepShift) & StepInfo::kStepMask; },
      step & StepInfo::kStepMask, timeout_ns, err, kPhaseStep, rank, peer, info_out);
}

// Returns peer q's info word (0 when q >= world_size or the wait gave up).
// Peers that no store reaches (another node's ranks, several nodes): their words are in
// `words_in` (StepWire, from the transport) and this rank's word reaches them the same way.
struct AllPeersByStore {
  __device__ bool operator()(int) const { return true; }
};

template <typename StoresTo = AllPeersByStore>
__device__ inline uint64_t exchange_step_words(const RankInfo& info, const PeerTable& peers,
                                               const BufferLayout& layout, StepWords words,
                                               uint64_t step, uint64_t my_info,
                                               const StepReason* my_reason, uint64_t timeout_ns,
                                               const ErrorSink& err, StepVotes& v,
                                               StoresTo stores_to = {},
                                               const StepWire* words_in = nullptr) {
  const int q = threadIdx.x;
  const int parity = static_cast<int>(step & 1);
  if (q >= info.world_size) return 0;
  // A world of one agrees with itself: its own word is the only one, and its verdict is its own
  // (a rank never names itself as the peer that rejected). No store, no wait (v34 run F: 1.0-1.2
  // us of a decode combine at world size 1).
  if (info.world_size == 1) return my_info;
  char* peer = peers.base[q];
  if (!stores_to(q)) {
    // Another node's rank: its word came through the transport (StepWire); deliver it into
    // this rank's own slots, where the wait below finds it.
    const StepWire& w = words_in[q];
    char* self = peers.base[info.rank];
    copy_words(self + layout.reason_offset(parity, q), &w.reason, sizeof(StepReason));
    auto* slot = reinterpret_cast<uint64_t*>(self + step_word_offset(layout, words, parity, q));
    slot[0] = w.info;
    st_release_sys(slot + 1, w.tag);
  } else if (StepInfo::rejected(my_info)) {
    auto* slot = reinterpret_cast<StepReason*>(peer + layout.reason_offset(parity, info.rank));
    if (v.scan_rejected) {
      StepReason r{};
      r.record = *err.host;  // mapped host memory, read once on this rare path
      r.has_record = 1;
      copy_words(slot, &r, sizeof(StepReason));
    } else {
      copy_words(slot, my_reason, sizeof(StepReason));
    }
  }
  if (stores_to(q)) {
    auto* mine =
        reinterpret_cast<uint64_t*>(peer + step_word_offset(layout, words, parity, info.rank));
    if (StepInfo::rejected(my_info)) {
      // The reason (stored above) before the word: a release.
      mine[0] = my_info;
      st_release_sys(mine + 1, step);
    } else {
      // The word orders nothing else, and its info carries the step's bits (step_info_of): no
      // fence (v34 run F: the release's fence was 0.4-0.5 us of a decode combine's step).
      st_relaxed_sys(mine, my_info);
      st_relaxed_sys(mine + 1, step);
    }
  }
  const auto* theirs = reinterpret_cast<const uint64_t*>(
      peers.base[info.rank] + step_word_offset(layout, words, parity, q));
  uint64_t tag = 0;
  // Acquire: a rejecting peer stored its reason and info word before the tag.
  uint64_t peer_info = 0;
  if (!wait_tagged(theirs + 1, 0, step, timeout_ns, err, kPhaseStep, info.rank, q, &tag) ||
      !step_info_of(theirs, step, timeout_ns, err, info.rank, q, &peer_info)) {
    v.gave_up = 1;
    return 0;
  }
  if (!StepInfo::same_call(peer_info, my_info)) atomicMin(&v.out_of_step, q);
  if (StepInfo::rejected(peer_info) && q != info.rank) atomicMin(&v.rejected_by, q);
  return peer_info;
}

// After a __syncthreads() that follows exchange_step_words.
__device__ inline void settle_step_votes(const RankInfo& info, const PeerTable& peers,
                                         const BufferLayout& layout, uint64_t step,
                                         uint64_t peer_info, StepOutcome* o, const ErrorSink& err,
                                         const StepVotes& v) {
  const int q = threadIdx.x;
  if (v.gave_up) return;  // a timeout is already reported
  const int chosen = v.out_of_step < info.world_size ? v.out_of_step : v.rejected_by;
  if (q != chosen || chosen == info.world_size) return;
  o->step = step;
  o->peer = q;
  o->peer_info = peer_info;
  if (v.out_of_step < info.world_size) {
    o->status = kStepOutOfStep;
  } else {
    const int parity = static_cast<int>(step & 1);
    copy_words(&o->reason, peers.base[info.rank] + layout.reason_offset(parity, q),
               sizeof(StepReason));
    o->status = kStepPeerRejected;
  }
  __threadfence_system();
  report_error(err, kDevStepFailed, kPhaseStep, info.rank, q, 0, 0, -1, -1, 0);
}

}  // namespace moe_ep::cuda_backend
