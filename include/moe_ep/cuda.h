// The CUDA backend's communicators (docs/design.md#backends-and-transports): one rank per GPU over
// an ncclComm_t. A framework hands in its own communicator (make_nccl_communicator), or a single
// process driving several GPUs from threads creates one per device
// (make_local_nccl_communicators). make_single_gpu_world puts several ranks on one GPU, for
// protocol tests. Available when the library is built with CUDA (MOE_EP_WITH_CUDA); otherwise
// these functions throw InvalidArgument.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "moe_ep/op.h"

struct ncclComm;
typedef struct ncclComm* ncclComm_t;

namespace moe_ep {

// True when this moe-ep was built with the CUDA backend.
bool cuda_backend_built();
// Number of visible CUDA devices (0 without CUDA or without a driver).
int cuda_device_count();

// Collective over `comm`: wraps an existing communicator whose rank runs on `device`. The caller
// keeps ownership of `comm` and must keep it alive while ops created from it exist.
std::shared_ptr<Communicator> make_nccl_communicator(ncclComm_t comm, int device);

// Bootstrapping across processes (what the Python package does over a torch process group):
// one rank calls nccl_unique_id() and hands the bytes to every rank, which then calls
// make_nccl_communicator(id, rank, world_size, device) collectively (ncclCommInitRank). The
// returned object owns the communicator. The id is kNcclUniqueIdBytes raw bytes.
inline constexpr int kNcclUniqueIdBytes = 128;
std::string nccl_unique_id();
std::shared_ptr<Communicator> make_nccl_communicator(const std::string& unique_id, int rank,
                                                     int world_size, int device);

// One communicator per device, created with ncclCommInitAll and owned by the returned objects.
std::vector<std::shared_ptr<Communicator>> make_local_nccl_communicators(
    const std::vector<int>& devices);

// A test world of `world_size` ranks on ONE GPU: rank r is communicator r, driven from its own
// thread and stream; peers' buffers are plain device memory of that GPU, and the unchanged
// kernels and protocol run between them. It tests the protocol, not link speed: its times are
// never multi-GPU figures. Ranks wait on each other across streams, so a rank that starts a call
// late must still find room on the GPU beside what the others hold while they wait for it: one
// op of a rank may use at most b SMs, the largest b with (world_size - 1) * 2 * (4b + 1) <=
// SMs - 1 (132 SMs: 16 at W = 2, 5 at W = 4, 2 at W = 8; the whole GPU at W = 1; 1 at least; the
// default budget is clamped to it, an explicit larger num_sms is an error), and world sizes
// above the SM count are refused. timeout_s bounds the host-side exchanges of the world
// (0 takes MOE_EP_TIMEOUT_S). domain_size D (0: every rank) makes the world act like machines of
// D ranks: ranks [d*D, (d+1)*D) see each other's buffers, a rank sees no buffer outside its
// domain, and what crosses between domains goes through the world's loopback transport, as it
// would between machines over NCCL; D must divide world_size.
std::vector<std::shared_ptr<Communicator>> make_single_gpu_world(int world_size, int device = 0,
                                                                 double timeout_s = 0,
                                                                 int domain_size = 0);

}  // namespace moe_ep
