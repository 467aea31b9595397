// moe-ep-link-floor: the bandwidth floor between two GPUs, one way and both ways at once, for
// the three ways a kernel or the driver can move bytes to a peer (docs/perf-notes.md, "Floors"):
//   copy   the copy engine (cudaMemcpyPeerAsync); no SMs
//   st16   a kernel that loads 16-byte vectors from local memory and stores them into the peer's
//          memory through the NVLink mapping (what the data kernels do), 2 blocks of 512 threads
//          per SM of budget, each lane with 4 vectors in flight
//   bulk   a kernel whose lane 0 of each block drives the bulk copy engine (cp.async.bulk):
//          local memory -> shared memory -> peer memory in 4 stages of 32 KiB, 1 block per SM
// Both ways at once, GPU a sends to b while b sends to a, each on its own stream, and the figure
// is the bytes of one direction over the slower GPU's time. With one GPU (--gpus A) the same
// three methods copy inside its memory (source and destination both local; `copy` is a device to
// device cudaMemcpyAsync): the floor of a world-size-1 leg at each SM budget, where every byte is
// read once and written once. Each measurement is the median of
// --reps timed repetitions after one warm-up, CUDA events on each sending GPU's stream.
// Usage: moe-ep-link-floor [--gpus A,B | --gpus A] [--mib N] [--reps N] [--sms LIST]
// Exit 0 on success, 1 when a CUDA call fails, 2 for a bad argument (one stderr line).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda_tool.h"

namespace {

using moe_ep_tool::BadArgument;
using moe_ep_tool::CudaFailure;
using moe_ep_tool::parse_list;
using moe_ep_tool::parse_one;

constexpr int kStoreThreads = 512;
constexpr int kBulkStages = 4;
constexpr int kBulkChunk = 32 << 10;  // bytes per stage

// Each lane copies 4 vectors per step: 4 loads issued before the 4 stores.
__global__ void __launch_bounds__(kStoreThreads, 2)
    store16_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    int4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = __ldg(src + i + k * stride);
#pragma unroll
    for (int k = 0; k < 4; ++k) dst[i + k * stride] = v[k];
  }
  for (; i < n; i += stride) dst[i] = __ldg(src + i);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Chunks i = blockIdx.x, blockIdx.x + gridDim.x, ...: the k-th chunk of a block goes through
// stage k % S (mbarrier k % S): loaded from local memory, then stored to the peer as its own bulk
// group. Once chunk k's store is issued, the stage of chunk k-1 is refilled with chunk k-1+S as
// soon as its store has finished reading shared memory (wait_group.read 1 leaves the newest
// store in flight), so S-1 loads and the stores overlap.
__global__ void bulk_kernel(const char* __restrict__ src, char* __restrict__ dst, size_t chunks) {
  extern __shared__ __align__(128) char stage[];
  __shared__ __align__(8) uint64_t bar[kBulkStages];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < kBulkStages; ++s) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])));
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  uint32_t phase[kBulkStages] = {};
  auto load = [&](size_t chunk, int s) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&bar[s])),
                 "r"(kBulkChunk)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(smem_addr(stage + s * kBulkChunk)),
        "l"(src + chunk * kBulkChunk), "r"(kBulkChunk), "r"(smem_addr(&bar[s]))
        : "memory");
  };
  size_t next = blockIdx.x;
  for (int s = 0; s < kBulkStages && next < chunks; ++s, next += gridDim.x) load(next, s);
  int s = 0;
  int prev = -1;
  for (size_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, "
          "0, p; }"
          : "=r"(done)
          : "r"(smem_addr(&bar[s])), "r"(phase[s])
          : "memory");
    }
    phase[s] ^= 1;
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                     dst + chunk * kBulkChunk),
                 "r"(smem_addr(stage + s * kBulkChunk)), "r"(kBulkChunk)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (prev >= 0 && next < chunks) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(next, prev);
      next += gridDim.x;
    }
    prev = s;
    s = (s + 1) % kBulkStages;
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

struct Side {
  int device = 0;
  int peer = 0;
  void* src = nullptr;  // on `device`
  void* dst = nullptr;  // on `peer`, written by `device`
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
};

enum class Method { kCopy, kStore16, kBulk };
const char* name(Method m) {
  switch (m) {
    case Method::kCopy: return "copy";
    case Method::kStore16: return "st16";
    case Method::kBulk: return "bulk";
  }
  return "?";
}

void launch(Method m, Side& s, size_t bytes, int sms) {
  CK(cudaSetDevice(s.device));
  CK(cudaEventRecord(s.start, s.stream));
  switch (m) {
    case Method::kCopy:
      if (s.peer == s.device) {
        CK(cudaMemcpyAsync(s.dst, s.src, bytes, cudaMemcpyDeviceToDevice, s.stream));
      } else {
        CK(cudaMemcpyPeerAsync(s.dst, s.peer, s.src, s.device, bytes, s.stream));
      }
      break;
    case Method::kStore16:
      store16_kernel<<<2 * sms, kStoreThreads, 0, s.stream>>>(
          static_cast<const int4*>(s.src), static_cast<int4*>(s.dst), bytes / sizeof(int4));
      break;
    case Method::kBulk:
      bulk_kernel<<<sms, 32, kBulkStages * kBulkChunk, s.stream>>>(
          static_cast<const char*>(s.src), static_cast<char*>(s.dst), bytes / kBulkChunk);
      break;
  }
  CK(cudaGetLastError());
  CK(cudaEventRecord(s.stop, s.stream));
}

float elapsed_ms(Side& s) {
  CK(cudaSetDevice(s.device));
  CK(cudaEventSynchronize(s.stop));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, s.start, s.stop));
  return ms;
}

// GB/s (1e9 bytes/s) per direction: the median over reps of bytes / (slowest sender's time).
double measure(Method m, std::vector<Side*> senders, size_t bytes, int sms, int reps) {
  std::vector<double> ms;
  for (int r = 0; r <= reps; ++r) {
    for (Side* s : senders) launch(m, *s, bytes, sms);
    double slowest = 0;
    for (Side* s : senders) slowest = std::max(slowest, static_cast<double>(elapsed_ms(*s)));
    if (r > 0) ms.push_back(slowest);  // the first one warms up
  }
  std::sort(ms.begin(), ms.end());
  return static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

int run(int argc, char** argv) {
  std::vector<int> gpus = {0, 1};
  int mib = 256;
  int reps = 5;
  std::vector<int> sms_list = {8, 16, 24, 32, 64, 132};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "usage: moe-ep-link-floor [--gpus A,B | --gpus A] [--mib N] [--reps N] [--sms LIST]\n");
      return 0;
    }
    if (i + 1 >= argc) throw BadArgument(flag + ": needs a value");
    const std::string value = argv[++i];
    if (flag == "--gpus") {
      gpus = parse_list(flag, value, 0, 1023);
      if (gpus.size() > 2 || (gpus.size() == 2 && gpus[0] == gpus[1])) {
        throw BadArgument("--gpus=" + value +
                          ": needs two different devices (e.g. 0,1), or one for copies inside it");
      }
    } else if (flag == "--mib") {
      mib = parse_one(flag, value, 1, 16384);
    } else if (flag == "--reps") {
      reps = parse_one(flag, value, 1, 1000);
    } else if (flag == "--sms") {
      sms_list = parse_list(flag, value, 1, 1024);
    } else {
      throw BadArgument(flag + ": unknown option (--gpus, --mib, --reps, --sms)");
    }
  }
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  for (int g : gpus) {
    if (g >= count) {
      throw BadArgument("--gpus: device " + std::to_string(g) + " exceeds the " +
                        std::to_string(count) + " visible CUDA devices");
    }
  }
  int device_sms = 0;
  CK(cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, gpus[0]));
  for (int s : sms_list) {
    if (s > device_sms) {
      throw BadArgument("--sms: " + std::to_string(s) + " exceeds the device's " +
                        std::to_string(device_sms) + " SMs");
    }
  }
  // Whole bulk chunks, so that every method moves the same bytes.
  const size_t bytes = (static_cast<size_t>(mib) << 20) / kBulkChunk * kBulkChunk;

  const bool local = gpus.size() == 1;
  std::vector<Side> sides(local ? 1 : 2);
  for (size_t k = 0; k < sides.size(); ++k) {
    sides[k].device = gpus[k];
    sides[k].peer = local ? gpus[0] : gpus[1 - k];
  }
  for (Side& s : sides) {
    CK(cudaSetDevice(s.device));
    if (!local) {
      int can = 0;
      CK(cudaDeviceCanAccessPeer(&can, s.device, s.peer));
      if (!can) {
        throw CudaFailure("GPU " + std::to_string(s.device) + " cannot access GPU " +
                          std::to_string(s.peer) + " directly (no peer access)");
      }
      const cudaError_t peer = cudaDeviceEnablePeerAccess(s.peer, 0);
      if (peer != cudaErrorPeerAccessAlreadyEnabled) CK(peer);
      cudaGetLastError();
    }
    CK(cudaMalloc(&s.src, bytes));
    CK(cudaMemset(s.src, 0x5a, bytes));
    CK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&s.start));
    CK(cudaEventCreate(&s.stop));
    CK(cudaFuncSetAttribute(bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            kBulkStages * kBulkChunk));
  }
  for (Side& s : sides) {
    CK(cudaSetDevice(s.peer));
    CK(cudaMalloc(&s.dst, bytes));
  }
  for (Side& s : sides) {
    CK(cudaSetDevice(s.device));
    CK(cudaDeviceSynchronize());
  }

  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, gpus[0]));
  if (local) {
    std::printf(
        "# moe-ep-link-floor: inside GPU %d (%s, %d SMs), %.1f MiB copied, median of %d reps; "
        "GB/s = 1e9 bytes copied/s (each read once and written once: twice that in HBM "
        "traffic)\n",
        gpus[0], prop.name, device_sms, bytes / 1048576.0, reps);
    std::printf("%-6s %5s %12s\n", "method", "sms", "copied");
  } else {
    std::printf(
        "# moe-ep-link-floor: GPU %d <-> GPU %d (%s, %d SMs), %.1f MiB per direction, "
        "median of %d reps; GB/s = 1e9 bytes/s per direction\n",
        gpus[0], gpus[1], prop.name, device_sms, bytes / 1048576.0, reps);
    std::printf("%-6s %5s %12s %12s %12s\n", "method", "sms", "one_way", "both_ways", "both/one");
  }
  Side* a = &sides[0];
  Side* b = local ? nullptr : &sides[1];
  auto row = [&](Method m, int sms) {
    const double one = measure(m, {a}, bytes, sms, reps);
    if (local) {
      if (m == Method::kCopy) {
        std::printf("%-6s %5s %12.1f\n", name(m), "-", one);
      } else {
        std::printf("%-6s %5d %12.1f\n", name(m), sms, one);
      }
      std::fflush(stdout);
      return;
    }
    const double both = measure(m, {a, b}, bytes, sms, reps);
    if (m == Method::kCopy) {
      std::printf("%-6s %5s %12.1f %12.1f %12.3f\n", name(m), "-", one, both, both / one);
    } else {
      std::printf("%-6s %5d %12.1f %12.1f %12.3f\n", name(m), sms, one, both, both / one);
    }
    std::fflush(stdout);
  };
  row(Method::kCopy, 0);
  for (Method m : {Method::kStore16, Method::kBulk}) {
    for (int sms : sms_list) row(m, sms);
  }
  // A check that the kernels moved the bytes: the last copy into each peer buffer holds 0x5a.
  for (Side& s : sides) {
    std::vector<unsigned char> host(1 << 20);
    CK(cudaSetDevice(s.peer));
    CK(cudaMemcpy(host.data(), static_cast<char*>(s.dst) + bytes - host.size(), host.size(),
                  cudaMemcpyDeviceToHost));
    for (unsigned char c : host) {
      if (c != 0x5a) throw CudaFailure("the peer buffer's tail was not written");
    }
  }
  for (Side& s : sides) {
    cudaSetDevice(s.device);
    cudaFree(s.src);
    cudaStreamDestroy(s.stream);
    cudaEventDestroy(s.start);
    cudaEventDestroy(s.stop);
    cudaSetDevice(s.peer);
    cudaFree(s.dst);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return moe_ep_tool::tool_main("moe-ep-link-floor", [&] { return run(argc, argv); });
}
