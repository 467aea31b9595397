// Dispatch on the CPU backend (docs/design.md#dispatch). Step 1 checks this rank's arguments
// (shapes, dtypes, aliasing, expert id ranges always; duplicates and non-finite values in
// validation mode) and plans the sends; the verdicts, call identities and per-destination counts
// are exchanged at "dispatch/publish". The sender
// then stores each routed token once per destination rank, at that rank's canonical row (source
// rank, then source token), in the dispatch wire format; after "dispatch/exchange" the receiver
// counts rows per local expert and returns views of its buffers. With several nodes, rows for
// another node go through its forwarder (forward.cc) and land at the same canonical rows, with
// the same bytes.
#include <cstring>

#include "backends/cpu/cpu_op.h"
#include "core/arg_checks.h"
#include "core/check.h"
#include "core/recv_views.h"
#include "formats/codecs.h"
#include "moe_ep/config.h"

namespace moe_ep::cpu_backend {
// Throws InvalidArgument (without the "dispatch: " prefix, which the verdict adds).
void CpuOp::check_dispatch_args(const DispatchArgs& args, int64_t* num_tokens) const {
  const int64_t h = config_.hidden;
  const int k = config_.topk;
  const TensorView& x = args.x;
  bool prequantized = false;
  const int64_t t =
      moe_ep::check_dispatch_args(config_, args, {DeviceType::kCpu, 0}, &prequantized);
  const std::vector<MemoryRange> owned = owned_memory();
  check_not_aliased("x", x, owned);
  check_not_aliased("x_scales", args.x_scales, owned);
  check_not_aliased("topk_idx", args.topk_idx, owned);
  check_not_aliased("topk_weights", args.topk_weights, owned);

  // Data scans. The range check is cheap on the CPU and keeps routing safe, so it always runs.
  const bool validate = Knobs::get().validate;
  std::string bad = find_bad_topk(shape_, args.topk_idx.ptr<int32_t>(), t, validate);
  MOE_EP_CHECK_ARG(bad.empty(), bad);
  if (validate) {
    if (!prequantized) {
      bad = find_nonfinite_bf16("x", x.ptr<uint16_t>(), t, h);
      MOE_EP_CHECK_ARG(bad.empty(), bad);
    }
    bad = find_nonfinite_f32("topk_weights", args.topk_weights.ptr<float>(), t, k);
    MOE_EP_CHECK_ARG(bad.empty(), bad);
  }
  *num_tokens = t;
}

DispatchResult CpuOp::dispatch(const DispatchArgs& args) {
  CallScope scope(*this, CallKind::kDispatch);
  check_usable();
  // Step 1: verdict and send counts, published for "dispatch/publish".
  RankPost& post = my_post();
  post.num_tokens = 0;
  post.send_counts.assign(world_size_, 0);
  StepVerdict verdict = next_step(CallKind::kDispatch);
  SendPlan plan;
  collect_rejection(verdict, [&] {
    check_nothing_pending();
    int64_t num_tokens = 0;
    check_dispatch_args(args, &num_tokens);
    plan = plan_sends(shape_, args.topk_idx.ptr<int32_t>(), num_tokens);
    post.num_tokens = num_tokens;
    for (int dest = 0; dest < world_size_; ++dest) post.send_counts[dest] = plan.count(dest);
  });
  publish_and_settle(verdict);

  DispatchResult result;
  guarded([&] {
    // Read the counts now: the posts of this barrier are only stable until the next one.
    for (int src = 0; src < world_size_; ++src) {
      for (int dest = 0; dest < world_size_; ++dest) {
        counts_[src][dest] = post_of(src).send_counts[dest];
      }
    }
    const int64_t num_tokens = post_of(rank_).num_tokens;
    send_dispatch_rows(args, plan);
    if (several_nodes()) {
      stage_dispatch_rows(args, plan);
      sync("dispatch/forward");  // every row for another node is staged; inputs may go
      forward_dispatch_rows();
    }
    sync("dispatch/exchange");  // every row has landed; inputs may go
    plan_ = std::move(plan);
    latest_ = Handle{uid_, verdict.call, num_tokens, 0};
    result = receive_dispatch();
  });
  return result;
}

void CpuOp::write_dispatch_row(const DispatchArgs& args, int64_t t, uint8_t* payload_row,
                               uint8_t* scale_row) const {
  const int64_t h = config_.hidden;
  const int64_t payload = payload_bytes(config_.dispatch_dtype, h);  // bytes per row
  const int64_t scales = scale_bytes(config_.dispatch_dtype, h);     // bytes per row
  if (args.x.dtype != ScalarType::kBFloat16) {  // pre-quantized: the bytes travel as given
    std::memcpy(payload_row, args.x.ptr<uint8_t>() + t * payload, payload);
    std::memcpy(scale_row, args.x_scales.ptr<uint8_t>() + t * scales, scales);
    return;
  }
  formats::visit_format(config_.dispatch_dtype, [&](auto format) {
    using F = decltype(format);
    formats::encode_row<F>(args.x.ptr<uint16_t>() + t * h, h, payload_row,
                           reinterpret_cast<typename F::Scale*>(scale_row));
  });
}

// Sender role: this rank's tokens go to every destination rank of its own node that owns one of
// their experts, at rows recv_offset(src = this rank) + position in the destination's list.
// Destinations on other nodes are reached through their forwarders (stage_dispatch_rows).
void CpuOp::send_dispatch_rows(const DispatchArgs& args, const SendPlan& plan) {
  const int64_t h = config_.hidden;
  const int k = config_.topk;
  const int64_t payload = payload_bytes(config_.dispatch_dtype, h);  // bytes per row
  const int64_t scales = scale_bytes(config_.dispatch_dtype, h);     // bytes per row
  const int32_t* topk_idx = args.topk_idx.ptr<int32_t>();            // [T, K]
  const float* topk_weights = args.topk_weights.ptr<float>();        // [T, K]

  const int node = shape_.node_of(rank_);
  for (int dest = shape_.first_rank_of(node); dest < shape_.first_rank_of(node + 1); ++dest) {
    RankBuffers& dst = shared_->buffers[dest];
    const int64_t first_row = recv_offset(counts_, rank_, dest);
    const std::vector<int32_t>& tokens = plan.tokens_per_dest[dest];
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int64_t t = tokens[i];
      const int64_t row = first_row + static_cast<int64_t>(i);
      write_dispatch_row(args, t, dst.recv_payload.data() + row * payload,
                         dst.recv_scales.data() + row * scales);
      local_slots(shape_, topk_idx + t * k, dest, dst.recv_topk_idx.data() + row * k);
      std::memcpy(dst.recv_topk_weights.data() + row * k, topk_weights + t * k, sizeof(float) * k);
      dst.recv_src_rank[row] = rank_;
      dst.recv_src_token[row] = static_cast<int32_t>(t);
    }
  }
}

// Receiver role: every peer's rows are in place; count rows per local expert, keep the route
// back for combine and hand out views of this rank's buffers.
DispatchResult CpuOp::receive_dispatch() {
  RankBuffers& mine = shared_->buffers[rank_];
  int64_t num_recv = 0;
  for (int src = 0; src < world_size_; ++src) num_recv += counts_[src][rank_];
  latest_.num_recv = num_recv;
  count_rows_per_local_expert(shape_, mine.recv_topk_idx.data(), num_recv,
                              mine.recv_count_per_local_expert.data());
  route_src_rank_.assign(mine.recv_src_rank.begin(), mine.recv_src_rank.begin() + num_recv);
  route_src_token_.assign(mine.recv_src_token.begin(), mine.recv_src_token.begin() + num_recv);

  RecvBuffers buffers;
  buffers.payload = mine.recv_payload.data();
  buffers.scales = mine.recv_scales.data();
  buffers.topk_idx = mine.recv_topk_idx.data();
  buffers.topk_weights = mine.recv_topk_weights.data();
  buffers.src_rank = mine.recv_src_rank.data();
  buffers.src_token = mine.recv_src_token.data();
  buffers.count_per_local_expert = mine.recv_count_per_local_expert.data();
  return make_dispatch_result(config_, world_size_, buffers, num_recv, latest_);
}

}  // namespace moe_ep::cpu_backend
