// Launchers of the validation and counts-exchange kernels (notify.cuh).
#include <algorithm>

#include "backends/cuda/notify.cuh"

namespace moe_ep::cuda_backend {

cudaError_t launch_validate(const ValidateParams& p, cudaStream_t stream) {
  const int64_t work = std::max<int64_t>(
      static_cast<int64_t>(p.num_tokens) * p.info.topk,
      p.validate && p.x_bf16 ? static_cast<int64_t>(p.num_tokens) * p.info.hidden : 0);
  // 256 threads x up to 1024 blocks: enough to stream the validation scan of x at full HBM rate.
  const int blocks = static_cast<int>(std::clamp<int64_t>((work + 255) / 256, 1, 1024));
  validate_kernel<<<blocks, 256, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_notify(const NotifyParams& p, cudaStream_t stream) {
  const int world = p.info.world_size;
  const size_t smem = sizeof(int) * std::max(p.info.experts_per_rank, world * world);
  notify_kernel<<<world, kNotifyThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda_backend
