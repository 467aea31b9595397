// Launchers of the validation and counts-exchange kernels (notify.cuh), inside the op's budget.
#include <algorithm>

#include "backends/cuda/notify.cuh"

namespace moe_ep::cuda_backend {

int validate_blocks(const ValidateParams& p, int max_blocks) {
  const int64_t work = std::max<int64_t>(
      static_cast<int64_t>(p.num_tokens) * p.info.topk,
      p.validate && p.x_bf16 ? static_cast<int64_t>(p.num_tokens) * p.info.hidden : 0);
  const int64_t wanted = (work + Policy::kValidateThreads - 1) / Policy::kValidateThreads;
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, max_blocks));
}

cudaError_t launch_validate(const ValidateParams& p, int max_blocks, cudaStream_t stream) {
  return launch_following(validate_kernel, dim3(validate_blocks(p, max_blocks)),
                          dim3(Policy::kValidateThreads), 0, stream, p);
}

cudaError_t launch_notify(const NotifyParams& p, int max_blocks, cudaStream_t stream) {
  const int world = p.info.world_size;
  const size_t smem = sizeof(int) * std::max(p.info.experts_per_rank, world * world);
  // One block per ticket at most (W x parts senders + 1 receiver); fewer take several tickets
  // each. Several nodes launch the senders and the receiver (one block) apart.
  const int senders = world * notify_parts(p.num_tokens);
  const int tickets = p.phase == kNotifyAll ? senders + 1 : p.phase == kNotifySend ? senders : 1;
  const int blocks = std::clamp(tickets, 1, max_blocks);
  return launch_following(notify_kernel, dim3(blocks), dim3(Policy::kNotifyThreads), smem, stream,
                          p);
}

cudaError_t preload_notify_kernels() {
  const cudaError_t status = load_kernel(validate_kernel);
  return status != cudaSuccess ? status : load_kernel(notify_kernel);
}

}  // namespace moe_ep::cuda_backend
