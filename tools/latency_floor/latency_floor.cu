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
#include "latency_floor/kernels.cuh"

namespace moe_ep_latency_floor {
namespace {

using moe_ep_tool::BadArgument;
using moe_ep_tool::CudaFailure;
using moe_ep_tool::parse_one;

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

// A decode round's kernels at world size 1, empty (shape_kernel), in the library's shapes before
// v56 (its data blocks are 256 threads since): the dispatch's step kernel (one block of 1024
// threads with the ranks' 32 KiB of shared memory), its send and its expand (`grid` blocks of 512
// threads each), the combine's step kernel (one block of 64 threads) and the
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
}  // namespace moe_ep_latency_floor

int main(int argc, char** argv) {
  return moe_ep_tool::tool_main("moe-ep-latency-floor",
                                [&] { return moe_ep_latency_floor::run(argc, argv); });
}
