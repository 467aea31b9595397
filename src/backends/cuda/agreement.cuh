// The device side of the agreements of docs/design.md#collective-calls-and-agreement.
//
// step_kernel (one block, thread q for peer q) starts every dispatch and combine (an accepted
// one-node dispatch: count_kernel in notify.cuh, which runs the same block, step_block.cuh,
// between its input scan and notify): it exchanges
// step words with every peer (step_exchange.cuh), this rank counting as rejected when the host
// said so or a data scan already set the error flag, and settles the outcome in the order the
// host will rank it: a peer in another call first, then the lowest peer that rejected. Step
// words alternate between two parities: a rank can be at most one step ahead of a peer (it waits
// for the peer's word of every step), so it never overwrites a word the peer has not read.
//
// create_rendezvous_kernel (one block, thread q for peer q) agrees on an op creation through the
// communicator's control area: thread q stores this rank's attempt {config, reason, tag} into
// peer q's area, then waits for peer q's attempt with the same configuration, newer than any
// attempt of q this rank has accounted for. A peer's newer rejection ends the wait at once, and
// so does a peer already in a later round: its slot keeps its attempt of this round (prev_*),
// which decides q's part of the round at once (v23: a peer that timed out and started its next
// creation had overwritten the round's configuration, and this rank waited out its own bound
// to report the next creation's fields instead of the round's).
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_comm.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/step_block.cuh"

namespace moe_ep::cuda_backend {

__global__ void step_kernel(StepParams p) {
  wait_previous_kernel();
  step_block(p);
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
  const int domain = p.domain_size > 0 ? p.domain_size : p.world_size;
  const bool reachable = q / domain == p.rank / domain;  // by stores, in this rank's domain
  if (q < p.world_size && reachable) {
    auto* slot = reinterpret_cast<CreateSlot*>(p.control.base[q] + kControlBytesPerRank * p.rank);
    for (int f = 0; f < kNumConfigFields; ++f) slot->config[f] = p.config[f];
    for (int f = 0; f < kNumConfigFields; ++f) slot->prev_config[f] = p.prev_config[f];
    st_relaxed_sys(&slot->prev_tag, p.prev_tag);
    if (rejecting) copy_words(&slot->reason, p.my_reason, sizeof(StepReason));
    st_relaxed_sys(&slot->reject_attempt, p.reject_attempt);
    st_release_sys(&slot->tag, p.tag);
  }
  if (rejecting) return;  // uniform across the block
  const bool active = q < p.world_size;
  if (active && !reachable) {
    // Another domain's rank: its attempt came through the transport; deliver it into this
    // rank's own area, where the wait below reads it.
    const auto& in = static_cast<const CreateSlot*>(p.slots_in)[q];
    auto* mine = reinterpret_cast<CreateSlot*>(p.control.base[p.rank] + kControlBytesPerRank * q);
    for (int f = 0; f < kNumConfigFields; ++f) mine->config[f] = in.config[f];
    for (int f = 0; f < kNumConfigFields; ++f) mine->prev_config[f] = in.prev_config[f];
    st_relaxed_sys(&mine->prev_tag, in.prev_tag);
    copy_words(&mine->reason, &in.reason, sizeof(StepReason));
    st_relaxed_sys(&mine->reject_attempt, in.reject_attempt);
    st_release_sys(&mine->tag, in.tag);
  }
  const auto* slot = reinterpret_cast<const CreateSlot*>(p.control.base[p.rank] +
                                                         kControlBytesPerRank * (active ? q : 0));
  CreateOutcome* o = p.outcome;
  const uint64_t start = global_timer_ns();
  int status = active ? kCreatePending : kCreateMatched;
  uint64_t tag = 0, reject_attempt = 0;
  int64_t config[kNumConfigFields] = {};
  const uint64_t round = p.tag >> 2;
  for (uint32_t spins = 0; status == kCreatePending; ++spins) {
    tag = ld_acquire_sys(&slot->tag);
    reject_attempt = ld_relaxed_sys(&slot->reject_attempt);
    for (int f = 0; f < kNumConfigFields; ++f) config[f] = __ldcg(&slot->config[f]);
    // A peer's rejection not seen yet, made at this round or later (cpu/world.cc says why).
    if (q != p.rank && reject_attempt > p.seen[q] && reject_attempt >= round) {
      status = kCreatePeerRejected;
    } else if ((tag >> 2) > p.seen[q] && (tag & 3) == kCreateJoining &&
               same_config(config, p.config)) {
      status = kCreateMatched;
    } else if (q != p.rank && (tag >> 2) > round && round > p.seen[q]) {
      // Peer q is past this round (in a later one with another configuration, or the test above
      // would have matched). Its attempt of this round, which the slot keeps, decides: joining
      // with the same configuration is a match (q then failed the round for another peer, whose
      // thread finds why); anything else is not, reported as q's attempt of this round.
      const uint64_t prev_tag = ld_relaxed_sys(&slot->prev_tag);
      if ((prev_tag >> 2) == round) {
        for (int f = 0; f < kNumConfigFields; ++f) config[f] = __ldcg(&slot->prev_config[f]);
        const bool same = (prev_tag & 3) == kCreateJoining && same_config(config, p.config);
        tag = prev_tag;
        status = same ? kCreateMatched : kCreatePeerLeft;
      }
    }
    if (status == kCreatePending && (spins & 255) == 0) {
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
