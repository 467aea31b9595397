// v65 probe (not part of the library): the host time of one kernel launch on an idle stream, by
// the parameters' size and the launch call. Each sample: synchronize, then time one launch call
// with steady_clock; the median of 400 samples a case. Also a launch right after another (the
// second of two, as the data and wait kernels are).
//   nvcc -std=c++17 -arch=sm_90 -O2 launch_probe.cu -o launch_probe -lcuda && ./launch_probe
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

template <int N>
struct Blob {
  unsigned char b[N];
};

template <int N>
__global__ void empty_kernel(Blob<N> p) {
  if (p.b[0] == 7 && threadIdx.x == 1000) p.b[1] = 0;  // never true: keeps the parameter used
}

static double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      return;                                                                       \
    }                                                                               \
  } while (0)

enum class How { kChevron, kEx, kExPdl, kDriver };

template <int N>
void one_case(cudaStream_t stream, How how, int blocks, int threads, bool second) {
  Blob<N> p{};
  CUfunction f = nullptr;
  {
    cudaFunction_t rf = nullptr;
    CHECK(cudaGetFuncBySymbol(&rf, reinterpret_cast<const void*>(empty_kernel<N>)));
    f = reinterpret_cast<CUfunction>(rf);
  }
  auto launch = [&]() -> cudaError_t {
    if (how == How::kChevron) {
      empty_kernel<N><<<blocks, threads, 0, stream>>>(p);
      return cudaGetLastError();
    }
    if (how == How::kDriver) {
      void* args[] = {&p};
      return cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, stream, args, nullptr) ==
                     CUDA_SUCCESS
                 ? cudaSuccess
                 : cudaErrorUnknown;
    }
    cudaLaunchConfig_t c{};
    c.gridDim = dim3(blocks);
    c.blockDim = dim3(threads);
    c.stream = stream;
    cudaLaunchAttribute a{};
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
    if (how == How::kExPdl) {
      c.attrs = &a;
      c.numAttrs = 1;
    }
    return cudaLaunchKernelEx(&c, empty_kernel<N>, p);
  };
  std::vector<double> t;
  for (int i = 0; i < 450; ++i) {
    CHECK(cudaStreamSynchronize(stream));
    if (second) CHECK(launch());
    const double t0 = now_us();
    CHECK(launch());
    const double t1 = now_us();
    if (i >= 50) t.push_back(t1 - t0);
  }
  CHECK(cudaStreamSynchronize(stream));
  const char* names[] = {"<<<>>>", "cudaLaunchKernelEx", "cudaLaunchKernelEx+PDL",
                         "cuLaunchKernel"};
  std::printf("params %5d B  %-24s blocks %4d threads %4d %s: %.2f us\n", N,
              names[static_cast<int>(how)], blocks, threads, second ? "second" : "first ",
              median(t));
}

template <int N>
void sizes(cudaStream_t s) {
  for (How h : {How::kChevron, How::kEx, How::kExPdl, How::kDriver})
    one_case<N>(s, h, 1, 64, false);
  one_case<N>(s, How::kExPdl, 128, 1024, false);
  one_case<N>(s, How::kExPdl, 1, 64, true);
}

int main() {
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 1;
  sizes<16>(s);
  sizes<256>(s);
  sizes<512>(s);
  sizes<1024>(s);
  sizes<2048>(s);
  sizes<4096>(s);
  return 0;
}
