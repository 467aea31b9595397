// The device side of the agreements of docs/design.md#collective-calls-and-agreement.
//
// step_kernel (one block, thread q for peer q) starts every dispatch and combine: it stores this
// rank's step word {info, tag = step} into peer q's buffer, with the reason first when this rank
// rejected (the host said so, or a data scan already set the error flag), then waits (bounded)
// for peer q's word of the same step and compares the calls. The block settles the outcome in
// the order the host will rank it: a peer in another call first, then the lowest peer that
// rejected; on either it sets the error flag, so the call's later kernels move nothing. Step
// words alternate between two parities: a rank can be at most one step ahead of a peer (it waits
// for the peer's word of every step), so it never overwrites a word the peer has not read.
//
// create_rendezvous_kernel (one block, thread q for peer q) agrees on an op creation through the
// communicator's control area: thread q stores this rank's attempt {config, reason, tag} into
// peer q's area, then waits for peer q's attempt with the same configuration, newer than any
// attempt of q this rank has accounted for. A peer's newer rejection ends the wait at once.
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_comm.h"
#include "backends/cuda/launch.h"

namespace moe_ep::cuda_backend {

__global__ void step_kernel(StepParams p) {
  const RankInfo& info = p.info;
  const int q = threadIdx.x;
  __shared__ int scan_rejected;  // this rank's data scan already failed
  __shared__ int out_of_step;    // lowest peer in another call, or world_size
  __shared__ int rejected_by;    // lowest peer that rejected, or world_size
  __shared__ int gave_up;
  if (q == 0) {
    scan_rejected = ld_volatile(p.err.flag) != 0;
    out_of_step = info.world_size;
    rejected_by = info.world_size;
    gave_up = 0;
  }
  __syncthreads();
  const bool rejected = StepInfo::rejected(p.info_word) || scan_rejected;
  const uint64_t my_info =
      StepInfo::pack(StepInfo::kind(p.info_word), rejected, StepInfo::call(p.info_word));
  const int parity = static_cast<int>(p.step & 1);
  if (q < info.world_size) {
    char* peer = p.peers.base[q];
    if (rejected) {
      auto* slot = reinterpret_cast<StepReason*>(peer + p.layout.reason_offset(parity, info.rank));
      if (scan_rejected) {
        StepReason r{};
        r.record = *p.err.host;  // mapped host memory, read once on this rare path
        r.has_record = 1;
        copy_words(slot, &r, sizeof(StepReason));
      } else {
        copy_words(slot, p.my_reason, sizeof(StepReason));
      }
    }
    auto* word = reinterpret_cast<uint64_t*>(peer + p.layout.step_offset(parity, info.rank));
    word[0] = my_info;
    st_release_sys(word + 1, p.step);
  }
  uint64_t peer_info = 0;
  if (q < info.world_size) {
    const auto* word = reinterpret_cast<const uint64_t*>(p.peers.base[info.rank] +
                                                         p.layout.step_offset(parity, q));
    uint64_t tag = 0;
    // Acquire: the info word and the reason were stored before the tag.
    if (wait_tagged(word + 1, 0, p.step, p.timeout_ns, p.err, kPhaseStep, info.rank, q, &tag)) {
      peer_info = __ldcg(word);
      if (!StepInfo::same_call(peer_info, my_info)) atomicMin(&out_of_step, q);
      if (StepInfo::rejected(peer_info) && q != info.rank) atomicMin(&rejected_by, q);
    } else {
      gave_up = 1;
    }
  }
  __syncthreads();
  if (gave_up) return;  // a timeout is already reported
  const int chosen = out_of_step < info.world_size ? out_of_step : rejected_by;
  if (q != chosen || chosen == info.world_size) return;
  StepOutcome* o = p.outcome;
  o->step = p.step;
  o->peer = q;
  o->peer_info = peer_info;
  if (out_of_step < info.world_size) {
    o->status = kStepOutOfStep;
  } else {
    copy_words(&o->reason, p.peers.base[info.rank] + p.layout.reason_offset(parity, q),
               sizeof(StepReason));
    o->status = kStepPeerRejected;
  }
  __threadfence_system();
  // Later kernels of this call see the flag and move nothing; the host reads the outcome.
  report_error(p.err, kDevStepFailed, kPhaseStep, info.rank, q, 0, 0, -1, -1, 0);
}

__device__ __forceinline__ bool same_config(const int64_t* a, const int64_t* b) {
  bool same = true;
  for (int f = 0; f < kNumConfigFields; ++f) same = same && a[f] == b[f];
  return same;
}

__global__ void create_rendezvous_kernel(CreateParams p) {
  const int q = threadIdx.x;
  __shared__ int rejected_by;
  if (q == 0) rejected_by = p.world_size;
  __syncthreads();
  const bool rejecting = (p.tag & 3) == kCreateRejected;
  if (q < p.world_size) {
    auto* slot = reinterpret_cast<CreateSlot*>(p.control.base[q] + kControlBytesPerRank * p.rank);
    for (int f = 0; f < kNumConfigFields; ++f) slot->config[f] = p.config[f];
    if (rejecting) copy_words(&slot->reason, p.my_reason, sizeof(StepReason));
    st_relaxed_sys(&slot->reject_attempt, p.reject_attempt);
    st_release_sys(&slot->tag, p.tag);
  }
  if (rejecting) return;  // uniform across the block
  const bool active = q < p.world_size;
  const auto* slot = reinterpret_cast<const CreateSlot*>(p.control.base[p.rank] +
                                                         kControlBytesPerRank * (active ? q : 0));
  CreateOutcome* o = p.outcome;
  const uint64_t start = global_timer_ns();
  int status = active ? kCreatePending : kCreateMatched;
  uint64_t tag = 0, reject_attempt = 0;
  int64_t config[kNumConfigFields] = {};
  for (uint32_t spins = 0; status == kCreatePending; ++spins) {
    tag = ld_acquire_sys(&slot->tag);
    reject_attempt = ld_relaxed_sys(&slot->reject_attempt);
    for (int f = 0; f < kNumConfigFields; ++f) config[f] = __ldcg(&slot->config[f]);
    // A peer's rejection not seen yet, made at this round or later (cpu/world.cc says why).
    if (q != p.rank && reject_attempt > p.seen[q] && reject_attempt >= (p.tag >> 2)) {
      status = kCreatePeerRejected;
    } else if ((tag >> 2) > p.seen[q] && (tag & 3) == kCreateJoining &&
               same_config(config, p.config)) {
      status = kCreateMatched;
    } else if ((spins & 255) == 0) {
      if (*reinterpret_cast<volatile int*>(&rejected_by) < p.world_size) break;
      if (global_timer_ns() - start > p.timeout_ns) status = kCreateTimedOut;
    }
  }
  if (active) {
    o->tag[q] = tag;
    o->reject_attempt[q] = reject_attempt;
    for (int f = 0; f < kNumConfigFields; ++f) o->config[q][f] = config[f];
    o->status[q] = status;
    if (status == kCreatePeerRejected) atomicMin(&rejected_by, q);
  }
  __syncthreads();
  if (active && q == rejected_by) {
    o->rejected_by = q;
    copy_words(&o->reason, &slot->reason, sizeof(StepReason));
  }
  __threadfence_system();
}

}  // namespace moe_ep::cuda_backend
