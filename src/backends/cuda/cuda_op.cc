// The CUDA op's calls (cuda_op.h): creation after the communicator's agreement, dispatch,
// combine, reject and synchronize. Argument checks never throw before the step agreement: a
// rejected call still runs the step kernel with its verdict, then raises.
#include "backends/cuda/cuda_op.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/factory.h"
#include "core/arg_checks.h"
#include "core/log.h"
#include "core/recv_views.h"
#include "formats/row_format.h"
#include "moe_ep/config.h"

namespace moe_ep::cuda_backend {

uint64_t timeout_ns() { return static_cast<uint64_t>(Knobs::get().timeout_s * 1e9); }

CudaOp::CudaOp(std::shared_ptr<CudaComm> comm, const OpConfig& config, int num_sms)
    : OpBase(config, comm->rank(), comm->size()),
      comm_(std::move(comm)),
      device_(comm_->device()),
      num_sms_(num_sms),
      data_blocks_(num_sms * Policy::kDataBlocksPerSm) {
  DeviceGuard guard(device_);
  MOE_EP_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes_, cudaDevAttrL2CacheSize, device_));
  const CudaOpGeometry g = CudaOpGeometry::of(config, world_size_, rank_, num_sms);
  layout_ = g.layout;
  nodes_ = g.nodes;
  stage_layout_ = g.stage_layout;
  ll_msg_dispatch_ = g.ll_msg_dispatch;
  ll_msg_combine_ = g.ll_msg_combine;
  ce_combine_from_y_ = g.ce_combine_from_y;
  allocate_arrays(g);
  if (nodes_.several()) {
    const size_t remote = static_cast<size_t>(nodes_.num_nodes - 1);
    exchanged_ = std::make_unique<Event>();
    staged_rows_.assign(remote, 0);
    forwarded_rows_host_.assign(remote, 0);
  }
  if (config.copy_engine) ce_recv_count_.assign(world_size_, 0);
  buffer_ = comm_->allocate(static_cast<size_t>(layout_.total_bytes()));
  MOE_EP_LOG(LogLevel::kInfo, "cuda op uid ", uid_, " rank ", rank_, "/", world_size_, ": ",
             num_sms_, " SMs (", data_blocks_, " data blocks), buffer ", layout_.total_bytes(),
             " bytes; ", describe_policy(),
             config.copy_engine
                 ? detail::concat("; copy engine: staging ",
                                  ce_stage_.bytes() + ce_combine_stage_.bytes(), " bytes")
                 : std::string());
}

void CudaOp::publish() {
  comm_->publish(*buffer_);
  // With several nodes no call stores into, or loads from, another node's rank (those words and
  // rows cross by the transport), so the kernels get no address there: a slip faults at once
  // instead of working only while every rank happens to be an NVLink peer.
  peers_ = buffer_->peers();
  if (nodes_.several()) {
    for (int r = 0; r < world_size_; ++r) {
      if (!nodes_.same_node(r)) peers_.base[r] = nullptr;
    }
  }
  // Decode mode across nodes: one persistent exchange for the dispatch's messages, every rank
  // with its rail peers on the other nodes (collective: every rank makes it, in this order).
  if (config_.low_latency && nodes_.several()) {
    // One message of message_bytes each way per rail peer: slot m of `out` to, and of `in` from,
    // the rail peer on node slot m.
    const auto rail_exchange = [&](char* out, char* in, int64_t message_bytes) {
      std::vector<TransferPart> sends, recvs;
      const size_t bytes = static_cast<size_t>(message_bytes);
      for (int m = 0; m < nodes_.num_nodes - 1; ++m) {
        const int peer = nodes_.rail_peer(rank_, nodes_.node_of_slot(m));
        sends.push_back({peer, out + m * bytes, bytes});
        recvs.push_back({peer, in + m * bytes, bytes});
      }
      return comm_->transport().persistent(sends, recvs, comm_->internal_stream());
    };
    ll_dispatch_exchange_ =
        rail_exchange(ll_msg_out_.get(), ll_msg_in_.get(), ll_msg_dispatch_.bytes);
    // And one for the combine's messages (the forwarders' partials), made second on every rank.
    ll_combine_exchange_ =
        rail_exchange(ll_cmsg_out_.get(), ll_cmsg_in_.get(), ll_msg_combine_.bytes);
  }
  // Copy-engine path: dispatch's pack stores other ranks' rows into the staging area, its own
  // into its buffer (NotifyParams::ce_stage_offset gives the rows).
  if (config_.copy_engine) {
    for (int r = 0; r < world_size_; ++r) ce_pack_peers_.base[r] = ce_stage_.get();
    ce_pack_peers_.base[rank_] = buffer_->local();
  }
  // At debug level, the peer table every kernel of this op will use: one line per rank, so the
  // tables of all ranks can be compared when a wait on a peer's word never ends (a timeout logs
  // it too, at warn level).
  if (Knobs::get().log_level >= LogLevel::kDebug) {
    MOE_EP_LOG(LogLevel::kDebug, describe_peers());
  }
}

CudaOp::~CudaOp() {
  DeviceGuard guard(device_);
  // Let this op's kernels finish before its memory goes (never a device-wide sync: other ranks
  // of the single-GPU world may be waiting for this one).
  if (have_call_) cudaEventSynchronize(call_done_.get());
  if (poisoned() && buffer_) buffer_->abandon();
}

RankInfo CudaOp::rank_info() const {
  RankInfo info;
  info.rank = rank_;
  info.world_size = world_size_;
  info.num_experts = config_.num_experts;
  info.experts_per_rank = config_.num_experts / world_size_;
  info.topk = config_.topk;
  info.hidden = config_.hidden;
  info.max_tokens = config_.max_tokens_per_rank;
  return info;
}

std::vector<MemoryRange> CudaOp::owned_memory() const {
  return {{buffer_->local(), buffer_->bytes()}};
}

void CudaOp::write_my_reason(const std::string& error) {
  StepReason& r = host_.host()->my_reason;
  std::memset(&r, 0, sizeof(r));
  const size_t n = std::min(error.size(), sizeof(r.text) - 1);
  std::memcpy(r.text, error.data(), n);
  r.text_bytes = static_cast<int32_t>(n);
}

ValidateParams CudaOp::validation_params(const DispatchArgs& args, bool prequantized,
                                         int64_t num_tokens) const {
  ValidateParams vp{rank_info(),
                    args.topk_idx.ptr<int32_t>(),
                    prequantized ? nullptr : args.x.ptr<uint16_t>(),
                    args.topk_weights.ptr<float>(),
                    static_cast<int32_t>(num_tokens),
                    Knobs::get().validate,
                    error_sink()};
  vp.started_ns = scan_started();
  return vp;
}

void CudaOp::launch_validation(const DispatchArgs& args, bool prequantized, int64_t num_tokens,
                               cudaStream_t stream) {
  MOE_EP_CUDA_CHECK(launch_validate(validation_params(args, prequantized, num_tokens),
                                    num_sms_ * Policy::kValidateBlocksPerSm, stream));
}

void CudaOp::begin_step(cudaStream_t stream, const StepVerdict& verdict, const ValidateParams* scan,
                        const NotifyParams* notify) {
  const uint64_t step = ++steps_;
  if (!verdict.error.empty()) write_my_reason(verdict.error);
  StepParams sp;
  sp.info = rank_info();
  sp.peers = peers_;
  sp.layout = layout_;
  sp.step = step;
  sp.info_word =
      StepInfo::pack(static_cast<int>(verdict.kind), !verdict.error.empty(), verdict.call);
  sp.my_reason = &host_.device()->my_reason;
  sp.outcome = &host_.device()->step;
  sp.timeout_ns = timeout_ns();
  sp.err = error_sink();
  sp.nodes = nodes_;
  sp.started_ns = step_started_.get();
  step_launched_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  if (nodes_.several()) {
    if (scan != nullptr) {
      MOE_EP_CUDA_CHECK(launch_validate(*scan, num_sms_ * Policy::kValidateBlocksPerSm, stream));
    }
    step_across_nodes(sp, stream);
  } else if (scan != nullptr && notify != nullptr) {
    CountParams c{*scan, sp, *notify, 0, scan_blocks_done_.get(), step_done_.get()};
    MOE_EP_CUDA_CHECK(launch_count(c, num_sms_ * Policy::kNotifyBlocksPerSm, stream));
  } else {
    MOE_EP_CUDA_CHECK(launch_step(sp, stream));
  }
  last_kind_ = verdict.kind;
  last_verdict_ = verdict;
}

void CudaOp::host_wait(cudaEvent_t event, const char* what) {
  if (nodes_.several()) {
    wait_bounded(event, what);
  } else {
    MOE_EP_CUDA_CHECK(cudaEventSynchronize(event));
  }
}

void CudaOp::wait_num_recv(const char* what) {
  // The call's event is queried every 20 us at most: rank threads sharing a process (the one-GPU
  // test world) would otherwise crowd the driver while their peers launch.
  constexpr auto kQueryEvery = std::chrono::microseconds(20);
  const volatile int64_t* num_recv = &host_.host()->num_recv;
  auto next_query = std::chrono::steady_clock::now();
  while (*num_recv < 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_query) {
      std::this_thread::yield();  // rank threads of one process leave each other cores
      continue;
    }
    next_query = now + kQueryEvery;
    const cudaError_t status = cudaEventQuery(call_done_.get());
    if (status == cudaSuccess) break;  // the call is over, num_recv stored or not
    if (status != cudaErrorNotReady) {
      throw CudaError(detail::concat(
          what, ": cudaEventQuery of the call failed: ", cudaGetErrorString(status)));
    }
  }
  std::atomic_thread_fence(std::memory_order_acquire);
}

void CudaOp::end_call(cudaStream_t stream) {
  MOE_EP_CUDA_CHECK(cudaEventRecord(call_done_.get(), stream));
  have_call_ = true;
}

DispatchResult CudaOp::dispatch(const DispatchArgs& args) {
  CallScope scope(*this, CallKind::kDispatch);
  check_usable();
  DeviceGuard guard(device_);
  raise_device_error("dispatch", nullptr, /*before_step=*/true);  // an earlier call's error
  refuse_capture("dispatch", static_cast<cudaStream_t>(args.stream));
  StepVerdict verdict = next_step(CallKind::kDispatch);
  bool prequantized = false;
  int64_t num_tokens = 0;
  collect_rejection(verdict, [&] {
    take_receive_error();
    check_nothing_pending();
    num_tokens = check_dispatch_args(config_, args, {DeviceType::kCuda, device_}, &prequantized);
    const std::vector<MemoryRange> owned = owned_memory();
    check_not_aliased("x", args.x, owned);
    check_not_aliased("x_scales", args.x_scales, owned);
    check_not_aliased("topk_idx", args.topk_idx, owned);
    check_not_aliased("topk_weights", args.topk_weights, owned);
  });
  const bool accepted = verdict.error.empty();
  auto stream = static_cast<cudaStream_t>(args.stream);
  const RankInfo info = rank_info();
  const ErrorSink sink = error_sink();
  host_.host()->num_recv = -1;
  // This call's positions go to the spare half of pos_ (count_kernel's senders store them before
  // the step settles), which becomes the latest once the call has passed; a call that fails
  // leaves the latest handle's positions alone (undone on the way out).
  struct UndoFlip {
    int& half;
    bool armed;
    ~UndoFlip() {
      if (armed) half ^= 1;
    }
  };
  if (accepted) pos_half_ ^= 1;
  const bool polls_num_recv = !nodes_.several() && !config_.copy_engine;
  UndoFlip undo_flip{pos_half_, accepted};
  try {
    if (have_call_) MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, call_done_.get(), 0));
    ValidateParams scan{};
    NotifyParams np{};
    if (accepted) {
      scan = validation_params(args, prequantized, num_tokens);
      np = NotifyParams{info,
                        peers_,
                        layout_,
                        args.topk_idx.ptr<int32_t>(),
                        static_cast<int32_t>(num_tokens),
                        pos(),
                        send_offset_.get(),
                        recv_expert_count_.get(),
                        &host_.device()->num_recv,
                        counters_.get(),
                        0,  // the step: set by begin_step
                        timeout_ns(),
                        sink,
                        nodes_};
      np.remote_experts = remote_experts_.get();
      np.recv_from_self = recv_from_self_.get();
      np.part_words = notify_part_words_.get();
      np.part_experts = notify_part_experts_.get();
      if (config_.copy_engine) {
        np.ce_counts = &host_.device()->ce;
        np.ce_stage_offset = ce_stage_offset_.get();
      }
    }
    // One node: the scan, the step and notify in one kernel.
    begin_step(stream, verdict, accepted ? &scan : nullptr, accepted ? &np : nullptr);
    if (accepted) {
      if (nodes_.several()) {
        np.step = steps_;
        notify_across_nodes(np, stream);
        const NodePositionsParams pp{info,
                                     nodes_,
                                     pos(),
                                     static_cast<int32_t>(num_tokens),
                                     node_pos_.get(),
                                     node_rows_.get(),
                                     host_.device()->node_staged,
                                     sink};
        MOE_EP_CUDA_CHECK(launch_node_positions(pp, stream));
      }
      // One node's SM path: no event between count_kernel and the data kernel, which would keep
      // the data kernel from launching before count_kernel's end (programmatic dependent
      // launch); the host learns num_recv from the receiver's store (wait_num_recv).
      if (!polls_num_recv) MOE_EP_CUDA_CHECK(cudaEventRecord(notified_.get(), stream));
      // The data kernel needs only device state (positions, offsets), so it is queued before
      // the host learns num_recv; it moves nothing when the step or notify failed.
      DispatchParams dp{info,
                        nodes_,
                        peers_,
                        layout_,
                        args.x.data,
                        args.x_scales.data,
                        args.topk_idx.ptr<int32_t>(),
                        args.topk_weights.ptr<float>(),
                        static_cast<int32_t>(num_tokens),
                        pos(),
                        send_offset_.get(),
                        block_counter_.get(),
                        steps_,
                        timeout_ns(),
                        sink,
                        node_pos_.get(),
                        stage_out_.get(),
                        stage_layout_};
      if (config_.copy_engine) {
        // Pack into the staging area (own rows in place), then, once the host knows the counts
        // and that the step and notify passed on this rank, the copies, the done words and the
        // wait for every source's. A failed call queues no copy (docs/cuda-backend.md).
        DispatchParams pack = dp;
        pack.peers = ce_pack_peers_;
        pack.send_offset = ce_stage_offset_.get();
        pack.copy_engine = true;
        MOE_EP_CUDA_CHECK(launch_dispatch(config_.dispatch_dtype, prequantized, pack, data_blocks_,
                                          stream, /*with_wait=*/false));
        host_wait(notified_.get(), "dispatch");
        if (device_clear()) {
          ce_dispatch_copies(stream);
          ce_signal(world_size_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << world_size_) - 1, stream);
          DispatchParams wait = dp;
          wait.copy_engine = true;  // the wait for done words, which ce_signal stores
          MOE_EP_CUDA_CHECK(launch_dispatch_wait(wait, stream));
        }
      } else {
        MOE_EP_CUDA_CHECK(launch_dispatch(config_.dispatch_dtype, prequantized, dp, data_blocks_,
                                          stream, /*with_wait=*/!nodes_.several()));
      }
      if (nodes_.several()) forward_staged_rows(dp, stream);
    }
    end_call(stream);
    // Bounded: every device wait times out (and, across nodes, the host's wait, since the stream
    // holds the transport's exchanges).
    if (accepted && polls_num_recv) {
      wait_num_recv("dispatch");
    } else {
      host_wait(accepted ? notified_.get() : call_done_.get(), "dispatch");
    }
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
  raise_device_error("dispatch", &verdict);
  const int64_t num_recv = host_.host()->num_recv;
  if (num_recv < 0 || num_recv > layout_.max_recv_rows()) {
    poison_and_throw(Internal(detail::concat("dispatch: notify produced num_recv=", num_recv,
                                             " outside [0, ", layout_.max_recv_rows(), "]")));
  }
  if (config_.copy_engine) {  // combine's copies are sized by these
    int64_t total = 0;
    for (int src = 0; src < world_size_; ++src) {
      ce_recv_count_[src] = host_.host()->ce.recv_count[src];
      total += ce_recv_count_[src];
    }
    if (total != num_recv) {
      poison_and_throw(Internal(detail::concat("dispatch: notify's rows per source sum to ", total,
                                               ", not num_recv=", num_recv)));
    }
  }
  latest_ = Handle{uid_, verdict.call, num_tokens, num_recv};
  undo_flip.armed = false;
  combined_ = false;
  const char* self = buffer_->local();
  RecvBuffers b;
  b.payload = self + layout_.recv_payload_offset(0);
  b.scales = self + layout_.recv_scales_offset(0);
  b.topk_idx = reinterpret_cast<const int32_t*>(self + layout_.recv_topk_idx_offset(0));
  b.topk_weights = reinterpret_cast<const float*>(self + layout_.recv_topk_weights_offset(0));
  b.src_rank = reinterpret_cast<const int32_t*>(self + layout_.recv_src_rank_offset(0));
  b.src_token = reinterpret_cast<const int32_t*>(self + layout_.recv_src_token_offset(0));
  b.count_per_local_expert = recv_expert_count_.get();
  b.device = DeviceType::kCuda;
  b.device_index = device_;
  return make_dispatch_result(config_, world_size_, b, num_recv, latest_);
}

void CudaOp::combine(const Handle& handle, const TensorView& y, const TensorView& out,
                     void* stream_arg) {
  CallScope scope(*this, CallKind::kCombine);
  check_usable();
  DeviceGuard guard(device_);
  raise_device_error("combine", nullptr, /*before_step=*/true);
  refuse_capture("combine", static_cast<cudaStream_t>(stream_arg));
  StepVerdict verdict = next_step(CallKind::kCombine);
  collect_rejection(verdict, [&] {
    take_receive_error();
    check_nothing_pending();
    check_combine_args(config_, latest_, handle, y, out, {DeviceType::kCuda, device_});
    MOE_EP_CHECK_ARG(!combined_, "handle of dispatch call ", handle.call_seq,
                     " was already combined: the CUDA backend combines each dispatch once");
    check_not_aliased("out", out, owned_memory());
  });
  const bool accepted = verdict.error.empty();
  auto stream = static_cast<cudaStream_t>(stream_arg);
  if (config_.copy_engine) {
    combine_copy_engine(handle, y, out, verdict, stream);
    return;
  }
  try {
    if (have_call_) MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, call_done_.get(), 0));
    begin_step(stream, verdict);
    if (nodes_.several()) MOE_EP_CUDA_CHECK(cudaEventRecord(notified_.get(), stream));
    if (accepted) {
      // Several nodes: this launch only sends; combine_across_nodes sums.
      CombineParams cp{rank_info(),
                       nodes_,
                       peers_,
                       layout_,
                       y.ptr<uint16_t>(),
                       handle.num_recv,
                       out.ptr<uint16_t>(),
                       nodes_.several() ? 0 : static_cast<int32_t>(handle.num_tokens),
                       pos(),
                       counters_.get() + 2,
                       steps_,
                       timeout_ns(),
                       error_sink()};
      if (!nodes_.several()) {  // own rows summed in place
        cp.send_offset = send_offset_.get();
        cp.recv_from_self = recv_from_self_.get();
        cp.prefetch_bytes =
            combine_prefetch_bytes(data_blocks_, handle.num_tokens, config_.hidden, l2_bytes_,
                                   config_.combine_dtype != CombineDtype::bf16);
      }
      MOE_EP_CUDA_CHECK(launch_combine(config_.combine_dtype, cp, data_blocks_, stream));
      if (nodes_.several()) combine_across_nodes(handle, out, stream);
    }
    end_call(stream);
    if (!accepted) host_wait(call_done_.get(), "combine");
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
  if (!accepted) raise_device_error("combine", &verdict);
  combined_ = true;  // undone if a peer's rejection is raised later
}

void CudaOp::reject(CallKind kind, const std::string& reason, void* stream_arg) {
  CallScope scope(*this, kind);
  check_usable();
  DeviceGuard guard(device_);
  raise_device_error(to_string(kind), nullptr, /*before_step=*/true);
  auto stream = static_cast<cudaStream_t>(stream_arg);
  const bool decode = kind == CallKind::kLowLatencyDispatch || kind == CallKind::kLowLatencyCombine;
  // Before the pending receive error is taken below, which the refusal would otherwise drop.
  if (!decode) refuse_capture(to_string(kind), stream);
  StepVerdict verdict = next_step(kind);
  verdict.error = reason.empty() ? std::string("rejected by the caller") : reason;
  try {
    take_receive_error();
    check_nothing_pending();
  } catch (const InvalidUsage& e) {
    verdict.error += detail::concat("; also, ", e.what());
  }
  // Without decode buffers every rank rejects a decode call alike, so there is nothing to agree;
  // nor inside a capture, as low_latency_dispatch / low_latency_combine reject there (a rejected
  // call cannot be part of the graph, and the agreement would wait on the host).
  if (decode && (!config_.low_latency || capturing(stream))) {
    throw InvalidArgument(detail::concat(to_string(kind), ": ", verdict.error));
  }
  try {
    if (have_call_) MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, call_done_.get(), 0));
    if (decode) {
      // Decode calls agree through decode mode's own step words.
      write_my_reason(verdict.error);
      const LowLatencyParams p = ll_params(kind, /*host_rejected=*/true);
      if (nodes_.several()) {
        // Across nodes: the node's agreement, then the exchange, forward and settle every call
        // of its kind takes.
        MOE_EP_CUDA_CHECK(launch_ll_node_step(p, stream));
        if (kind == CallKind::kLowLatencyDispatch) {
          ll_dispatch_across_nodes(p, stream);
        } else {
          ll_combine_across_nodes(p, stream);
        }
      } else {
        MOE_EP_CUDA_CHECK(launch_ll_step(p, stream));
      }
      last_kind_ = kind;
      last_verdict_ = verdict;
    } else {
      begin_step(stream, verdict);
    }
    end_call(stream);
    host_wait(call_done_.get(), to_string(kind));
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
  raise_device_error(to_string(kind), &verdict);
  throw Internal("reject: the step settled although this rank rejected it");
}

void CudaOp::synchronize(void* stream) {
  CallScope scope(*this, last_kind_);
  check_usable();
  DeviceGuard guard(device_);
  try {
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    if (have_call_) host_wait(call_done_.get(), "synchronize");
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
  raise_device_error("synchronize");
}

}  // namespace moe_ep::cuda_backend
