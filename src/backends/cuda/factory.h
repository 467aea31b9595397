// Entry point of the CUDA backend for the backend-independent create_op (src/core/op.cc).
// Defined only when the library is built with CUDA (MOE_EP_WITH_CUDA).
#pragma once

#include <memory>
#include <string>

#include "moe_ep/op.h"

namespace moe_ep::cuda_backend {

std::shared_ptr<Op> create_op(const std::shared_ptr<Communicator>& comm, const OpConfig& config);
void reject_create(const std::shared_ptr<Communicator>& comm, const std::string& reason);

// INTERNAL, for tests only (not part of the public API): decode mode across nodes
// (low_latency with ranks_per_node < world_size) has its dispatch built but not its combine, so
// create_op refuses it. While this process-wide switch is on, create_op accepts it, and such an
// op's low_latency_dispatch runs the path across nodes (docs/multi-node.md, "Decode mode across
// nodes") while its low_latency_combine raises InvalidUsage before its step. Every rank of a
// communicator must see the same setting (the one-GPU test world: one process). Off by default.
void allow_decode_dispatch_across_nodes(bool allowed);
bool decode_dispatch_across_nodes_allowed();

}  // namespace moe_ep::cuda_backend
