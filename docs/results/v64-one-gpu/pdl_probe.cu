// v64 probe: does work after a PDL-launched kernel that never runs griddepcontrol.wait wait for
// that kernel's predecessor? D spins SPIN_NS, then sets its flag; W (launched with programmatic
// stream serialization, no griddepcontrol.wait) ends at once; then, in stream order:
//   X1, a plain launch, reads D's flag; X2, a PDL launch that waits (griddepcontrol.wait) first;
//   and the host, after an event recorded after W, reads D's flag in mapped memory; and a
//   chain of two such kernels (D, W, W) before a PDL X that waits.
// Each prints the flag it saw (1: D had ended) and how long after D's flag store it ran.
//   nvcc -arch=sm_90 -O2 -o pdl_probe pdl_probe.cu && ./pdl_probe
#include <cuda_runtime.h>

#include <cstdio>
#define CK(x)                                             \
  do {                                                    \
    cudaError_t e = (x);                                  \
    if (e != cudaSuccess) {                               \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      return 1;                                           \
    }                                                     \
  } while (0)
constexpr unsigned long long kSpinNs = 50000000ull;
__device__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__global__ void d_kernel(volatile int* flag, unsigned long long* t) {
  asm volatile("griddepcontrol.launch_dependents;");
  const unsigned long long t0 = now();
  while (now() - t0 < kSpinNs) {
  }
  t[0] = now();
  __threadfence_system();
  *flag = 1;
  __threadfence_system();
}
__global__ void w_kernel(volatile int* flag, unsigned long long* t, int* seen) {
  seen[0] = *flag;
  t[1] = now();
  asm volatile("griddepcontrol.launch_dependents;");
}
__global__ void x_kernel(volatile int* flag, unsigned long long* t, int* seen, int i, bool gw) {
  if (gw) asm volatile("griddepcontrol.wait;" ::: "memory");
  seen[i] = *flag;
  t[i + 1] = now();
}
template <typename... A, typename... B>
cudaError_t launch(bool pdl, cudaStream_t s, void (*k)(A...), B... args) {
  cudaLaunchConfig_t c = {};
  cudaLaunchAttribute a[1];
  a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a[0].val.programmaticStreamSerializationAllowed = 1;
  c.gridDim = 1;
  c.blockDim = 1;
  c.stream = s;
  c.attrs = a;
  c.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&c, k, args...);
}
int main() {
  int* flag;
  unsigned long long* t;
  int* seen;
  CK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  CK(cudaHostAlloc(&t, 8 * sizeof(unsigned long long), cudaHostAllocMapped));
  CK(cudaHostAlloc(&seen, 8 * sizeof(int), cudaHostAllocMapped));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  for (int round = 0; round < 3; ++round) {
    *flag = 0;
    for (int i = 0; i < 8; ++i) {
      t[i] = 0;
      seen[i] = -1;
    }
    CK(launch(false, s, d_kernel, (volatile int*)flag, t));
    CK(launch(true, s, w_kernel, (volatile int*)flag, t, seen));
    CK(cudaEventRecord(ev, s));
    CK(cudaEventSynchronize(ev));
    const int host_seen = *(volatile int*)flag;
    CK(launch(false, s, x_kernel, (volatile int*)flag, t, seen, 1, false));
    CK(cudaStreamSynchronize(s));
    const int x1 = seen[1];
    // Second form: D, W, then X2 launched with PDL and waiting, no host sync in between.
    *flag = 0;
    seen[2] = -1;
    CK(launch(false, s, d_kernel, (volatile int*)flag, t));
    CK(launch(true, s, w_kernel, (volatile int*)flag, t, seen));
    CK(launch(true, s, x_kernel, (volatile int*)flag, t, seen, 2, true));
    CK(cudaStreamSynchronize(s));
    const long long x2_after = (long long)(t[3] - t[0]);
    // Third form: D, W, a plain X1 without a host sync.
    *flag = 0;
    seen[1] = -1;
    CK(launch(false, s, d_kernel, (volatile int*)flag, t));
    CK(launch(true, s, w_kernel, (volatile int*)flag, t, seen));
    CK(launch(false, s, x_kernel, (volatile int*)flag, t, seen, 1, false));
    CK(cudaStreamSynchronize(s));
    std::printf(
        "round %d: W saw %d; host after W's event saw %d; plain X after host sync saw %d;"
        " PDL X (waits) saw %d at %+lld ns; plain X saw %d at %+lld ns of D's store\n",
        round, seen[0], host_seen, x1, seen[2], x2_after, seen[1], (long long)(t[2] - t[0]));
    // Fourth form: D, W, W (two PDL kernels that never wait), then a PDL X that waits.
    *flag = 0;
    seen[3] = -1;
    CK(launch(false, s, d_kernel, (volatile int*)flag, t));
    CK(launch(true, s, w_kernel, (volatile int*)flag, t, seen));
    CK(launch(true, s, w_kernel, (volatile int*)flag, t, seen));
    CK(launch(true, s, x_kernel, (volatile int*)flag, t, seen, 3, true));
    CK(cudaStreamSynchronize(s));
    std::printf("round %d: chain of two: PDL X (waits) saw %d at %+lld ns\n", round, seen[3],
                (long long)(t[4] - t[0]));
  }
  return 0;
}
