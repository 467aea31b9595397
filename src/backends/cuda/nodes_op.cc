// The CUDA op's host side across nodes (ranks_per_node < W; docs/multi-node.md, "The CUDA path
// across nodes"). What crosses between nodes goes through the communicator's Transport, in
// exchanges every rank takes together: a rank takes one only after a host wait has shown that the
// call's step passed (step_passed), which the step agreement makes the same answer on every rank.
// Dispatch: node positions (after notify) -> data kernel (this node's ranks stored, other nodes'
// rows staged) -> the count parts, then the staged rows, cross -> forward kernel -> wait for every
// source's done word. Combine: sends (this node's sources direct, other nodes' rows to their
// forwarder) -> forwarder partials -> the partials cross back -> the node-ordered sum.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_op.h"
#include "core/check.h"
#include "moe_ep/config.h"

namespace moe_ep::cuda_backend {

bool CudaOp::step_passed(cudaEvent_t event) {
  wait_bounded(event, "the step agreement");
  std::atomic_thread_fence(std::memory_order_acquire);
  return *reinterpret_cast<volatile const int32_t*>(&host_.host()->error.code) == kDevOk;
}

void CudaOp::wait_bounded(cudaEvent_t event, const char* what) {
  // Twice the kernels' own limit, so that a wait of theirs that gives up is reported by them
  // (naming the phase and the peer) before the host blames the transport.
  const double limit_s = 2 * Knobs::get().timeout_s;
  if (poll_done([event] { return cudaEventQuery(event); }, limit_s)) return;
  std::string peers;
  for (int n = 0; n < nodes_.num_nodes; ++n) {
    if (n == nodes_.node) continue;
    peers += detail::concat(peers.empty() ? "" : ", ", nodes_.rail_peer(rank_, n));
  }
  poison_and_throw(Timeout(
      detail::concat("timed out after ", limit_s, " s waiting on the host for ", what, ": rank ",
                     rank_, "'s stream holds transport exchanges with its rail peers [", peers,
                     "] (", comm_->transport().name(),
                     "); a peer is dead or not calling the same op (MOE_EP_TIMEOUT_S)")));
}

void CudaOp::step_across_nodes(StepParams sp, cudaStream_t stream) {
  sp.word_out = step_out_.get();
  sp.words_in = steps_in_.get();
  sp.phase = kStepPost;
  MOE_EP_CUDA_CHECK(launch_step(sp, stream));
  // Every rank of every other node gets this rank's word; all of them, whatever this rank's
  // verdict, so every rank takes this exchange in every step.
  std::vector<TransferPart> sends, recvs;
  for (int q = 0; q < world_size_; ++q) {
    if (nodes_.same_node(q)) continue;
    sends.push_back({q, step_out_.get(), sizeof(StepWire)});
    recvs.push_back({q, steps_in_.get() + q, sizeof(StepWire)});
  }
  comm_->transport().exchange(sends, recvs, stream);
  sp.phase = kStepSettle;
  MOE_EP_CUDA_CHECK(launch_step(sp, stream));
}

void CudaOp::notify_across_nodes(NotifyParams np, cudaStream_t stream) {
  // The exchanges below are taken only by ranks whose step passed, which is every rank or none.
  MOE_EP_CUDA_CHECK(cudaEventRecord(notified_.get(), stream));
  if (!step_passed(notified_.get())) return;
  const int blocks = num_sms_ * Policy::kNotifyBlocksPerSm;
  np.phase = kNotifySend;
  MOE_EP_CUDA_CHECK(launch_notify(np, blocks, stream));
  // This rank's counts row (its words in its own buffer) to every rank of the other nodes, and
  // their rows into this rank's buffer; then the expert words for each of them.
  const int parity = static_cast<int>(np.step & 1);
  char* self = buffer_->local();
  const size_t row_bytes = sizeof(uint64_t) * world_size_;
  const size_t experts_bytes = sizeof(uint64_t) * layout_.local_experts;
  std::vector<TransferPart> sends, recvs;
  for (int q = 0; q < world_size_; ++q) {
    if (nodes_.same_node(q)) continue;
    sends.push_back({q, self + layout_.counts_offset(parity, rank_, 0), row_bytes});
    recvs.push_back({q, self + layout_.counts_offset(parity, q, 0), row_bytes});
  }
  comm_->transport().exchange(sends, recvs, stream);
  sends.clear();
  recvs.clear();
  for (int q = 0; q < world_size_; ++q) {
    if (nodes_.same_node(q)) continue;
    sends.push_back(
        {q, remote_experts_.get() + static_cast<size_t>(q) * layout_.local_experts, experts_bytes});
    recvs.push_back({q, self + layout_.experts_offset(parity, q, 0), experts_bytes});
  }
  comm_->transport().exchange(sends, recvs, stream);
  np.phase = kNotifyReceive;
  MOE_EP_CUDA_CHECK(launch_notify(np, blocks, stream));
}

NodeParams CudaOp::node_params() const {
  NodeParams p{};
  p.info = rank_info();
  p.nodes = nodes_;
  p.peers = peers_;
  p.layout = layout_;
  p.stage_layout = stage_layout_;
  p.stage_in = stage_in_.get();
  for (size_t m = 0; m < forwarded_rows_host_.size(); ++m) p.rows_in[m] = forwarded_rows_host_[m];
  p.block_counter = forward_counter_.get();
  p.partial_bf16 = partial_bf16_.get();
  p.partial_out = partial_out_.get();
  p.partial_in = partial_in_.get();
  p.scratch_flag = scratch_flag_.get();
  p.pos = pos();
  p.node_pos = node_pos_.get();
  p.step = steps_;
  p.timeout_ns = timeout_ns();
  p.err = error_sink();
  return p;
}

void CudaOp::forward_staged_rows(const DispatchParams& dp, cudaStream_t stream) {
  // A failed step moved nothing on any rank, and none of them exchanges: the error is raised
  // after the host wait for num_recv, as with one node.
  if (!step_passed(notified_.get())) return;
  Transport& transport = comm_->transport();
  const int remote = nodes_.num_nodes - 1;
  HostShared& counts = *host_.host();
  // The count parts: what this rank staged for node n goes to its forwarder there; what the
  // rail peer on node m staged for this node comes here.
  std::vector<TransferPart> sends, recvs;
  for (int m = 0; m < remote; ++m) {
    const int n = nodes_.node_of_slot(m);
    sends.push_back({nodes_.rail_peer(rank_, n), node_rows_.get() + n, sizeof(int32_t)});
    recvs.push_back({nodes_.rail_peer(rank_, n), forwarded_rows_.get() + m, sizeof(int32_t)});
  }
  transport.exchange(sends, recvs, stream);
  MOE_EP_CUDA_CHECK(cudaMemcpyAsync(counts.node_forwarded, forwarded_rows_.get(),
                                    sizeof(int32_t) * remote, cudaMemcpyDeviceToHost, stream));
  MOE_EP_CUDA_CHECK(cudaEventRecord(exchanged_->get(), stream));
  wait_bounded(exchanged_->get(), "dispatch (the staged row counts)");
  const int64_t stride = stage_layout_.stride;
  const int64_t slot_bytes = static_cast<int64_t>(config_.max_tokens_per_rank) * stride;
  sends.clear();
  recvs.clear();
  for (int m = 0; m < remote; ++m) {
    const int n = nodes_.node_of_slot(m);
    const int32_t staged = counts.node_staged[n];
    const int32_t forwarded = counts.node_forwarded[m];
    if (staged < 0 || staged > config_.max_tokens_per_rank || forwarded < 0 ||
        forwarded > config_.max_tokens_per_rank) {
      poison_and_throw(
          Internal(detail::concat("dispatch: staged rows out of range: ", staged, " for node ", n,
                                  ", ", forwarded, " from rank ", nodes_.rail_peer(rank_, n),
                                  " (limit ", config_.max_tokens_per_rank, ")")));
    }
    staged_rows_[m] = staged;
    forwarded_rows_host_[m] = forwarded;
    sends.push_back({nodes_.rail_peer(rank_, n), stage_out_.get() + m * slot_bytes,
                     static_cast<size_t>(staged * stride)});
    recvs.push_back({nodes_.rail_peer(rank_, n), stage_in_.get() + m * slot_bytes,
                     static_cast<size_t>(forwarded * stride)});
  }
  transport.exchange(sends, recvs, stream);
  MOE_EP_CUDA_CHECK(launch_forward(node_params(), data_blocks_, stream));
  MOE_EP_CUDA_CHECK(launch_dispatch_wait(dp, stream));
}

void CudaOp::combine_across_nodes(const Handle& handle, const TensorView& out,
                                  cudaStream_t stream) {
  NodeParams p = node_params();
  p.out = out.ptr<uint16_t>();
  p.num_tokens = static_cast<int32_t>(handle.num_tokens);
  MOE_EP_CUDA_CHECK(launch_node_partials(config_.combine_dtype, p, data_blocks_, stream));
  if (!step_passed(notified_.get())) return;
  const int remote = nodes_.num_nodes - 1;
  const int64_t row_bytes = layout_.combine_row_bytes;
  const int64_t slot_bytes = static_cast<int64_t>(config_.max_tokens_per_rank) * row_bytes;
  std::vector<TransferPart> sends, recvs;
  for (int m = 0; m < remote; ++m) {
    const int peer = nodes_.rail_peer(rank_, nodes_.node_of_slot(m));
    // Partials of the rows forwarded from peer go back to it; those of the rows this rank
    // staged for peer's node come from it.
    sends.push_back({peer, partial_out_.get() + m * slot_bytes,
                     static_cast<size_t>(forwarded_rows_host_[m] * row_bytes)});
    recvs.push_back({peer, partial_in_.get() + m * slot_bytes,
                     static_cast<size_t>(staged_rows_[m] * row_bytes)});
  }
  comm_->transport().exchange(sends, recvs, stream);
  MOE_EP_CUDA_CHECK(launch_node_reduce(config_.combine_dtype, p, data_blocks_, stream));
}

}  // namespace moe_ep::cuda_backend
