// Entry point of the CPU backend for the backend-independent create_op (src/core/op.cc). The
// communicator must come from a CpuWorld (moe_ep/cpu.h).
#pragma once

#include <memory>

#include "moe_ep/op.h"

namespace moe_ep::cpu_backend {

// Collective over the ranks of comm's CpuWorld: checks the configuration on every rank, checks
// that every rank passed the same one, allocates this rank's receive buffers.
std::shared_ptr<Op> create_op(const std::shared_ptr<Communicator>& comm, const OpConfig& config);

}  // namespace moe_ep::cpu_backend
