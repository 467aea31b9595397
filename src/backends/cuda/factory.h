// Entry point of the CUDA backend for the backend-independent create_op (src/core/op.cc).
// Defined only when the library is built with CUDA (MOE_EP_WITH_CUDA).
#pragma once

#include <memory>
#include <string>

#include "moe_ep/op.h"

namespace moe_ep::cuda_backend {

std::shared_ptr<Op> create_op(const std::shared_ptr<Communicator>& comm, const OpConfig& config);
void reject_create(const std::shared_ptr<Communicator>& comm, const std::string& reason);
OpMemory op_memory(const std::shared_ptr<Communicator>& comm, const OpConfig& config);

}  // namespace moe_ep::cuda_backend
