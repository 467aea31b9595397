// The library's own memory (resources.h): device memory from a stream-ordered pool per device,
// mapped pinned host memory from slabs that live as long as the process. Neither path calls
// cudaMalloc, cudaFree, cudaHostAlloc or cudaFreeHost after its first use, so making or destroying
// an op never waits for the kernels of the rest of the device.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/resources.h"

namespace moe_ep::cuda_backend {
namespace {

struct DevicePool {
  cudaMemPool_t pool = nullptr;
  cudaStream_t stream = nullptr;  // allocations and frees only: no kernel ever waits on it
};

// Never destroyed: an op held by a static (an op cache) may free its memory during exit, after
// function-local statics are gone.
std::mutex& pools_mutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

// Made once per device and kept for the life of the process (like the driver's default pool).
// Its release threshold is unlimited: with the default (0) each synchronisation would hand the
// unused memory back to the driver, and unmapping it can wait for the device. Peers that can
// reach this device get access, as cudaMalloc's memory has once peer access is on.
DevicePool& pool_of(int device) {
  static auto* pools = new std::map<int, DevicePool>();  // never destroyed, as the mutex
  std::lock_guard<std::mutex> lock(pools_mutex());
  DevicePool& p = (*pools)[device];
  if (p.pool != nullptr) return p;
  DeviceGuard guard(device);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  MOE_EP_CUDA_CHECK(cudaMemPoolCreate(&p.pool, &props));
  uint64_t keep = UINT64_MAX;
  MOE_EP_CUDA_CHECK(cudaMemPoolSetAttribute(p.pool, cudaMemPoolAttrReleaseThreshold, &keep));
  int count = 0;
  MOE_EP_CUDA_CHECK(cudaGetDeviceCount(&count));
  std::vector<cudaMemAccessDesc> access;
  for (int d = 0; d < count; ++d) {
    int can = 0;
    if (d != device && cudaDeviceCanAccessPeer(&can, d, device) == cudaSuccess && can) {
      cudaMemAccessDesc a{};
      a.location.type = cudaMemLocationTypeDevice;
      a.location.id = d;
      a.flags = cudaMemAccessFlagsProtReadWrite;
      access.push_back(a);
    }
  }
  if (!access.empty()) {
    MOE_EP_CUDA_CHECK(cudaMemPoolSetAccess(p.pool, access.data(), access.size()));
  }
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking));
  return p;
}

// Host blocks are carved from slabs of kSlabBytes (or one block's size when larger), in units of
// kHostAlign bytes; a freed block goes onto the free list of its size.
constexpr size_t kSlabBytes = size_t{1} << 20;
constexpr size_t kHostAlign = 256;

struct HostSlabs {
  std::mutex mu;
  char* host = nullptr;  // the current slab's free tail
  char* device = nullptr;
  size_t left = 0;
  std::map<size_t, std::vector<std::pair<char*, char*>>> free;  // size -> (host, device)
  std::map<char*, char*> device_of;                             // every block handed out
};

HostSlabs& host_slabs() {
  static HostSlabs* slabs = new HostSlabs();  // outlives every static owner of a block
  return *slabs;
}

size_t host_block_bytes(size_t bytes) {
  return (bytes == 0 ? kHostAlign : (bytes + kHostAlign - 1) / kHostAlign * kHostAlign);
}

std::atomic<int64_t> g_device_alloc_bytes{0};

}  // namespace

int64_t device_alloc_bytes() { return g_device_alloc_bytes.load(); }

void* device_alloc(int device, size_t bytes) {
  g_device_alloc_bytes += static_cast<int64_t>(bytes == 0 ? 1 : bytes);
  DevicePool& p = pool_of(device);
  DeviceGuard guard(device);
  void* ptr = nullptr;
  MOE_EP_CUDA_CHECK(cudaMallocFromPoolAsync(&ptr, bytes == 0 ? 1 : bytes, p.pool, p.stream));
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(p.stream));  // usable from any stream from here on
  return ptr;
}

void device_free(int device, void* ptr) {
  if (ptr == nullptr) return;
  DevicePool& p = pool_of(device);
  DeviceGuard guard(device);
  cudaFreeAsync(ptr, p.stream);  // errors ignored, as in every destructor (resources.h)
}

void* host_mapped_alloc(size_t bytes, void** device_ptr) {
  const size_t size = host_block_bytes(bytes);
  HostSlabs& s = host_slabs();
  std::lock_guard<std::mutex> lock(s.mu);
  char* host = nullptr;
  char* device = nullptr;
  auto it = s.free.find(size);
  if (it != s.free.end() && !it->second.empty()) {
    host = it->second.back().first;
    device = it->second.back().second;
    it->second.pop_back();
  } else {
    if (s.left < size) {
      const size_t slab = size > kSlabBytes ? size : kSlabBytes;
      void* h = nullptr;
      MOE_EP_CUDA_CHECK(cudaHostAlloc(&h, slab, cudaHostAllocMapped | cudaHostAllocPortable));
      void* d = nullptr;
      MOE_EP_CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
      s.host = static_cast<char*>(h);
      s.device = static_cast<char*>(d);
      s.left = slab;
    }
    host = s.host;
    device = s.device;
    s.host += size;
    s.device += size;
    s.left -= size;
  }
  s.device_of[host] = device;
  std::memset(host, 0, size);
  *device_ptr = device;
  return host;
}

void host_mapped_free(void* host, size_t bytes) {
  if (host == nullptr) return;
  HostSlabs& s = host_slabs();
  std::lock_guard<std::mutex> lock(s.mu);
  char* h = static_cast<char*>(host);
  auto it = s.device_of.find(h);
  if (it == s.device_of.end()) return;
  s.free[host_block_bytes(bytes)].push_back({h, it->second});
  s.device_of.erase(it);
}

void reserve_library_memory(int device) {
  pool_of(device);
  void* d = nullptr;
  host_mapped_free(host_mapped_alloc(1, &d), 1);
}

}  // namespace moe_ep::cuda_backend
