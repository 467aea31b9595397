// The device side of moe-ep-latency-floor (latency_floor.cu, which launches and times these and
// says what each row measures): the chases, the stores with their fences, the block ends, the
// signal between two SMs, the straight-line code, and the kernels of the boundary and round rows.
// Each kernel reads %globaltimer itself and writes its figures to `out` (or `stamps`).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moe_ep_latency_floor {

constexpr int kSlots = 64;      // slots of a chase, one cycle through all of them
constexpr int kStride = 32;     // 64-bit words from one slot to the next: 256 bytes
constexpr uint64_t kStep = 17;  // slot i holds (i + 17) % 64 (17 and 64 are coprime)
constexpr int kBlockThreads = 1024;
constexpr uint64_t kSignalTimeoutNs = 1000000000ull;
constexpr uint64_t kBoundarySpinNs = 20000;  // A runs this long, so B is launched and waiting

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

enum Load { kL1, kL2, kVolatile, kRelaxedSys, kAcquireSys, kAtomic };

template <int K>
__device__ __forceinline__ uint64_t load(uint64_t* p) {
  uint64_t v;
  if constexpr (K == kL1) {
    asm volatile("ld.global.ca.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else if constexpr (K == kL2) {
    asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else if constexpr (K == kVolatile) {
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else if constexpr (K == kRelaxedSys) {
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else if constexpr (K == kAcquireSys) {
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else {
    v = atomicAdd(reinterpret_cast<unsigned long long*>(p), 0ull);
  }
  return v;
}

// out[0]: ns for `chain` dependent loads after one pass over the slots; out[1]: the last slot.
// `n` slots `stride` words apart (kSlots and kStride but for the page rows).
template <int K>
__global__ void chase_kernel(uint64_t* slots, int chain, uint64_t* out, uint64_t n,
                             uint64_t stride) {
  uint64_t i = 0;
  for (uint64_t j = 0; j < n; ++j) i = load<K>(slots + i * stride);
  if (i >= n) {
    out[1] = i;
    return;
  }
  const uint64_t t0 = now_ns();
  for (int j = 0; j < chain; ++j) i = load<K>(slots + i * stride);
  if (i >= n) {  // (the branch waits for the last load before the timer is read)
    out[1] = i;
    return;
  }
  out[0] = now_ns() - t0;
  out[1] = i;
}

// Slot i of a page chase (n slots `stride` words apart) holds (i + kStep) % n.
__global__ void page_chase_init_kernel(uint64_t* slots, uint64_t n, uint64_t stride) {
  for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    slots[i * stride] = (i + kStep) % n;
  }
}

enum Sync {
  kFenceScSys,
  kFenceAcqRelSys,
  kFenceScGpu,
  kFenceAcqRelGpu,
  kStoreRelease,
  kRedRelease,
  kRedRelaxed
};

// out[0]: ns for `chain` stores, each followed by the sync S (a release store: the store itself).
template <int S>
__global__ void store_sync_kernel(uint64_t* scratch, int chain, uint64_t* out) {
  uint64_t* counter = scratch + kSlots * kStride;
  const uint64_t t0 = now_ns();
  for (int j = 0; j < chain; ++j) {
    uint64_t* p = scratch + (j % kSlots) * kStride;
    const uint64_t v = j;
    if constexpr (S == kStoreRelease) {
      asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
      continue;
    }
    asm volatile("st.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
    if constexpr (S == kFenceScSys) asm volatile("fence.sc.sys;" ::: "memory");
    if constexpr (S == kFenceAcqRelSys) asm volatile("fence.acq_rel.sys;" ::: "memory");
    if constexpr (S == kFenceScGpu) asm volatile("fence.sc.gpu;" ::: "memory");
    if constexpr (S == kFenceAcqRelGpu) asm volatile("fence.acq_rel.gpu;" ::: "memory");
    if constexpr (S == kRedRelease) {
      asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(counter), "l"(1ull) : "memory");
    }
    if constexpr (S == kRedRelaxed) {
      asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(counter), "l"(1ull) : "memory");
    }
  }
  out[0] = now_ns() - t0;
  out[1] = 0;
}

enum BlockEnd { kBarrier, kEveryThreadFences, kReleaseAfterBarrier };

// A block of kBlockThreads, `chain` times: a barrier alone, or a block's end as a done count
// ends it (every thread's store before the barrier, then thread 0's add). out[0]: thread 0's ns.
template <int V>
__global__ void __launch_bounds__(kBlockThreads)
    block_end_kernel(uint64_t* scratch, int chain, uint64_t* out) {
  uint64_t* mine = scratch + threadIdx.x * 8;
  uint64_t* counter = scratch + kBlockThreads * 8;
  __syncthreads();
  const uint64_t t0 = now_ns();
  for (int j = 0; j < chain; ++j) {
    if constexpr (V != kBarrier) *reinterpret_cast<volatile uint64_t*>(mine) = j;
    if constexpr (V == kEveryThreadFences) asm volatile("fence.sc.sys;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      if constexpr (V == kEveryThreadFences) {
        asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(counter), "l"(1ull)
                     : "memory");
      }
      if constexpr (V == kReleaseAfterBarrier) {
        asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(counter), "l"(1ull)
                     : "memory");
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    out[0] = now_ns() - t0;
    out[1] = 0;
  }
}

enum Signal { kReleaseAcquire, kRelaxed };

template <int V>
__device__ __forceinline__ void put(uint64_t* p, uint64_t v) {
  if constexpr (V == kReleaseAcquire) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  } else {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
}

// Spins until *p >= v; false after kSignalTimeoutNs from `start`.
template <int V>
__device__ __forceinline__ bool await(uint64_t* p, uint64_t v, uint64_t start) {
  for (uint32_t spins = 1;; ++spins) {
    if (load < V == kReleaseAcquire ? kAcquireSys : kRelaxedSys > (p) >= v) return true;
    if ((spins & 255u) == 0 && now_ns() - start > kSignalTimeoutNs) return false;
  }
}

// Two blocks (dynamic shared memory keeps them on different SMs): block 0 stores j into `ping`,
// block 1 waits for it and stores j into `pong`, block 0 waits for that; `chain` round trips.
// out[0]: block 0's ns; out[2]: 1 when a wait gave up; out[3], out[4]: the blocks' SMs plus 1.
template <int V>
__global__ void signal_kernel(uint64_t* flags, int chain, uint64_t* out) {
  if (threadIdx.x != 0) return;
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  out[3 + blockIdx.x] = sm + 1;
  uint64_t* ping = flags;
  uint64_t* pong = flags + kStride;
  const uint64_t start = now_ns();
  for (uint64_t j = 1; j <= static_cast<uint64_t>(chain); ++j) {
    if (blockIdx.x == 0) {
      put<V>(ping, j);
      if (!await<V>(pong, j, start)) {
        out[2] = 1;
        return;
      }
    } else {
      if (!await<V>(ping, j, start)) {
        out[2] = 1;
        return;
      }
      put<V>(pong, j);
    }
  }
  if (blockIdx.x == 0) {
    out[0] = now_ns() - start;
    out[1] = 0;
  }
}

// The smallest step of %globaltimer seen in 100000 reads (its resolution on this GPU).
__global__ void timer_step_kernel(uint64_t* out) {
  uint64_t best = ~0ull;
  uint64_t t = now_ns();
  for (int i = 0; i < 100000; ++i) {
    const uint64_t n = now_ns();
    if (n != t) best = n - t < best ? n - t : best;
    t = n;
  }
  out[0] = best;
}

// Straight-line code: kCodeOps dependent mad.lo.u32 (16 bytes of SASS each, 32 KiB), run twice
// by one thread in a loop that is not unrolled. out[0], out[1]: each pass's ns. Tag makes
// kernels of the same size with other code (a constant differs), run to push this one out.
constexpr int kCodeOps = 2048;
template <int Tag>
__global__ void code_kernel(const uint32_t* in, uint64_t* out) {
  uint32_t x = in[0];
  const uint32_t y = in[1], z = in[2] + Tag;
#pragma unroll 1
  for (int pass = 0; pass < 2; ++pass) {
    const uint64_t t0 = now_ns();
#pragma unroll
    for (int i = 0; i < kCodeOps; ++i) {
      asm volatile("mad.lo.u32 %0, %0, %1, %2;" : "+r"(x) : "r"(y), "r"(z));
    }
    if (x == 0x9e3779b9u) out[7] = 1;  // (the branch waits for the chain before the timer)
    if (blockIdx.x == 0 && threadIdx.x == 0) out[pass] = now_ns() - t0;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) out[2] = x;
}

// Kernel A of a boundary: lets B launch (with programmatic dependent launch), runs
// kBoundarySpinNs, stamps its end. B stamps its entry and, after griddepcontrol.wait (a no-op
// without the attribute), the moment it may read A's results.
__global__ void boundary_a_kernel(uint64_t* stamps) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const uint64_t t0 = now_ns();
  while (now_ns() - t0 < kBoundarySpinNs) {
  }
  stamps[0] = now_ns();
}
__global__ void boundary_b_kernel(uint64_t* stamps) {
  const uint64_t entry = now_ns();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  stamps[2] = now_ns();
  stamps[1] = entry;
}

// A kernel of a decode round's shape with no work: it waits for the kernel before it, lets the
// next one launch, and thread 0 of each block stores one word (through shared memory, so the
// launch's shared memory is used). shape_round (latency_floor.cu) times 5 of them a round.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) shape_kernel(uint64_t* sink, uint64_t v) {
  extern __shared__ uint64_t shape_smem[];
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (threadIdx.x == 0) {
    shape_smem[0] = v;
    sink[(blockIdx.x % 64) * kStride] = shape_smem[0] + blockIdx.x;
  }
}

}  // namespace moe_ep_latency_floor
