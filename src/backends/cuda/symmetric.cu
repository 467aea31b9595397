// Peer addresses of an NCCL symmetric window: ncclGetPeerPointer is a device function, so a
// one-block kernel reads the address of every rank's buffer once at op creation; the data
// kernels then use plain pointers (stores over NVLink go straight to the peer's HBM).
#include <nccl.h>
#include <nccl_device.h>

#include "backends/cuda/launch.h"

namespace moe_ep::cuda_backend {

__global__ void resolve_peers_kernel(ncclWindow_t window, int world_size, char** out) {
  for (int peer = threadIdx.x; peer < world_size; peer += blockDim.x) {
    out[peer] = static_cast<char*>(ncclGetPeerPointer(window, 0, peer));
  }
}

cudaError_t resolve_peer_pointers(void* window, int world_size, char** out_device,
                                  cudaStream_t stream) {
  resolve_peers_kernel<<<1, 64, 0, stream>>>(static_cast<ncclWindow_t>(window), world_size,
                                             out_device);
  return cudaGetLastError();
}

cudaError_t preload_symmetric_kernels() { return load_kernel(resolve_peers_kernel); }

}  // namespace moe_ep::cuda_backend
