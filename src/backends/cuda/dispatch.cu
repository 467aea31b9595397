// Instantiations and launcher of the dispatch kernels (dispatch.cuh), one per wire format.
#include "backends/cuda/dispatch.cuh"

namespace moe_ep::cuda_backend {

template <typename F, bool kPrequantized>
static cudaError_t launch_dispatch_as(const DispatchParams& p, int num_blocks, cudaStream_t stream,
                                      bool with_wait) {
  auto kernel = p.nodes.several() ? dispatch_kernel<F, kPrequantized, true>
                                  : dispatch_kernel<F, kPrequantized, false>;
  if constexpr (!kPrequantized && F::kBitsPerElem != 16) {
    if (dispatch_whole_slices<F>(p, kPrequantized)) kernel = dispatch_kernel<F, false, false, true>;
  }
  // One node's SM path counts its blocks in a done count (BufferLayout::done_count_complete).
  if (!p.nodes.several() && num_blocks > BufferLayout::kMaxDoneCountBlocks) {
    return cudaErrorInvalidConfiguration;
  }
  cudaError_t status =
      launch_following(kernel, dim3(num_blocks), dim3(Policy::kDataThreads), 0, stream, p);
  if (status != cudaSuccess || !with_wait) return status;
  return launch_dispatch_wait(p, stream);
}

cudaError_t launch_dispatch(DispatchDtype dtype, bool prequantized, const DispatchParams& p,
                            int num_blocks, cudaStream_t stream, bool with_wait) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    return prequantized ? launch_dispatch_as<F, true>(p, num_blocks, stream, with_wait)
                        : launch_dispatch_as<F, false>(p, num_blocks, stream, with_wait);
  });
}

cudaError_t launch_dispatch_wait(const DispatchParams& p, cudaStream_t stream) {
  return launch_following(dispatch_wait_kernel, dim3(1), dim3(Policy::kMaxPeers), 0, stream, p);
}

cudaError_t preload_dispatch_kernels() {
  for (DispatchDtype dtype : kAllDispatchDtypes) {
    const cudaError_t status = formats::visit_format(dtype, [](auto format) {
      using F = decltype(format);
      cudaError_t s = load_kernel(dispatch_kernel<F, true, false>);
      if (s == cudaSuccess) s = load_kernel(dispatch_kernel<F, false, false>);
      if (s == cudaSuccess) s = load_kernel(dispatch_kernel<F, true, true>);
      if (s == cudaSuccess) s = load_kernel(dispatch_kernel<F, false, true>);
      if constexpr (F::kBitsPerElem != 16) {
        if (s == cudaSuccess) s = load_kernel(dispatch_kernel<F, false, false, true>);
      }
      return s;
    });
    if (status != cudaSuccess) return status;
  }
  return load_kernel(dispatch_wait_kernel);
}

}  // namespace moe_ep::cuda_backend
