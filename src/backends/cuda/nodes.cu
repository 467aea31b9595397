// Launchers of the several-node kernels (nodes.cuh), inside the op's budget.
#include <algorithm>

#include "backends/cuda/nodes.cuh"

namespace moe_ep::cuda_backend {

cudaError_t launch_node_positions(const NodePositionsParams& p, cudaStream_t stream) {
  node_positions_kernel<<<p.nodes.num_nodes, Policy::kNotifyThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_forward(const NodeParams& p, int num_blocks, cudaStream_t stream) {
  forward_kernel<<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_node_partials(CombineDtype dtype, const NodeParams& p, int num_blocks,
                                 cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    node_partial_kernel<decltype(format)><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

cudaError_t launch_node_reduce(CombineDtype dtype, const NodeParams& p, int num_blocks,
                               cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    node_reduce_kernel<decltype(format)><<<num_blocks, Policy::kDataThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

cudaError_t preload_node_kernels() {
  cudaError_t status = load_kernel(node_positions_kernel);
  if (status == cudaSuccess) status = load_kernel(forward_kernel);
  for (CombineDtype dtype : kAllCombineDtypes) {
    if (status != cudaSuccess) return status;
    status = formats::visit_format(dtype, [](auto format) {
      using F = decltype(format);
      cudaError_t s = load_kernel(node_partial_kernel<F>);
      return s == cudaSuccess ? load_kernel(node_reduce_kernel<F>) : s;
    });
  }
  return status;
}

}  // namespace moe_ep::cuda_backend
