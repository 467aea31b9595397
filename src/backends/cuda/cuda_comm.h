// What the CUDA op needs from a communicator, whatever joins its ranks: NCCL symmetric memory
// between GPUs (nccl_comm.cc) or plain device memory of one GPU shared by W ranks of the
// single-GPU test world (single_gpu_world.cc). A communicator owns a small control area, made
// when the communicator is, through which op creations are agreed on before anything collective
// is allocated (create_rendezvous.cu); an op then asks it for its symmetric buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/cuda/device_error.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/resources.h"
#include "backends/cuda/transport.h"
#include "core/agreement.h"
#include "moe_ep/op.h"

namespace moe_ep::cuda_backend {

// Memory every rank's kernels can store into: this rank's buffer and every rank's base address
// as seen from this rank's GPU. Releasing it is collective (each rank releases its own when its
// op goes); an op poisoned by a dead peer abandons it instead, since a collective release would
// wait for that peer.
class SymmetricMemory {
 public:
  virtual ~SymmetricMemory() = default;
  char* local() const { return local_; }
  const PeerTable& peers() const { return peers_; }
  size_t bytes() const { return bytes_; }
  virtual void abandon() {}

 protected:
  char* local_ = nullptr;
  PeerTable peers_{};
  size_t bytes_ = 0;
};

// One rank's slot in every peer's control area: its latest creation attempt.
struct CreateSlot {
  uint64_t tag;             // attempt << 2 | state (kCreateJoining or kCreateRejected)
  uint64_t reject_attempt;  // the attempt of its latest rejection, 0 when none
  int64_t config[kNumConfigFields];
  StepReason reason;
  // The rank's attempt before this one, as it was: a peer still in that round when this rank has
  // already left it (it timed out there) judges the round by it instead of waiting for a match
  // that cannot come (the round's configuration is no longer in `config`).
  uint64_t prev_tag;
  int64_t prev_config[kNumConfigFields];
};
inline constexpr uint64_t kCreateJoining = 1;
inline constexpr uint64_t kCreateRejected = 2;
inline constexpr size_t kControlBytesPerRank = (sizeof(CreateSlot) + 255) / 256 * 256;

// A rank's memory of the creations it has taken part in, and what its rendezvous kernel
// reports through (guarded by mu). The mapped memory and the stream are made with the
// communicator, never during a creation: freeing pinned memory waits for the whole device, and in
// the single-GPU world that would wait for a peer's rendezvous kernel, which waits for this rank.
struct CreateLedger {
  std::mutex mu;
  uint64_t attempts = 0;       // this rank's creation attempts so far
  uint64_t rejected_at = 0;    // its latest rejection
  std::vector<uint64_t> seen;  // [W] every peer's attempts accounted for
  // Several domains: this rank's attempt as it crosses the transport, and the other domains'
  // ranks' attempts as they arrive (device memory, made with the communicator).
  std::unique_ptr<DeviceArray<CreateSlot>> slot_out;  // [1]
  std::unique_ptr<DeviceArray<CreateSlot>> slots_in;  // [W]
  // The latest round (attempt number; every rank counts the rounds alike) that failed on this
  // rank: a peer's join from that round or earlier is void, even if this rank never saw it (it
  // may be posted after this rank left the round).
  uint64_t failed_round = 0;
  // This rank's latest attempt (tag and configuration), which its next attempt's slot carries
  // as the previous one (CreateSlot::prev_tag).
  uint64_t last_tag = 0;
  ConfigValues last_values{};
  std::unique_ptr<HostMapped<CreateOutcome>> outcome;
  std::unique_ptr<HostMapped<StepReason>> reason;
  std::unique_ptr<Stream> stream;
  void init(int device, int world_size) {
    DeviceGuard guard(device);
    seen.assign(world_size, 0);
    slot_out = std::make_unique<DeviceArray<CreateSlot>>(device, 1);
    slots_in = std::make_unique<DeviceArray<CreateSlot>>(device, world_size);
    outcome = std::make_unique<HostMapped<CreateOutcome>>();
    reason = std::make_unique<HostMapped<StepReason>>();
    stream = std::make_unique<Stream>();
  }
};

class CudaComm : public Communicator {
 public:
  Backend backend() const override { return Backend::kCuda; }
  virtual int device() const = 0;
  // SMs one op of this rank may occupy at most: the device's own for one rank per GPU, a share
  // of it for the single-GPU world, where every rank's kernels must fit on the GPU together.
  virtual int max_sms() const = 0;
  // Local: zeroed memory of `bytes` on this rank's device, not yet known to the peers.
  virtual std::unique_ptr<SymmetricMemory> allocate(size_t bytes) = 0;
  // Collective, called once every rank has allocated: fills in every rank's base address.
  virtual void publish(SymmetricMemory& memory) = 0;
  // The control area: kControlBytesPerRank per source rank, made with the communicator.
  virtual const SymmetricMemory& control() const = 0;
  // Carries staged bytes between ranks of different nodes (transport.h): NCCL's send and
  // receive, or the single-GPU world's loopback. Made with the communicator.
  virtual Transport& transport() = 0;
  // Made with the communicator (CreateLedger::init, in the implementation's constructor).
  CreateLedger& ledger() { return ledger_; }
  // The communicator's own stream, for its ops' housekeeping (zeroing, clearing errors).
  cudaStream_t internal_stream() const { return ledger_.stream->get(); }
  // Ranks [d*D, (d+1)*D) reach each other's memory by load and store (one NVLink domain); a
  // rank's control area and buffers are known only to its domain (SymmetricMemory::peers holds
  // null for the others), and what crosses domains goes through transport(). D divides the
  // world size; D = size() is one domain.
  virtual int domain_size() const { return size(); }
  int domain_first() const { return rank() / domain_size() * domain_size(); }
  bool same_domain(int peer) const { return peer / domain_size() == rank() / domain_size(); }

 protected:
  CreateLedger ledger_;
};

// The CUDA communicator behind `comm` (InvalidArgument naming the backend when it is none).
std::shared_ptr<CudaComm> cuda_comm_of(const std::shared_ptr<Communicator>& comm);

}  // namespace moe_ep::cuda_backend
