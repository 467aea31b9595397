// Combine on the CPU backend (docs/design.md#combine). Step 1 checks the handle (this op, latest
// dispatch), the shapes of y and out and that out is not the op's own memory; verdicts and call
// identities are exchanged at "combine/publish". The sender encodes each
// row of y in the combine wire format into the source rank's combine buffer at (this rank, source
// token); after "combine/exchange" the receiver decodes, for each of its tokens, the rows of the
// ranks it was sent to in ascending rank order and sums them in fp32 from 0.0f, then rounds to
// bf16. A token sent nowhere (every slot masked) is never touched and comes out as zeros.
// With several nodes (docs/design.md#several-nodes) a row for a source on another node goes to
// the forwarder of this node for that source instead; after "combine/forward" the forwarder sums
// its node's rows of each token into one partial, rounds it to bf16 and sends it home encoded,
// and the receiver sums node by node: its own node's rows (a sum of their own), then each other
// node's partial, nodes ascending. With one node this is the rank-ascending sum.
#include <algorithm>
#include <vector>

#include "backends/cpu/cpu_op.h"
#include "core/arg_checks.h"
#include "core/check.h"
#include "formats/codecs.h"

namespace moe_ep::cpu_backend {

// Throws InvalidArgument (without the "combine: " prefix, which the verdict adds).
void CpuOp::check_combine_args(const Handle& handle, const TensorView& y,
                               const TensorView& out) const {
  moe_ep::check_combine_args(config_, latest_, handle, y, out, {DeviceType::kCpu, 0});
  check_not_aliased("out", out, owned_memory());
}

void CpuOp::combine(const Handle& handle, const TensorView& y, const TensorView& out,
                    void* /*stream*/) {
  CallScope scope(*this, CallKind::kCombine);
  check_usable();
  RankPost& post = my_post();
  post.num_tokens = 0;
  post.send_counts.assign(world_size_, 0);
  StepVerdict verdict = next_step(CallKind::kCombine);
  collect_rejection(verdict, [&] {
    check_nothing_pending();
    check_combine_args(handle, y, out);
  });
  publish_and_settle(verdict);
  guarded([&] {
    send_combine_rows(y);
    if (several_nodes()) {
      sync("combine/forward");  // every row for another node is at its forwarder
      forward_combine_partials(forward_tokens_, forward_to_);
    }
    sync("combine/exchange");  // every partial result has landed
    receive_combine(plan_, latest_.num_tokens, out);
  });
}

// Sender role: received row i came from (src rank, src token); its partial result goes back,
// encoded as the wire carries it, to that rank's combine buffer at row (this rank, src token)
// when src is on this node, else to the forwarder of this node for src (forward.cc).
void CpuOp::send_combine_rows(const TensorView& y) {
  const int64_t h = config_.hidden;
  const uint16_t* y_rows = y.ptr<uint16_t>();  // [num_recv, hidden] bf16
  formats::visit_format(config_.combine_dtype, [&](auto format) {
    using F = decltype(format);
    for (int64_t i = 0; i < latest_.num_recv; ++i) {
      const CombineRow dst = combine_row_for(route_src_rank_[i], route_src_token_[i]);
      formats::encode_row<F>(y_rows + i * h, h, dst.payload,
                             reinterpret_cast<typename F::Scale*>(dst.scales));
    }
  });
}

CpuOp::CombineRow CpuOp::combine_row_for(int src, int64_t t) {
  const int64_t h = config_.hidden;
  const int64_t max_tokens = config_.max_tokens_per_rank;
  const int64_t payload = payload_bytes(config_.combine_dtype, h);  // bytes per row
  const int64_t scales = scale_bytes(config_.combine_dtype, h);     // bytes per row
  const int node = shape_.node_of(rank_);
  if (shape_.node_of(src) == node) {
    RankBuffers& dst = shared_->buffers[src];
    const int64_t row = rank_ * max_tokens + t;
    return {dst.combine_payload.data() + row * payload, dst.combine_scales.data() + row * scales};
  }
  RankBuffers& dst = shared_->buffers[shape_.forwarder(src, node)];
  const int position = rank_ - shape_.first_rank_of(node);  // this rank's place in its node
  const int64_t row =
      fwd_combine_row(position, shape_.node_of(src), shape_.num_nodes(), max_tokens, t);
  return {dst.fwd_combine_payload.data() + row * payload,
          dst.fwd_combine_scales.data() + row * scales};
}

// Receiver role, in both modes: with `plan` naming the destination ranks of each token,
// out[t] = bf16(sum over nodes n ascending of v_n) in fp32 from 0.0f, where v_n of this rank's
// own node is the fp32 sum from 0.0f over its ranks r of t, ascending, of decode(row(r, t)), and
// v_n of another node n holding t is decode(row(f, t)), the partial of n's forwarder f for this
// rank. With one node, out[t] = bf16(0.0f + v_own): the rank-ascending sum (v_own is never -0.0f,
// a sum from +0.0f, so adding it to +0.0f changes no bit).
void CpuOp::receive_combine(const SendPlan& plan, int64_t num_tokens, const TensorView& out) {
  const int64_t h = config_.hidden;
  const int64_t max_tokens = config_.max_tokens_per_rank;
  const int64_t payload = payload_bytes(config_.combine_dtype, h);  // bytes per row
  const int64_t scales = scale_bytes(config_.combine_dtype, h);     // bytes per row
  const RankBuffers& mine = shared_->buffers[rank_];
  const int own_node = shape_.node_of(rank_);
  std::vector<float> sums(num_tokens * h, 0.0f);      // [num_tokens, hidden]
  std::vector<float> own_sums(num_tokens * h, 0.0f);  // [num_tokens, hidden] v_own
  std::vector<uint8_t> held(num_tokens);              // [num_tokens] node n holds token t
  std::vector<float> decoded(h);                      // [hidden]
  formats::visit_format(config_.combine_dtype, [&](auto format) {
    using F = decltype(format);
    // Adds decode(row) of this rank's combine buffer to acc ([hidden]).
    const auto add_row = [&](int64_t row, float* acc) {
      formats::decode_row<F>(
          mine.combine_payload.data() + row * payload,
          reinterpret_cast<const typename F::Scale*>(mine.combine_scales.data() + row * scales), h,
          decoded.data());
      for (int64_t j = 0; j < h; ++j) acc[j] += decoded[j];
    };
    for (int node = 0; node < shape_.num_nodes(); ++node) {
      std::fill(held.begin(), held.end(), 0);
      const bool own = node == own_node;
      for (int r = shape_.first_rank_of(node); r < shape_.first_rank_of(node + 1); ++r) {
        for (const int32_t t : plan.tokens_per_dest[r]) {
          held[t] = 1;
          if (own) add_row(r * max_tokens + t, own_sums.data() + t * h);
        }
      }
      const int forwarder = shape_.forwarder(rank_, node);
      for (int64_t t = 0; t < num_tokens; ++t) {
        if (!held[t]) continue;
        float* sum = sums.data() + t * h;
        if (own) {
          for (int64_t j = 0; j < h; ++j) sum[j] += own_sums[t * h + j];
        } else {
          add_row(forwarder * max_tokens + t, sum);
        }
      }
    }
  });
  uint16_t* out_rows = out.ptr<uint16_t>();  // [num_tokens, hidden] bf16
  for (int64_t i = 0; i < num_tokens * h; ++i) out_rows[i] = formats::float_to_bf16(sums[i]);
}

}  // namespace moe_ep::cpu_backend
