// v40 probe (not part of the library): what an SM pays to run code it has not cached. One warp
// runs N straight-line instructions (8 independent FMA chains, so a warm pass issues about one
// instruction a cycle) twice in a row; clock64 stamps each pass. The first pass fetches the code
// (from L2 or HBM), the second finds it in the SM's instruction caches. Cases: a kernel's first
// launch, a relaunch right after (code in L2 and maybe in the SM), and a relaunch after another
// kernel has run 512 KB of other code on every SM (as a dispatch's kernels follow a combine's),
// and after a 256 MB memset (as a 4096-token call streams its rows through L2).
//   nvcc -O3 -arch=sm_90 -o icache_probe icache_probe.cu && ./icache_probe
#include <cstdio>

template <int N, int kSalt>
__global__ void straight(float* out, long long* stamps) {
  float a[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) a[j] = threadIdx.x + j + kSalt;
  const float b = out[1], c = out[2];
  for (int pass = 0; pass < 2; ++pass) {
    const long long t0 = clock64();
#pragma unroll
    for (int i = 0; i < N / 8; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) a[j] = fmaf(a[j], b, c);
    }
    __syncwarp();
    const long long t1 = clock64();
    if (threadIdx.x == 0) stamps[blockIdx.x * 2 + pass] = t1 - t0;
  }
  float s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += a[j];
  if (s == 12345.0f) out[0] = s;
}

template <int N>
void run(float* out, long long* stamps, const char* name, void* big, size_t big_bytes) {
  long long h[2];
  auto once = [&](const char* what) {
    straight<N, 0><<<1, 32>>>(out, stamps);
    cudaMemcpy(h, stamps, sizeof(h), cudaMemcpyDeviceToHost);
    printf(
        "%-8s N=%6d (%4d KB) %-28s cold pass %7lld cycles, warm pass %7lld, extra %7lld = %5.1f cycles/line\n",
        name, N, N * 16 / 1024, what, h[0], h[1], h[0] - h[1], (h[0] - h[1]) / (N * 16.0 / 128));
  };
  once("first launch");
  once("relaunch");
  straight<16384, 1><<<132 * 4, 32>>>(out, stamps + 64);  // 256 KB of other code on every SM
  straight<16384, 2><<<132 * 4, 32>>>(out, stamps + 64 + 2 * 132 * 4);
  cudaDeviceSynchronize();
  once("after 512 KB of other code");
  cudaMemset(big, N & 255, big_bytes);  // 256 MB through L2: the code leaves it too
  cudaDeviceSynchronize();
  once("after 256 MB memset");
}

int main() {
  float* out;
  long long* stamps;
  cudaMalloc(&out, 16);
  cudaMalloc(&stamps, 1 << 20);
  float init[4] = {0, 1.0001f, 0.5f, 0};
  cudaMemcpy(out, init, sizeof(init), cudaMemcpyHostToDevice);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  printf("SM clock attribute %d MHz\n", clock_khz / 1000);
  const size_t big_bytes = size_t{256} << 20;
  void* big = nullptr;
  cudaMalloc(&big, big_bytes);
  run<1024>(out, stamps, "1024", big, big_bytes);
  run<4096>(out, stamps, "4096", big, big_bytes);
  run<16384>(out, stamps, "16384", big, big_bytes);
  cudaError_t e = cudaDeviceSynchronize();
  printf("status %s\n", cudaGetErrorString(e));
  return 0;
}
