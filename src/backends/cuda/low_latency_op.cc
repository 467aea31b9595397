// Decode mode on the CUDA backend (cuda_op.h, low_latency.cuh, docs/decode-mode.md): the host side
// of low_latency_dispatch and low_latency_combine. Nothing here waits for the device and every
// launch has the same shape for calls with the same shapes, so both calls can be captured in a
// CUDA graph; the step and call numbers live in device memory (LowLatencyState). While a stream
// is being captured the op does not order the call behind its previous one with its internal
// event (the graph's own order does). A rank whose host checks reject a call still launches the
// decode step kernel with its verdict, outside a capture, and raises once it ran; a peer's
// rejection and every device error are raised at the op's next call or synchronize().
// Overlap hooks (docs/decode-mode.md#overlap-hooks): a call made with return_recv_hook queues its
// send part (step and sends) and leaves its receive part pending on the host; the receive call
// queues the kernels that wait for the peers' stores, on its own stream behind the op's previous
// call like any call, so a hooked round can be captured too.

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_op.h"
#include "core/arg_checks.h"
#include "core/recv_views.h"
#include "formats/row_format.h"
#include "moe_ep/config.h"

namespace moe_ep::cuda_backend {

bool CudaOp::capturing(cudaStream_t stream) const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MOE_EP_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

void CudaOp::refuse_capture(const char* call, cudaStream_t stream) const {
  if (!capturing(stream)) return;
  throw InvalidUsage(detail::concat(
      call, ": stream=", static_cast<const void*>(stream),
      " is capturing a CUDA graph, and normal mode's calls cannot be captured (the host numbers "
      "their steps, and a dispatch waits on the host for num_recv); capture decode mode's "
      "low_latency_dispatch and low_latency_combine (an op with low_latency=true) instead"));
}

LowLatencyParams CudaOp::ll_params(CallKind kind, bool host_rejected) const {
  LowLatencyParams p{};
  p.info = rank_info();
  p.peers = peers_;
  p.layout = layout_;
  p.state = ll_state_.get();
  p.kind = static_cast<int>(kind);
  p.host_rejected = host_rejected;
  p.my_reason = &host_.device()->my_reason;
  p.outcome = &host_.device()->step;
  p.num_tokens = static_cast<int32_t>(latest_low_latency_.num_tokens);
  p.token_mask = ll_token_mask_.get();
  p.sent_calls = ll_sent_calls_.get();
  p.send_blocks = data_blocks_;
  p.slot_rows = ll_slot_rows_.get();
  p.slab_payload = ll_slab_payload_.get();
  p.slab_scales = ll_slab_scales_.get();
  const formats::RowFormat wire = formats::row_format(config_.dispatch_dtype, config_.hidden);
  p.column_scale_bytes = config_.column_major_scales && wire.has_scales()
                             ? static_cast<int32_t>(element_size(wire.scale_type))
                             : 0;
  p.count = ll_count_.get();
  p.src_rank = ll_src_rank_.get();
  p.src_token = ll_src_token_.get();
  p.src_slot = ll_src_slot_.get();
  p.send_counts = ll_send_counts_.get();
  p.slot_ranks = ll_slot_ranks_.get();
  p.tickets = ll_tickets_.get();
  p.timeout_ns = timeout_ns();
  p.err = error_sink();
  p.nodes = nodes_;
  if (nodes_.several()) {
    const bool dispatch = kind == CallKind::kLowLatencyDispatch;
    p.msg = dispatch ? ll_msg_dispatch_ : ll_msg_combine_;
    p.msg_out = dispatch ? ll_msg_out_.get() : ll_cmsg_out_.get();
    p.msg_in = dispatch ? ll_msg_in_.get() : ll_cmsg_in_.get();
    p.forward_counter = ll_forward_counter_.get();
  }
  return p;
}

void CudaOp::ll_dispatch_across_nodes(const LowLatencyParams& p, cudaStream_t stream) {
  ll_dispatch_exchange_->launch(stream, p.err, p.timeout_ns);
  MOE_EP_CUDA_CHECK(launch_ll_forward(p, data_blocks_, stream));
  MOE_EP_CUDA_CHECK(launch_ll_settle(p, stream));
}

void CudaOp::ll_combine_across_nodes(const LowLatencyParams& p, cudaStream_t stream) {
  MOE_EP_CUDA_CHECK(launch_ll_combine_forward(config_.combine_dtype, p, data_blocks_, stream));
  MOE_EP_CUDA_CHECK(launch_ll_combine_seal(p, stream));
  ll_combine_exchange_->launch(stream, p.err, p.timeout_ns);
  MOE_EP_CUDA_CHECK(launch_ll_forward(p, data_blocks_, stream));
  MOE_EP_CUDA_CHECK(launch_ll_settle(p, stream));
}

LowLatencyDispatchResult CudaOp::ll_result() const {
  LowLatencyRecvBuffers b;
  b.payload = ll_slab_payload_.get();
  b.scales = ll_slab_scales_.get();
  b.count = ll_count_.get();
  b.src_rank = ll_src_rank_.get();
  b.src_token = ll_src_token_.get();
  b.src_slot = ll_src_slot_.get();
  b.device = DeviceType::kCuda;
  b.device_index = device_;
  return make_low_latency_result(config_, world_size_, b, latest_low_latency_);
}

LowLatencyDispatchResult CudaOp::low_latency_dispatch(const LowLatencyDispatchArgs& args) {
  CallScope scope(*this, CallKind::kLowLatencyDispatch);
  check_usable();
  DeviceGuard guard(device_);
  raise_device_error("low_latency_dispatch", nullptr, /*before_step=*/true);
  StepVerdict verdict = next_step(CallKind::kLowLatencyDispatch);
  bool prequantized = false;
  int64_t num_tokens = 0;
  collect_rejection(verdict, [&] {
    take_receive_error();
    check_nothing_pending();
    check_low_latency_enabled(config_);
    num_tokens = check_dispatch_args(config_, args, {DeviceType::kCuda, device_}, &prequantized);
    const std::vector<MemoryRange> owned = owned_memory();
    check_not_aliased("x", args.x, owned);
    check_not_aliased("topk_idx", args.topk_idx, owned);
    check_not_aliased("topk_weights", args.topk_weights, owned);
  });
  const bool accepted = verdict.error.empty();
  auto stream = static_cast<cudaStream_t>(args.stream);
  const bool in_graph = capturing(stream);
  if (!accepted && (in_graph || !config_.low_latency)) {
    // Nothing to agree on inside a capture (a rejected call cannot be part of the graph), and an
    // op without decode buffers has no decode step words: every rank rejects alike.
    throw_own_rejection(verdict);
  }
  if (in_graph) captured_ = true;
  try {
    if (have_call_ && !in_graph)
      MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, call_done_.get(), 0));
    const bool across_nodes = nodes_.several();
    // On one node the step kernel ranks the slots (ll_rank_slots) and, outside validation mode,
    // scans the expert ids itself, one kernel fewer; validation mode's scan of x needs
    // validate_kernel's grid.
    const bool step_ranks = accepted && !across_nodes;
    const bool step_scans = step_ranks && !Knobs::get().validate;
    if (!accepted) {
      write_my_reason(verdict.error);
    } else if (!step_scans) {
      launch_validation(args, prequantized, num_tokens, stream);
    }
    LowLatencyParams p = ll_params(CallKind::kLowLatencyDispatch, !accepted);
    p.hooked_send = accepted && args.return_recv_hook;  // its receive part checks this step
    if (accepted) {
      p.x = args.x.data;
      p.x_scales = args.x_scales.data;
      p.topk_idx = args.topk_idx.ptr<int32_t>();
      p.topk_weights = args.topk_weights.ptr<float>();
      p.num_tokens = static_cast<int32_t>(num_tokens);
    }
    p.step_ranks = step_ranks;
    p.step_scans = step_scans;
    p.scan_started_ns = scan_started();
    // Across nodes the node agrees first; the verdict of every rank comes with the settle.
    MOE_EP_CUDA_CHECK(across_nodes ? launch_ll_node_step(p, stream) : launch_ll_step(p, stream));
    last_kind_ = CallKind::kLowLatencyDispatch;
    last_verdict_ = verdict;
    if (across_nodes) {
      // Send (when accepted), then the exchange, forward and settle, which every rank takes in
      // every dispatch; with the hook too (the exchange count must not depend on the hooks), so
      // the receive part is the expand alone, as on one node.
      if (accepted) {
        MOE_EP_CUDA_CHECK(
            launch_ll_send(config_.dispatch_dtype, prequantized, p, data_blocks_, stream));
      }
      ll_dispatch_across_nodes(p, stream);
      if (accepted && !args.return_recv_hook) {
        MOE_EP_CUDA_CHECK(launch_ll_expand(config_.dispatch_dtype, p, data_blocks_, stream));
      }
    } else if (accepted) {
      // With the hook, the expand (which waits for every source) is the receive part's.
      MOE_EP_CUDA_CHECK(
          args.return_recv_hook
              ? launch_ll_send(config_.dispatch_dtype, prequantized, p, data_blocks_, stream)
              : launch_ll_dispatch(config_.dispatch_dtype, prequantized, p, data_blocks_, stream));
    }
    if (!in_graph) end_call(stream);
    // Across nodes the stream holds the exchange, whose NCCL receive has no limit: bounded.
    if (!accepted) host_wait(call_done_.get(), "low_latency_dispatch");
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
  if (!accepted) raise_device_error("low_latency_dispatch", &verdict);
  previous_low_latency_ = latest_low_latency_;
  latest_low_latency_ = LowLatencyHandle{uid_, verdict.call, num_tokens};
  if (accepted_low_latency_.size() == 8) accepted_low_latency_.erase(accepted_low_latency_.begin());
  accepted_low_latency_.push_back(latest_low_latency_);
  LowLatencyDispatchResult result = ll_result();
  if (args.return_recv_hook) {
    pending_ = PendingRecv{CallKind::kLowLatencyDispatch, latest_low_latency_, {}};
    result.recv_pending = true;
  }
  return result;
}

void CudaOp::low_latency_dispatch_recv(const LowLatencyHandle& handle, void* stream_arg) {
  const char* call = "low_latency_dispatch_recv";
  CallScope scope(*this, call);
  check_usable();
  DeviceGuard guard(device_);
  // A failure of the send part that the device has reported by now (a peer rejected the call)
  // is raised here and drops the pending receive; one reported later is raised at the next call.
  raise_device_error(call);
  // No step of its own: the send part agreed on the call, and a misuse here is the same on
  // every rank, so each rank rejects it alone without waiting for the others.
  take_pending(CallKind::kLowLatencyDispatch, handle, call);
  auto stream = static_cast<cudaStream_t>(stream_arg);
  const bool in_graph = capturing(stream);
  if (in_graph) captured_ = true;
  try {
    if (have_call_ && !in_graph)
      MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, call_done_.get(), 0));
    // The expand of the send part's dispatch: it waits for every source's done word of that
    // dispatch's step (LowLatencyState::dispatch_step) and fills the slabs, after checking that
    // the send part ran (LowLatencyState::hooked_step; else it reports and moves nothing).
    LowLatencyParams p = ll_params(CallKind::kLowLatencyDispatch, false);
    p.deferred_receive = true;
    MOE_EP_CUDA_CHECK(launch_ll_expand(config_.dispatch_dtype, p, data_blocks_, stream));
    if (!in_graph) end_call(stream);
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
}

void CudaOp::low_latency_combine(const TensorView& y, const LowLatencyHandle& handle,
                                 const TensorView& out, void* stream_arg, bool return_recv_hook) {
  CallScope scope(*this, CallKind::kLowLatencyCombine);
  check_usable();
  DeviceGuard guard(device_);
  raise_device_error("low_latency_combine", nullptr, /*before_step=*/true);
  StepVerdict verdict = next_step(CallKind::kLowLatencyCombine);
  collect_rejection(verdict, [&] {
    take_receive_error();
    check_nothing_pending();
    check_low_latency_combine_args(config_, world_size_, latest_low_latency_, handle, y, out,
                                   {DeviceType::kCuda, device_});
    check_not_aliased("out", out, owned_memory());
  });
  const bool accepted = verdict.error.empty();
  auto stream = static_cast<cudaStream_t>(stream_arg);
  const bool in_graph = capturing(stream);
  if (!accepted && (in_graph || !config_.low_latency)) throw_own_rejection(verdict);
  if (in_graph) captured_ = true;
  try {
    if (have_call_ && !in_graph)
      MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, call_done_.get(), 0));
    if (!accepted) {
      write_my_reason(verdict.error);
    }
    LowLatencyParams p = ll_params(CallKind::kLowLatencyCombine, !accepted);
    p.hooked_send = accepted && return_recv_hook;  // its receive part checks this step
    const bool across_nodes = nodes_.several();
    // Across nodes the node agrees first; the verdict of every rank comes with the settle.
    MOE_EP_CUDA_CHECK(across_nodes ? launch_ll_node_step(p, stream) : launch_ll_step(p, stream));
    last_kind_ = CallKind::kLowLatencyCombine;
    last_verdict_ = verdict;
    if (accepted) {
      p.y = y.ptr<uint16_t>();
      p.out = out.ptr<uint16_t>();
    }
    if (across_nodes) {
      // The expert side's sends (when accepted), then the forwarders' sums, the exchange, the
      // step words and the settle, which every rank takes in every combine, with the hook too
      // (the exchange count must not depend on the hooks); the node-ordered sum is the receive
      // part.
      if (accepted) {
        p.combine_phase = kLlCombineSend;
        MOE_EP_CUDA_CHECK(launch_ll_combine(config_.combine_dtype, p, data_blocks_, stream));
      }
      ll_combine_across_nodes(p, stream);
      if (accepted && !return_recv_hook) {
        MOE_EP_CUDA_CHECK(launch_ll_combine_reduce(config_.combine_dtype, p, data_blocks_, stream));
      }
    } else if (accepted) {
      // With the hook, the token-side sum (which waits for the peers' rows) is the receive
      // part's.
      p.combine_phase = return_recv_hook ? kLlCombineSend : kLlCombineAll;
      MOE_EP_CUDA_CHECK(launch_ll_combine(config_.combine_dtype, p, data_blocks_, stream));
    }
    if (!in_graph) end_call(stream);
    // Across nodes the stream holds the exchange, whose NCCL receive has no limit: bounded.
    if (!accepted) host_wait(call_done_.get(), "low_latency_combine");
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
  if (!accepted) raise_device_error("low_latency_combine", &verdict);
  if (accepted && return_recv_hook) {
    pending_ = PendingRecv{CallKind::kLowLatencyCombine, handle, out};
  }
}

void CudaOp::low_latency_combine_recv(const LowLatencyHandle& handle, void* stream_arg) {
  const char* call = "low_latency_combine_recv";
  CallScope scope(*this, call);
  check_usable();
  DeviceGuard guard(device_);
  raise_device_error(call);  // as in low_latency_dispatch_recv
  const PendingRecv pending = take_pending(CallKind::kLowLatencyCombine, handle, call);
  auto stream = static_cast<cudaStream_t>(stream_arg);
  const bool in_graph = capturing(stream);
  if (in_graph) captured_ = true;
  try {
    if (have_call_ && !in_graph)
      MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, call_done_.get(), 0));
    // The sum of this rank's own tokens into the send part's out: it waits for the flags of the
    // send part's combine step (LowLatencyState::combine_step).
    LowLatencyParams p = ll_params(CallKind::kLowLatencyCombine, false);
    p.out = pending.out.ptr<uint16_t>();
    p.combine_phase = kLlCombineReceive;
    p.deferred_receive = true;  // checks that the send part ran, as the dispatch's expand
    // Across nodes the node-ordered sum (the messages landed in the send part).
    MOE_EP_CUDA_CHECK(nodes_.several()
                          ? launch_ll_combine_reduce(config_.combine_dtype, p, data_blocks_, stream)
                          : launch_ll_combine(config_.combine_dtype, p, data_blocks_, stream));
    if (!in_graph) end_call(stream);
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
}

}  // namespace moe_ep::cuda_backend
