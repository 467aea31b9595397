// Helpers of the GPU tests: device copies of a rank's inputs, a download of everything a CUDA
// dispatch returned, and a runner that drives one op per GPU on its own thread. CUDA calls are
// checked with the library's MOE_EP_CUDA_CHECK (a failure throws moe_ep::CudaError). Compiled
// only with the CUDA backend (MOE_EP_WITH_CUDA).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "moe_ep/cuda.h"
#include "reference/reference.h"
#include "testing/inputs.h"

namespace moe_ep::testing {

// The stream the tests allocate, copy and free on: non-blocking, so it never orders itself with
// the ranks' streams. cudaFree would wait for the whole device, and in the single-GPU world a
// rank freeing its buffers between calls would then wait for a peer's kernel that waits for it;
// stream-ordered allocation (cudaMallocAsync / cudaFreeAsync) waits for nothing, provided the
// pool keeps what is freed: with the default release threshold (0) every synchronisation hands
// the pool's unused memory back to the driver, and unmapping it may wait for the device as
// cudaFree does (the suspected cause of the intermittent W = 8 decode timeouts, where a rank
// launched its step kernel only after its peers had waited 30 s for it). So the pool of every
// device the tests use keeps its memory for the life of the process, and takes 1 GiB at once
// before any rank exists, so that the tests' allocations seldom have to grow it.
inline cudaStream_t test_stream_of(int device) {
  static std::mutex mu;
  static std::map<int, cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mu);
  cudaStream_t& s = streams[device];
  if (s == nullptr) {
    int previous = 0;
    MOE_EP_CUDA_CHECK(cudaGetDevice(&previous));
    MOE_EP_CUDA_CHECK(cudaSetDevice(device));
    MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaMemPool_t pool = nullptr;
    MOE_EP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep_everything = UINT64_MAX;
    MOE_EP_CUDA_CHECK(
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
    void* reserve = nullptr;
    MOE_EP_CUDA_CHECK(cudaMallocAsync(&reserve, size_t{1} << 30, s));
    MOE_EP_CUDA_CHECK(cudaFreeAsync(reserve, s));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(s));
    MOE_EP_CUDA_CHECK(cudaSetDevice(previous));
  }
  return s;
}

inline int current_device() {
  int device = 0;
  MOE_EP_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

inline cudaStream_t test_alloc_stream() { return test_stream_of(current_device()); }

// Device memory of the current device that frees itself; whoever used it on another stream
// has synchronised that stream before it goes.
struct DeviceBuffer {
  std::shared_ptr<void> ptr;
  static DeviceBuffer of_bytes(size_t bytes) {
    void* p = nullptr;
    const int device = current_device();
    MOE_EP_CUDA_CHECK(cudaMallocAsync(&p, bytes == 0 ? 16 : bytes, test_stream_of(device)));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(test_stream_of(device)));
    return {
        std::shared_ptr<void>(p, [device](void* q) { cudaFreeAsync(q, test_stream_of(device)); })};
  }
  template <typename T>
  static DeviceBuffer copy_of(const std::vector<T>& host) {
    DeviceBuffer b = of_bytes(host.size() * sizeof(T));
    if (!host.empty()) {
      MOE_EP_CUDA_CHECK(cudaMemcpyAsync(b.ptr.get(), host.data(), host.size() * sizeof(T),
                                        cudaMemcpyHostToDevice, test_alloc_stream()));
      MOE_EP_CUDA_CHECK(cudaStreamSynchronize(test_alloc_stream()));
    }
    return b;
  }
};

// A rank's inputs on its GPU; args() views them like RankInput::args() does on the host.
struct DeviceInput {
  DeviceBuffer x, x_scales, topk_idx, topk_weights;
  DispatchArgs view;

  DeviceInput(const RankInput& in, int device) {
    DispatchArgs host = in.args();
    x = in.prequantized() ? DeviceBuffer::copy_of(in.x_payload) : DeviceBuffer::copy_of(in.x);
    topk_idx = DeviceBuffer::copy_of(in.topk_idx);
    topk_weights = DeviceBuffer::copy_of(in.topk_weights);
    view = host;
    auto on_device = [device](TensorView v, void* data) {
      v.data = data;
      v.device = DeviceType::kCuda;
      v.device_index = device;
      return v;
    };
    view.x = on_device(host.x, x.ptr.get());
    if (in.prequantized()) {
      x_scales = DeviceBuffer::copy_of(in.x_scales);
      view.x_scales = on_device(host.x_scales, x_scales.ptr.get());
    }
    view.topk_idx = on_device(host.topk_idx, topk_idx.ptr.get());
    view.topk_weights = on_device(host.topk_weights, topk_weights.ptr.get());
  }
};

inline void device_to_host(void* dst, const void* src, size_t n) {
  MOE_EP_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, test_alloc_stream()));
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(test_alloc_stream()));
}

template <typename T>
std::vector<T> download_view(const TensorView& v) {
  return reference::copy_view<T>(v, device_to_host);
}

inline reference::DispatchOutputs download_outputs(const DispatchResult& r) {
  return reference::copy_outputs(r, device_to_host);
}

// Runs fn(rank, comm) on one thread per device (device r for rank r) and returns each rank's
// exception message ("" when it returned normally).
inline std::vector<std::string> run_gpu_ranks(
    const std::vector<std::shared_ptr<Communicator>>& comms,
    const std::function<void(int, const std::shared_ptr<Communicator>&)>& fn) {
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        MOE_EP_CUDA_CHECK(cudaSetDevice(static_cast<int>(r)));
        fn(static_cast<int>(r), comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace moe_ep::testing
