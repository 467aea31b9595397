// Launchers of the step agreement and the creation rendezvous (agreement.cuh): one block, a
// thread per peer, for the agreements.
#include "backends/cuda/agreement.cuh"
#include "backends/cuda/resources.h"

namespace moe_ep::cuda_backend {

cudaError_t launch_step(const StepParams& p, cudaStream_t stream) {
  return launch_following(step_kernel, dim3(1), dim3(Policy::kMaxPeers), 0, stream, p);
}

cudaError_t launch_create_rendezvous(const CreateParams& p, cudaStream_t stream) {
  create_rendezvous_kernel<<<1, Policy::kMaxPeers, 0, stream>>>(p);
  return cudaGetLastError();
}

namespace {

// Needs kBytes of local memory per thread (a volatile array indexed at run time lives there).
template <int kBytes>
__global__ void local_memory_kernel(int* sink) {
  volatile char buffer[kBytes];
  for (int i = threadIdx.x; i < kBytes; i += blockDim.x) buffer[i] = static_cast<char>(i);
  const int read = buffer[(threadIdx.x * 7) % kBytes];
  if (sink != nullptr) *sink = read;
}

template <int kBytes>
bool run_local_memory_kernel(cudaStream_t stream) {
  local_memory_kernel<kBytes><<<1, 32, 0, stream>>>(nullptr);
  MOE_EP_CUDA_CHECK(cudaGetLastError());
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  return true;
}

}  // namespace

bool reserve_local_memory(size_t bytes) {
  if (bytes == 0) return true;
  Stream stream;
  if (bytes <= 256) return run_local_memory_kernel<256>(stream.get());
  if (bytes <= 1024) return run_local_memory_kernel<1024>(stream.get());
  if (bytes <= 4096) return run_local_memory_kernel<4096>(stream.get());
  return false;
}

cudaError_t preload_agreement_kernels() {
  const cudaError_t status = load_kernel(step_kernel);
  if (status != cudaSuccess) return status;
  return load_kernel(create_rendezvous_kernel);
}

}  // namespace moe_ep::cuda_backend
