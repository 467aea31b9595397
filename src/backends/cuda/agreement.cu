// Launchers of the step agreement and the creation rendezvous (agreement.cuh): one block, a
// thread per peer.
#include "backends/cuda/agreement.cuh"

namespace moe_ep::cuda_backend {

cudaError_t launch_step(const StepParams& p, cudaStream_t stream) {
  step_kernel<<<1, Policy::kMaxPeers, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_create_rendezvous(const CreateParams& p, cudaStream_t stream) {
  create_rendezvous_kernel<<<1, Policy::kMaxPeers, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t preload_agreement_kernels() {
  cudaFuncAttributes attr;
  const cudaError_t status = cudaFuncGetAttributes(&attr, step_kernel);
  return status != cudaSuccess ? status : cudaFuncGetAttributes(&attr, create_rendezvous_kernel);
}

}  // namespace moe_ep::cuda_backend
