// Instantiations and launcher of the combine kernels (combine.cuh), one per wire format.
#include "backends/cuda/combine.cuh"

namespace moe_ep::cuda_backend {

cudaError_t launch_combine(CombineDtype dtype, const CombineParams& p, int num_blocks,
                           cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    combine_send_kernel<F><<<num_blocks, kDataThreads, 0, stream>>>(p);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    combine_reduce_kernel<F><<<num_blocks, kDataThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

}  // namespace moe_ep::cuda_backend
