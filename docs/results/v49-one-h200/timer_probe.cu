// v49 probe (not part of the library): how often %globaltimer changes on this GPU. The decode
// traces (next-trace.patch, v40-v45's) read intervals of 0.3-2.5 us between points; if the timer
// ticks in steps of about 1 us, such intervals are quantized and a median of them is biased.
// One thread reads the timer in a loop and records each change: the steps' sizes (ns) and the
// SM cycles between changes.
//   nvcc -O2 -arch=sm_90 -o timer_probe timer_probe.cu && ./timer_probe
#include <cstdio>
#include <cstdint>
#include <algorithm>
#include <vector>

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

constexpr int kChanges = 4096;

__global__ void probe(uint64_t* steps, uint64_t* cycles) {
  uint64_t last = global_ns();
  uint64_t last_clock = clock64();
  for (int i = 0; i < kChanges;) {
    const uint64_t t = global_ns();
    if (t != last) {
      const uint64_t c = clock64();
      steps[i] = t - last;
      cycles[i] = c - last_clock;
      last = t;
      last_clock = c;
      ++i;
    }
  }
}

int main() {
  uint64_t *steps, *cycles;
  if (cudaMallocManaged(&steps, kChanges * 8) != cudaSuccess) return 1;
  if (cudaMallocManaged(&cycles, kChanges * 8) != cudaSuccess) return 1;
  for (int run = 0; run < 3; ++run) {
    probe<<<1, 1>>>(steps, cycles);
    if (cudaDeviceSynchronize() != cudaSuccess) return 1;
    std::vector<uint64_t> s(steps + 1, steps + kChanges), c(cycles + 1, cycles + kChanges);
    std::sort(s.begin(), s.end());
    std::sort(c.begin(), c.end());
    const size_t n = s.size();
    printf("run %d: %zu timer changes; step ns min %llu p10 %llu median %llu p90 %llu max %llu; "
           "SM cycles between changes median %llu\n",
           run, n, (unsigned long long)s[0], (unsigned long long)s[n / 10],
           (unsigned long long)s[n / 2], (unsigned long long)s[n * 9 / 10],
           (unsigned long long)s[n - 1], (unsigned long long)c[n / 2]);
  }
  return 0;
}
