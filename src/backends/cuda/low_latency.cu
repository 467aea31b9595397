// Instantiations and launchers of the decode-mode kernels (low_latency.cuh), one per wire format.

#include "backends/cuda/low_latency.cuh"

namespace moe_ep::cuda_backend {

cudaError_t launch_ll_step(const LowLatencyParams& p, cudaStream_t stream) {
  ll_step_kernel<<<1, Policy::kMaxPeers, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_ll_send(DispatchDtype dtype, bool prequantized, const LowLatencyParams& p,
                           int num_blocks, cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    if (prequantized) {
      ll_send_kernel<F, true><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    } else {
      ll_send_kernel<F, false><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_ll_expand(DispatchDtype dtype, const LowLatencyParams& p, int num_blocks,
                             cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    // No more blocks than the most work items a call can have: the blocks wait for the peers'
    // rows, and idle waiting blocks would only hold SMs (other ranks' sends among them, when
    // ranks share a GPU).
    const int64_t warps_per_block = Policy::kDataThreads / 32;
    const int64_t needed =
        (LlExpandItems::of(p).most_items(p) + warps_per_block - 1) / warps_per_block;
    const int blocks = static_cast<int>(needed < num_blocks ? needed : num_blocks);
    ll_expand_kernel<F><<<blocks, Policy::kDataThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

cudaError_t launch_ll_dispatch(DispatchDtype dtype, bool prequantized, const LowLatencyParams& p,
                               int num_blocks, cudaStream_t stream) {
  const cudaError_t status = launch_ll_send(dtype, prequantized, p, num_blocks, stream);
  if (status != cudaSuccess) return status;
  return launch_ll_expand(dtype, p, num_blocks, stream);
}

cudaError_t launch_ll_combine(CombineDtype dtype, const LowLatencyParams& p, int num_blocks,
                              cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    ll_combine_kernel<F><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

cudaError_t preload_ll_kernels() {
  cudaFuncAttributes attr;
  cudaError_t status = cudaFuncGetAttributes(&attr, ll_step_kernel);
  for (DispatchDtype dtype : kAllDispatchDtypes) {
    if (status != cudaSuccess) return status;
    status = formats::visit_format(dtype, [](auto format) {
      using F = decltype(format);
      cudaFuncAttributes a;
      cudaError_t s = cudaFuncGetAttributes(&a, ll_send_kernel<F, true>);
      if (s == cudaSuccess) s = cudaFuncGetAttributes(&a, ll_send_kernel<F, false>);
      if (s == cudaSuccess) s = cudaFuncGetAttributes(&a, ll_expand_kernel<F>);
      return s;
    });
  }
  for (CombineDtype dtype : kAllCombineDtypes) {
    if (status != cudaSuccess) return status;
    status = formats::visit_format(dtype, [](auto format) {
      cudaFuncAttributes a;
      return cudaFuncGetAttributes(&a, ll_combine_kernel<decltype(format)>);
    });
  }
  return status;
}

}  // namespace moe_ep::cuda_backend
