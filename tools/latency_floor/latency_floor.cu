// moe-ep-latency-floor: what the steps a decode call is chained from cost on one GPU, in ns
// (docs/perf-notes.md, "Floors"). A decode leg at world size 1 is a chain of kernels whose
// threads wait on loads, fences, barriers, flags and kernel boundaries one after another; this
// tool times each kind alone, so that a leg's time can be counted from its steps:
//   loads      one thread chases 64 slots 256 bytes apart, each load's address the previous
//              load's value (an L1 hit, an L2 hit, volatile, relaxed and acquire at system
//              scope, and volatile from mapped host memory), and atomicAdd the same way; then
//              L2 hits with every slot in a 2 MiB page of its own (64 pages, then 4096)
//   stores     one thread stores a word, then a fence of each kind, or a release store, or a
//              release or relaxed red.add at system scope: the cost of each, the fence included
//   block      a block of 1024 threads: a barrier; the end of a block whose threads each store
//              and fence at system scope before the barrier and a red.add (count_block_done
//              before v45), and one whose thread 0 releases after the barrier (since v45)
//   signal     two blocks on two SMs pass a word back and forth (release/acquire at system
//              scope, relaxed at system scope): one way is half a round trip
//   code       one thread runs 32 KiB of straight-line code twice in a loop: the first pass
//              after other kernels' code ran on every SM (its instructions come from L2), the
//              second pass (from the SM's instruction caches), and the first pass of a launch
//              right after another launch of the same kernel
//   boundary   kernel A's last timer read to kernel B's first after it may read A's results:
//              stream order, programmatic dependent launch (B waits in griddepcontrol.wait), and
//              both inside a CUDA graph
//   round      a decode round's five kernels at world size 1 with their grids and block sizes but
//              no work, 16 rounds in one graph timed by events: what the kernels cost as such
// Each figure is the median (and the range) over --reps timed repetitions after one warm-up,
// %globaltimer read inside the kernels; the per-operation rows divide a chain of --chain
// operations. The tool checks what it measures: a chase must end on the slot it predicts, the two
// signalling blocks on different SMs within a second, else exit 1.
// Usage: moe-ep-latency-floor [--gpu N] [--reps N] [--chain N]
// Exit 0 on success, 1 when a CUDA call or a check fails, 2 for a bad argument (one stderr line).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cuda_tool.h"

namespace {

using moe_ep_tool::BadArgument;
using moe_ep_tool::CudaFailure;
using moe_ep_tool::parse_one;

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
// launch's shared memory is used). shape_round times 5 of them a round (decode_round_shapes).
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

struct Figure {
  double median, lo, hi;
};
Figure summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

struct Bench {
  int reps = 9;
  int chain = 256;
  cudaStream_t stream = nullptr;
  uint64_t* out = nullptr;         // device, 8 words
  uint64_t* slots = nullptr;       // device, the chase
  uint64_t* host_slots = nullptr;  // mapped host memory, the same chase (device address)
  uint64_t* scratch = nullptr;     // device, stores and counters

  std::vector<uint64_t> result() {
    std::vector<uint64_t> h(8);
    CK(cudaStreamSynchronize(stream));
    CK(cudaMemcpy(h.data(), out, 8 * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    return h;
  }

  // ns per operation over `ops` operations a launch; `launch` enqueues one timed launch.
  template <typename Launch>
  Figure per_op(const char* what, int ops, uint64_t expect_last, bool check_last, Launch launch) {
    std::vector<double> ns;
    for (int r = 0; r <= reps; ++r) {
      CK(cudaMemsetAsync(out, 0, 8 * sizeof(uint64_t), stream));
      launch();
      CK(cudaGetLastError());
      const std::vector<uint64_t> h = result();
      if (h[2] != 0) throw CudaFailure(std::string(what) + ": a wait gave up after 1 s");
      if (check_last && h[1] != expect_last) {
        throw CudaFailure(std::string(what) + ": the chase ended on slot " + std::to_string(h[1]) +
                          ", not " + std::to_string(expect_last));
      }
      if (h[3] != 0 && h[3] == h[4]) {
        throw CudaFailure(std::string(what) + ": both blocks ran on SM " +
                          std::to_string(h[3] - 1));
      }
      if (r > 0) ns.push_back(static_cast<double>(h[0]) / ops);  // the first one warms up
    }
    return summarize(ns);
  }
};

void row(const char* what, const Figure& f) {
  std::printf("%-66s %8.0f %8.0f %8.0f\n", what, f.median, f.lo, f.hi);
  std::fflush(stdout);
}

// The code rows: the first and second pass of code_kernel<0> after code_kernel<1..4> ran on every
// SM (`after_other`), or right after another launch of code_kernel<0>. ns, over reps.
std::pair<Figure, Figure> code_passes(Bench& b, bool after_other, int sms) {
  uint32_t* in = reinterpret_cast<uint32_t*>(b.scratch);
  std::vector<double> first, second;
  for (int r = 0; r <= b.reps; ++r) {
    CK(cudaMemsetAsync(in, 0, 4 * sizeof(uint32_t), b.stream));
    if (after_other) {
      code_kernel<1><<<sms, 32, 0, b.stream>>>(in, b.scratch + 64);
      code_kernel<2><<<sms, 32, 0, b.stream>>>(in, b.scratch + 64);
      code_kernel<3><<<sms, 32, 0, b.stream>>>(in, b.scratch + 64);
      code_kernel<4><<<sms, 32, 0, b.stream>>>(in, b.scratch + 64);
    } else {
      code_kernel<0><<<1, 1, 0, b.stream>>>(in, b.scratch + 64);
    }
    code_kernel<0><<<1, 1, 0, b.stream>>>(in, b.out);
    CK(cudaGetLastError());
    const std::vector<uint64_t> h = b.result();
    if (r > 0) {
      first.push_back(static_cast<double>(h[0]));
      second.push_back(static_cast<double>(h[1]));
    }
  }
  return {summarize(first), summarize(second)};
}

// Launches kernel(args...) on `stream`, with programmatic dependent launch when `pdl` (the next
// kernel may then begin before this one ends; it waits in griddepcontrol.wait).
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), int blocks, int threads, int smem, cudaStream_t stream,
            bool pdl, Args... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned int>(blocks));
  cfg.blockDim = dim3(static_cast<unsigned int>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// A's end to B's results-readable moment, ns, over reps: in a stream or a captured graph, with
// or without programmatic dependent launch.
Figure boundary(Bench& b, bool pdl, bool graph) {
  uint64_t* stamps = b.scratch;
  const auto enqueue = [&] {
    boundary_a_kernel<<<1, 32, 0, b.stream>>>(stamps);
    CK(cudaGetLastError());
    launch(boundary_b_kernel, 1, 32, 0, b.stream, pdl, stamps);
  };
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    CK(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal));
    enqueue();
    CK(cudaStreamEndCapture(b.stream, &g));
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaGraphDestroy(g));
  }
  std::vector<double> ns;
  for (int r = 0; r <= b.reps; ++r) {
    if (graph) {
      CK(cudaGraphLaunch(exec, b.stream));
    } else {
      enqueue();
    }
    uint64_t h[3];
    CK(cudaStreamSynchronize(b.stream));
    CK(cudaMemcpy(h, stamps, sizeof(h), cudaMemcpyDeviceToHost));
    if (r > 0) ns.push_back(static_cast<double>(static_cast<int64_t>(h[2] - h[0])));
  }
  if (exec != nullptr) CK(cudaGraphExecDestroy(exec));
  return summarize(ns);
}

// A decode round's kernels at world size 1, empty (shape_kernel): the dispatch's step kernel (one
// block of 1024 threads with the ranks' 32 KiB of shared memory), its send and its expand (`grid`
// blocks of 512 threads each), the combine's step kernel (one block of 64 threads) and the
// combine (`grid` x 512); kRounds rounds in one CUDA graph, with or without programmatic launch,
// timed by events around each replay. ns a round, over reps.
constexpr int kRounds = 16;
constexpr int kRanksSmem = 32 * 1024;
Figure shape_round(Bench& b, int grid, bool pdl) {
  struct Shape {
    int blocks, threads, smem;
  };
  const Shape shapes[] = {
      {1, 1024, kRanksSmem}, {grid, 512, 0}, {grid, 512, 0}, {1, 64, 0}, {grid, 512, 0}};
  CK(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal));
  for (int r = 0; r < kRounds; ++r) {
    for (const Shape& k : shapes) {
      const int smem = k.smem > 0 ? k.smem : 8;
      const auto v = static_cast<uint64_t>(r);
      if (k.threads == 1024) {
        launch(shape_kernel<1024>, k.blocks, k.threads, smem, b.stream, pdl, b.scratch, v);
      } else if (k.threads == 512) {
        launch(shape_kernel<512>, k.blocks, k.threads, smem, b.stream, pdl, b.scratch, v);
      } else {
        launch(shape_kernel<64>, k.blocks, k.threads, smem, b.stream, pdl, b.scratch, v);
      }
    }
  }
  cudaGraph_t g = nullptr;
  CK(cudaStreamEndCapture(b.stream, &g));
  cudaGraphExec_t exec = nullptr;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphDestroy(g));
  cudaEvent_t start = nullptr, stop = nullptr;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  std::vector<double> ns;
  for (int r = 0; r <= b.reps; ++r) {
    CK(cudaEventRecord(start, b.stream));
    CK(cudaGraphLaunch(exec, b.stream));
    CK(cudaEventRecord(stop, b.stream));
    CK(cudaEventSynchronize(stop));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0) ns.push_back(static_cast<double>(ms) * 1e6 / kRounds);
  }
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  CK(cudaGraphExecDestroy(exec));
  return summarize(ns);
}

int run(int argc, char** argv) {
  int gpu = 0;
  Bench b;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("usage: moe-ep-latency-floor [--gpu N] [--reps N] [--chain N]\n");
      return 0;
    }
    if (i + 1 >= argc) throw BadArgument(flag + ": needs a value");
    const std::string value = argv[++i];
    if (flag == "--gpu") {
      gpu = parse_one(flag, value, 0, 1023);
    } else if (flag == "--reps") {
      b.reps = parse_one(flag, value, 1, 1000);
    } else if (flag == "--chain") {
      b.chain = parse_one(flag, value, 16, 65536);
    } else {
      throw BadArgument(flag + ": unknown option (--gpu, --reps, --chain)");
    }
  }
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  if (gpu >= count) {
    throw BadArgument("--gpu=" + std::to_string(gpu) + ": exceeds the " + std::to_string(count) +
                      " visible CUDA devices");
  }
  CK(cudaSetDevice(gpu));
  CK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  std::vector<uint64_t> chase(static_cast<size_t>(kSlots) * kStride, 0);
  for (int i = 0; i < kSlots; ++i) chase[static_cast<size_t>(i) * kStride] = (i + kStep) % kSlots;
  const size_t chase_bytes = chase.size() * sizeof(uint64_t);
  CK(cudaMalloc(&b.out, 8 * sizeof(uint64_t)));
  CK(cudaMalloc(&b.slots, chase_bytes));
  CK(cudaMemcpy(b.slots, chase.data(), chase_bytes, cudaMemcpyHostToDevice));
  uint64_t* host = nullptr;
  CK(cudaHostAlloc(&host, chase_bytes, cudaHostAllocMapped));
  std::copy(chase.begin(), chase.end(), host);
  CK(cudaHostGetDevicePointer(&b.host_slots, host, 0));
  const size_t scratch_words = static_cast<size_t>(kBlockThreads) * 8 + 8;
  CK(cudaMalloc(&b.scratch, scratch_words * sizeof(uint64_t)));
  CK(cudaMemset(b.scratch, 0, scratch_words * sizeof(uint64_t)));
  int signal_smem = 0;
  CK(cudaDeviceGetAttribute(&signal_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, gpu));
  signal_smem = signal_smem / 2 + 1024;  // more than half an SM's: one such block an SM
  CK(cudaFuncSetAttribute(signal_kernel<kReleaseAcquire>,
                          cudaFuncAttributeMaxDynamicSharedMemorySize, signal_smem));
  CK(cudaFuncSetAttribute(signal_kernel<kRelaxed>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          signal_smem));

  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, gpu));
  int clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, gpu));
  timer_step_kernel<<<1, 1, 0, b.stream>>>(b.out);
  CK(cudaGetLastError());
  const uint64_t timer_step = b.result()[0];
  const int chain = b.chain;
  std::printf(
      "# moe-ep-latency-floor: GPU %d (%s, %d SMs, SM clock up to %d MHz), chains of %d, median "
      "of %d reps (min, max), ns; %%globaltimer steps by %llu ns\n",
      gpu, prop.name, prop.multiProcessorCount, clock_khz / 1000, chain, b.reps,
      static_cast<unsigned long long>(timer_step));
  std::printf("%-66s %8s %8s %8s\n", "step", "median", "min", "max");
  const auto chase_row = [&](const char* what, auto kernel, uint64_t* slots, int n) {
    row(what, b.per_op(what, n, (kStep * static_cast<uint64_t>(n)) % kSlots, true, [&] {
      kernel<<<1, 1, 0, b.stream>>>(slots, n, b.out, uint64_t{kSlots}, uint64_t{kStride});
    }));
  };
  chase_row("load, L1 hit (ld.global.ca)", chase_kernel<kL1>, b.slots, chain);
  chase_row("load, L2 hit (ld.global.cg)", chase_kernel<kL2>, b.slots, chain);
  chase_row("load, volatile (ld.volatile.global)", chase_kernel<kVolatile>, b.slots, chain);
  chase_row("load, relaxed at system scope (ld.relaxed.sys)", chase_kernel<kRelaxedSys>, b.slots,
            chain);
  chase_row("load, acquire at system scope (ld.acquire.sys)", chase_kernel<kAcquireSys>, b.slots,
            chain);
  chase_row("atomicAdd, its value used (atom.add, relaxed, gpu scope)", chase_kernel<kAtomic>,
            b.slots, chain);
  chase_row("load, volatile, from mapped host memory (a chain of chain/16)",
            chase_kernel<kVolatile>, b.host_slots, std::max(chain / 16, 4));
  // The same L2-hit chase with each slot in a page of its own (2 MiB apart, cudaMalloc's large
  // pages): a load that also misses the SM's address translation cache, and with 4096 pages (8
  // GiB) more pages than the translation caches may hold. The decode kernels' words (state,
  // flags, counts, metadata, rows) lie in different regions of a large buffer.
  for (const uint64_t pages : {uint64_t{64}, uint64_t{4096}}) {
    constexpr uint64_t kPageWords = (uint64_t{2} << 20) / sizeof(uint64_t);
    uint64_t* far = nullptr;
    if (cudaMalloc(&far, pages * kPageWords * sizeof(uint64_t)) != cudaSuccess) {
      (void)cudaGetLastError();
      std::printf("(no room for %llu pages of 2 MiB: row skipped)\n",
                  static_cast<unsigned long long>(pages));
      continue;
    }
    page_chase_init_kernel<<<64, 256, 0, b.stream>>>(far, pages, kPageWords);
    CK(cudaGetLastError());
    const std::string what =
        "load, L2 hit, each slot in another 2 MiB page (" + std::to_string(pages) + " pages)";
    row(what.c_str(),
        b.per_op(what.c_str(), chain, (kStep * static_cast<uint64_t>(chain)) % pages, true, [&] {
          chase_kernel<kL2><<<1, 1, 0, b.stream>>>(far, chain, b.out, pages, kPageWords);
        }));
    CK(cudaStreamSynchronize(b.stream));
    CK(cudaFree(far));
  }
  const auto sync_row = [&](const char* what, auto kernel) {
    row(what, b.per_op(what, chain, 0, false,
                       [&] { kernel<<<1, 1, 0, b.stream>>>(b.scratch, chain, b.out); }));
  };
  sync_row("store + fence.sc.sys (__threadfence_system)", store_sync_kernel<kFenceScSys>);
  sync_row("store + fence.acq_rel.sys", store_sync_kernel<kFenceAcqRelSys>);
  sync_row("store + fence.sc.gpu (__threadfence)", store_sync_kernel<kFenceScGpu>);
  sync_row("store + fence.acq_rel.gpu", store_sync_kernel<kFenceAcqRelGpu>);
  sync_row("st.release.sys", store_sync_kernel<kStoreRelease>);
  sync_row("store + red.release.sys.add", store_sync_kernel<kRedRelease>);
  sync_row("store + red.relaxed.sys.add", store_sync_kernel<kRedRelaxed>);
  const auto block_row = [&](const char* what, auto kernel) {
    row(what, b.per_op(what, chain, 0, false, [&] {
      kernel<<<1, kBlockThreads, 0, b.stream>>>(b.scratch, chain, b.out);
    }));
  };
  block_row("barrier, 1024 threads (bar.sync)", block_end_kernel<kBarrier>);
  block_row("block end, 1024 threads: store + fence.sc.sys each, barrier, red",
            block_end_kernel<kEveryThreadFences>);
  block_row("block end, 1024 threads: store each, barrier, red.release.sys",
            block_end_kernel<kReleaseAfterBarrier>);
  const auto signal_row = [&](const char* what, auto kernel) {
    // One way: half of each round trip.
    row(what, b.per_op(what, 2 * chain, 0, false, [&] {
      CK(cudaMemsetAsync(b.scratch, 0, 2 * kStride * sizeof(uint64_t), b.stream));
      kernel<<<2, 32, signal_smem, b.stream>>>(b.scratch, chain, b.out);
    }));
  };
  signal_row("signal to another SM, one way (st.release.sys / ld.acquire.sys)",
             signal_kernel<kReleaseAcquire>);
  signal_row("signal to another SM, one way (st.relaxed.sys / ld.relaxed.sys)",
             signal_kernel<kRelaxed>);
  const auto cold = code_passes(b, true, prop.multiProcessorCount);
  const auto again = code_passes(b, false, prop.multiProcessorCount);
  row("32 KiB of straight-line code, first pass after other code ran (whole pass)", cold.first);
  row("32 KiB of straight-line code, second pass (whole pass)", cold.second);
  row("32 KiB of straight-line code, first pass right after a launch of it", again.first);
  row("kernel boundary, stream order (A's end to B's first read)", boundary(b, false, false));
  row("kernel boundary, programmatic launch (A's end to B's wait return)",
      boundary(b, true, false));
  row("kernel boundary in a CUDA graph", boundary(b, false, true));
  row("kernel boundary in a CUDA graph, programmatic launch", boundary(b, true, true));
  CK(cudaFuncSetAttribute(shape_kernel<1024>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          kRanksSmem));
  for (const int grid : {1, 32, 132, 264}) {
    for (const bool pdl : {true, false}) {
      const std::string what = "decode round of 5 empty kernels, grids of " + std::to_string(grid) +
                               " x 512, graph" + (pdl ? ", programmatic launch" : "") +
                               " (a round)";
      row(what.c_str(), shape_round(b, grid, pdl));
    }
  }
  CK(cudaFreeHost(host));
  CK(cudaFree(b.scratch));
  CK(cudaFree(b.slots));
  CK(cudaFree(b.out));
  CK(cudaStreamDestroy(b.stream));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return moe_ep_tool::tool_main("moe-ep-latency-floor", [&] { return run(argc, argv); });
}
