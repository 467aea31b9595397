// Host-side check macro for CUDA runtime calls, used by the library, the tests and the bench: a
// failure throws CudaError naming the call, the error string and where it happened (file name
// only, no absolute path). Never exits. The NCCL twin is in nccl_check.h.
#pragma once

#include <cuda_runtime.h>

#include "core/check.h"

#define MOE_EP_CUDA_CHECK(expr)                                                                  \
  do {                                                                                           \
    const cudaError_t moe_ep_status_ = (expr);                                                   \
    if (moe_ep_status_ != cudaSuccess) {                                                         \
      throw ::moe_ep::CudaError(                                                                 \
          ::moe_ep::detail::concat(#expr, " failed: ", cudaGetErrorString(moe_ep_status_), " (", \
                                   ::moe_ep::detail::base_name(__FILE__), ":", __LINE__, ")"));  \
    }                                                                                            \
  } while (0)

namespace moe_ep::cuda_backend {

// Makes `device` current for the scope and restores the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    MOE_EP_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) MOE_EP_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace moe_ep::cuda_backend
