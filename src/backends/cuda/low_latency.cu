// Instantiations and launchers of the decode-mode kernels (low_latency.cuh), one per wire format.
#include <algorithm>

#include "backends/cuda/low_latency.cuh"

namespace moe_ep::cuda_backend {

cudaError_t launch_ll_step(const LowLatencyParams& p, cudaStream_t stream) {
  ll_step_kernel<<<1, Policy::kMaxPeers, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_ll_dispatch(DispatchDtype dtype, bool prequantized, const LowLatencyParams& p,
                               int num_blocks, cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    if (prequantized) {
      ll_send_kernel<F, true><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    } else {
      ll_send_kernel<F, false><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    }
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    // One block per local expert at most; fewer take several experts each.
    const int expand_blocks = std::clamp(p.info.experts_per_rank, 1, num_blocks);
    ll_expand_kernel<F><<<expand_blocks, Policy::kDataThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

cudaError_t launch_ll_combine(CombineDtype dtype, const LowLatencyParams& p, int num_blocks,
                              cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    ll_combine_kernel<F><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

}  // namespace moe_ep::cuda_backend
