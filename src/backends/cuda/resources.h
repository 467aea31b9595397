// RAII owners of the CUDA resources an op or a communicator holds: events, streams, device memory
// and mapped pinned host memory. A failure half-way through creating an op unwinds through their
// destructors, so nothing leaks; each destructor ignores errors (it may run while another error
// is being reported). Freeing memory waits for the whole device, so ops and communicators free
// only when they go, never during a call.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>

#include "backends/cuda/cuda_check.h"

namespace moe_ep::cuda_backend {

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

// cudaMalloc'd memory of `count` elements of T on `device`.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(int device, size_t count) : device_(device), count_(count) {
    DeviceGuard guard(device);
    void* p = nullptr;
    MOE_EP_CUDA_CHECK(cudaMalloc(&p, sizeof(T) * (count == 0 ? 1 : count)));
    data_ = static_cast<T*>(p);
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
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device_);
    cudaFree(data_);
    cudaSetDevice(previous);
    data_ = nullptr;
  }
  int device_ = 0;
  size_t count_ = 0;
  T* data_ = nullptr;
};

// One T in mapped, pinned host memory, zero-initialised; device() is its address for kernels.
template <typename T>
class HostMapped {
 public:
  HostMapped() {
    void* p = nullptr;
    MOE_EP_CUDA_CHECK(cudaHostAlloc(&p, sizeof(T), cudaHostAllocMapped | cudaHostAllocPortable));
    host_ = static_cast<T*>(p);
    std::memset(static_cast<void*>(host_), 0, sizeof(T));
    void* d = nullptr;
    MOE_EP_CUDA_CHECK(cudaHostGetDevicePointer(&d, host_, 0));
    device_ = static_cast<T*>(d);
  }
  HostMapped(const HostMapped&) = delete;
  HostMapped& operator=(const HostMapped&) = delete;
  ~HostMapped() { cudaFreeHost(host_); }
  T* host() const { return host_; }
  T* device() const { return device_; }

 private:
  T* host_ = nullptr;
  T* device_ = nullptr;
};

}  // namespace moe_ep::cuda_backend
