// The library's own memory (src/backends/cuda/device_memory.cc; label gpu, skipped without a
// GPU): device memory from a stream-ordered pool per device, mapped host words from reused pinned
// slabs. Each case checks what the ops rely on: the memory is usable from any stream once the
// allocation returns, a freed block comes back zeroed, and freeing never waits for a kernel
// that is still running on the device (the point of the pool: docs/cuda-backend.md).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "moe_ep/cuda.h"
#ifdef MOE_EP_WITH_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/resources.h"
#include "testing/gpu_world.h"
#endif

namespace moe_ep {
namespace {

#ifndef MOE_EP_WITH_CUDA
TEST(GpuMemory, NeedsTheCudaBackend) { GTEST_SKIP() << "moe-ep was built without CUDA"; }
#else

using cuda_backend::device_alloc;
using cuda_backend::device_free;
using cuda_backend::host_mapped_alloc;
using cuda_backend::host_mapped_free;

class GpuMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
    MOE_EP_CUDA_CHECK(cudaSetDevice(0));
  }
};

// Spins until *release is non-zero (or 10 s pass): a kernel still running while the host frees.
__global__ void spin_until(const volatile int* release, int* done) {
  const long long start = clock64();
  while (*release == 0 && clock64() - start < 10LL * 2'000'000'000LL) {
  }
  *done = 1;
}

TEST_F(GpuMemory, DeviceMemoryIsUsableFromAnyStreamAndRoundTrips) {
  const size_t bytes = (size_t{3} << 20) + 5;  // not a multiple of anything
  auto* p = static_cast<uint8_t*>(device_alloc(0, bytes));
  ASSERT_NE(p, nullptr);
  std::vector<uint8_t> in(bytes), out(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<uint8_t>(i * 131 + 7);
  testing::TestStream stream;
  testing::upload_bytes(p, in.data(), bytes, stream.s);
  testing::download_bytes(out.data(), p, bytes, stream.s);
  EXPECT_EQ(std::memcmp(in.data(), out.data(), bytes), 0);
  device_free(0, p);
  void* zero = device_alloc(0, 0);  // a size of 0 still gives a distinct, freeable pointer
  EXPECT_NE(zero, nullptr);
  device_free(0, zero);
}

TEST_F(GpuMemory, FreeingDoesNotWaitForARunningKernel) {
  // A kernel spins on a mapped host word; while it runs, the host frees device memory and host
  // words and allocates again. With cudaFree this would wait for the kernel, i.e. forever here
  // (until its 10 s limit); the pool returns at once.
  void* release_device = nullptr;
  auto* release = static_cast<int*>(host_mapped_alloc(sizeof(int), &release_device));
  void* done_device = nullptr;
  auto* done = static_cast<int*>(host_mapped_alloc(sizeof(int), &done_device));
  void* block = device_alloc(0, 1 << 20);
  void* word_device = nullptr;
  void* word = host_mapped_alloc(64, &word_device);
  testing::TestStream stream;
  spin_until<<<1, 1, 0, stream.s>>>(static_cast<const volatile int*>(release_device),
                                    static_cast<int*>(done_device));
  MOE_EP_CUDA_CHECK(cudaGetLastError());
  const auto start = std::chrono::steady_clock::now();
  device_free(0, block);
  host_mapped_free(word, 64);
  void* again = device_alloc(0, 1 << 20);
  void* again_word_device = nullptr;
  void* again_word = host_mapped_alloc(64, &again_word_device);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool still_spinning = *static_cast<volatile int*>(done) == 0;
  *static_cast<volatile int*>(release) = 1;
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  EXPECT_TRUE(still_spinning) << "the kernel ended before the frees were timed";
  // Basis: the frees and allocations are host bookkeeping and one stream-ordered call each
  // (well under a millisecond); the kernel spins for up to 10 s, so 2 s separates the two.
  EXPECT_LT(seconds, 2.0) << "freeing waited for the running kernel";
  EXPECT_EQ(*static_cast<volatile int*>(done), 1);
  device_free(0, again);
  host_mapped_free(again_word, 64);
  host_mapped_free(release, sizeof(int));
  host_mapped_free(done, sizeof(int));
}

TEST_F(GpuMemory, HostWordsAreReusedZeroedAndSeenByKernels) {
  void* device_ptr = nullptr;
  auto* first = static_cast<uint8_t*>(host_mapped_alloc(300, &device_ptr));
  for (int i = 0; i < 300; ++i) EXPECT_EQ(first[i], 0) << "byte " << i;
  std::memset(first, 0xab, 300);
  host_mapped_free(first, 300);
  void* again_device = nullptr;
  auto* again = static_cast<uint8_t*>(host_mapped_alloc(300, &again_device));
  EXPECT_EQ(again, first) << "a freed block of the same size is reused";
  EXPECT_EQ(again_device, device_ptr);
  for (int i = 0; i < 300; ++i) ASSERT_EQ(again[i], 0) << "reused block not zeroed at byte " << i;
  // The kernel's view: what the device writes through the device pointer, the host reads.
  testing::TestStream stream;
  MOE_EP_CUDA_CHECK(cudaMemsetAsync(again_device, 0x5c, 300, stream.s));
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  for (int i = 0; i < 300; ++i) ASSERT_EQ(again[i], 0x5c) << "byte " << i;
  host_mapped_free(again, 300);
  // Blocks of different sizes never overlap.
  void* d1 = nullptr;
  void* d2 = nullptr;
  auto* a = static_cast<char*>(host_mapped_alloc(1000, &d1));
  auto* b = static_cast<char*>(host_mapped_alloc(1000, &d2));
  EXPECT_TRUE(a + 1000 <= b || b + 1000 <= a);
  host_mapped_free(a, 1000);
  host_mapped_free(b, 1000);
}

#endif  // MOE_EP_WITH_CUDA

}  // namespace
}  // namespace moe_ep
