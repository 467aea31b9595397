// Decode mode on the CPU backend (docs/decode-mode.md): the readable reference of
// low_latency_dispatch and low_latency_combine, with the three steps of every call (cpu_op.h).
// Dispatch: step 1 checks the arguments as dispatch does and plans the sends; the sender stores
// each routed token once into each destination rank's staging area (encoded once, with its
// local top-k ids, weights and token index) and then the number of rows it staged there; after
// "low_latency_dispatch/exchange" the receiver expands the staging rows, source by source and
// token by token, into one slab per local expert, so each slab is in canonical order, and keeps
// a private copy of the routing for the combine. Combine: the expert rank forms, for each
// received (s, t), p = bf16(sum over t's slots k ascending whose expert is local of
// w_k * y[e_k][row]) in fp32 (product, then add), and stores p, encoded in the combine wire
// format, at row (this rank, t) of s's combine area; after "low_latency_combine/exchange" s sums
// its rows by ascending rank exactly as in normal mode (receive_combine).
// Several nodes (docs/decode-mode.md#several-nodes): the rows still go straight to their slabs
// (the one-node outputs), and each source also stages the route of every token bound for another
// node at that node's forwarder, which records it in the receive part; in the combine a partial
// for a source on another node goes to this node's forwarder for it, which sums its node's
// partials after "low_latency_combine/forward" as in normal mode (forward.cc), and the source
// sums node by node (receive_combine). The forwarders' step is part of the receive part.
// Overlap hooks (docs/decode-mode.md#overlap-hooks): with return_recv_hook a call returns once
// its own sends are stored (the send part: agreement and sends), and low_latency_dispatch_recv /
// low_latency_combine_recv do the rest (the receive part: the "<call>/exchange" barrier and the
// receiver role). Between the two the op holds the pending receive and rejects every other call.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_op.h"
#include "core/arg_checks.h"
#include "core/check.h"
#include "core/recv_views.h"
#include "core/slab_scales.h"
#include "formats/codecs.h"
#include "formats/row_format.h"

namespace moe_ep::cpu_backend {

LowLatencyDispatchResult CpuOp::low_latency_dispatch(const LowLatencyDispatchArgs& args) {
  CallScope scope(*this, CallKind::kLowLatencyDispatch);
  check_usable();
  // Step 1: verdict, published for "low_latency_dispatch/publish". The counts travel with the
  // rows (stage_count), as they must on a GPU where no size passes through the host.
  RankPost& post = my_post();
  post.num_tokens = 0;
  post.send_counts.assign(world_size_, 0);
  StepVerdict verdict = next_step(CallKind::kLowLatencyDispatch);
  SendPlan plan;
  collect_rejection(verdict, [&] {
    check_nothing_pending();
    int64_t num_tokens = 0;
    check_low_latency_enabled(config_);
    check_dispatch_args(args, &num_tokens);
    plan = plan_sends(shape_, args.topk_idx.ptr<int32_t>(), num_tokens);
    post.num_tokens = num_tokens;
  });
  publish_and_settle(verdict);

  guarded([&] {
    const int64_t num_tokens = post_of(rank_).num_tokens;
    send_low_latency_tokens(args, plan);
    // The call is made on every rank from here: its handle is the latest, whether or not the
    // receive part is deferred.
    low_latency_plan_ = std::move(plan);
    latest_low_latency_ = LowLatencyHandle{uid_, verdict.call, num_tokens};
    if (args.return_recv_hook) return;
    sync("low_latency_dispatch/exchange");  // every staging row has landed; inputs may go
    receive_low_latency();
  });
  LowLatencyDispatchResult result = low_latency_views();
  if (args.return_recv_hook) {
    pending_ = PendingRecv{CallKind::kLowLatencyDispatch, latest_low_latency_, {}};
    result.recv_pending = true;
  }
  return result;
}

void CpuOp::low_latency_dispatch_recv(const LowLatencyHandle& handle, void* /*stream*/) {
  const char* call = "low_latency_dispatch_recv";
  CallScope scope(*this, call);
  check_usable();
  // No step of its own: the send part agreed on the call, and a misuse here is the same on
  // every rank, so each rank rejects it alone (take_pending) without waiting for the others.
  take_pending(CallKind::kLowLatencyDispatch, handle, call);
  guarded([&] {
    sync("low_latency_dispatch/exchange");  // every staging row has landed
    receive_low_latency();
  });
}

// Sender role: token t goes once to each destination rank that owns one of its experts, at the
// next staging row of (this rank) there; then the number of rows staged, for every destination.
void CpuOp::send_low_latency_tokens(const LowLatencyDispatchArgs& args, const SendPlan& plan) {
  const int64_t h = config_.hidden;
  const int k = config_.topk;
  const int64_t max_tokens = config_.max_tokens_per_rank;
  const int64_t payload = payload_bytes(config_.dispatch_dtype, h);  // bytes per row
  const int64_t scales = scale_bytes(config_.dispatch_dtype, h);     // bytes per row
  const bool prequantized = args.x.dtype != ScalarType::kBFloat16;
  const int32_t* topk_idx = args.topk_idx.ptr<int32_t>();      // [T, K]
  const float* topk_weights = args.topk_weights.ptr<float>();  // [T, K]

  formats::visit_format(config_.dispatch_dtype, [&](auto format) {
    using F = decltype(format);
    for (int dest = 0; dest < world_size_; ++dest) {
      RankBuffers& dst = shared_->buffers[dest];
      const std::vector<int32_t>& tokens = plan.tokens_per_dest[dest];
      for (size_t i = 0; i < tokens.size(); ++i) {
        const int64_t t = tokens[i];
        const int64_t row = rank_ * max_tokens + static_cast<int64_t>(i);
        uint8_t* payload_row = dst.stage_payload.data() + row * payload;
        uint8_t* scale_row = dst.stage_scales.data() + row * scales;
        if (prequantized) {
          std::memcpy(payload_row, args.x.ptr<uint8_t>() + t * payload, payload);
          std::memcpy(scale_row, args.x_scales.ptr<uint8_t>() + t * scales, scales);
        } else {
          formats::encode_row<F>(args.x.ptr<uint16_t>() + t * h, h, payload_row,
                                 reinterpret_cast<typename F::Scale*>(scale_row));
        }
        local_slots(shape_, topk_idx + t * k, dest, dst.stage_topk_idx.data() + row * k);
        std::memcpy(dst.stage_topk_weights.data() + row * k, topk_weights + t * k,
                    sizeof(float) * k);
        dst.stage_src_token[row] = static_cast<int32_t>(t);
      }
      dst.stage_count[rank_] = static_cast<int32_t>(tokens.size());
    }
  });
  // Several nodes: the rows themselves went straight to their slabs above (the bytes a forwarder
  // would store are the bytes staged, unchanged, so the slabs are the one-node ones); what each
  // other node's forwarder needs for the combine is the route alone.
  if (several_nodes()) {
    stage_for_forwarders(plan, args.topk_idx, [](RankBuffers&, int64_t, int64_t) {});
  }
}

// Receiver role: every source's staging rows are in place. Expanding them source by source, row
// by row (tokens ascending) appends to each slab in canonical order. A token naming a local
// expert in two slots gets one row there, attributed to the first slot.
void CpuOp::receive_low_latency() {
  RankBuffers& mine = shared_->buffers[rank_];
  const int k = config_.topk;
  const int64_t max_tokens = config_.max_tokens_per_rank;
  const int64_t slab_rows = static_cast<int64_t>(world_size_) * max_tokens;       // rows per slab
  const int64_t payload = payload_bytes(config_.dispatch_dtype, config_.hidden);  // bytes per row
  const int64_t scales = scale_bytes(config_.dispatch_dtype, config_.hidden);     // bytes per row
  const formats::RowFormat wire = formats::row_format(config_.dispatch_dtype, config_.hidden);
  const int64_t scale_cols = wire.scale_cols;                // per row, 0 without scales
  const int64_t scale_elem = element_size(wire.scale_type);  // bytes of one scale
  const SlabScales slab_scales{slab_rows, scale_cols, config_.column_major_scales};

  std::fill(mine.slab_count.begin(), mine.slab_count.end(), 0);
  std::fill(mine.slab_src_rank.begin(), mine.slab_src_rank.end(), -1);
  std::fill(mine.slab_src_token.begin(), mine.slab_src_token.end(), -1);
  std::fill(mine.slab_src_slot.begin(), mine.slab_src_slot.end(), -1);
  low_latency_src_rank_.clear();
  low_latency_src_token_.clear();
  low_latency_weights_.clear();
  low_latency_slot_rows_.clear();

  for (int src = 0; src < world_size_; ++src) {
    const int64_t staged = mine.stage_count[src];
    MOE_EP_CHECK_INTERNAL(staged >= 0 && staged <= max_tokens, "rank ", src, " staged ", staged,
                          " rows, outside [0, max_tokens_per_rank=", max_tokens, "]");
    for (int64_t i = 0; i < staged; ++i) {
      const int64_t stage_row = src * max_tokens + i;
      const int32_t token = mine.stage_src_token[stage_row];
      const int32_t* local = mine.stage_topk_idx.data() + stage_row * k;  // [K]
      low_latency_src_rank_.push_back(src);
      low_latency_src_token_.push_back(token);
      const float* weights = mine.stage_topk_weights.data() + stage_row * k;  // [K]
      low_latency_weights_.insert(low_latency_weights_.end(), weights, weights + k);
      const size_t slots_at = low_latency_slot_rows_.size();
      low_latency_slot_rows_.resize(slots_at + k, -1);
      int64_t* slot_rows = low_latency_slot_rows_.data() + slots_at;  // [K]
      for (int slot = 0; slot < k; ++slot) {
        const int32_t e = local[slot];
        if (e < 0) continue;
        const int first = static_cast<int>(std::find(local, local + slot, e) - local);
        if (first < slot) {  // repeated expert: the row of its first slot
          slot_rows[slot] = slot_rows[first];
          continue;
        }
        const int64_t slab_row = mine.slab_count[e]++;
        const int64_t row = e * slab_rows + slab_row;
        std::memcpy(mine.slab_payload.data() + row * payload,
                    mine.stage_payload.data() + stage_row * payload, payload);
        for (int64_t j = 0; j < scale_cols; ++j) {
          std::memcpy(mine.slab_scales.data() + slab_scales.at(e, slab_row, j) * scale_elem,
                      mine.stage_scales.data() + stage_row * scales + j * scale_elem, scale_elem);
        }
        mine.slab_src_rank[row] = src;
        mine.slab_src_token[row] = token;
        mine.slab_src_slot[row] = slot;
        slot_rows[slot] = row;
      }
    }
  }
  if (several_nodes())
    record_forward_routes(&low_latency_forward_tokens_, &low_latency_forward_to_);
}

// The slabs' views: fixed memory, filled by receive_low_latency.
LowLatencyDispatchResult CpuOp::low_latency_views() const {
  const RankBuffers& mine = shared_->buffers[rank_];
  LowLatencyRecvBuffers buffers;
  buffers.payload = mine.slab_payload.data();
  buffers.scales = mine.slab_scales.data();
  buffers.count = mine.slab_count.data();
  buffers.src_rank = mine.slab_src_rank.data();
  buffers.src_token = mine.slab_src_token.data();
  buffers.src_slot = mine.slab_src_slot.data();
  return make_low_latency_result(config_, world_size_, buffers, latest_low_latency_);
}

// Throws InvalidArgument (without the "low_latency_combine: " prefix, which the verdict adds).
void CpuOp::check_low_latency_combine_args(const TensorView& y, const LowLatencyHandle& handle,
                                           const TensorView& out) const {
  moe_ep::check_low_latency_combine_args(config_, world_size_, latest_low_latency_, handle, y, out,
                                         {DeviceType::kCpu, 0});
  check_not_aliased("out", out, owned_memory());
}

void CpuOp::low_latency_combine(const TensorView& y, const LowLatencyHandle& handle,
                                const TensorView& out, void* /*stream*/, bool return_recv_hook) {
  CallScope scope(*this, CallKind::kLowLatencyCombine);
  check_usable();
  RankPost& post = my_post();
  post.num_tokens = 0;
  post.send_counts.assign(world_size_, 0);
  StepVerdict verdict = next_step(CallKind::kLowLatencyCombine);
  collect_rejection(verdict, [&] {
    check_nothing_pending();
    check_low_latency_combine_args(y, handle, out);
  });
  publish_and_settle(verdict);
  guarded([&] {
    send_low_latency_partials(y);
    if (return_recv_hook) return;
    receive_low_latency_combine(out);
  });
  if (return_recv_hook) pending_ = PendingRecv{CallKind::kLowLatencyCombine, handle, out};
}

void CpuOp::low_latency_combine_recv(const LowLatencyHandle& handle, void* /*stream*/) {
  const char* call = "low_latency_combine_recv";
  CallScope scope(*this, call);
  check_usable();
  // No step of its own, as low_latency_dispatch_recv.
  const PendingRecv pending = take_pending(CallKind::kLowLatencyCombine, handle, call);
  guarded([&] { receive_low_latency_combine(pending.out); });
}

// With several nodes each forwarder first sums its node's partials of every token it forwards
// (forward.cc, as in normal mode); then the source sums node by node (receive_combine).
void CpuOp::receive_low_latency_combine(const TensorView& out) {
  if (several_nodes()) {
    sync("low_latency_combine/forward");  // every partial for another node is at its forwarder
    forward_combine_partials(low_latency_forward_tokens_, low_latency_forward_to_);
  }
  sync("low_latency_combine/exchange");  // every partial result has landed
  receive_combine(low_latency_plan_, latest_low_latency_.num_tokens, out);
}

// Sender (expert rank) role: for each received (s, t), p = bf16(sum over t's slots k ascending
// whose expert is local of w_k * float(y[e_k][row of (s, t)])) in fp32 from 0.0f, each term a
// rounded product and a rounded addition; p goes back encoded to row (this rank, t) of s, or to
// its forwarder (combine_row_for).
void CpuOp::send_low_latency_partials(const TensorView& y) {
  const int64_t h = config_.hidden;
  const int k = config_.topk;
  const uint16_t* y_rows = y.ptr<uint16_t>();  // [E/W, W*Tmax, H] bf16
  std::vector<float> acc(h);                   // [H]
  std::vector<uint16_t> partial(h);            // [H] bf16
  formats::visit_format(config_.combine_dtype, [&](auto format) {
    using F = decltype(format);
    for (size_t n = 0; n < low_latency_src_rank_.size(); ++n) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int slot = 0; slot < k; ++slot) {
        const int64_t row = low_latency_slot_rows_[n * k + slot];
        if (row < 0) continue;
        const float w = low_latency_weights_[n * k + slot];
        const uint16_t* y_row = y_rows + row * h;
        for (int64_t j = 0; j < h; ++j) {
          const float term = w * formats::bf16_to_float(y_row[j]);
          acc[j] = acc[j] + term;
        }
      }
      for (int64_t j = 0; j < h; ++j) partial[j] = formats::float_to_bf16(acc[j]);
      const CombineRow dst = combine_row_for(low_latency_src_rank_[n], low_latency_src_token_[n]);
      formats::encode_row<F>(partial.data(), h, dst.payload,
                             reinterpret_cast<typename F::Scale*>(dst.scales));
    }
  });
}

}  // namespace moe_ep::cpu_backend
