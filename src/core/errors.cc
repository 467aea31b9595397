// The error family: names of the codes and the code -> exception mapping.
#include "moe_ep/errors.h"

namespace moe_ep {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kInvalidUsage: return "InvalidUsage";
    case ErrorCode::kTimeout: return "Timeout";
    case ErrorCode::kRemoteError: return "RemoteError";
    case ErrorCode::kCudaError: return "CudaError";
    case ErrorCode::kNcclError: return "NcclError";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

void throw_error(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::kInvalidArgument: throw InvalidArgument(message);
    case ErrorCode::kInvalidUsage: throw InvalidUsage(message);
    case ErrorCode::kTimeout: throw Timeout(message);
    case ErrorCode::kRemoteError: throw RemoteError(message);
    case ErrorCode::kCudaError: throw CudaError(message);
    case ErrorCode::kNcclError: throw NcclError(message);
    case ErrorCode::kInternal: throw Internal(message);
  }
  throw Internal("unknown error code " + std::to_string(static_cast<int>(code)) + ": " + message);
}

}  // namespace moe_ep
