// The copy-engine path of the CUDA op (OpConfig::copy_engine; docs/cuda-backend.md#the-copy-engine-
// path), normal mode on one node. The rows a rank sends to a peer are contiguous in canonical order
// on both sides, so each leg is a local pack into a staging area (or, for a bf16 combine, y
// itself), one cudaMemcpyAsync per destination and field, and a done word per source released
// after the copies (ce_signal_kernel), which the receiver's existing waits acquire.
// The copies are queued by the host, so they cannot be skipped by the device when a step fails:
// the host queues them only after waiting for the step (dispatch: for notify, a wait dispatch
// makes anyway; combine: for the step agreement, a host wait the SM path does not make) and
// finding this rank's error record clear. A rank therefore writes into a peer only after that
// peer's step word of this call arrived, i.e. after the peer's previous call finished: the same
// reuse rule as the SM path's stores.
#include <atomic>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_op.h"
#include "core/arg_checks.h"
#include "core/check.h"

namespace moe_ep::cuda_backend {
namespace {

// One copy of the path: peer memory (or this rank's own, never for own rows) from local memory.
void copy_bytes(char* dst, const char* src, int64_t bytes, cudaStream_t stream) {
  if (bytes <= 0) return;
  MOE_EP_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream));
}

}  // namespace

bool CudaOp::device_clear() const {
  std::atomic_thread_fence(std::memory_order_acquire);
  return *reinterpret_cast<volatile const int32_t*>(&host_.host()->error.code) == kDevOk;
}

void CudaOp::ce_signal(uint64_t mask, cudaStream_t stream) {
  CopyEngineSignalParams sp{};
  sp.peers = peers_;
  sp.world_size = world_size_;
  sp.mask = mask;
  sp.offset = layout_.done_offset(rank_);
  sp.value = steps_;
  sp.err = error_sink();
  MOE_EP_CUDA_CHECK(launch_ce_signal(sp, stream));
}

void CudaOp::ce_dispatch_copies(cudaStream_t stream) {
  std::atomic_thread_fence(std::memory_order_acquire);
  const CopyEngineCounts& ce = host_.host()->ce;
  const int64_t tmax = config_.max_tokens_per_rank;
  const int64_t k = config_.topk;
  const char* stage = ce_stage_.get();
  for (int d = 0; d < world_size_; ++d) {
    if (d == rank_) continue;  // packed in place
    const int64_t n = *reinterpret_cast<volatile const int32_t*>(&ce.send_count[d]);
    const int64_t to = *reinterpret_cast<volatile const int32_t*>(&ce.send_offset[d]);
    if (n < 0 || n > tmax || to < 0 || to + n > layout_.max_recv_rows()) {
      poison_and_throw(Internal(detail::concat(
          "dispatch (copy engine): notify gave ", n, " rows for rank ", d, " at row ", to,
          ", outside [0, ", tmax, "] rows within [0, ", layout_.max_recv_rows(), ")")));
    }
    if (n == 0) continue;
    const int64_t from = d * tmax;  // the staging area's rows for d
    char* peer = peers_.base[d];
    copy_bytes(peer + layout_.recv_payload_offset(to), stage + layout_.recv_payload_offset(from),
               n * layout_.dispatch_payload_bytes, stream);
    copy_bytes(peer + layout_.recv_scales_offset(to), stage + layout_.recv_scales_offset(from),
               n * layout_.dispatch_scale_bytes, stream);
    copy_bytes(peer + layout_.recv_topk_idx_offset(to), stage + layout_.recv_topk_idx_offset(from),
               n * k * 4, stream);
    copy_bytes(peer + layout_.recv_topk_weights_offset(to),
               stage + layout_.recv_topk_weights_offset(from), n * k * 4, stream);
    copy_bytes(peer + layout_.recv_src_rank_offset(to), stage + layout_.recv_src_rank_offset(from),
               n * 4, stream);
    copy_bytes(peer + layout_.recv_src_token_offset(to),
               stage + layout_.recv_src_token_offset(from), n * 4, stream);
  }
}

void CudaOp::ce_combine_copies(const uint16_t* y, cudaStream_t stream) {
  const int64_t row_bytes = layout_.combine_row_bytes;
  const char* rows =
      ce_combine_from_y_ ? reinterpret_cast<const char*>(y) : ce_combine_stage_.get();
  int64_t first = 0;  // the source's first received row
  for (int src = 0; src < world_size_; ++src) {
    const int64_t n = ce_recv_count_[src];
    if (src != rank_ && n > 0) {  // own rows are summed in place from y
      copy_bytes(peers_.base[src] + layout_.combine_row_offset(rank_, 0), rows + first * row_bytes,
                 n * row_bytes, stream);
    }
    first += n;
  }
}

void CudaOp::combine_copy_engine(const Handle& handle, const TensorView& y, const TensorView& out,
                                 const StepVerdict& verdict, cudaStream_t stream) {
  const bool accepted = verdict.error.empty();
  bool passed = false;
  try {
    if (have_call_) MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, call_done_.get(), 0));
    CombineParams cp{rank_info(),
                     nodes_,
                     peers_,
                     layout_,
                     accepted ? y.ptr<uint16_t>() : nullptr,
                     handle.num_recv,
                     accepted ? out.ptr<uint16_t>() : nullptr,
                     static_cast<int32_t>(handle.num_tokens),
                     pos(),
                     counters_.get() + 2,
                     0,
                     timeout_ns(),
                     error_sink()};
    cp.send_offset = send_offset_.get();
    cp.ce_stage = ce_combine_stage_.get();
    // The encode reads y and writes this rank's staging area only (free: the op's previous call,
    // whose copies read it, is done), so it overlaps the wait for the peers' step words.
    if (accepted && !ce_combine_from_y_) {
      MOE_EP_CUDA_CHECK(launch_ce_combine_pack(config_.combine_dtype, cp, data_blocks_, stream));
    }
    begin_step(stream, verdict);
    cp.step = steps_;
    MOE_EP_CUDA_CHECK(cudaEventRecord(notified_.get(), stream));
    host_wait(notified_.get(), "combine");
    passed = accepted && device_clear();
    if (passed) {
      ce_combine_copies(cp.y, stream);
      const uint64_t all = world_size_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << world_size_) - 1;
      ce_signal(all & ~(uint64_t{1} << rank_), stream);
      MOE_EP_CUDA_CHECK(launch_ce_reduce(config_.combine_dtype, cp, data_blocks_, stream));
    }
    end_call(stream);
    if (!passed) host_wait(call_done_.get(), "combine");
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
  if (!passed) {
    raise_device_error("combine", &verdict);
    poison_and_throw(Internal("combine (copy engine): the step did not pass on rank " +
                              std::to_string(rank_) + " but no error was raised"));
  }
  combined_ = true;  // undone if a peer's failure is raised later
}

}  // namespace moe_ep::cuda_backend
