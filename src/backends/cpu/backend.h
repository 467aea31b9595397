// Entry point of the CPU backend for the backend-independent create_op (src/core/op.cc). The
// communicator must come from a CpuWorld (moe_ep/cpu.h).
#pragma once

#include <memory>
#include <string>

#include "moe_ep/op.h"

namespace moe_ep::cpu_backend {

// Collective over the ranks of comm's CpuWorld: checks the configuration (a rejection is told to
// the other ranks), joins the creation of the same configuration on every rank, allocates this
// rank's receive buffers.
std::shared_ptr<Op> create_op(const std::shared_ptr<Communicator>& comm, const OpConfig& config);

// Tells the ranks of comm's CpuWorld that this rank rejected a creation (moe_ep::reject_create).
void reject_create(const std::shared_ptr<Communicator>& comm, const std::string& reason);
// What create_op(comm, config) would allocate on this rank (moe_ep::op_memory).
OpMemory op_memory(const std::shared_ptr<Communicator>& comm, const OpConfig& config);

}  // namespace moe_ep::cpu_backend
