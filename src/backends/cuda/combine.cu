// Instantiations and launcher of the combine kernel (combine.cuh), one per wire format.
#include "backends/cuda/combine.cuh"

namespace moe_ep::cuda_backend {

cudaError_t launch_combine(CombineDtype dtype, const CombineParams& p, int num_blocks,
                           cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    // One node: this rank's own rows summed in place (combine.cuh, kOwnInPlace).
    auto kernel = p.send_offset != nullptr && !p.nodes.several() ? combine_kernel<F, true>
                                                                 : combine_kernel<F, false>;
    // One node, hidden a multiple of a few warp steps (7168 is): own-only rows without bounds
    // tests (combine.cuh, reduce_own_row_whole).
    if (combine_whole_rows<F>(p)) kernel = combine_kernel<F, true, true>;
    return launch_following(kernel, dim3(num_blocks), dim3(Policy::kDataThreads), 0, stream, p);
  });
}

cudaError_t preload_combine_kernels() {
  for (CombineDtype dtype : kAllCombineDtypes) {
    const cudaError_t status = formats::visit_format(dtype, [](auto format) {
      using F = decltype(format);
      cudaError_t s = load_kernel(combine_kernel<F, true>);
      if (s == cudaSuccess) s = load_kernel(combine_kernel<F, false>);
      if (s == cudaSuccess) s = load_kernel(combine_kernel<F, true, true>);
      return s;
    });
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace moe_ep::cuda_backend
