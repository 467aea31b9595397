// The CUDA bench backend: one GPU per rank (rank r on device r), one NCCL communicator per
// device from ncclCommInitAll, a non-blocking stream and a pair of events per leg on every rank.
// Under mpirun (bench_world.h) this process holds one rank, on its host's GPU of the process's
// index there, with a communicator made from process 0's NCCL unique id (process_communicators).
// The link floor is the copy engine's peer bandwidth between GPUs 0 and 1, measured once at
// start-up one way and both ways at once; the lower of the two is the floor, since every rank
// sends and receives during a leg (one way 394 GB/s on the 2 x H200 NV18 machine).
// With --baseline nccl a second set of NCCL communicators (ncclCommInitAll over the same
// devices, owned here, not shared with the op) runs the all-to-allv baseline.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/nccl_check.h"
#include "bench_backend.h"
#include "moe_ep/config.h"
#include "moe_ep/cuda.h"
#include "moe_ep/errors.h"

namespace moe_ep::cli {
namespace {

// Grows a device buffer of the current device to at least `bytes` (never below 256, so that the
// pointer is never null); the old contents are dropped.
void grow_buffer(void*& data, size_t& capacity, int64_t bytes) {
  const size_t want = std::max<size_t>(static_cast<size_t>(bytes), 256);
  if (want <= capacity) return;
  if (data != nullptr) MOE_EP_CUDA_CHECK(cudaFree(data));
  data = nullptr;
  capacity = 0;
  MOE_EP_CUDA_CHECK(cudaMalloc(&data, want));
  capacity = want;
}

// The copy engine's peer bandwidth between GPUs 0 and 1 in GB/s (1e9 bytes/s) per direction,
// best of 5 after a warm-up: one way (0 -> 1 alone) and both ways at once (0 -> 1 and 1 -> 0 on
// two streams, bytes of one direction over the slower side's time). Every rank sends and
// receives during a leg, so the bench's floor is the lower of the two.
struct PeerCopy {
  double one_way_gbps = 0;
  double both_ways_gbps = 0;
};

PeerCopy measure_peer_copy_gbps() {
  constexpr size_t kBytes = size_t{256} << 20;  // 256 MiB: far past the L2, ~0.7 ms at 394 GB/s
  constexpr int kReps = 5;
  struct Side {
    int device;
    void* src = nullptr;  // on device
    void* dst = nullptr;  // on the peer
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
  } sides[2] = {{0}, {1}};
  for (Side& s : sides) {
    const int peer = 1 - s.device;
    MOE_EP_CUDA_CHECK(cudaSetDevice(peer));
    MOE_EP_CUDA_CHECK(cudaMalloc(&s.dst, kBytes));
    MOE_EP_CUDA_CHECK(cudaSetDevice(s.device));
    MOE_EP_CUDA_CHECK(cudaMalloc(&s.src, kBytes));
    // Without peer access the copy is staged through the host (~38 GB/s measured on 2 x H200).
    // The macro names the variable it checks, so the variable is named after the call.
    const cudaError_t enable_peer_access = cudaDeviceEnablePeerAccess(peer, 0);
    if (enable_peer_access != cudaErrorPeerAccessAlreadyEnabled) {
      MOE_EP_CUDA_CHECK(enable_peer_access);
    }
    cudaGetLastError();  // clears cudaErrorPeerAccessAlreadyEnabled
    MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    MOE_EP_CUDA_CHECK(cudaEventCreate(&s.start));
    MOE_EP_CUDA_CHECK(cudaEventCreate(&s.stop));
  }
  auto best_gbps = [&](int senders) {
    double best_ms = 1e30;
    for (int i = 0; i < kReps + 1; ++i) {
      for (int k = 0; k < senders; ++k) {
        Side& s = sides[k];
        MOE_EP_CUDA_CHECK(cudaSetDevice(s.device));
        MOE_EP_CUDA_CHECK(cudaEventRecord(s.start, s.stream));
        MOE_EP_CUDA_CHECK(
            cudaMemcpyPeerAsync(s.dst, 1 - s.device, s.src, s.device, kBytes, s.stream));
        MOE_EP_CUDA_CHECK(cudaEventRecord(s.stop, s.stream));
      }
      double slowest = 0;
      for (int k = 0; k < senders; ++k) {
        MOE_EP_CUDA_CHECK(cudaEventSynchronize(sides[k].stop));
        float ms = 0;
        MOE_EP_CUDA_CHECK(cudaEventElapsedTime(&ms, sides[k].start, sides[k].stop));
        slowest = std::max(slowest, static_cast<double>(ms));
      }
      if (i > 0) best_ms = std::min(best_ms, slowest);  // the first one warms up
    }
    return static_cast<double>(kBytes) / (best_ms * 1e-3) / 1e9;
  };
  PeerCopy out;
  out.one_way_gbps = best_gbps(1);
  out.both_ways_gbps = best_gbps(2);
  for (Side& s : sides) {
    cudaSetDevice(s.device);
    cudaEventDestroy(s.start);
    cudaEventDestroy(s.stop);
    cudaStreamDestroy(s.stream);
    cudaFree(s.src);
    cudaSetDevice(1 - s.device);
    cudaFree(s.dst);
  }
  cudaSetDevice(0);
  return out;
}

class CudaBenchBackend final : public BenchBackend {
 public:
  CudaBenchBackend() = default;
  CudaBenchBackend(const CudaBenchBackend&) = delete;
  CudaBenchBackend& operator=(const CudaBenchBackend&) = delete;
  ~CudaBenchBackend() override {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      RankState& st = ranks_[r];
      if (st.nccl_send == nullptr && st.nccl_recv == nullptr) continue;
      cudaSetDevice(device_of(static_cast<int>(r)));
      cudaFree(st.nccl_send);
      cudaFree(st.nccl_recv);
    }
    for (ncclComm_t comm : nccl_comms_) {
      if (comm != nullptr) ncclCommDestroy(comm);  // aborted ones are already null
    }
  }

  Backend kind() const override { return Backend::kCuda; }
  std::string describe(int ranks) const override {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::string out = "cuda (" + std::to_string(ranks) + " x " + prop.name;
    if (peer_copy_) {
      out += ", peer copy " + std::to_string(static_cast<int>(peer_copy_->one_way_gbps)) +
             " GB/s one way, " + std::to_string(static_cast<int>(peer_copy_->both_ways_gbps)) +
             " GB/s each way at once";
    }
    return out + ")";
  }

  std::vector<std::shared_ptr<Communicator>> communicators(int ranks) override {
    const int visible = moe_ep::cuda_device_count();
    if (ranks > visible) {
      throw InvalidArgument("--ranks=" + std::to_string(ranks) + " exceeds the " +
                            std::to_string(visible) + " visible CUDA devices");
    }
    if (ranks >= 2 && !peer_copy_) peer_copy_ = measure_peer_copy_gbps();
    std::vector<int> devices(ranks);
    for (int r = 0; r < ranks; ++r) devices[r] = r;
    ranks_.resize(ranks);
    std::vector<std::shared_ptr<Communicator>> comms = make_local_nccl_communicators(devices);
    if (nccl_baseline_ && nccl_comms_.empty()) {
      // One thread for all devices: ncclCommInitAll must not run concurrently per rank.
      nccl_comms_.assign(ranks, nullptr);
      const ncclResult_t init_all = ncclCommInitAll(nccl_comms_.data(), ranks, devices.data());
      if (init_all != ncclSuccess) nccl_comms_.clear();  // nothing to destroy
      MOE_EP_NCCL_CHECK(init_all);
    }
    return comms;
  }

  std::string nccl_unique_id() override { return moe_ep::nccl_unique_id(); }

  std::vector<std::shared_ptr<Communicator>> process_communicators(
      int rank, int ranks, int device, const std::string& unique_id) override {
    // `device` exists: bench_cmd agreed on it on every process, and the library checks it too.
    devices_.assign(ranks, -1);
    devices_[rank] = device;
    ranks_.resize(ranks);
    std::vector<std::shared_ptr<Communicator>> comms(ranks);
    comms[rank] = make_nccl_communicator(unique_id, rank, ranks, device);
    return comms;
  }

  void bind_rank(int rank) override {
    MOE_EP_CUDA_CHECK(cudaSetDevice(device_of(rank)));
    RankState& st = ranks_[rank];
    if (st.stream != nullptr) return;
    MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
    for (int l = 0; l < kNumLegs; ++l) {
      MOE_EP_CUDA_CHECK(cudaEventCreate(&st.start[l]));
      MOE_EP_CUDA_CHECK(cudaEventCreate(&st.stop[l]));
    }
  }
  void* stream(int rank) override { return ranks_[rank].stream; }

  BenchTensor alloc(int rank, const TensorView& shape) override {
    const size_t bytes = static_cast<size_t>(shape.nbytes());
    void* data = nullptr;
    MOE_EP_CUDA_CHECK(cudaMalloc(&data, bytes == 0 ? 256 : bytes));
    MOE_EP_CUDA_CHECK(cudaMemset(data, 0, bytes == 0 ? 256 : bytes));
    BenchTensor t;
    t.storage = std::shared_ptr<void>(data, [](void* p) { cudaFree(p); });
    t.view = shape;
    t.view.data = data;
    t.view.device = DeviceType::kCuda;
    t.view.device_index = device_of(rank);
    return t;
  }

  void upload(int rank, const void* host, const BenchTensor& dst) override {
    if (dst.view.nbytes() == 0) return;
    MOE_EP_CUDA_CHECK(cudaMemcpyAsync(dst.view.data, host, dst.view.nbytes(),
                                      cudaMemcpyHostToDevice, ranks_[rank].stream));
    synchronize(rank);
  }
  void download(int rank, const TensorView& src, void* host) override {
    if (src.nbytes() == 0) return;
    MOE_EP_CUDA_CHECK(
        cudaMemcpyAsync(host, src.data, src.nbytes(), cudaMemcpyDeviceToHost, ranks_[rank].stream));
    synchronize(rank);
  }
  void synchronize(int rank) override {
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(ranks_[rank].stream));
  }

  std::function<void()> capture(int rank, const std::function<void()>& issue) override {
    cudaStream_t stream = ranks_[rank].stream;
    // Thread-local: the other ranks' threads capture or run their own calls meanwhile.
    MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    ranks_[rank].capturing = true;
    try {
      issue();
      ranks_[rank].capturing = false;
    } catch (...) {
      ranks_[rank].capturing = false;
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream, &partial);  // leave the stream usable; the error is issue's
      if (partial != nullptr) cudaGraphDestroy(partial);
      throw;
    }
    cudaGraph_t graph = nullptr;
    MOE_EP_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    MOE_EP_CUDA_CHECK(instantiated);
    std::shared_ptr<CUgraphExec_st> owned(exec, [](cudaGraphExec_t e) { cudaGraphExecDestroy(e); });
    return [owned, stream] { MOE_EP_CUDA_CHECK(cudaGraphLaunch(owned.get(), stream)); };
  }

  void timer_start(int rank, Leg leg) override {
    record_timer(ranks_[rank], ranks_[rank].start[static_cast<int>(leg)]);
  }
  void timer_stop(int rank, Leg leg) override {
    record_timer(ranks_[rank], ranks_[rank].stop[static_cast<int>(leg)]);
  }
  double elapsed_us(int rank, Leg leg) override {
    float ms = 0;
    const int l = static_cast<int>(leg);
    MOE_EP_CUDA_CHECK(cudaEventElapsedTime(&ms, ranks_[rank].start[l], ranks_[rank].stop[l]));
    return ms * 1e3;
  }

  std::optional<double> link_floor_gbps() const override {
    if (!peer_copy_) return std::nullopt;
    return std::min(peer_copy_->one_way_gbps, peer_copy_->both_ways_gbps);
  }

  bool supports_nccl_baseline() const override { return true; }
  void enable_nccl_baseline() override { nccl_baseline_ = true; }

  void nccl_reserve(int rank, int64_t send_bytes, int64_t recv_bytes) override {
    RankState& st = ranks_[rank];
    grow_buffer(st.nccl_send, st.nccl_send_capacity, send_bytes);
    grow_buffer(st.nccl_recv, st.nccl_recv_capacity, recv_bytes);
    if (st.nccl_start == nullptr) {
      MOE_EP_CUDA_CHECK(cudaEventCreate(&st.nccl_start));
      MOE_EP_CUDA_CHECK(cudaEventCreate(&st.nccl_stop));
    }
  }

  double nccl_alltoallv_us(int rank, const std::vector<int64_t>& send_bytes,
                           const std::vector<int64_t>& recv_bytes) override {
    RankState& st = ranks_[rank];
    const size_t peers = nccl_comms_.size();
    int64_t send_total = 0, recv_total = 0;
    for (size_t p = 0; p < send_bytes.size(); ++p) send_total += send_bytes[p];
    for (size_t p = 0; p < recv_bytes.size(); ++p) recv_total += recv_bytes[p];
    if (static_cast<size_t>(rank) >= peers || nccl_comms_[rank] == nullptr ||
        send_bytes.size() != peers || recv_bytes.size() != peers || st.nccl_start == nullptr ||
        static_cast<size_t>(send_total) > st.nccl_send_capacity ||
        static_cast<size_t>(recv_total) > st.nccl_recv_capacity) {
      throw Internal("bench: nccl_alltoallv_us on rank " + std::to_string(rank) +
                     ": no (live) baseline communicator, no nccl_reserve, or " +
                     std::to_string(send_bytes.size()) + " peers for " + std::to_string(peers) +
                     " communicators");
    }
    ncclComm_t comm = nccl_comms_[rank];
    auto* send = static_cast<uint8_t*>(st.nccl_send);
    auto* recv = static_cast<uint8_t*>(st.nccl_recv);
    MOE_EP_CUDA_CHECK(cudaEventRecord(st.nccl_start, st.stream));
    MOE_EP_NCCL_CHECK(ncclGroupStart());
    // Zero-byte pairs are skipped on both sides alike (send_bytes[p] of r == recv_bytes[r] of p).
    int64_t send_offset = 0, recv_offset = 0;
    for (size_t p = 0; p < peers; ++p) {
      const int peer = static_cast<int>(p);
      if (send_bytes[p] > 0) {
        MOE_EP_NCCL_CHECK(ncclSend(send + send_offset, static_cast<size_t>(send_bytes[p]),
                                   ncclUint8, peer, comm, st.stream));
      }
      if (recv_bytes[p] > 0) {
        MOE_EP_NCCL_CHECK(ncclRecv(recv + recv_offset, static_cast<size_t>(recv_bytes[p]),
                                   ncclUint8, peer, comm, st.stream));
      }
      send_offset += send_bytes[p];
      recv_offset += recv_bytes[p];
    }
    MOE_EP_NCCL_CHECK(ncclGroupEnd());
    MOE_EP_CUDA_CHECK(cudaEventRecord(st.nccl_stop, st.stream));
    wait_nccl(rank);
    float ms = 0;
    MOE_EP_CUDA_CHECK(cudaEventElapsedTime(&ms, st.nccl_start, st.nccl_stop));
    return ms * 1e3;
  }

 private:
  struct RankState {
    cudaStream_t stream = nullptr;
    cudaEvent_t start[kNumLegs] = {};
    cudaEvent_t stop[kNumLegs] = {};
    // The NCCL baseline: buffers reused across pairs (grown as needed) and one pair of events.
    void* nccl_send = nullptr;
    void* nccl_recv = nullptr;
    size_t nccl_send_capacity = 0;
    size_t nccl_recv_capacity = 0;
    cudaEvent_t nccl_start = nullptr;
    cudaEvent_t nccl_stop = nullptr;
    bool capturing = false;  // inside capture()'s issue()
  };

  // Inside a capture (decode mode's --decode-graph round) a plain record only orders the graph's
  // nodes; cudaEventRecordExternal makes it an event record node, which stamps the event at
  // each replay.
  static void record_timer(const RankState& st, cudaEvent_t event) {
    if (st.capturing) {
      MOE_EP_CUDA_CHECK(cudaEventRecordWithFlags(event, st.stream, cudaEventRecordExternal));
    } else {
      MOE_EP_CUDA_CHECK(cudaEventRecord(event, st.stream));
    }
  }

  // Waits for the rank's all-to-allv, bounded like the library's waits (MOE_EP_TIMEOUT_S): a
  // peer that never posts its half (it failed) or an NCCL error aborts this rank's communicator
  // instead of hanging the process.
  void wait_nccl(int rank) {
    using Clock = std::chrono::steady_clock;
    RankState& st = ranks_[rank];
    const double timeout_s = Knobs::get().timeout_s;
    const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(timeout_s));
    for (;;) {
      const cudaError_t event_query = cudaEventQuery(st.nccl_stop);
      if (event_query == cudaSuccess) return;
      if (event_query != cudaErrorNotReady) MOE_EP_CUDA_CHECK(event_query);
      ncclResult_t async = ncclSuccess;
      MOE_EP_NCCL_CHECK(ncclCommGetAsyncError(nccl_comms_[rank], &async));
      if (async != ncclSuccess) {
        abort_nccl(rank);
        throw NcclError(fmt::format("bench: the NCCL baseline all-to-allv failed: {}",
                                    ncclGetErrorString(async)));
      }
      if (Clock::now() > deadline) {
        abort_nccl(rank);
        throw Timeout(fmt::format(
            "bench: the NCCL baseline all-to-allv did not finish within {:g} s (MOE_EP_TIMEOUT_S)",
            timeout_s));
      }
      std::this_thread::yield();
    }
  }
  void abort_nccl(int rank) {
    ncclCommAbort(nccl_comms_[rank]);
    nccl_comms_[rank] = nullptr;
  }

  // Rank r's device: r with a thread per GPU, this host's process index under mpirun.
  int device_of(int rank) const { return devices_.empty() ? rank : devices_[rank]; }
  std::vector<int> devices_;      // [ranks] under mpirun (only this process's rank set); else empty
  std::vector<RankState> ranks_;  // [ranks]; each rank's thread touches only its own entry
  std::optional<PeerCopy> peer_copy_;
  bool nccl_baseline_ = false;
  std::vector<ncclComm_t> nccl_comms_;  // [ranks] for the baseline; entry r: rank r's thread
};

}  // namespace

std::unique_ptr<BenchBackend> make_cuda_bench_backend() {
  return std::make_unique<CudaBenchBackend>();
}

int cuda_device_count() { return moe_ep::cuda_device_count(); }

}  // namespace moe_ep::cli
