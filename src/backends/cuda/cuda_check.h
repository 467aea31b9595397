// Host-side check macros for CUDA and NCCL calls: a failure throws CudaError / NcclError naming
// the call, the error string and where it happened. Never exits.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include "core/check.h"

#define MOE_EP_CUDA_CHECK(expr)                                                                  \
  do {                                                                                           \
    const cudaError_t moe_ep_status_ = (expr);                                                   \
    if (moe_ep_status_ != cudaSuccess) {                                                         \
      throw ::moe_ep::CudaError(                                                                 \
          ::moe_ep::detail::concat(#expr, " failed: ", cudaGetErrorString(moe_ep_status_), " (", \
                                   __FILE__, ":", __LINE__, ")"));                               \
    }                                                                                            \
  } while (0)

#define MOE_EP_NCCL_CHECK(expr)                                                                  \
  do {                                                                                           \
    const ncclResult_t moe_ep_status_ = (expr);                                                  \
    if (moe_ep_status_ != ncclSuccess) {                                                         \
      throw ::moe_ep::NcclError(                                                                 \
          ::moe_ep::detail::concat(#expr, " failed: ", ncclGetErrorString(moe_ep_status_), " (", \
                                   __FILE__, ":", __LINE__, ")"));                               \
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
