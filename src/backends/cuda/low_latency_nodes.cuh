// Decode mode across nodes on the GPU (docs/multi-node.md, "Decode mode across nodes"): the
// dispatch's and the combine's kernels, each call around one persistent exchange, all with fixed
// shapes and no host wait, so that a CUDA graph can hold the whole call. Tested on one H200 in
// the one-GPU world (tests/test_gpu_low_latency_nodes.cu; docs/perf-history.md, v20).
// Dispatch:
//   ll_node_step: the decode step agreed by stores with this node's ranks only (as ll_step does
//                 with every rank on one node), without a verdict yet: when the node agreed
//                 (every word of the node this call, none rejected) its sends may go
//                 (LowLatencyState::send_step). This rank's step word also goes into the header
//                 of its message for every other node, whatever its verdict.
//   ll_send:      (low_latency_send.cuh) stores into this node's ranks as on one node and packs
//                 every token bound for node m into the message for m (DecodeMessageLayout).
//   the exchange: every rank's messages to its rail peers on the other nodes, and theirs here
//                 (PersistentExchange::launch, every call, on every rank).
//   ll_forward:   for each message from a rail peer s whose header says it holds this step's rows
//                 (s accepted, its node agreed, its send ran): every row is stored into the
//                 stage rows [s][t] of the ranks of this node it names, with the flags and the
//                 metadata the one-node send of s would have stored, and the flags of the other
//                 ranks; then s's counts rows and its done word in every rank of this node. The
//                 step word of every rail peer goes to every rank of this node every call.
//   ll_settle:    waits (bounded) for all W step words in this rank's own slots (its node's by
//                 stores, the others' from the forwarders) and settles as ll_step does; a call
//                 rejected anywhere fails on every rank, naming the same peer as on one node.
//   ll_expand:    (low_latency_expand.cuh) unchanged: every source's done word, counts, flags,
//                 metadata and stage rows are in this rank's buffer as with one node.
// Combine (the messages: DecodeMessageLayout::combine, one per rail peer):
//   ll_node_step: as in the dispatch, into the combine's messages.
//   ll_combine:   (low_latency_combine.cuh, the send part only) each (s, t) that came here: the
//                 weighted sum of the token's local expert rows, bf16, in the combine format, to
//                 s when s is on this node, else to this node's forwarder for s at combine slot
//                 (s's node * L + this rank's place in the node, t), with the slice's ready flag.
//   ll_combine_forward: for each rail peer s on another node and t < Tmax, slice by slice: the
//                 ranks of this node that took (s, t) (their dispatch flags, which this rank's
//                 ll_forward stored), their partials waited for (bounded), summed in fp32 from
//                 +0 in ascending rank, rounded to bf16 and encoded into row t of the message
//                 for s's node (what node_partial_kernel does in normal mode).
//   the exchange, ll_forward (step words only), ll_settle: as in the dispatch.
//   ll_combine_reduce: (the receive part) per token and slice: out = bf16 of the sum over nodes
//                 ascending of this node's fp32 sum of its ranks' parts (ascending rank, waited
//                 for) and the other nodes' decoded partials from the messages, as
//                 node_reduce_kernel and the CPU backend's receive_combine.
// Why nothing is overwritten early: every store into a rank B's step slots and stage rows comes
// from B's node, and a writer stores for call k+1 only after its node's agreement of k+1, which
// needed B's word of k+1, posted after B's call k ended. The messages are safe by the transport
// (bytes land only once the receiver's stream reached the matching launch).
#pragma once

#include "backends/cuda/low_latency.cuh"
#include "backends/cuda/low_latency_combine.cuh"

namespace moe_ep::cuda_backend {

// This rank's step word in the header of a message: the word ll_step would store, with the
// reason when it rejected.
__device__ inline void ll_put_header_word(const LowLatencyParams& p, char* msg, uint64_t info,
                                          uint64_t step, bool scan_rejected) {
  auto* w = reinterpret_cast<StepWire*>(msg + p.msg.step);
  w->info = info;
  w->tag = step;
  if (!StepInfo::rejected(info)) return;
  if (scan_rejected) {
    StepReason r{};
    r.record = *p.err.host;  // mapped host memory, read once on this rare path
    r.has_record = 1;
    copy_words(&w->reason, &r, sizeof(StepReason));
  } else {
    copy_words(&w->reason, p.my_reason, sizeof(StepReason));
  }
}

__global__ void ll_node_step_kernel(LowLatencyParams p) {
  ll_follow_previous_kernel();
  const RankInfo& info = p.info;
  LowLatencyState* state = p.state;
  __shared__ uint64_t step, call;
  __shared__ StepVotes votes;
  const bool dispatch = p.kind == static_cast<int>(CallKind::kLowLatencyDispatch);
  if (threadIdx.x == 0) {
    step = state->step + 1;
    call = dispatch ? state->dispatch_calls + 1 : state->dispatch_calls;
    init_step_votes(votes, p.err, info.world_size);
  }
  __syncthreads();
  const bool rejected = p.host_rejected || votes.scan_rejected;
  const uint64_t my_info = StepInfo::with_step(StepInfo::pack(p.kind, rejected, call), step);
  for (int n = threadIdx.x; n < p.nodes.num_nodes; n += blockDim.x) {
    if (n != p.nodes.node) {
      ll_put_header_word(p, ll_message_out(p, n), my_info, step, votes.scan_rejected != 0);
    }
  }
  const int q = threadIdx.x;
  if (q < info.world_size && p.nodes.same_node(q)) {
    exchange_step_words(info, p.peers, p.layout, StepWords::kDecode, step, my_info, p.my_reason,
                        p.timeout_ns, p.err, votes);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // The step happened on every rank whatever its outcome; the settle decides whether the call
    // ran (it needs every node's words).
    state->step = step;
    if (p.hooked_send) state->hooked_step = step;
    state->send_step = step_votes_agree(votes, rejected, info.world_size) ? step : 0;
    state->node_gave_up = votes.gave_up ? step : 0;
  }
}

// Whether message m (from the rail peer on remote node slot m) holds rows of this step that
// this rank forwards: its sender's word is this step's and accepted, and its send ran (`sent`,
// which only a send after its node agreed writes). Its T in *tokens.
__device__ inline bool ll_message_forwarded(const LowLatencyParams& p, int m, uint64_t step,
                                            int32_t* tokens) {
  const char* msg = p.msg_in + static_cast<int64_t>(m) * p.msg.bytes;
  const auto* w = reinterpret_cast<const StepWire*>(msg + p.msg.step);
  const uint64_t tag = __ldcg(&w->tag);
  const uint64_t word = __ldcg(&w->info);
  const uint64_t sent = __ldcg(reinterpret_cast<const uint64_t*>(msg + p.msg.sent));
  *tokens = __ldcg(reinterpret_cast<const int32_t*>(msg + p.msg.num_tokens));
  return tag == step && sent == step && !StepInfo::rejected(word) && *tokens >= 0 &&
         *tokens <= p.info.max_tokens;
}

__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    ll_forward_kernel(LowLatencyParams p) {
  ll_follow_previous_kernel();
  const RankInfo& info = p.info;
  const NodeInfo& nodes = p.nodes;
  const uint64_t step = p.state->step;
  const int parity = static_cast<int>(step & 1);
  const int node_size = nodes.node_size;
  const int first = nodes.first_rank();
  const int remote = nodes.num_nodes - 1;
  const int epr = info.experts_per_rank;
  // Rows are forwarded only when this node agreed (else nothing of this call reaches an output
  // on any rank: every rank's settle sees the rejection); the step words go every call. A
  // combine's messages hold the forwarders' partials, which the source reads where they landed:
  // for a combine this kernel stores the step words only.
  const bool clean = !block_sees_error(p.err);
  const bool dispatch = p.kind == static_cast<int>(CallKind::kLowLatencyDispatch);
  const bool node_agreed = dispatch && clean && p.state->send_step == step;
  const WarpCoord c = warp_coord();
  const int64_t tmax = info.max_tokens;
  const int64_t payload_bytes = p.layout.dispatch_payload_bytes;
  const int64_t scale_bytes = p.layout.dispatch_scale_bytes;
  const int64_t vectors = payload_bytes / 16;
  const int topk = info.topk;
  for (int64_t item = c.warp; node_agreed && item < remote * tmax; item += c.num_warps) {
    const int m = static_cast<int>(item / tmax);
    const int64_t t = item - m * tmax;
    int32_t tokens = 0;
    if (!ll_message_forwarded(p, m, step, &tokens) || t >= tokens) continue;  // warp-uniform
    const int s = nodes.rail_peer(info.rank, nodes.node_of_slot(m));
    const char* row = p.msg_in + static_cast<int64_t>(m) * p.msg.bytes + p.msg.row(t);
    const auto* ids = reinterpret_cast<const int32_t*>(row + p.msg.row_ids);
    const auto* weights = reinterpret_cast<const float*>(row + p.msg.row_weights);
    const auto* ranks = reinterpret_cast<const int32_t*>(row + p.msg.row_ranks);
    // Bit b: the token goes to rank first + b of this node.
    uint64_t here = 0;
    for (int k = c.lane; k < topk; k += 32) {
      const int32_t e = __ldcg(ids + k);
      if (e >= 0 && e < info.num_experts && nodes.same_node(e / epr)) {
        here |= 1ull << (e / epr - first);
      }
    }
    here = warp_or64(here);
    // Plain stores, as the one-node send's: the done words released after them order them.
    for (int b = c.lane; b < node_size; b += 32) {
      *reinterpret_cast<uint64_t*>(p.peers.base[first + b] + p.layout.ll_flag_offset(s, t)) =
          step << 1 | ((here >> b) & 1);
    }
    for (uint64_t mask = here; mask != 0;) {
      const int d = first + next_dest(mask);
      char* meta = p.peers.base[d] + p.layout.ll_meta_offset(s, t);
      for (int k = c.lane; k < topk; k += 32) {
        const int32_t e = __ldcg(ids + k);
        const bool mine = e >= 0 && e < info.num_experts && e / epr == d;
        reinterpret_cast<int32_t*>(meta)[k] = mine ? e - d * epr : -1;
        reinterpret_cast<float*>(meta)[topk + k] = __ldcg(weights + k);
        if (mine) reinterpret_cast<int32_t*>(meta)[2 * topk + k] = __ldcg(ranks + k);
      }
    }
    for (int64_t i = c.lane; i < vectors; i += 32) {
      const uint4 v = __ldcg(reinterpret_cast<const uint4*>(row) + i);
      for (uint64_t mask = here; mask != 0;) {
        const int d = first + next_dest(mask);
        reinterpret_cast<uint4*>(p.peers.base[d] + p.layout.ll_stage_offset(0, s, t))[i] = v;
      }
    }
    for (int64_t i = c.lane; i < scale_bytes; i += 32) {
      const char v = row[payload_bytes + i];
      for (uint64_t mask = here; mask != 0;) {
        const int d = first + next_dest(mask);
        (p.peers.base[d] + p.layout.ll_stage_offset(0, s, t))[payload_bytes + i] = v;
      }
    }
  }
  when_grid_done(p.forward_counter, [&] {
    // Each forwarded source's counts rows, then (fenced) its done word, in every rank of the
    // node; every rail peer's step word (with its reason) into every rank's slots.
    for (int m = 0; m < remote; ++m) {
      int32_t tokens = 0;
      if (!node_agreed || !ll_message_forwarded(p, m, step, &tokens)) continue;
      const int s = nodes.rail_peer(info.rank, nodes.node_of_slot(m));
      const auto* counts = reinterpret_cast<const int32_t*>(
          p.msg_in + static_cast<int64_t>(m) * p.msg.bytes + p.msg.counts);
      for (int i = threadIdx.x; i < node_size * epr; i += blockDim.x) {
        const int b = i / epr;
        *reinterpret_cast<int32_t*>(p.peers.base[first + b] +
                                    p.layout.ll_counts_offset(s, i - b * epr)) = __ldcg(counts + i);
      }
    }
    for (int i = threadIdx.x; i < remote * node_size; i += blockDim.x) {
      const int m = i / node_size;
      const int d = first + (i - m * node_size);
      const int s = nodes.rail_peer(info.rank, nodes.node_of_slot(m));
      const auto* w = reinterpret_cast<const StepWire*>(
          p.msg_in + static_cast<int64_t>(m) * p.msg.bytes + p.msg.step);
      copy_words(p.peers.base[d] + p.layout.reason_offset(parity, s), &w->reason,
                 sizeof(StepReason));
      auto* slot =
          reinterpret_cast<uint64_t*>(p.peers.base[d] + p.layout.ll_step_offset(parity, s));
      slot[0] = __ldcg(&w->info);
      st_release_sys(slot + 1, __ldcg(&w->tag));
    }
    __threadfence_system();
    __syncthreads();
    for (int i = threadIdx.x; i < remote * node_size; i += blockDim.x) {
      const int m = i / node_size;
      int32_t tokens = 0;
      if (!node_agreed || !ll_message_forwarded(p, m, step, &tokens)) continue;
      const int d = first + (i - m * node_size);
      const int s = nodes.rail_peer(info.rank, nodes.node_of_slot(m));
      st_release_sys(reinterpret_cast<uint64_t*>(p.peers.base[d] + p.layout.ll_done_offset(s)),
                     step << 32 | static_cast<uint32_t>(tokens));
    }
  });
}

__global__ void ll_settle_kernel(LowLatencyParams p) {
  ll_follow_previous_kernel();
  const RankInfo& info = p.info;
  LowLatencyState* state = p.state;
  __shared__ uint64_t step, call;
  __shared__ int skip;
  __shared__ StepVotes votes;
  const bool dispatch = p.kind == static_cast<int>(CallKind::kLowLatencyDispatch);
  if (threadIdx.x == 0) {
    step = state->step;
    call = dispatch ? state->dispatch_calls + 1 : state->dispatch_calls;
    init_step_votes(votes, p.err, info.world_size);
    // The node's agreement gave up on a wait (reported then): no second wait of the same length.
    skip = state->node_gave_up == step;
    if (skip) votes.gave_up = 1;
  }
  __syncthreads();
  const int parity = static_cast<int>(step & 1);
  const char* self = p.peers.base[info.rank];
  // This rank's own word, as its node step stored it (the word every other rank sees).
  const uint64_t my_info =
      __ldcg(reinterpret_cast<const uint64_t*>(self + p.layout.ll_step_offset(parity, info.rank)));
  const int q = threadIdx.x;
  uint64_t peer_info = 0;
  if (q < info.world_size && !skip) {
    const auto* theirs =
        reinterpret_cast<const uint64_t*>(self + p.layout.ll_step_offset(parity, q));
    uint64_t tag = 0;
    if (!wait_tagged(theirs + 1, 0, step, p.timeout_ns, p.err, kPhaseStep, info.rank, q, &tag) ||
        !step_info_of(theirs, step, p.timeout_ns, p.err, info.rank, q, &peer_info)) {
      votes.gave_up = 1;
    } else {
      if (!StepInfo::same_call(peer_info, my_info)) atomicMin(&votes.out_of_step, q);
      if (StepInfo::rejected(peer_info) && q != info.rank) atomicMin(&votes.rejected_by, q);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (step_votes_agree(votes, StepInfo::rejected(my_info), info.world_size)) {
      ll_record_call(state, dispatch, step, call);
    }
  }
  settle_step_votes(info, p.peers, p.layout, step, peer_info, p.outcome, p.err, votes);
}

// Combine across nodes, the forwarder's side: item (remote node slot m, token t, slice) sums the
// parts this node's ranks stored for token t of the rail peer s on node n = node_of_slot(m), at
// combine slots (n * L + q, t), q the rank's place in this node. The ranks are those whose
// dispatch flag of (s, t) says the token came to them (the flags ll_forward stored for the
// dispatch that ran); each part is waited for by its ready flag, tagged with the step in flight.
// Only once this node agreed on the call (as the sends).
template <typename F>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    ll_combine_forward_kernel(LowLatencyParams p) {
  ll_follow_previous_kernel();
  if (block_sees_error(p.err)) return;
  const uint64_t step = p.state->step;
  if (p.state->send_step != step) return;  // nothing of this call was sent here
  const RankInfo& info = p.info;
  const NodeInfo& nodes = p.nodes;
  const WarpCoord c = warp_coord();
  const int hidden = info.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  const int64_t slices = p.layout.ll_slices;
  const int64_t tmax = info.max_tokens;
  const int node_size = nodes.node_size;
  const int first = nodes.first_rank();
  const uint64_t came = p.state->dispatch_step << 1 | 1;
  const char* self = p.peers.base[info.rank];
  const ReduceArgs wait{self,    p.layout,          hidden,       info.rank,
                        nullptr, kDecodeTag | step, p.timeout_ns, p.err};
  const int64_t per_node = tmax * slices;
  const int64_t items = static_cast<int64_t>(nodes.num_nodes - 1) * per_node;
  for (int64_t item = c.warp; item < items; item += c.num_warps) {
    const int m = static_cast<int>(item / per_node);
    const int64_t t = (item - m * per_node) / slices;
    const int64_t slice = item - m * per_node - t * slices;
    const int n = nodes.node_of_slot(m);
    const int s = nodes.rail_peer(info.rank, n);
    // Bit first + q: rank q of this node took the token (and stored its part at slot n*L + q).
    uint64_t ranks = 0;
    for (int q = c.lane; q < node_size; q += 32) {
      const uint64_t flag = __ldcg(reinterpret_cast<const uint64_t*>(
          p.peers.base[first + q] + p.layout.ll_flag_offset(s, t)));
      if (flag == came) ranks |= 1ull << (first + q);
    }
    ranks = warp_or64(ranks);
    if (ranks == 0) continue;  // warp-uniform: the token is not for this node (or t >= T_s)
    const int slot_base = n * node_size - first;  // rank r's part is at slot r + slot_base
    const auto flag_offset = [&](int r) {
      return p.layout.ll_ready_offset(r + slot_base, t, slice);
    };
    if (!wait_ready_flags(wait, ranks, flag_offset)) break;  // reported; the others stop too
    const int64_t begin = slice * Policy::kDispatchSliceElems;
    const int64_t stop =
        begin + Policy::kDispatchSliceElems < hidden ? begin + Policy::kDispatchSliceElems : hidden;
    const int lane = c.lane;
    // The node's partial, lane by lane: decoded parts summed in fp32 from +0 in ascending rank,
    // rounded to bf16 (zeros past the slice), then encoded into the message row, no flag (the
    // exchange after this kernel carries it).
    const auto partial = [&](int64_t elem) {
      float acc[1][kElemsPerLane];
#pragma unroll
      for (int j = 0; j < kElemsPerLane; ++j) acc[0][j] = 0.0f;
      const int64_t base = elem - lane * kElemsPerLane;
      for (uint64_t mm = ranks; mm != 0;) {  // ascending rank order
        const int r = next_dest(mm);
        add_row_steps<F, 1>(self + p.layout.combine_row_offset(r + slot_base, t), payload_bytes,
                            base, stop, lane, acc);
      }
      return lane_pack_bf16(acc[0]);
    };
    send_combine_range<F, 1>(partial, begin, stop, hidden, ll_message_out(p, n) + p.msg.row(t),
                             nullptr, 0, lane);
  }
}

// After ll_combine_forward: marks each outgoing combine message with the step whose partials it
// holds, or 0 when this rank's forward did not run this call (its node did not agree here, or an
// error stopped it). The source sums a node's partials only under its own step
// (ll_combine_reduce): a forwarder whose node agreement gave up locally while its word reached
// the other nodes as accepted leaves an older call's partials in its message, never summed.
// griddepcontrol.wait (ll_follow_previous_kernel) orders it after every row of the forward.
__global__ void ll_combine_seal_kernel(LowLatencyParams p) {
  ll_follow_previous_kernel();
  const uint64_t step = p.state->step;
  const bool ran = p.state->send_step == step && !block_sees_error(p.err);
  for (int n = threadIdx.x; n < p.nodes.num_nodes; n += blockDim.x) {
    if (n == p.nodes.node) continue;
    *reinterpret_cast<uint64_t*>(ll_message_out(p, n) + p.msg.sent) = ran ? step : 0;
  }
}

// Combine across nodes, the source's side (the receive part): item (token t, slice) of this
// rank's tokens. out = bf16(sum over nodes n ascending of v_n) in fp32 from +0: v_n of this node
// is the fp32 sum from +0 of its ranks' parts of t (ascending rank, each waited for by its ready
// flag, tagged with the combine's step), v_n of another node holding t the decoded partial of
// n's forwarder in the message from it (row t). Node n holds t when t's routing names one of its
// ranks (token_mask, from this rank's own dispatch).
template <typename F>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    ll_combine_reduce_kernel(LowLatencyParams p) {
  ll_follow_previous_kernel();
  if (block_sees_error(p.err)) return;
  const uint64_t step = p.state->combine_step;
  if (!ll_receive_has_its_send(p, step, kPhaseCombineWait)) return;
  const RankInfo& info = p.info;
  const NodeInfo& nodes = p.nodes;
  const WarpCoord c = warp_coord();
  const int lane = c.lane;
  const int hidden = info.hidden;
  const int64_t payload_bytes = formats::payload_bytes_of<F>(hidden);
  const int64_t slices = p.layout.ll_slices;
  const int node_size = nodes.node_size;
  const uint64_t ones = node_size >= 64 ? ~uint64_t{0} : (uint64_t{1} << node_size) - 1;
  const char* self = p.peers.base[info.rank];
  const ReduceArgs wait{self,  p.layout,          hidden,       info.rank,
                        p.out, kDecodeTag | step, p.timeout_ns, p.err};
  const int64_t items = static_cast<int64_t>(p.num_tokens) * slices;
  for (int64_t item = c.warp; item < items; item += c.num_warps) {
    const int64_t t = item / slices;
    const int64_t slice = item - t * slices;
    const uint64_t mask = p.token_mask[t];
    const uint64_t own = mask & own_node_mask(nodes);
    const auto flag_offset = [&](int r) { return p.layout.ll_ready_offset(r, t, slice); };
    if (!wait_ready_flags(wait, own, flag_offset)) break;  // reported; the others stop too
    const int64_t begin = slice * Policy::kDispatchSliceElems;
    const int64_t stop =
        begin + Policy::kDispatchSliceElems < hidden ? begin + Policy::kDispatchSliceElems : hidden;
    for (int64_t base = begin; base < stop; base += kElemsPerWarpStep) {
      float acc[1][kElemsPerLane];
#pragma unroll
      for (int j = 0; j < kElemsPerLane; ++j) acc[0][j] = 0.0f;
      for (int n = 0; n < nodes.num_nodes; ++n) {
        if (((mask >> (n * node_size)) & ones) == 0) continue;  // node n holds none of t
        if (n == nodes.node) {
          float mine[1][kElemsPerLane];
#pragma unroll
          for (int j = 0; j < kElemsPerLane; ++j) mine[0][j] = 0.0f;
          for (uint64_t mm = own; mm != 0;) {  // ascending rank order
            const int r = next_dest(mm);
            add_row_steps<F, 1>(self + p.layout.combine_row_offset(r, t), payload_bytes, base, stop,
                                lane, mine);
          }
#pragma unroll
          for (int j = 0; j < kElemsPerLane; ++j) acc[0][j] = acc[0][j] + mine[0][j];
        } else {
          const char* msg = p.msg_in + static_cast<int64_t>(nodes.slot(n)) * p.msg.bytes;
          const uint64_t sent = __ldcg(reinterpret_cast<const uint64_t*>(msg + p.msg.sent));
          if (sent != step) {  // warp-uniform: one word
            if (lane == 0) {
              report_error(p.err, kDevPartialMissing, kPhaseCombineWait, info.rank,
                           nodes.rail_peer(info.rank, n), static_cast<int64_t>(step),
                           static_cast<int64_t>(sent), t, -1, n);
            }
            return;  // reported; the other warps stop at their next check or wait
          }
          add_row_steps<F, 1>(msg + p.msg.row(t), payload_bytes, base, stop, lane, acc);
        }
      }
      const int64_t elem = base + lane * kElemsPerLane;
      if (elem < stop) {
        *reinterpret_cast<uint4*>(p.out + t * hidden + elem) = lane_pack_bf16(acc[0]);
      }
    }
  }
}

}  // namespace moe_ep::cuda_backend
