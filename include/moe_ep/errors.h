// The moe-ep error family (docs/design.md#errors). Every failure the library reports is an
// moe_ep::Error with a code. InvalidArgument and InvalidUsage leave the op usable; the other codes
// poison it, and later calls on that op raise InvalidUsage("op unusable after: <first error>").
#pragma once

#include <stdexcept>
#include <string>

namespace moe_ep {

enum class ErrorCode {
  kInvalidArgument,  // a value the caller passed breaks a rule (incl. a stale or foreign handle)
  kInvalidUsage,     // a call on an op that a poisoning error made unusable
  kTimeout,          // a bounded wait expired (peer missing or dead)
  kRemoteError,      // another rank failed during a collective call
  kCudaError,        // a CUDA runtime or kernel error
  kNcclError,        // an NCCL call failed
  kInternal,         // a broken invariant inside moe-ep
};

const char* to_string(ErrorCode code);

// True for the codes after which an op must not be used again.
inline bool poisons_op(ErrorCode code) {
  return code != ErrorCode::kInvalidArgument && code != ErrorCode::kInvalidUsage;
}

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

#define MOE_EP_DECLARE_ERROR(Name)                                                    \
  class Name : public Error {                                                         \
   public:                                                                            \
    explicit Name(const std::string& message) : Error(ErrorCode::k##Name, message) {} \
  }

MOE_EP_DECLARE_ERROR(InvalidArgument);
MOE_EP_DECLARE_ERROR(InvalidUsage);
MOE_EP_DECLARE_ERROR(Timeout);
MOE_EP_DECLARE_ERROR(RemoteError);
MOE_EP_DECLARE_ERROR(CudaError);
MOE_EP_DECLARE_ERROR(NcclError);
MOE_EP_DECLARE_ERROR(Internal);

#undef MOE_EP_DECLARE_ERROR

// Rethrows `message` as the exception type that matches `code`.
[[noreturn]] void throw_error(ErrorCode code, const std::string& message);

}  // namespace moe_ep
