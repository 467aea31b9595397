// Tensor views: element sizes and descriptions for error messages.
#include "moe_ep/tensor.h"

#include <sstream>

namespace moe_ep {

const char* to_string(ScalarType type) {
  switch (type) {
    case ScalarType::kBFloat16: return "bf16";
    case ScalarType::kFloat32: return "fp32";
    case ScalarType::kInt32: return "int32";
    case ScalarType::kFloat8E4M3: return "e4m3";
    case ScalarType::kFloat8E8M0: return "e8m0";
    case ScalarType::kFloat4E2M1: return "e2m1x2";
    case ScalarType::kUInt8: return "uint8";
  }
  return "unknown";
}

int64_t element_size(ScalarType type) {
  switch (type) {
    case ScalarType::kBFloat16: return 2;
    case ScalarType::kFloat32:
    case ScalarType::kInt32: return 4;
    case ScalarType::kFloat8E4M3:
    case ScalarType::kFloat8E8M0:
    case ScalarType::kFloat4E2M1:
    case ScalarType::kUInt8: return 1;
  }
  return 1;
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << to_string(dtype) << "[";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << shape[d];
  os << "] on " << (device == DeviceType::kCpu ? "cpu" : "cuda:" + std::to_string(device_index));
  return os.str();
}

}  // namespace moe_ep
