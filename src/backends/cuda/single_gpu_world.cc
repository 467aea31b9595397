// The single-GPU test world (moe_ep/cuda.h, make_single_gpu_world): W ranks on one device, each
// a communicator driven from its own thread and stream. Symmetric memory is plain device memory
// of that device (every rank's kernels can store into any of it); publishing a buffer is a
// bounded host barrier at which the ranks exchange base addresses. The control areas are made
// by the world itself. Each rank's ops get at most the SMs of single_gpu_world_sms_per_rank
// (policy.h), so that a rank that starts a call late still finds room beside what the others
// hold while they wait for it, which their waits on each other need.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backends/cpu/barrier.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_comm.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/policy.h"
#include "backends/cuda/resources.h"
#include "backends/cuda/transport.h"
#include "core/log.h"
#include "moe_ep/config.h"
#include "moe_ep/cuda.h"

namespace moe_ep {
namespace cuda_backend {

class SingleGpuCommunicator;

namespace {

// The loopback transport's mailbox: what every rank declared for the current exchange. Entry
// [src * W + dst]: src writes the send side (and its buffer), dst the receive side, each its own
// fields, between the exchange's barriers.
struct LoopbackMailbox {
  std::vector<TransferEnds> ends;              // [W * W]
  std::vector<const void*> data;               // [W * W] src's send buffer for dst
  std::vector<std::unique_ptr<Event>> sent;    // [W] recorded after a rank's sends are ready
  std::vector<std::unique_ptr<Event>> copied;  // [W] recorded after a rank's receives landed
  // Persistent exchanges, while one is being made:
  std::vector<void*> recv_data;  // [W * W] dst's receive buffer for src
  std::vector<uint64_t*> flags;  // [W] rank r's data flags ([W], flags[q] written by sender q)
  std::vector<uint64_t*> ready;  // [W] rank r's ready flags ([W], ready[q] written by receiver q)
};

struct WorldShared {
  WorldShared(int world_size, double timeout_s)
      : barrier(world_size, timeout_s), bases(world_size, nullptr) {
    const size_t pairs = static_cast<size_t>(world_size) * world_size;
    loopback.ends.assign(pairs, TransferEnds{});
    loopback.data.assign(pairs, nullptr);
    loopback.recv_data.assign(pairs, nullptr);
    loopback.flags.assign(world_size, nullptr);
    loopback.ready.assign(world_size, nullptr);
  }
  // Events of the loopback transport, made on the world's device before any rank exists.
  void make_events(int world_size) {
    for (int r = 0; r < world_size; ++r) {
      loopback.sent.push_back(std::make_unique<Event>());
      loopback.copied.push_back(std::make_unique<Event>());
    }
  }
  cpu_backend::BoundedBarrier barrier;
  std::vector<char*> bases;  // [W] the buffers being published
  LoopbackMailbox loopback;
};

// The loopback transport (transport.h) between the world's ranks: each rank posts its parts in
// the mailbox and records an event after its sends' producers; at a bounded host barrier every
// rank checks the whole mailbox (so a mismatch is found by every rank, which all raise it), then
// copies what it receives straight from the senders' buffers, device to device on its stream
// behind each sender's event, and records its own event; after a second barrier each sender's
// stream waits for its receivers' events, so later work reuses a send buffer only once it has
// been copied. A rank's stream so waits for its receivers' earlier work: an exchange is a step
// every rank reaches, never one a rank's earlier kernel waits for.
class LoopbackTransport : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<WorldShared> world, int rank, int world_size)
      : world_(std::move(world)), rank_(rank), size_(world_size) {}
  const char* name() const override { return "loopback"; }

  void exchange(const std::vector<TransferPart>& sends, const std::vector<TransferPart>& recvs,
                cudaStream_t stream) override {
    check_transfer_parts(sends, size_, "sends");
    check_transfer_parts(recvs, size_, "receives");
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    MOE_EP_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) {
      throw Internal("the loopback transport cannot be captured in a CUDA graph");
    }
    LoopbackMailbox& box = world_->loopback;
    const auto at = [this](int src, int dst) { return static_cast<size_t>(src) * size_ + dst; };
    for (int peer = 0; peer < size_; ++peer) {
      box.ends[at(rank_, peer)].send_bytes = -1;
      box.data[at(rank_, peer)] = nullptr;
      box.ends[at(peer, rank_)].recv_bytes = -1;
    }
    for (const TransferPart& part : sends) {
      box.ends[at(rank_, part.peer)].send_bytes = static_cast<int64_t>(part.bytes);
      box.data[at(rank_, part.peer)] = part.data;
    }
    for (const TransferPart& part : recvs) {
      box.ends[at(part.peer, rank_)].recv_bytes = static_cast<int64_t>(part.bytes);
    }
    try {
      MOE_EP_CUDA_CHECK(cudaEventRecord(box.sent[rank_]->get(), stream));
      world_->barrier.arrive_and_wait(rank_, "loopback transport/posted");
      const std::string mismatch = transfer_mismatch(box.ends, size_);
      if (!mismatch.empty()) {
        // Every rank found it; none changes the mailbox before all have read it.
        world_->barrier.arrive_and_wait(rank_, "loopback transport/checked");
        throw Internal("loopback transport: " + mismatch);
      }
      for (const TransferPart& part : recvs) {
        if (part.bytes == 0) continue;
        MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, box.sent[part.peer]->get(), 0));
        MOE_EP_CUDA_CHECK(cudaMemcpyAsync(part.data, box.data[at(part.peer, rank_)], part.bytes,
                                          cudaMemcpyDeviceToDevice, stream));
      }
      MOE_EP_CUDA_CHECK(cudaEventRecord(box.copied[rank_]->get(), stream));
      world_->barrier.arrive_and_wait(rank_, "loopback transport/copied");
      for (const TransferPart& part : sends) {
        if (part.bytes == 0) continue;
        MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, box.copied[part.peer]->get(), 0));
      }
    } catch (const CudaError& e) {
      world_->barrier.break_group(rank_, e.code(), e.what());  // the peers stop waiting for us
      throw;
    }
  }

  // The parts go through the mailbox once, at a bounded host barrier where every rank checks
  // every pair (as exchange() does) and learns its receivers' buffers and flags; each launch is
  // then one kernel (loopback.cu), which a graph can hold.
  std::unique_ptr<PersistentExchange> persistent(const std::vector<TransferPart>& sends,
                                                 const std::vector<TransferPart>& recvs,
                                                 cudaStream_t stream) override;

 private:
  std::shared_ptr<WorldShared> world_;
  int rank_;
  int size_;
};

class LoopbackPersistent : public PersistentExchange {
 public:
  LoopbackPersistent(int device, int rank, int world_size) : device_(device) {
    params_.rank = rank;
    params_.world_size = world_size;
    flags_ = DeviceArray<uint64_t>(device, world_size);
    ready_ = DeviceArray<uint64_t>(device, world_size);
    seq_ = DeviceArray<uint64_t>(device, 1);
    done_ = DeviceArray<unsigned int>(device, 1);
    params_.flags = flags_.get();
    params_.seq = seq_.get();
    params_.done = done_.get();
  }
  uint64_t* ready() const { return ready_.get(); }
  void zero(cudaStream_t stream) {
    flags_.zero(stream);
    ready_.zero(stream);
    seq_.zero(stream);
    done_.zero(stream);
  }
  LoopbackParams& params() { return params_; }
  void launch(cudaStream_t stream, const ErrorSink& err, uint64_t timeout_ns) override {
    LoopbackParams p = params_;
    p.err = err;
    p.timeout_ns = timeout_ns;
    DeviceGuard guard(device_);
    MOE_EP_CUDA_CHECK(launch_loopback_exchange(p, stream));
  }

 private:
  int device_;
  LoopbackParams params_{};
  DeviceArray<uint64_t> flags_;
  DeviceArray<uint64_t> ready_;
  DeviceArray<uint64_t> seq_;
  DeviceArray<unsigned int> done_;
};

std::unique_ptr<PersistentExchange> LoopbackTransport::persistent(
    const std::vector<TransferPart>& sends, const std::vector<TransferPart>& recvs,
    cudaStream_t stream) {
  check_transfer_parts(sends, size_, "sends");
  check_transfer_parts(recvs, size_, "receives");
  std::unique_ptr<LoopbackPersistent> made;
  try {
    int device = 0;
    MOE_EP_CUDA_CHECK(cudaGetDevice(&device));
    made = std::make_unique<LoopbackPersistent>(device, rank_, size_);
    made->zero(stream);  // synchronous (DeviceArray::zero): zero before any peer can store
  } catch (const CudaError& e) {
    world_->barrier.break_group(rank_, e.code(), e.what());  // the peers stop waiting for us
    throw;
  }
  LoopbackMailbox& box = world_->loopback;
  const auto at = [this](int src, int dst) { return static_cast<size_t>(src) * size_ + dst; };
  for (int peer = 0; peer < size_; ++peer) {
    box.ends[at(rank_, peer)].send_bytes = -1;
    box.ends[at(peer, rank_)].recv_bytes = -1;
    box.recv_data[at(peer, rank_)] = nullptr;
  }
  LoopbackParams& p = made->params();
  for (const TransferPart& part : sends) {
    box.ends[at(rank_, part.peer)].send_bytes = static_cast<int64_t>(part.bytes);
  }
  for (const TransferPart& part : recvs) {
    box.ends[at(part.peer, rank_)].recv_bytes = static_cast<int64_t>(part.bytes);
    box.recv_data[at(part.peer, rank_)] = part.data;
    if (part.bytes > 0) p.recv_mask |= uint64_t{1} << part.peer;
  }
  box.flags[rank_] = p.flags;
  box.ready[rank_] = made->ready();
  world_->barrier.arrive_and_wait(rank_, "loopback persistent exchange/posted");
  const std::string mismatch = transfer_mismatch(box.ends, size_);
  if (mismatch.empty()) {
    for (const TransferPart& part : sends) {
      if (part.bytes == 0) continue;
      LoopbackSend& s = p.sends[p.num_sends++];
      s.dst = static_cast<char*>(box.recv_data[at(rank_, part.peer)]);
      s.src = static_cast<const char*>(part.data);
      s.bytes = part.bytes;
      s.flag = box.flags[part.peer] + rank_;
      s.ready = made->ready() + part.peer;
      s.peer = part.peer;
    }
    for (const TransferPart& part : recvs) {
      if (part.bytes > 0) p.ready_at[part.peer] = box.ready[part.peer] + rank_;
    }
  }
  // Nobody changes the mailbox before every rank has read it.
  world_->barrier.arrive_and_wait(rank_, "loopback persistent exchange/read");
  if (!mismatch.empty()) throw Internal("loopback transport (persistent exchange): " + mismatch);
  return made;
}

class PlainSymmetric : public SymmetricMemory {
 public:
  PlainSymmetric(int device, size_t bytes, cudaStream_t stream) : device_(device) {
    DeviceGuard guard(device);
    local_ = static_cast<char*>(device_alloc(device, bytes));  // stream-ordered (resources.h)
    bytes_ = bytes;
    MOE_EP_CUDA_CHECK(cudaMemsetAsync(local_, 0, bytes, stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  ~PlainSymmetric() override {
    if (abandoned_) return;  // a peer may still store into it
    device_free(device_, local_);
  }
  void abandon() override { abandoned_ = true; }
  void set_peer(int rank, char* base) { peers_.base[rank] = base; }

 private:
  int device_;
  bool abandoned_ = false;
};

uint64_t next_group_id() {
  static std::atomic<uint64_t> next{1};
  return (0x5167ull << 48) | next++;  // apart from NCCL groups' random ids
}

}  // namespace

class SingleGpuCommunicator : public CudaComm {
 public:
  SingleGpuCommunicator(std::shared_ptr<WorldShared> world, int rank, int world_size,
                        int domain_size, int device, int max_sms, uint64_t group_id,
                        std::unique_ptr<SymmetricMemory> control)
      : world_(std::move(world)),
        rank_(rank),
        size_(world_size),
        domain_size_(domain_size),
        device_(device),
        max_sms_(max_sms),
        group_id_(group_id),
        control_(std::move(control)),
        transport_(std::make_unique<LoopbackTransport>(world_, rank, world_size)) {
    ledger_.init(device, world_size);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint64_t group_id() const override { return group_id_; }
  int device() const override { return device_; }
  int max_sms() const override { return max_sms_; }
  int domain_size() const override { return domain_size_; }
  const SymmetricMemory& control() const override { return *control_; }
  Transport& transport() override { return *transport_; }

  std::unique_ptr<SymmetricMemory> allocate(size_t bytes) override {
    return std::make_unique<PlainSymmetric>(device_, bytes, internal_stream());
  }

  void publish(SymmetricMemory& memory) override {
    world_->bases[rank_] = memory.local();
    world_->barrier.arrive_and_wait(rank_, "single-GPU world/publish");
    auto& plain = static_cast<PlainSymmetric&>(memory);
    // Outside its domain a rank knows no buffer, as between machines.
    for (int r = 0; r < size_; ++r) plain.set_peer(r, same_domain(r) ? world_->bases[r] : nullptr);
    // Nobody publishes the next buffer before every rank has read this one's addresses.
    world_->barrier.arrive_and_wait(rank_, "single-GPU world/published");
  }

 private:
  std::shared_ptr<WorldShared> world_;
  int rank_;
  int size_;
  int domain_size_;
  int device_;
  int max_sms_;
  uint64_t group_id_;
  std::unique_ptr<SymmetricMemory> control_;
  std::unique_ptr<Transport> transport_;
};

}  // namespace cuda_backend

std::vector<std::shared_ptr<Communicator>> make_single_gpu_world(int world_size, int device,
                                                                 double timeout_s,
                                                                 int domain_size) {
  const int count = cuda_device_count();
  MOE_EP_CHECK_ARG(device >= 0 && device < count, "device=", device,
                   " is not a visible CUDA device (", count, " visible)");
  MOE_EP_CHECK_ARG(world_size >= 1 && world_size <= cuda_backend::Policy::kMaxPeers,
                   "make_single_gpu_world: world_size=", world_size, " must be in [1, ",
                   cuda_backend::Policy::kMaxPeers, "]");
  MOE_EP_CHECK_ARG(std::isfinite(timeout_s) && timeout_s >= 0 && timeout_s <= 1e9,
                   "make_single_gpu_world: timeout_s=", timeout_s, " must be in [0, 1e9]");
  MOE_EP_CHECK_ARG(domain_size >= 0 && domain_size <= world_size,
                   "make_single_gpu_world: domain_size=", domain_size,
                   " must be in [0, world_size=", world_size, "]");
  const int domain = domain_size > 0 ? domain_size : world_size;
  MOE_EP_CHECK_ARG(world_size % domain == 0, "make_single_gpu_world: domain_size=", domain_size,
                   " does not divide world_size=", world_size);
  int sms = 0;
  MOE_EP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  MOE_EP_CHECK_ARG(world_size <= sms, "make_single_gpu_world: world_size=", world_size,
                   " ranks cannot all be resident on device ", device, " with ", sms,
                   " SMs: each rank needs at least 1");
  const int per_rank = cuda_backend::single_gpu_world_sms_per_rank(sms, world_size);
  if (!cuda_backend::single_gpu_world_leaves_an_sm(sms, world_size, per_rank)) {
    MOE_EP_LOG(LogLevel::kWarn, "make_single_gpu_world(", world_size, "): ", sms,
               " SMs leave no SM free for a late rank's largest block beside what ", world_size - 1,
               " waiting ranks may hold at 1 SM each (policy.h, single_gpu_world_sms_per_rank);"
               " a rank that starts a call late can wait until the timeout");
  }
  const double timeout = timeout_s > 0 ? timeout_s : Knobs::get().timeout_s;
  // Each rank needs its stream on a hardware queue of its own (resources.h, Stream): with fewer
  // queues than streams a rank's kernel can wait behind another rank's waiting kernel.
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const int queues = connections != nullptr ? std::atoi(connections) : 8;
  // With lazy module loading (CUDA's default) a rank's first launch of a kernel may wait for the
  // device's running work, i.e. for another rank's kernel waiting for this one: load them all
  // now, before any rank exists (launch.h, preload_kernels).
  cuda_backend::preload_kernels(device);
  // The library's memory pool and host slab exist before any rank does (resources.h).
  cuda_backend::reserve_library_memory(device);
  if (queues < 2 * world_size + 2) {
    MOE_EP_LOG(LogLevel::kWarn, "make_single_gpu_world(", world_size,
               "): CUDA_DEVICE_MAX_CONNECTIONS=", queues, " hardware queues may be too few for ",
               world_size,
               " ranks' streams (ranks can then wait on each other until the timeout);"
               " set CUDA_DEVICE_MAX_CONNECTIONS=32 before the process first uses CUDA");
  }
  auto shared = std::make_shared<cuda_backend::WorldShared>(world_size, timeout);
  std::vector<std::unique_ptr<cuda_backend::PlainSymmetric>> controls;
  {
    cuda_backend::DeviceGuard guard(device);
    cuda_backend::Stream stream;  // made and gone before any rank's stream exists
    shared->make_events(world_size);
    for (int r = 0; r < world_size; ++r) {
      controls.push_back(std::make_unique<cuda_backend::PlainSymmetric>(
          device, cuda_backend::kControlBytesPerRank * world_size, stream.get()));
    }
  }
  for (int q = 0; q < world_size; ++q) {
    for (int r = 0; r < world_size; ++r) {
      controls[q]->set_peer(r, q / domain == r / domain ? controls[r]->local() : nullptr);
    }
  }
  const uint64_t group_id = cuda_backend::next_group_id();
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < world_size; ++r) {
    out.push_back(std::make_shared<cuda_backend::SingleGpuCommunicator>(
        shared, r, world_size, domain, device, per_rank, group_id, std::move(controls[r])));
  }
  return out;
}

}  // namespace moe_ep
