// RAII owners of the CUDA resources an op or a communicator holds: events, streams, device memory
// and mapped pinned host memory. A failure half-way through creating an op unwinds through their
// destructors, so nothing leaks; each destructor ignores errors (it may run while another error
// is being reported). Their memory comes from the library's own stream-ordered pools
// (device_memory.cc), never from cudaMalloc / cudaFree / cudaHostAlloc / cudaFreeHost: those are
// implicit synchronisation points of the whole device (cudaFree waits for every kernel on it), so
// an op created or destroyed on one rank of the single-GPU world would wait for another rank's
// kernel that waits for this rank, and destroying an op in a serving process would stall every
// stream on its GPU. Ops and communicators still allocate only when they are made.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>

#include "backends/cuda/cuda_check.h"

namespace moe_ep::cuda_backend {

// `bytes` of device memory on `device` from the library's pool there (made on first use, with
// its own stream; freed memory stays in the pool for the next op), ready for any stream when
// this returns. device_free returns it, ordered after nothing: its users must be done.
void* device_alloc(int device, size_t bytes);
void device_free(int device, void* p);
// The bytes every device_alloc of this process has asked for so far (a test hook: the GPU test
// of op_memory compares a creation's share with Op::memory()).
int64_t device_alloc_bytes();
// `bytes` of zeroed, mapped, pinned host memory (aligned to 256 bytes) from the library's
// process-wide slabs, which are never given back to the driver; host_mapped_free returns a block
// for reuse. *device_ptr is its address for kernels.
void* host_mapped_alloc(size_t bytes, void** device_ptr);
void host_mapped_free(void* host, size_t bytes);
// Makes `device`'s pool and the first host slab now, before any rank of a single-GPU world runs.
void reserve_library_memory(int device);

// Moves a handle out of `other`, leaving its null value behind.
template <typename T>
T take(T& other) {
  return std::exchange(other, T{});
}

class Event {
 public:
  explicit Event(unsigned flags = cudaEventDisableTiming) {
    MOE_EP_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags));
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { cudaEventDestroy(event_); }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// A non-blocking stream. Streams share the device's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS,
// 8 by default) round-robin in creation order, and two busy streams on one queue run in order:
// in the single-GPU world a rank's kernel queued behind another rank's waiting kernel would wait
// for it. So the library makes its streams once, with the communicator, never per call.
class Stream {
 public:
  Stream() { MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { cudaStreamDestroy(stream_); }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Polls `query()` (cudaEventQuery or cudaStreamQuery on some work) until it reports the work done
// or `limit_s` seconds have passed: true when done, false at the limit; any other error throws.
// For host waits on work that may hold a transport's receive, which never times out by itself.
template <typename Query>
bool poll_done(Query query, double limit_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (true) {
    const cudaError_t status = query();
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) MOE_EP_CUDA_CHECK(status);
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// Device memory of `count` elements of T on `device` (device_alloc).
template <typename T>
class DeviceArray {
 public:
  using value_type = T;
  // What an array of `count` elements takes: one element at least.
  static size_t allocation_bytes(size_t count) { return sizeof(T) * (count == 0 ? 1 : count); }
  DeviceArray() = default;
  DeviceArray(int device, size_t count) : device_(device), count_(count) {
    data_ = static_cast<T*>(device_alloc(device, allocation_bytes(count)));
  }
  DeviceArray(DeviceArray&& other) noexcept
      : device_(other.device_), count_(other.count_), data_(take(other.data_)) {}
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    reset();
    device_ = other.device_;
    count_ = other.count_;
    data_ = take(other.data_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { reset(); }

  T* get() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return sizeof(T) * count_; }
  // On the owner's internal stream, never the legacy default stream, which would order it with
  // other ranks' work on the device.
  void zero(cudaStream_t stream) const {
    MOE_EP_CUDA_CHECK(cudaMemsetAsync(data_, 0, sizeof(T) * (count_ ? count_ : 1), stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

 private:
  void reset() {
    if (data_ == nullptr) return;
    device_free(device_, data_);
    data_ = nullptr;
  }
  int device_ = 0;
  size_t count_ = 0;
  T* data_ = nullptr;
};

// One T in mapped, pinned host memory, zero-initialised (host_mapped_alloc); device() is its
// address for kernels.
template <typename T>
class HostMapped {
 public:
  HostMapped() {
    void* d = nullptr;
    host_ = static_cast<T*>(host_mapped_alloc(sizeof(T), &d));
    device_ = static_cast<T*>(d);
  }
  HostMapped(const HostMapped&) = delete;
  HostMapped& operator=(const HostMapped&) = delete;
  ~HostMapped() { host_mapped_free(host_, sizeof(T)); }
  T* host() const { return host_; }
  T* device() const { return device_; }

 private:
  T* host_ = nullptr;
  T* device_ = nullptr;
};

}  // namespace moe_ep::cuda_backend
