// Several nodes on the CPU backend (docs/design.md#several-nodes): the forwarding path that the
// CUDA backend's network hop will take, as plain stores between rank threads. Node n is ranks
// [n*L, (n+1)*L); source s reaches node n != node(s) only through the forwarder f = n*L + s%L.
// Dispatch: s stages each of its tokens bound for node n once at f (the dispatch wire bytes, its
// global expert ids and weights); after "dispatch/forward" f stores each staged row, unchanged,
// into every rank of n that owns one of the token's experts, at the row a one-node dispatch
// gives it (recv_offset from the agreed counts, plus the token's position among s's tokens for
// that rank), so every dispatch output is bit-identical to the one-node result.
// Combine: the ranks of n return their rows for s's tokens to f (combine wire format); after
// "combine/forward" f sums, per token, the decoded rows in fp32 from 0.0f in ascending rank,
// rounds the partial to bf16 (nearest even, as decode mode's expert-side partial), encodes it in
// the combine wire format and stores it in s's combine buffer at row (f, t); s then adds it at
// node n's place in the node-ascending sum (combine.cc, receive_combine).
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_op.h"
#include "core/check.h"
#include "formats/codecs.h"

namespace moe_ep::cpu_backend {

void CpuOp::stage_for_forwarders(
    const SendPlan& plan, const TensorView& topk_idx_view,
    const std::function<void(RankBuffers& fwd, int64_t row, int64_t t)>& extra) {
  const int k = config_.topk;
  const int64_t max_tokens = config_.max_tokens_per_rank;
  const int64_t num_tokens = topk_idx_view.rows();
  const int32_t* topk_idx = topk_idx_view.ptr<int32_t>();  // [T, K]
  std::vector<uint8_t> to_node(num_tokens);                // [T] token t goes to node n
  for (int node = 0; node < shape_.num_nodes(); ++node) {
    if (node == shape_.node_of(rank_)) continue;
    std::fill(to_node.begin(), to_node.end(), 0);
    for (int r = shape_.first_rank_of(node); r < shape_.first_rank_of(node + 1); ++r) {
      for (const int32_t t : plan.tokens_per_dest[r]) to_node[t] = 1;
    }
    RankBuffers& fwd = shared_->buffers[shape_.forwarder(rank_, node)];
    int64_t row = rank_ * max_tokens;  // this rank's staging rows at the forwarder
    for (int64_t t = 0; t < num_tokens; ++t) {
      if (!to_node[t]) continue;
      std::memcpy(fwd.fwd_topk_idx.data() + row * k, topk_idx + t * k, sizeof(int32_t) * k);
      fwd.fwd_src_token[row] = static_cast<int32_t>(t);
      extra(fwd, row, t);
      ++row;
    }
    fwd.fwd_count[rank_] = static_cast<int32_t>(row - rank_ * max_tokens);
  }
}

// Sender role toward other nodes: each token bound for another node is staged once at that
// node's forwarder, with its row in the wire format and its weights.
void CpuOp::stage_dispatch_rows(const DispatchArgs& args, const SendPlan& plan) {
  const int k = config_.topk;
  const int64_t payload = payload_bytes(config_.dispatch_dtype, config_.hidden);  // bytes per row
  const int64_t scales = scale_bytes(config_.dispatch_dtype, config_.hidden);     // bytes per row
  const float* topk_weights = args.topk_weights.ptr<float>();                     // [T, K]
  stage_for_forwarders(plan, args.topk_idx, [&](RankBuffers& fwd, int64_t row, int64_t t) {
    write_dispatch_row(args, t, fwd.fwd_payload.data() + row * payload,
                       fwd.fwd_scales.data() + row * scales);
    std::memcpy(fwd.fwd_topk_weights.data() + row * k, topk_weights + t * k, sizeof(float) * k);
  });
}

// Forwarder role in dispatch: the sources served are the ranks of other nodes at this rank's
// position. Their staged rows are in token order, so each destination's rows come in the order
// of that source's list for it, and a running row per destination lands each at its canonical
// row. The route of every forwarded token is kept for the combine.
void CpuOp::forward_dispatch_rows() {
  const int k = config_.topk;
  const int node_size = shape_.node_size();
  const int64_t max_tokens = config_.max_tokens_per_rank;
  const int64_t payload = payload_bytes(config_.dispatch_dtype, config_.hidden);  // bytes per row
  const int64_t scales = scale_bytes(config_.dispatch_dtype, config_.hidden);     // bytes per row
  const RankBuffers& mine = shared_->buffers[rank_];
  const int node = shape_.node_of(rank_);
  const int first = shape_.first_rank_of(node);
  forward_tokens_.assign(world_size_, {});
  forward_to_.assign(world_size_, {});
  std::vector<int64_t> next_row(node_size);  // [L] next canonical row of each rank of the node

  for (int src = 0; src < world_size_; ++src) {
    if (shape_.node_of(src) == node || shape_.forwarder(src, node) != rank_) continue;
    const int64_t staged = mine.fwd_count[src];
    MOE_EP_CHECK_INTERNAL(staged >= 0 && staged <= max_tokens, "rank ", src, " staged ", staged,
                          " rows at forwarder ", rank_,
                          ", outside [0, max_tokens_per_rank=", max_tokens, "]");
    for (int j = 0; j < node_size; ++j) next_row[j] = recv_offset(counts_, src, first + j);
    for (int64_t i = 0; i < staged; ++i) {
      const int64_t stage_row = src * max_tokens + i;
      const int32_t* slots = mine.fwd_topk_idx.data() + stage_row * k;  // [K] global ids
      forward_tokens_[src].push_back(mine.fwd_src_token[stage_row]);
      for (int j = 0; j < node_size; ++j) {
        const int dest = first + j;
        const bool takes = token_goes_to(shape_, slots, dest);
        forward_to_[src].push_back(takes ? 1 : 0);
        if (!takes) continue;
        RankBuffers& dst = shared_->buffers[dest];
        const int64_t row = next_row[j]++;
        std::memcpy(dst.recv_payload.data() + row * payload,
                    mine.fwd_payload.data() + stage_row * payload, payload);
        if (scales > 0) {  // bf16 rows have no scales (and the buffers are empty)
          std::memcpy(dst.recv_scales.data() + row * scales,
                      mine.fwd_scales.data() + stage_row * scales, scales);
        }
        local_slots(shape_, slots, dest, dst.recv_topk_idx.data() + row * k);
        std::memcpy(dst.recv_topk_weights.data() + row * k,
                    mine.fwd_topk_weights.data() + stage_row * k, sizeof(float) * k);
        dst.recv_src_rank[row] = src;
        dst.recv_src_token[row] = mine.fwd_src_token[stage_row];
      }
    }
    for (int j = 0; j < node_size; ++j) {
      const int64_t end = recv_offset(counts_, src, first + j) + counts_[src][first + j];
      MOE_EP_CHECK_INTERNAL(next_row[j] == end, "forwarder ", rank_, " stored rows up to ",
                            next_row[j], " of rank ", first + j, " for source ", src,
                            ", but the agreed counts end its rows at ", end);
    }
  }
}

// Forwarder role in decode mode's dispatch (low_latency.cc): the sources' rows went straight to
// their slabs, and the routes staged here (fwd_src_token, fwd_topk_idx, fwd_count) are recorded
// for low_latency_combine, as forward_dispatch_rows records them for combine.
void CpuOp::record_forward_routes(std::vector<std::vector<int32_t>>* tokens,
                                  std::vector<std::vector<uint8_t>>* to) const {
  const int k = config_.topk;
  const int node_size = shape_.node_size();
  const int64_t max_tokens = config_.max_tokens_per_rank;
  const RankBuffers& mine = shared_->buffers[rank_];
  const int node = shape_.node_of(rank_);
  const int first = shape_.first_rank_of(node);
  tokens->assign(world_size_, {});
  to->assign(world_size_, {});
  for (int src = 0; src < world_size_; ++src) {
    if (shape_.node_of(src) == node || shape_.forwarder(src, node) != rank_) continue;
    const int64_t staged = mine.fwd_count[src];
    MOE_EP_CHECK_INTERNAL(staged >= 0 && staged <= max_tokens, "rank ", src, " staged ", staged,
                          " routes at forwarder ", rank_,
                          ", outside [0, max_tokens_per_rank=", max_tokens, "]");
    for (int64_t i = 0; i < staged; ++i) {
      const int64_t stage_row = src * max_tokens + i;
      const int32_t* slots = mine.fwd_topk_idx.data() + stage_row * k;  // [K] global ids
      (*tokens)[src].push_back(mine.fwd_src_token[stage_row]);
      for (int j = 0; j < node_size; ++j) {
        (*to)[src].push_back(token_goes_to(shape_, slots, first + j) ? 1 : 0);
      }
    }
  }
}

// Forwarder role in combine (both modes): for each forwarded token t of source s, p = sum over the
// ranks j of this node that took t, ascending, of decode(row(j, node(s), t)) in fp32 from 0.0f;
// bf16(p), encoded in the combine wire format, goes to row (this rank, t) of s's combine buffer.
void CpuOp::forward_combine_partials(const std::vector<std::vector<int32_t>>& tokens_of,
                                     const std::vector<std::vector<uint8_t>>& to) {
  const int64_t h = config_.hidden;
  const int node_size = shape_.node_size();
  const int64_t max_tokens = config_.max_tokens_per_rank;
  const int64_t payload = payload_bytes(config_.combine_dtype, h);  // bytes per row
  const int64_t scales = scale_bytes(config_.combine_dtype, h);     // bytes per row
  const RankBuffers& mine = shared_->buffers[rank_];
  std::vector<float> decoded(h);     // [hidden]
  std::vector<float> acc(h);         // [hidden] fp32 partial
  std::vector<uint16_t> partial(h);  // [hidden] bf16 partial
  formats::visit_format(config_.combine_dtype, [&](auto format) {
    using F = decltype(format);
    // Sized by the latest dispatch: W entries, empty for the sources not served.
    for (int src = 0; src < static_cast<int>(tokens_of.size()); ++src) {
      const std::vector<int32_t>& tokens = tokens_of[src];
      RankBuffers& dst = shared_->buffers[src];
      for (size_t i = 0; i < tokens.size(); ++i) {
        const int64_t t = tokens[i];
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int j = 0; j < node_size; ++j) {
          if (!to[src][i * node_size + j]) continue;
          const int64_t row =
              fwd_combine_row(j, shape_.node_of(src), shape_.num_nodes(), max_tokens, t);
          formats::decode_row<F>(mine.fwd_combine_payload.data() + row * payload,
                                 reinterpret_cast<const typename F::Scale*>(
                                     mine.fwd_combine_scales.data() + row * scales),
                                 h, decoded.data());
          for (int64_t c = 0; c < h; ++c) acc[c] += decoded[c];
        }
        for (int64_t c = 0; c < h; ++c) partial[c] = formats::float_to_bf16(acc[c]);
        const int64_t row = rank_ * max_tokens + t;
        formats::encode_row<F>(
            partial.data(), h, dst.combine_payload.data() + row * payload,
            reinterpret_cast<typename F::Scale*>(dst.combine_scales.data() + row * scales));
      }
    }
  });
}

}  // namespace moe_ep::cpu_backend
