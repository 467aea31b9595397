// The one-GPU world's persistent exchange (transport.h, single_gpu_world.cc) on the device, so
// that a CUDA graph can hold it. As NCCL's send and receive, bytes land only once the receiver's
// stream has reached the matching launch (so it is done with the previous launch's bytes):
// block 0 first release-stores this launch's sequence number into each sender's `ready` flag for
// this rank; block b waits (bounded) until its receiver's `ready` flag holds the number, copies
// send part b into the receiver's buffer, then release-stores the number into the receiver's
// data flag for this rank; block 0 finally waits (bounded) until every sender's data flag holds
// it. The sequence number lives in device memory: every block reads it when it starts, and the
// last block to finish advances it, so every launch, captured or not, counts.
#include "backends/cuda/common.cuh"
#include "backends/cuda/launch.h"

namespace moe_ep::cuda_backend {
namespace {

__global__ void loopback_exchange_kernel(LoopbackParams p) {
  const uint64_t seq = *reinterpret_cast<const volatile uint64_t*>(p.seq) + 1;
  const int q = threadIdx.x;
  const bool receives_from_q = q < p.world_size && ((p.recv_mask >> q) & 1) != 0;
  if (blockIdx.x == 0 && receives_from_q) st_release_sys(p.ready_at[q], seq);
  __shared__ int receiver_ready;
  const bool sends = blockIdx.x < static_cast<unsigned int>(p.num_sends);
  if (threadIdx.x == 0) {
    receiver_ready = 0;
    if (sends) {
      const LoopbackSend& s = p.sends[blockIdx.x];
      uint64_t word = 0;
      receiver_ready =
          wait_tagged(s.ready, 0, seq, p.timeout_ns, p.err, kPhaseTransport, p.rank, s.peer, &word);
    }
  }
  __syncthreads();
  if (receiver_ready) {  // block-uniform; a wait that gave up is reported, and nothing is copied
    const LoopbackSend& s = p.sends[blockIdx.x];
    const bool vectors =
        ((reinterpret_cast<uintptr_t>(s.dst) | reinterpret_cast<uintptr_t>(s.src) | s.bytes) &
         15) == 0;
    if (vectors) {
      const auto* src = reinterpret_cast<const uint4*>(s.src);
      auto* dst = reinterpret_cast<uint4*>(s.dst);
      for (uint64_t i = threadIdx.x; i < s.bytes / 16; i += blockDim.x) dst[i] = __ldcg(src + i);
    } else {
      for (uint64_t i = threadIdx.x; i < s.bytes; i += blockDim.x) s.dst[i] = s.src[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      st_release_sys(s.flag, seq);
    }
  }
  if (blockIdx.x == 0 && receives_from_q) {
    uint64_t word = 0;
    wait_tagged(p.flags + q, 0, seq, p.timeout_ns, p.err, kPhaseTransport, p.rank, q, &word);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(p.done, 1u) == gridDim.x - 1) {  // every block has read seq: advance it
      *p.done = 0;
      *reinterpret_cast<volatile uint64_t*>(p.seq) = seq;
      __threadfence();
    }
  }
}

}  // namespace

cudaError_t launch_loopback_exchange(const LoopbackParams& p, cudaStream_t stream) {
  const int blocks = p.num_sends > 0 ? p.num_sends : 1;
  constexpr int kThreads = 256;  // block 0's waiters are its first W <= kMaxPeers threads
  static_assert(kThreads >= Policy::kMaxPeers, "a waiter thread per peer");
  loopback_exchange_kernel<<<blocks, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t preload_loopback_kernels() { return load_kernel(loopback_exchange_kernel); }

}  // namespace moe_ep::cuda_backend
