// Non-owning tensor views passed across the API: a pointer, an element type, a shape of rank 1,
// 2 or 3 (row-major, contiguous) and where the memory lives. moe-ep never frees what a view names.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace moe_ep {

enum class ScalarType : uint8_t {
  kBFloat16,    // bf16
  kFloat32,     // fp32
  kInt32,       // int32
  kFloat8E4M3,  // OCP e4m3, one byte
  kFloat8E8M0,  // unsigned power-of-two exponent byte
  kFloat4E2M1,  // two e2m1 values per byte, element 2i in the low nibble; shape counts bytes
  kUInt8,       // raw bytes
};

enum class DeviceType : uint8_t { kCpu, kCuda };

const char* to_string(ScalarType type);
int64_t element_size(ScalarType type);

struct TensorView {
  void* data = nullptr;
  ScalarType dtype = ScalarType::kUInt8;
  int ndim = 0;
  std::array<int64_t, 3> shape{0, 0, 0};
  DeviceType device = DeviceType::kCpu;
  int device_index = 0;

  static TensorView matrix(const void* data, ScalarType dtype, int64_t rows, int64_t cols,
                           DeviceType device = DeviceType::kCpu, int device_index = 0) {
    return TensorView{const_cast<void*>(data), dtype, 2, {rows, cols, 1}, device, device_index};
  }
  static TensorView vector(const void* data, ScalarType dtype, int64_t size,
                           DeviceType device = DeviceType::kCpu, int device_index = 0) {
    return TensorView{const_cast<void*>(data), dtype, 1, {size, 1, 1}, device, device_index};
  }
  // [d0, d1, d2], e.g. decode mode's per-expert slabs [E/W, W*Tmax, H].
  static TensorView tensor3(const void* data, ScalarType dtype, int64_t d0, int64_t d1, int64_t d2,
                            DeviceType device = DeviceType::kCpu, int device_index = 0) {
    return TensorView{const_cast<void*>(data), dtype, 3, {d0, d1, d2}, device, device_index};
  }

  bool defined() const { return ndim > 0; }
  int64_t rows() const { return shape[0]; }
  // Columns of a matrix; the product of the trailing dimensions for 3-D views.
  int64_t cols() const { return ndim == 2 ? shape[1] : ndim == 3 ? shape[1] * shape[2] : 1; }
  int64_t numel() const { return rows() * cols(); }
  int64_t nbytes() const { return numel() * element_size(dtype); }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  std::string describe() const;  // e.g. "bf16[4096, 7168] on cuda:0"
};

}  // namespace moe_ep
