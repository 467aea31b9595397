// Launchers of decode mode's kernels across nodes (low_latency_nodes.cuh). NOT RUN ON A GPU YET.

#include "backends/cuda/low_latency_nodes.cuh"

namespace moe_ep::cuda_backend {
namespace {

// As low_latency.cu's launch_following: programmatic dependent launch allowed.
cudaError_t launch_ll_following(void (*kernel)(LowLatencyParams), int blocks, int threads,
                                cudaStream_t stream, const LowLatencyParams& p) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned int>(blocks));
  config.blockDim = dim3(static_cast<unsigned int>(threads));
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, p);
}

}  // namespace

cudaError_t launch_ll_node_step(const LowLatencyParams& p, cudaStream_t stream) {
  return launch_ll_following(ll_node_step_kernel, 1, Policy::kMaxPeers, stream, p);
}

cudaError_t launch_ll_forward(const LowLatencyParams& p, int num_blocks, cudaStream_t stream) {
  // One warp per (remote node, token) at most; the same grid every call (capturable).
  const int64_t warps_per_block = Policy::kDataThreads / 32;
  const int64_t items = static_cast<int64_t>(p.nodes.num_nodes - 1) * p.info.max_tokens;
  int64_t blocks = (items + warps_per_block - 1) / warps_per_block;
  if (blocks > num_blocks) blocks = num_blocks;
  if (blocks < 1) blocks = 1;
  return launch_ll_following(ll_forward_kernel, static_cast<int>(blocks), Policy::kDataThreads,
                             stream, p);
}

cudaError_t launch_ll_settle(const LowLatencyParams& p, cudaStream_t stream) {
  return launch_ll_following(ll_settle_kernel, 1, Policy::kMaxPeers, stream, p);
}

cudaError_t preload_ll_node_kernels() {
  cudaFuncAttributes a;
  cudaError_t s = cudaFuncGetAttributes(&a, ll_node_step_kernel);
  if (s == cudaSuccess) s = cudaFuncGetAttributes(&a, ll_forward_kernel);
  if (s == cudaSuccess) s = cudaFuncGetAttributes(&a, ll_settle_kernel);
  return s;
}

}  // namespace moe_ep::cuda_backend
