// v42 probe (not part of the library): which streams share a hardware queue, and whether a
// kernel that lets the next one launch early (programmatic dependent launch) frees its queue.
// v42 run B: without programmatic dependent launch the one-GPU world's W = 8 processes failed
// 8 of 63 times (a rank's first kernel began only when the others had timed out), with it 0 of
// 63. If two ranks' streams shared a queue, a rank's kernel queued behind another rank's waiting
// kernel would wait for it, and early launches would let the queue move on. Three questions:
//   1. streams made one after another with CUDA_DEVICE_MAX_CONNECTIONS=32: which share a queue
//      (a spinning kernel on stream j; does a small kernel on stream k run meanwhile)?
//   2. does a stream made after others were destroyed take the next queue in turn?
//   3. on two streams that share a queue, does the small kernel run while the spinner spins
//      (a) with nothing after the spinner, (b) with a kernel after it launched with the
//      programmatic attribute, the spinner letting it launch at once, (c) the same kernel after
//      it without the attribute?
//   4. with B streams busy at once (each a spinner and a plain follower, which holds its queue),
//      does a small kernel on one more stream run? (The driver may bind streams to queues as they
//      get work, so pairs alone, as in 1, may never meet on one queue.) PROBE_BUSY_ONLY=1 runs 4
//      alone.
//   5. (prepared after run C's probes, not run yet; PROBE_COPIES=1 runs 5 alone) copies: with B
//      streams each holding a copy behind a spinning kernel (1 MiB host-to-device from pinned memory,
//      or device-to-device), or a plain launch behind one, does a host-to-device copy on one
//      more stream finish? The one-GPU world's stall has a form where a rank's upload returns
//      only when its peers time out.
//   nvcc -O3 -arch=sm_90 -o queue_probe queue_probe.cu && ./queue_probe
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

__device__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until *release or limit_ns; *started = 1 once it runs.
__global__ void spin(volatile int* release, volatile int* started, uint64_t limit_ns, int trigger) {
  if (trigger) asm volatile("griddepcontrol.launch_dependents;");
  *started = 1;
  const uint64_t t0 = now_ns();
  while (*release == 0 && now_ns() - t0 < limit_ns) {
  }
}
__global__ void tiny(volatile int* done) { *done = 1; }
__global__ void follower() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

struct Mapped {
  int* h = nullptr;
  int* d = nullptr;
  Mapped() {
    CHECK(cudaHostAlloc(&h, 128 * sizeof(int), cudaHostAllocMapped));
    CHECK(cudaHostGetDevicePointer(&d, h, 0));
  }
  volatile int& release() { return h[0]; }
  volatile int& started() { return h[1]; }
  volatile int& done() { return h[2]; }
};

enum class After { kNothing, kPdl, kPlain };

// Whether a small kernel on `k` runs while a spinner on `j` spins (false: they share a queue).
bool runs_beside(Mapped& m, cudaStream_t j, cudaStream_t k, After after = After::kNothing) {
  m.release() = 0;
  m.started() = 0;
  m.done() = 0;
  spin<<<1, 32, 0, j>>>(m.d, m.d + 1, 200000000ull, after == After::kPdl);
  CHECK(cudaGetLastError());
  if (after != After::kNothing) {
    cudaLaunchConfig_t c{};
    c.gridDim = dim3(1);
    c.blockDim = dim3(32);
    c.stream = j;
    cudaLaunchAttribute a{};
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
    c.attrs = &a;
    c.numAttrs = after == After::kPdl ? 1 : 0;
    CHECK(cudaLaunchKernelEx(&c, follower));
  }
  while (m.started() == 0) {
  }
  tiny<<<1, 1, 0, k>>>(m.d + 2);
  CHECK(cudaGetLastError());
  bool ran = false;
  for (int i = 0; i < 2000 && !ran; ++i) {  // up to about 2 ms
    ran = m.done() != 0;
    if (!ran) std::this_thread::sleep_for(std::chrono::microseconds(1));
  }
  m.release() = 1;
  CHECK(cudaStreamSynchronize(j));
  CHECK(cudaStreamSynchronize(k));
  return ran;
}

int main() {
  // PROBE_CONNECTIONS: the queues asked for (default 32, the tests' setting); 1 is the control
  // in which every stream shares one queue.
  const char* want = std::getenv("PROBE_CONNECTIONS");
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", want != nullptr ? want : "32", 1);
  std::printf("CUDA_DEVICE_MAX_CONNECTIONS=%s\n", std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
  CHECK(cudaSetDevice(0));
  Mapped m;
  constexpr int kStreams = 40;
  std::vector<cudaStream_t> s(kStreams);
  for (auto& x : s) CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  // 4. B busy streams (s[0..B-1]), then a small kernel on s[B].
  if (std::getenv("PROBE_COPIES") != nullptr) {
    char* pinned = nullptr;
    char* device = nullptr;
    CHECK(cudaHostAlloc(&pinned, 64 << 20, cudaHostAllocDefault));
    CHECK(cudaMalloc(&device, 64 << 20));
    const char* what[3] = {"an H2D copy", "a D2D copy", "a plain launch"};
    for (int held = 0; held < 3; ++held) {
      for (int busy : {1, 2, 3, 4, 8, 16}) {
        m.h[64] = 0;
        for (int i = 0; i < busy; ++i) {
          spin<<<1, 32, 0, s[i]>>>(m.d + 64, m.d + 65 + i, 200000000ull, 0);
          char* dst = device + (i + 1) * (1 << 20);
          if (held == 0) CHECK(cudaMemcpyAsync(dst, pinned, 1 << 20, cudaMemcpyHostToDevice, s[i]));
          if (held == 1)
            CHECK(cudaMemcpyAsync(dst, device, 1 << 20, cudaMemcpyDeviceToDevice, s[i]));
          if (held == 2) follower<<<1, 32, 0, s[i]>>>();
        }
        CHECK(cudaGetLastError());
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        CHECK(cudaMemcpyAsync(device + (32 << 20), pinned + (1 << 20), 1 << 20,
                              cudaMemcpyHostToDevice, s[busy]));
        bool done = false;
        for (int i = 0; i < 2000 && !done; ++i) {
          done = cudaStreamQuery(s[busy]) == cudaSuccess;
          if (!done) std::this_thread::sleep_for(std::chrono::microseconds(1));
        }
        std::printf("5. %2d streams each with %s behind a spinner: an H2D copy on one more %s\n",
                    busy, what[held], done ? "finished" : "waited");
        m.h[64] = 1;
        CHECK(cudaDeviceSynchronize());
      }
    }
    return 0;
  }
  const char* list_env = std::getenv("PROBE_BUSY_SHORT");
  const std::vector<int> busy_counts =
      list_env != nullptr ? std::vector<int>{3, 4, 5, 8}
                          : std::vector<int>{1, 2, 3, 4, 5, 8, 16, 24, 30, 31, 32, 33, 38};
  for (int busy : busy_counts) {
    int* rel = m.d + 64;  // every spinner's release and started words: h[64], h[65 + i]
    m.h[64] = 0;
    for (int i = 0; i < busy; ++i) m.h[65 + i] = 0;
    m.done() = 0;
    // PROBE_VARIANT: what follows each spinner: 0 a plain follower, 1 nothing, 2 a follower
    // launched with the programmatic attribute (the spinner lets it launch), 3 an event record.
    const char* variant_env = std::getenv("PROBE_VARIANT");
    const int variant = variant_env != nullptr ? std::atoi(variant_env) : 0;
    for (int i = 0; i < busy; ++i) {
      spin<<<1, 32, 0, s[i]>>>(rel, m.d + 65 + i, 200000000ull, variant == 2);
      if (variant == 0) follower<<<1, 32, 0, s[i]>>>();
      if (variant == 2) {
        cudaLaunchConfig_t c{};
        c.gridDim = dim3(1);
        c.blockDim = dim3(32);
        c.stream = s[i];
        cudaLaunchAttribute a{};
        a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        a.val.programmaticStreamSerializationAllowed = 1;
        c.attrs = &a;
        c.numAttrs = 1;
        CHECK(cudaLaunchKernelEx(&c, follower));
      }
      if (variant == 3) {
        cudaEvent_t e;
        CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        CHECK(cudaEventRecord(e, s[i]));
        CHECK(cudaEventDestroy(e));
      }
    }
    CHECK(cudaGetLastError());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    int started = 0;
    for (int i = 0; i < busy; ++i) started += m.h[65 + i];
    tiny<<<1, 1, 0, s[busy]>>>(m.d + 2);
    bool ran = false;
    for (int i = 0; i < 2000 && !ran; ++i) {
      ran = m.done() != 0;
      if (!ran) std::this_thread::sleep_for(std::chrono::microseconds(1));
    }
    std::printf("4. %2d busy streams (%2d spinners running): a small kernel on one more %s\n", busy,
                started, ran ? "ran" : "waited");
    m.h[64] = 1;
    CHECK(cudaDeviceSynchronize());
  }
  if (std::getenv("PROBE_BUSY_ONLY") != nullptr) return 0;
  // 1. Each stream's queue: the first earlier stream it cannot run beside.
  std::printf("1. streams made in turn, the earlier stream each shares a queue with:\n");
  int shared = 0;
  for (int k = 1; k < kStreams; ++k) {
    for (int j = 0; j < k; ++j) {
      if (!runs_beside(m, s[j], s[k], After::kPlain)) {
        std::printf("  stream %d shares with stream %d\n", k, j);
        ++shared;
        break;
      }
    }
  }
  std::printf("  %d of %d streams share a queue with an earlier one\n", shared, kStreams - 1);
  // 2. Five streams made and destroyed, then one more: which queue?
  for (int i = 0; i < 5; ++i) {
    cudaStream_t t;
    CHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    CHECK(cudaStreamDestroy(t));
  }
  cudaStream_t u;
  CHECK(cudaStreamCreateWithFlags(&u, cudaStreamNonBlocking));
  std::printf("2. after 5 made and destroyed, the next stream shares with:");
  for (int j = 0; j < kStreams; ++j) {
    if (!runs_beside(m, s[j], u, After::kPlain)) std::printf(" %d", j);
  }
  std::printf("\n");
  // 3. Streams 0 and 32 (or the first pair found above) under the three cases.
  int a = -1, b = -1;
  for (int k = 1; k < kStreams && a < 0; ++k) {
    for (int j = 0; j < k; ++j) {
      if (!runs_beside(m, s[j], s[k], After::kPlain)) {
        a = j;
        b = k;
        break;
      }
    }
  }
  if (a >= 0) {
    for (int rep = 0; rep < 3; ++rep) {
      std::printf(
          "3. streams %d and %d: small kernel runs beside the spinner: alone %d, then a"
          " PDL follower %d, then a plain follower %d\n",
          a, b, runs_beside(m, s[a], s[b]), runs_beside(m, s[a], s[b], After::kPdl),
          runs_beside(m, s[a], s[b], After::kPlain));
    }
  }
  return 0;
}
