// Instantiations and launcher of the combine kernel (combine.cuh), one per wire format.
#include "backends/cuda/combine.cuh"

namespace moe_ep::cuda_backend {

cudaError_t launch_combine(CombineDtype dtype, const CombineParams& p, int num_blocks,
                           cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    // One node: this rank's own rows summed in place (combine.cuh, kOwnInPlace).
    const auto kernel = p.send_offset != nullptr && !p.nodes.several() ? combine_kernel<F, true>
                                                                       : combine_kernel<F, false>;
    return launch_following(kernel, dim3(num_blocks), dim3(Policy::kDataThreads), 0, stream, p);
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
