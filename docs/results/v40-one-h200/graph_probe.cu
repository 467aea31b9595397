// v40 probe (not part of the library): what a kernel boundary costs inside a CUDA graph, as a
// decode leg's 2-3 kernels pay it. A graph of K one-block kernels (each spins ~1 us, so the
// boundary is what is left), captured on a stream: launched plainly, with the programmatic
// stream serialization attribute (each kernel waits for the previous one with griddepcontrol.wait
// and lets the next launch at its start, as the library's kernels do), and plainly with an
// event record node (cudaEventRecordExternal) between kernels. Per boundary: (median replay
// time - K x the spin) / K, median of 200 replays after 20.
//   nvcc -O3 -arch=sm_90 -o graph_probe graph_probe.cu && ./graph_probe
#include <algorithm>
#include <cstdio>
#include <vector>

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins about spin_ns; with kPdl, waits for the previous kernel first and lets the next launch.
template <bool kPdl>
__global__ void spin(unsigned long long spin_ns, int* sink) {
  if constexpr (kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  if constexpr (kPdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const unsigned long long t0 = now_ns();
  while (now_ns() - t0 < spin_ns) {
  }
  if (threadIdx.x == 0 && spin_ns == 12345) *sink = 1;
}

enum class Kind { kPlain, kPdl, kEvents };

float replay_us(Kind kind, int kernels, unsigned long long spin_ns, cudaStream_t stream, int* sink,
                cudaEvent_t start, cudaEvent_t stop) {
  std::vector<cudaEvent_t> marks(kernels);
  for (cudaEvent_t& e : marks) cudaEventCreate(&e);
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  for (int k = 0; k < kernels; ++k) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(1);
    config.blockDim = dim3(32);
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    if (kind == Kind::kPdl) {
      config.attrs = &attribute;
      config.numAttrs = 1;
      cudaLaunchKernelEx(&config, spin<true>, spin_ns, sink);
    } else {
      cudaLaunchKernelEx(&config, spin<false>, spin_ns, sink);
    }
    if (kind == Kind::kEvents) cudaEventRecordWithFlags(marks[k], stream, cudaEventRecordExternal);
  }
  cudaGraph_t graph;
  cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec;
  cudaGraphInstantiate(&exec, graph, 0);
  std::vector<float> times;
  for (int i = 0; i < 220; ++i) {
    cudaEventRecord(start, stream);
    cudaGraphLaunch(exec, stream);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i >= 20) times.push_back(ms * 1000);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  for (cudaEvent_t& e : marks) cudaEventDestroy(e);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int main() {
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  int* sink;
  cudaMalloc(&sink, 4);
  const unsigned long long spin_ns = 1000;
  const char* names[] = {"plain", "PDL", "plain + event node"};
  for (int kind = 0; kind < 3; ++kind) {
    for (int kernels : {1, 2, 4, 8, 16}) {
      const float us =
          replay_us(static_cast<Kind>(kind), kernels, spin_ns, stream, sink, start, stop);
      printf("%-20s %2d kernels: replay %7.2f us, %5.2f us a kernel beyond its 1 us spin\n",
             names[kind], kernels, us, (us - kernels * spin_ns / 1000.0) / kernels);
    }
  }
  printf("status %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
