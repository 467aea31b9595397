// The step agreement of one call in one block (docs/design.md#collective-calls-and-agreement):
// the exchange of step words (step_exchange.cuh) and the settling of the outcome. Device code
// only, shared by the kernels that run it (agreement.cuh, notify.cuh).
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/launch.h"
#include "backends/cuda/step_exchange.cuh"

namespace moe_ep::cuda_backend {

// The step agreement proper, in one block (thread q for peer q); step_kernel and a one-node
// dispatch's count_kernel (notify.cuh) run it. With let_next, the next kernel may be scheduled
// once the peers' words are in; count_kernel's block goes on to wait for peers in notify, so
// it lets the next kernel launch only when it leaves.
__device__ inline void step_block(const StepParams& p, bool let_next = true) {
  __shared__ StepVotes votes;
  if (threadIdx.x == 0) {
    init_step_votes(votes, p.err, p.info.world_size);
    if (p.started_ns != nullptr && p.phase != kStepPost) *p.started_ns = global_timer_ns();
  }
  __syncthreads();
  const bool rejected = StepInfo::rejected(p.info_word) || votes.scan_rejected;
  const uint64_t my_info = StepInfo::with_step(
      StepInfo::pack(StepInfo::kind(p.info_word), rejected, StepInfo::call(p.info_word)), p.step);
  if (p.phase == kStepPost) {
    // Several nodes: this rank's word, for the transport (the same word kStepSettle stores).
    if (threadIdx.x == 0) {
      p.word_out->info = my_info;
      p.word_out->tag = p.step;
      if (!rejected) return;
      if (votes.scan_rejected) {
        StepReason r{};
        r.record = *p.err.host;  // mapped host memory, read once on this rare path
        r.has_record = 1;
        copy_words(&p.word_out->reason, &r, sizeof(StepReason));
      } else {
        copy_words(&p.word_out->reason, p.my_reason, sizeof(StepReason));
      }
    }
    return;
  }
  uint64_t peer_info = 0;
  if (p.phase == kStepSettle) {
    const NodeInfo nodes = p.nodes;
    const auto same_node = [nodes](int q) { return nodes.same_node(q); };
    peer_info = exchange_step_words(p.info, p.peers, p.layout, StepWords::kNormal, p.step, my_info,
                                    p.my_reason, p.timeout_ns, p.err, votes, same_node, p.words_in);
  } else {
    peer_info = exchange_step_words(p.info, p.peers, p.layout, StepWords::kNormal, p.step, my_info,
                                    p.my_reason, p.timeout_ns, p.err, votes);
  }
  __syncthreads();
  if (let_next) let_next_kernel_launch();  // the peers' words are in
  settle_step_votes(p.info, p.peers, p.layout, p.step, peer_info, p.outcome, p.err, votes);
}

}  // namespace moe_ep::cuda_backend
