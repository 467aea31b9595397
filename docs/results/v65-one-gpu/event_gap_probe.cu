// v65 probe (not part of the library): the GPU's gap between two kernels on one stream with event
// records and a stream wait between them, as a normal call's end (`call_done_`, timing disabled),
// the bench's stop and start events (timing) and the next call's wait for `call_done_` put there.
// Each sample: a 30 us spin kernel first (the host queues the rest while it runs), then kernel A
// (stores %globaltimer as it ends), the case's work, kernel B (stores %globaltimer as it starts;
// launched with the programmatic-serialization attribute in the cases marked PDL, as the library
// launches). Prints the median of B's start minus A's end over 100 samples a case.
//   nvcc -std=c++17 -arch=sm_90 -O2 event_gap_probe.cu -o event_gap_probe && ./event_gap_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__global__ void spin_kernel(uint64_t ns) {
  const uint64_t start = now_ns();
  while (now_ns() - start < ns) {
  }
}
__global__ void a_kernel(uint64_t* t) {
  if (threadIdx.x == 0) t[0] = now_ns();
}
__global__ void b_kernel(uint64_t* t) {
  if (threadIdx.x == 0) t[1] = now_ns();
}

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t err = (x);                                                            \
    if (err != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err)); \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

struct Case {
  const char* name;
  int untimed;  // cudaEventDisableTiming records
  int timed;    // timing records
  bool wait;    // cudaStreamWaitEvent of the untimed event, same stream
  bool pdl;     // B with the programmatic-serialization attribute
};

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t untimed, timed[2];
  CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  for (cudaEvent_t& ev : timed) CHECK(cudaEventCreate(&ev));
  uint64_t* t = nullptr;
  CHECK(cudaMalloc(&t, 2 * sizeof(uint64_t)));
  const Case cases[] = {
      {"nothing", 0, 0, false, false},
      {"nothing, B PDL", 0, 0, false, true},
      {"1 untimed record", 1, 0, false, false},
      {"1 timed record", 0, 1, false, false},
      {"1 untimed + wait, B PDL", 1, 0, true, true},
      {"1 untimed + 2 timed + wait, B PDL (the bench)", 1, 2, true, true},
      {"2 timed, B PDL (the bench's timers alone)", 0, 2, false, true},
  };
  for (const Case& c : cases) {
    std::vector<double> gaps;
    for (int i = 0; i < 110; ++i) {
      spin_kernel<<<1, 32, 0, s>>>(30000);
      a_kernel<<<1, 32, 0, s>>>(t);
      if (c.untimed > 0) CHECK(cudaEventRecord(untimed, s));
      for (int k = 0; k < c.timed; ++k) CHECK(cudaEventRecord(timed[k], s));
      if (c.wait) CHECK(cudaStreamWaitEvent(s, untimed, 0));
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(1);
      cfg.blockDim = dim3(32);
      cfg.stream = s;
      cudaLaunchAttribute a{};
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
      if (c.pdl) {
        cfg.attrs = &a;
        cfg.numAttrs = 1;
      }
      CHECK(cudaLaunchKernelEx(&cfg, b_kernel, t));
      uint64_t h[2];
      CHECK(cudaMemcpyAsync(h, t, sizeof(h), cudaMemcpyDeviceToHost, s));
      CHECK(cudaStreamSynchronize(s));
      if (i >= 10) gaps.push_back(static_cast<double>(h[1] - h[0]) / 1000.0);
    }
    std::sort(gaps.begin(), gaps.end());
    std::printf("%-50s median %.2f us (p10 %.2f, p90 %.2f)\n", c.name, gaps[gaps.size() / 2],
                gaps[gaps.size() / 10], gaps[gaps.size() * 9 / 10]);
  }
  return 0;
}
