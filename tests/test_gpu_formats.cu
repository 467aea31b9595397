// GPU test of the device-only fast paths of the codecs (label `gpu`): on all 2^32 float bit
// patterns, the device e2m1 rounding by midpoints must equal the CUDA header's conversion, which
// tests/test_formats_random.cc ties to the host path. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "formats/scalar.h"

namespace moe_ep::formats {
namespace {

__global__ void count_e2m1_mismatches(unsigned long long* mismatches, uint32_t* first) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
       i <= 0xffffffffull; i += stride) {
    const float x = bits_float(static_cast<uint32_t>(i));
    const uint8_t header = __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest) & 0xf;
    if (e2m1_rne(x) != header) {
      ++local;
      atomicMin(first, static_cast<uint32_t>(i));
    }
  }
  if (local) atomicAdd(mismatches, local);
}

TEST(GpuFormats, E2m1FastPathEqualsHeaderOnEveryFloat) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  }
  unsigned long long* mismatches = nullptr;
  uint32_t* first = nullptr;
  ASSERT_EQ(cudaMalloc(&mismatches, sizeof(*mismatches)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&first, sizeof(*first)), cudaSuccess);
  ASSERT_EQ(cudaMemset(mismatches, 0, sizeof(*mismatches)), cudaSuccess);
  ASSERT_EQ(cudaMemset(first, 0xff, sizeof(*first)), cudaSuccess);
  count_e2m1_mismatches<<<1024, 256>>>(mismatches, first);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  unsigned long long host_mismatches = 0;
  uint32_t host_first = 0;
  cudaMemcpy(&host_mismatches, mismatches, sizeof(host_mismatches), cudaMemcpyDeviceToHost);
  cudaMemcpy(&host_first, first, sizeof(host_first), cudaMemcpyDeviceToHost);
  cudaFree(mismatches);
  cudaFree(first);
  EXPECT_EQ(host_mismatches, 0ull) << "first mismatching float bits 0x" << std::hex << host_first;
}

}  // namespace
}  // namespace moe_ep::formats
