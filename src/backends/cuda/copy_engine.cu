// Instantiations and launchers of the copy-engine path's kernels (copy_engine.cuh).
#include "backends/cuda/copy_engine.cuh"

namespace moe_ep::cuda_backend {

cudaError_t launch_ce_signal(const CopyEngineSignalParams& p, cudaStream_t stream) {
  ce_signal_kernel<<<1, Policy::kMaxPeers, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_ce_combine_pack(CombineDtype dtype, const CombineParams& p, int num_blocks,
                                   cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    ce_combine_pack_kernel<F><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

cudaError_t launch_ce_reduce(CombineDtype dtype, const CombineParams& p, int num_blocks,
                             cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    ce_reduce_kernel<F><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

cudaError_t preload_copy_engine_kernels() {
  for (CombineDtype dtype : kAllCombineDtypes) {
    const cudaError_t status = formats::visit_format(dtype, [](auto format) {
      using F = decltype(format);
      const cudaError_t s = load_kernel(ce_combine_pack_kernel<F>);
      return s == cudaSuccess ? load_kernel(ce_reduce_kernel<F>) : s;
    });
    if (status != cudaSuccess) return status;
  }
  return load_kernel(ce_signal_kernel);
}

}  // namespace moe_ep::cuda_backend
