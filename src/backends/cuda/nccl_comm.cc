// NCCL communicators for the CUDA backend and the public functions of moe_ep/cuda.h.
#include "backends/cuda/nccl_comm.h"

#include <nccl_device.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <random>
#include <thread>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/nccl_check.h"
#include "backends/cuda/resources.h"
#include "moe_ep/cuda.h"

namespace moe_ep {
namespace cuda_backend {
namespace {

// A buffer in NCCL symmetric memory: ncclMemAlloc'd, then registered as a window (collective).
// Deregistration is collective too, so an abandoned buffer (its op poisoned by a dead peer) is
// left as it is rather than waiting for that peer.
class NcclSymmetric : public SymmetricMemory {
 public:
  NcclSymmetric(ncclComm_t comm, int device, size_t bytes, cudaStream_t stream)
      : comm_(comm), device_(device), stream_(stream) {
    DeviceGuard guard(device);
    void* p = nullptr;
    MOE_EP_NCCL_CHECK(ncclMemAlloc(&p, bytes));
    local_ = static_cast<char*>(p);
    bytes_ = bytes;
    MOE_EP_CUDA_CHECK(cudaMemsetAsync(local_, 0, bytes, stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  ~NcclSymmetric() override {
    if (abandoned_) return;
    DeviceGuard guard(device_);
    if (window_ != nullptr) ncclCommWindowDeregister(comm_, window_);
    ncclMemFree(local_);
  }
  void abandon() override { abandoned_ = true; }

  // Collective: registers the window and reads the base address of every rank of this rank's
  // domain ([domain_first, domain_first + domain_size)) through it; the others stay null.
  void publish(int rank, int world, int domain_first, int domain_size) {
    DeviceGuard guard(device_);
    MOE_EP_NCCL_CHECK(
        ncclCommWindowRegister(comm_, local_, bytes_, &window_, NCCL_WIN_COLL_SYMMETRIC));
    if (world == 1) {
      // A one-rank window has no peer mapping to resolve (ncclGetPeerPointer faults on it).
      peers_.base[0] = local_;
      return;
    }
    DeviceArray<char*> resolved(device_, world);
    MOE_EP_CUDA_CHECK(resolve_peer_pointers(window_, world, resolved.get(), stream_));
    MOE_EP_CUDA_CHECK(cudaMemcpyAsync(peers_.base, resolved.get(), sizeof(char*) * world,
                                      cudaMemcpyDeviceToHost, stream_));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    MOE_EP_CHECK_INTERNAL(peers_.base[rank] != nullptr, "window of rank ", rank,
                          " resolved to a null address");
    for (int r = 0; r < world; ++r) {
      if (r < domain_first || r >= domain_first + domain_size) peers_.base[r] = nullptr;
    }
  }

 private:
  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_;  // the communicator's internal stream
  ncclWindow_t window_ = nullptr;
  bool abandoned_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int device, uint64_t group_id, bool owned)
    : comm_(comm), device_(device), group_id_(group_id), owned_(owned) {
  MOE_EP_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
  MOE_EP_NCCL_CHECK(ncclCommCount(comm_, &size_));
  // The ranks this one reaches by load and store (its NVLink domain): the only ones whose
  // windows it may store into, and the only ones ncclGetPeerPointer resolves (for the others it
  // would compute an address that is not theirs). The CUDA backend takes domains of consecutive
  // ranks, the same size everywhere (CudaComm::domain_size); every rank of such a communicator
  // sees the same team shape, so all accept or all refuse.
  domain_size_ = size_;
  if (size_ > 1) {
    const ncclTeam_t lsa = ncclTeamLsa(comm_);
    const bool one_domain = lsa.nRanks == size_;  // taken as it is (one machine)
    if (!one_domain && (lsa.nRanks < 1 || size_ % lsa.nRanks != 0 || lsa.stride != 1 ||
                        lsa.rank != rank_ % lsa.nRanks)) {
      // Nothing is held yet; a communicator made here is destroyed by its maker's catch.
      throw InvalidArgument(detail::concat(
          "NCCL communicator of ", size_, " ranks: rank ", rank_,
          "'s load/store team (its NVLink "
          "domain) has ",
          lsa.nRanks, " ranks, index ", lsa.rank, ", stride ", lsa.stride,
          "; the CUDA backend needs domains of consecutive ranks of one size dividing the "
          "world (place ranks machine by machine)"));
    }
    domain_size_ = lsa.nRanks;
  }
  MOE_EP_CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device_));
  ledger_.init(device_, size_);
  preload_kernels(device_);  // before any kernel of ours can wait for a peer (launch.h)
  control_ = allocate(kControlBytesPerRank * static_cast<size_t>(size_));
  publish(*control_);
  transport_ = make_nccl_transport(comm_, size_);
}

NcclCommunicator::~NcclCommunicator() {
  transport_.reset();
  control_.reset();
  if (owned_) ncclCommDestroy(comm_);
}

std::unique_ptr<SymmetricMemory> NcclCommunicator::allocate(size_t bytes) {
  return std::make_unique<NcclSymmetric>(comm_, device_, bytes, internal_stream());
}

void NcclCommunicator::publish(SymmetricMemory& memory) {
  static_cast<NcclSymmetric&>(memory).publish(rank_, size_, domain_first(), domain_size_);
}

namespace {

uint64_t fresh_group_id() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  const uint64_t salt = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return salt ^ (++counter) ^
         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace
}  // namespace cuda_backend

bool cuda_backend_built() { return true; }

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::shared_ptr<Communicator> make_nccl_communicator(ncclComm_t comm, int device) {
  MOE_EP_CHECK_ARG(comm != nullptr, "comm=null: an initialised ncclComm_t is required");
  const int count = cuda_device_count();
  MOE_EP_CHECK_ARG(device >= 0 && device < count, "device=", device, " is not a visible CUDA ",
                   "device (", count, " visible)");
  cuda_backend::DeviceGuard guard(device);
  // Agree on a group id: rank 0's random value, broadcast over the communicator itself.
  uint64_t* id_device = nullptr;
  MOE_EP_CUDA_CHECK(cudaMalloc(&id_device, sizeof(uint64_t)));
  uint64_t id = cuda_backend::fresh_group_id();
  cudaStream_t stream = nullptr;
  try {
    MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MOE_EP_CUDA_CHECK(cudaMemcpyAsync(id_device, &id, sizeof(id), cudaMemcpyHostToDevice, stream));
    MOE_EP_NCCL_CHECK(ncclBroadcast(id_device, id_device, 1, ncclUint64, 0, comm, stream));
    MOE_EP_CUDA_CHECK(cudaMemcpyAsync(&id, id_device, sizeof(id), cudaMemcpyDeviceToHost, stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    if (stream) cudaStreamDestroy(stream);
    cudaFree(id_device);
    throw;
  }
  cudaStreamDestroy(stream);
  cudaFree(id_device);
  return std::make_shared<cuda_backend::NcclCommunicator>(comm, device, id, false);
}

std::string nccl_unique_id() {
  static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "NCCL unique id size changed");
  ncclUniqueId id;
  MOE_EP_NCCL_CHECK(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
}

std::shared_ptr<Communicator> make_nccl_communicator(const std::string& unique_id, int rank,
                                                     int world_size, int device) {
  MOE_EP_CHECK_ARG(unique_id.size() == sizeof(ncclUniqueId), "unique_id has ", unique_id.size(),
                   " bytes; an NCCL unique id has ", sizeof(ncclUniqueId));
  MOE_EP_CHECK_ARG(world_size >= 1, "world_size=", world_size, " must be >= 1");
  MOE_EP_CHECK_ARG(rank >= 0 && rank < world_size, "rank=", rank,
                   " must be in [0, world_size=", world_size, ")");
  const int count = cuda_device_count();
  MOE_EP_CHECK_ARG(device >= 0 && device < count, "device=", device, " is not a visible CUDA ",
                   "device (", count, " visible)");
  cuda_backend::DeviceGuard guard(device);
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  ncclComm_t comm = nullptr;
  MOE_EP_NCCL_CHECK(ncclCommInitRank(&comm, world_size, id, rank));
  // Every rank holds the same id bytes, so a hash of them is a group id they agree on without
  // another exchange (FNV-1a, 64 bit).
  uint64_t group_id = 1469598103934665603ull;
  for (unsigned char c : unique_id) group_id = (group_id ^ c) * 1099511628211ull;
  try {
    return std::make_shared<cuda_backend::NcclCommunicator>(comm, device, group_id, true);
  } catch (...) {
    ncclCommDestroy(comm);
    throw;
  }
}

std::vector<std::shared_ptr<Communicator>> make_local_nccl_communicators(
    const std::vector<int>& devices) {
  const int count = cuda_device_count();
  MOE_EP_CHECK_ARG(!devices.empty(), "devices is empty: at least one CUDA device is required");
  for (int d : devices) {
    MOE_EP_CHECK_ARG(d >= 0 && d < count, "devices contains ", d, ", not a visible CUDA device (",
                     count, " visible)");
  }
  std::vector<ncclComm_t> comms(devices.size());
  MOE_EP_NCCL_CHECK(
      ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  const uint64_t id = cuda_backend::fresh_group_id();
  // Each communicator registers its control area collectively: one thread per rank.
  std::vector<std::shared_ptr<Communicator>> out(devices.size());
  std::vector<std::exception_ptr> errors(devices.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < devices.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        out[i] = std::make_shared<cuda_backend::NcclCommunicator>(comms[i], devices[i], id, true);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < devices.size(); ++i) {
    if (errors[i] && !out[i]) ncclCommDestroy(comms[i]);
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

}  // namespace moe_ep
