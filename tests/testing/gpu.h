// Helpers of the GPU tests: device copies of a rank's inputs, a download of everything a CUDA
// dispatch returned, and a runner that drives one op per GPU on its own thread. Compiled only
// with the CUDA backend (MOE_EP_WITH_CUDA).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "moe_ep/cuda.h"
#include "testing/inputs.h"
#include "testing/reference.h"

namespace moe_ep::testing {

#define MOE_EP_TEST_CUDA(expr)                                                      \
  do {                                                                              \
    const cudaError_t s_ = (expr);                                                  \
    if (s_ != cudaSuccess)                                                          \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(s_)); \
  } while (0)

// Device memory that frees itself.
struct DeviceBuffer {
  std::shared_ptr<void> ptr;
  static DeviceBuffer of_bytes(size_t bytes) {
    void* p = nullptr;
    MOE_EP_TEST_CUDA(cudaMalloc(&p, bytes == 0 ? 16 : bytes));
    return {std::shared_ptr<void>(p, [](void* q) { cudaFree(q); })};
  }
  template <typename T>
  static DeviceBuffer copy_of(const std::vector<T>& host) {
    DeviceBuffer b = of_bytes(host.size() * sizeof(T));
    if (!host.empty()) {
      MOE_EP_TEST_CUDA(
          cudaMemcpy(b.ptr.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
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
  MOE_EP_TEST_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
}

template <typename T>
std::vector<T> download_view(const TensorView& v) {
  return copy_view<T>(v, device_to_host);
}

inline DispatchOutputs download_outputs(const DispatchResult& r) {
  return copy_outputs(r, device_to_host);
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
        MOE_EP_TEST_CUDA(cudaSetDevice(static_cast<int>(r)));
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
