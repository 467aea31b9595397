// Device-side plumbing shared by the CUDA kernels: the error word in mapped host memory (no
// traps), acquire/release accesses at system scope for flags written across GPUs, and bounded
// spin-waits that say who waited on whom.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backends/cuda/device_error.h"
#include "core/layout.h"

namespace moe_ep::cuda_backend {

// Programmatic dependent launch. A kernel launched by launch_following may be scheduled while
// the kernel before it on the stream still runs; it calls wait_previous_kernel() before anything
// else, which returns once that kernel has completed and its memory operations are visible (the
// stream order, without the launch gap). let_next_kernel_launch() allows the next kernel to be
// scheduled early: each kernel calls it once it no longer waits on a peer, so that blocks parked
// in wait_previous_kernel never hold SMs a peer's rank needs (the one-GPU world's ranks share
// them). Launched without the attribute, or after a kernel that never calls it, both change
// nothing.
__device__ __forceinline__ void wait_previous_kernel() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void let_next_kernel_launch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

template <typename... Params, typename... Args>
cudaError_t launch_following(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// For self-describing words ({seq, value}) that order nothing else: no fence is needed, only a
// single-copy-atomic 64-bit store and load.
__device__ __forceinline__ void st_relaxed_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// An atomic add whose result nobody reads (a reduction), a release at system scope: the thread's
// earlier memory operations, and those ordered before them (a block barrier), are visible to a
// reader that acquires the sum.
__device__ __forceinline__ void red_add_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// atomicAdd with acquire and release semantics at GPU scope: the thread's earlier memory
// operations happen before it, and what the earlier adds in the word's release sequence released
// happens before the thread's later ones. Returns the old value.
__device__ __forceinline__ unsigned int atomic_add_acq_rel_gpu(unsigned int* p, unsigned int v) {
  unsigned int old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}

__device__ __forceinline__ uint64_t ld_relaxed_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// A release store at GPU scope, for a word that only threads of this GPU read (with acquire).
__device__ __forceinline__ void st_release_gpu(uint64_t* p, uint64_t v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ int32_t ld_volatile(const int32_t* p) {
  return *reinterpret_cast<const volatile int32_t*>(p);
}

// Copies n bytes with 8-byte loads and stores (both ends are 8-byte aligned).
__device__ __forceinline__ void copy_words(void* dst, const void* src, int n) {
  auto* d = static_cast<uint64_t*>(dst);
  const auto* s = static_cast<const uint64_t*>(src);
  for (int i = 0; i < n / 8; ++i) d[i] = s[i];
}

// The OR of a 64-bit word over the whole warp (every lane calls it).
__device__ __forceinline__ uint64_t warp_or64(uint64_t v) {
  const uint32_t lo = __reduce_or_sync(0xffffffffu, static_cast<uint32_t>(v));
  const uint32_t hi = __reduce_or_sync(0xffffffffu, static_cast<uint32_t>(v >> 32));
  return static_cast<uint64_t>(hi) << 32 | lo;
}

// One read of the device error flag per block, shared with every thread (a barrier).
__device__ __forceinline__ bool block_sees_error(const ErrorSink& sink) {
  __shared__ int32_t seen;
  if (threadIdx.x == 0) seen = ld_volatile(sink.flag);
  __syncthreads();
  return seen != 0;
}

__device__ inline void report_error(const ErrorSink& sink, int32_t code, int32_t phase,
                                    int32_t rank, int32_t peer, int64_t expected, int64_t seen,
                                    int64_t token, int64_t column, int64_t value) {
  if (atomicCAS(sink.flag, 0, -1) != 0) return;  // someone reported first
  DeviceError* err = sink.host;
  err->phase = phase;
  err->rank = rank;
  err->peer = peer;
  err->expected = expected;
  err->seen = seen;
  err->token = token;
  err->column = column;
  err->value = value;
  __threadfence_system();
  err->code = code;
  __threadfence_system();
  atomicExch(sink.flag, code);
}

// Waits until the 64-bit word at `flag` holds `expected` in the field that `field(word)` reads.
// Returns true with the word in *word_out, or reports a timeout (expected and the field last
// seen) and returns false after timeout_ns, or gives up early once another thread has reported
// an error. With kAcquire false the load is relaxed: for words that carry their own payload.
// `beside()` runs before each load of the flag (a load of another word in flight with it).
struct NothingBeside {
  __device__ void operator()() const {}
};
template <bool kAcquire, typename Field, typename Beside = NothingBeside>
__device__ inline bool wait_field(const uint64_t* flag, Field field, uint64_t expected,
                                  uint64_t timeout_ns, const ErrorSink& err, int32_t phase,
                                  int32_t rank, int32_t peer, uint64_t* word_out,
                                  Beside beside = {}) {
  const uint64_t start = global_timer_ns();
  uint32_t spins = 0;
  while (true) {
    beside();
    const uint64_t word = kAcquire ? ld_acquire_sys(flag) : ld_relaxed_sys(flag);
    if (field(word) == expected) {
      *word_out = word;
      return true;
    }
    if ((++spins & 1023u) == 0) {
      if (ld_volatile(err.flag) != 0) return false;
      if (global_timer_ns() - start > timeout_ns) {
        report_error(err, kDevTimeout, phase, rank, peer, static_cast<int64_t>(expected),
                     static_cast<int64_t>(field(word)), -1, -1, 0);
        return false;
      }
    }
  }
}

// wait_field for the tag in the bits from `shift` up: (word >> shift) == expected.
template <bool kAcquire = true>
__device__ inline bool wait_tagged(const uint64_t* flag, int shift, uint64_t expected,
                                   uint64_t timeout_ns, const ErrorSink& err, int32_t phase,
                                   int32_t rank, int32_t peer, uint64_t* word_out) {
  return wait_field<kAcquire>(
      flag, [shift](uint64_t word) { return word >> shift; }, expected, timeout_ns, err, phase,
      rank, peer, word_out);
}

// The last block's extra stores before the done signal: none.
struct NoLastBlockStores {
  __device__ void operator()() const {}
};

// Grid-wide completion: every thread fences its own stores at system scope, the block counts
// itself in, and every thread of the last block runs `last(counter)` (after a device-scope fence,
// so it sees what every block stored), then resets `counter` for the next launch.
template <typename Last>
__device__ inline void when_grid_done(unsigned int* counter, Last last) {
  __threadfence_system();
  __syncthreads();
  __shared__ bool is_last;
  if (threadIdx.x == 0) {
    const unsigned int prev = atomicAdd(counter, 1u);
    is_last = (prev == gridDim.x - 1);
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  last();
  if (threadIdx.x == 0) *counter = 0;
}

// Last-block-done signal: every thread fences its own stores, the block counts itself in, and the
// last block of the grid release-stores `value` at byte `offset` of every peer buffer.
// `last_block_stores`, when given, runs on every thread of the last block first; its stores are
// fenced at system scope before the release, so a peer that sees `value` sees them too.
// `counter` is reset by the last block for the next launch.
template <typename LastBlockStores = NoLastBlockStores>
__device__ inline void signal_when_grid_done(unsigned int* counter, char* const* peers,
                                             int world_size, int64_t offset, uint64_t value,
                                             LastBlockStores last_block_stores = {}) {
  when_grid_done(counter, [&] {
    if constexpr (!std::is_same_v<LastBlockStores, NoLastBlockStores>) {
      last_block_stores();
      __threadfence_system();
      __syncthreads();
    }
    for (int p = threadIdx.x; p < world_size; p += blockDim.x) {
      st_release_sys(reinterpret_cast<uint64_t*>(peers[p] + offset), value);
    }
  });
}

// Done-count signal, a block's end: the barrier puts every thread's stores before the adds, and
// the block adds 1 | G << 32 (G the grid's blocks) at byte `offset` of every peer buffer, each add
// a release at system scope (cumulative: it releases what the barrier ordered before it, as NCCL's
// device-side barriers release a block's stores, one thread a peer after the block's sync).
// wait_done_count sees the grid once all G blocks have added (BufferLayout::done_count_complete),
// whatever G is on each rank. No counter round trip, no last block, no second fence and no
// release stores, which signal_when_grid_done pays (v40 run L: 1.1-2.2 us of a grid's 3.2-4.9 us
// end). The waiter clears the count before its rank's next step word lets a peer add again.
__device__ inline void count_block_done(char* const* peers, int world_size, int64_t offset) {
  __syncthreads();
  const uint64_t one = 1u | (static_cast<uint64_t>(gridDim.x) << 32);
  for (int p = threadIdx.x; p < world_size; p += blockDim.x) {
    red_add_release_sys(reinterpret_cast<uint64_t*>(peers[p] + offset), one);
  }
}

// Waits (bounded, as wait_field) until the done count at `count` is complete. With `beside`, each
// poll first loads that word (relaxed, in flight with the count's acquire load) into
// *beside_out: on return, the load made beside the complete count. It may be older than the
// acquire, so only a word that carries its own tag can be taken from it (the caller checks).
__device__ inline bool wait_done_count(const uint64_t* count, uint64_t timeout_ns,
                                       const ErrorSink& err, int32_t phase, int32_t rank,
                                       int32_t peer, const uint64_t* beside = nullptr,
                                       uint64_t* beside_out = nullptr) {
  const auto complete = [](uint64_t w) -> uint64_t {
    return BufferLayout::done_count_complete(w) ? 1 : 0;
  };
  uint64_t word = 0;
  if (beside == nullptr) {
    return wait_field<true>(count, complete, 1, timeout_ns, err, phase, rank, peer, &word);
  }
  return wait_field<true>(count, complete, 1, timeout_ns, err, phase, rank, peer, &word,
                          [&] { *beside_out = ld_relaxed_sys(beside); });
}

}  // namespace moe_ep::cuda_backend
