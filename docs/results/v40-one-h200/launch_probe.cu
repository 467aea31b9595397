// v40 probe (not part of the library): the host's cost of one kernel launch by parameter size
// and launch attribute. A dispatch's first launch (count_kernel, 1936 bytes of parameters, with
// the programmatic-serialization attribute) took 3.6-4.2 us of host time in v40 run M. Here an
// empty kernel with 64 / 1024 / 2048 / 4096 bytes of parameters, launched by cudaLaunchKernelEx
// with and without that attribute: the host time of one launch, median of 2000, on an idle
// stream (synchronized every 8 launches) and back to back.
//   nvcc -O3 -arch=sm_90 -o launch_probe launch_probe.cu && ./launch_probe
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

template <int kBytes>
struct Params {
  unsigned char b[kBytes];
};

template <int kBytes>
__global__ void empty(Params<kBytes> p) {
  if (p.b[0] == 123 && threadIdx.x == 999) printf("never\n");
}

template <int kBytes>
void measure(cudaStream_t stream, bool pdl) {
  Params<kBytes> p{};
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(3);
  config.blockDim = dim3(1024);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = pdl ? &attribute : nullptr;
  config.numAttrs = pdl ? 1 : 0;
  for (int i = 0; i < 100; ++i) cudaLaunchKernelEx(&config, empty<kBytes>, p);
  cudaStreamSynchronize(stream);
  std::vector<double> idle, busy;
  for (int i = 0; i < 2000; ++i) {
    const bool sync_first = i % 8 == 0;
    if (sync_first) cudaStreamSynchronize(stream);
    const auto t0 = std::chrono::steady_clock::now();
    cudaLaunchKernelEx(&config, empty<kBytes>, p);
    const auto t1 = std::chrono::steady_clock::now();
    (sync_first ? idle : busy)
        .push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  cudaStreamSynchronize(stream);
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  printf("params %5d B  %-10s  one launch: %.2f us after a sync, %.2f us back to back\n", kBytes,
         pdl ? "PDL" : "plain", median(idle), median(busy));
}

int main() {
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  for (int pdl = 0; pdl < 2; ++pdl) {
    measure<64>(stream, pdl);
    measure<1024>(stream, pdl);
    measure<2048>(stream, pdl);
    measure<4096>(stream, pdl);
  }
  printf("status %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
