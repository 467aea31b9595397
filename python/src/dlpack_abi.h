// The DLPack exchange ABI (https://dmlc.github.io/dlpack/latest/c_api.html), declared from the
// published specification: the unversioned DLManagedTensor that torch.utils.dlpack.to_dlpack,
// numpy's __dlpack__ and torch.utils.dlpack.from_dlpack exchange in a PyCapsule named
// "dltensor" (renamed "used_dltensor" once a consumer owns it). Only the fields moe-ep reads or
// writes are named; the layout is the ABI's and must not change.
#pragma once

#include <cstdint>

namespace moe_ep::python {

enum DlDeviceType : int32_t {
  kDlCpu = 1,
  kDlCuda = 2,
  kDlCudaHost = 3,  // pinned host memory: host-addressable, so the CPU backend may read it
};

enum DlTypeCode : uint8_t {
  kDlInt = 0,
  kDlUInt = 1,
  kDlFloat = 2,
  kDlBfloat = 4,
  kDlComplex = 5,
  kDlBool = 6,
  // Codes 7-17 are the 8/6/4-bit float types added in DLPack 1.1; moe-ep takes any 8-bit code
  // as raw bytes of the wire type the argument expects (e4m3 / e2m1 pairs / e8m0).
};

struct DlDevice {
  int32_t device_type;
  int32_t device_id;
};

struct DlDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DlTensor {
  void* data;
  DlDevice device;
  int32_t ndim;
  DlDataType dtype;
  int64_t* shape;    // [ndim]
  int64_t* strides;  // [ndim] in elements, or null for compact row-major
  uint64_t byte_offset;
};

struct DlManagedTensor {
  DlTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DlManagedTensor* self);
};

inline constexpr const char* kDlCapsuleName = "dltensor";
inline constexpr const char* kDlUsedCapsuleName = "used_dltensor";

}  // namespace moe_ep::python
