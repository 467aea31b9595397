// Instantiations and launcher of the combine kernel (combine.cuh), one per wire format.
#include "backends/cuda/combine.cuh"

namespace moe_ep::cuda_backend {

cudaError_t launch_combine(CombineDtype dtype, const CombineParams& p, int num_blocks,
                           cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    // One node: this rank's own rows summed in place (combine.cuh, kOwnInPlace).
    if (p.send_offset != nullptr && !p.nodes.several()) {
      combine_kernel<F, true><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    } else {
      combine_kernel<F, false><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    }
    return cudaGetLastError();
  });
}

cudaError_t preload_combine_kernels() {
  for (CombineDtype dtype : kAllCombineDtypes) {
    const cudaError_t status = formats::visit_format(dtype, [](auto format) {
      const cudaError_t s = load_kernel(combine_kernel<decltype(format), true>);
      return s == cudaSuccess ? load_kernel(combine_kernel<decltype(format), false>) : s;
    });
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace moe_ep::cuda_backend
