// Instantiations and launcher of the combine kernel (combine.cuh), one per wire format.
#include "backends/cuda/combine.cuh"

namespace moe_ep::cuda_backend {

int combine_max_coresident_blocks(CombineDtype dtype, int device) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    int per_sm = 0;
    int sms = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, combine_kernel<F>, kDataThreads,
                                                      0) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return -1;
    }
    return per_sm * sms;
  });
}

cudaError_t launch_combine(CombineDtype dtype, const CombineParams& p, int num_blocks,
                           cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    combine_kernel<F><<<num_blocks, kDataThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

}  // namespace moe_ep::cuda_backend
