// Moving staged bytes between ranks of different nodes (docs/multi-node.md#transports). The
// hierarchical path stages what one rank sends to one peer (a forwarder of another node, or a
// source whose partials go back) in one contiguous device buffer and hands the buffers of a step
// to a Transport, which carries each to its peer. Two implementations: NCCL (grouped ncclSend /
// ncclRecv on the communicator that spans all ranks; transport.cc) and a loopback for the
// single-GPU test world (a device-to-device copy from the sender's buffer, ordered by events;
// single_gpu_world.cc), so that the one-GPU tests move the same staged bytes as nodes would.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "backends/cuda/device_error.h"
#include "backends/cuda/transfer_check.h"

struct ncclComm;
typedef struct ncclComm* ncclComm_t;

namespace moe_ep::cuda_backend {

// An exchange whose parts (peers, buffers, sizes) are fixed when it is made, then launched as
// often as needed; each launch may be captured in a CUDA graph (decode mode across nodes:
// docs/multi-node.md). Made by Transport::persistent.
class PersistentExchange {
 public:
  virtual ~PersistentExchange() = default;
  // Enqueues one exchange on `stream`, ordered like Transport::exchange: every send part's bytes
  // land in the peer's matching receive part, and only once the receiver's stream has reached
  // its matching launch (so it is done with the previous launch's bytes), as with NCCL's send
  // and receive. Every rank launches each of its persistent exchanges equally often and in the
  // same order. A wait that a transport bounds (the loopback's) reports into `err` after
  // `timeout_ns`; NCCL's never times out.
  virtual void launch(cudaStream_t stream, const ErrorSink& err, uint64_t timeout_ns) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;  // "nccl" or "loopback"
  // Collective: every rank of the communicator calls it for the same step, possibly with no
  // parts. A rank sends to and receives from each peer at most once per exchange (itself
  // included); the two ends of a transfer agree on its byte count, which callers make sure of by
  // exchanging counts first in parts of a fixed size. Enqueued on `stream`: the send buffers are
  // read after the stream's earlier work, the receive buffers are written before its later
  // work, and later work on `stream` may overwrite the send buffers. Not capturable in a CUDA
  // graph (the loopback orders ranks on the host).
  virtual void exchange(const std::vector<TransferPart>& sends,
                        const std::vector<TransferPart>& recvs, cudaStream_t stream) = 0;

  // Collective, on the host: every rank calls it with the parts it will send and receive at each
  // launch. The two ends of every transfer must agree on its bytes; every rank checks all pairs
  // and throws Internal naming the first that does not. The buffers must outlive the exchange.
  virtual std::unique_ptr<PersistentExchange> persistent(const std::vector<TransferPart>& sends,
                                                         const std::vector<TransferPart>& recvs,
                                                         cudaStream_t stream) = 0;
};

// Over an NCCL communicator that spans all ranks (not owned). NCCL does not check that the two
// ends of a transfer agree; the callers' count exchange does.
std::unique_ptr<Transport> make_nccl_transport(ncclComm_t comm, int world_size);

}  // namespace moe_ep::cuda_backend
