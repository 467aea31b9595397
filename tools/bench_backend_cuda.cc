// The CUDA bench backend: one GPU per rank (rank r on device r), one NCCL communicator per
// device from ncclCommInitAll, a non-blocking stream and a pair of events per leg on every rank.
// The link floor is the peer-copy bandwidth GPU 0 -> GPU 1 measured once at start-up with the
// copy engine (the practical NVLink ceiling; 394 GB/s on the 2 x H200 NV18 machine).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench_backend.h"
#include "moe_ep/cuda.h"
#include "moe_ep/errors.h"

namespace moe_ep::cli {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw CudaError(std::string("bench: ") + what + ": " + cudaGetErrorString(status));
  }
}

// Median-free best-of-N peer copy bandwidth in GB/s (1e9 bytes/s), one direction.
double measure_peer_copy_gbps(int src, int dst) {
  constexpr size_t kBytes = size_t{256} << 20;  // 256 MiB: far past the L2, ~0.7 ms at 394 GB/s
  constexpr int kReps = 5;
  void* a = nullptr;
  void* b = nullptr;
  check(cudaSetDevice(src), "cudaSetDevice");
  check(cudaMalloc(&a, kBytes), "cudaMalloc");
  check(cudaSetDevice(dst), "cudaSetDevice");
  check(cudaMalloc(&b, kBytes), "cudaMalloc");
  check(cudaSetDevice(src), "cudaSetDevice");
  // Without peer access the copy is staged through the host (~38 GB/s measured on 2 x H200).
  const cudaError_t peer = cudaDeviceEnablePeerAccess(dst, 0);
  if (peer != cudaSuccess && peer != cudaErrorPeerAccessAlreadyEnabled) {
    check(peer, "cudaDeviceEnablePeerAccess");
  }
  cudaGetLastError();
  cudaStream_t s;
  cudaEvent_t e0, e1;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  double best_ms = 1e30;
  for (int i = 0; i < kReps + 1; ++i) {
    check(cudaEventRecord(e0, s), "cudaEventRecord");
    check(cudaMemcpyPeerAsync(b, dst, a, src, kBytes, s), "cudaMemcpyPeerAsync");
    check(cudaEventRecord(e1, s), "cudaEventRecord");
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    if (i > 0) best_ms = std::min(best_ms, static_cast<double>(ms));  // first one warms up
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
  cudaFree(a);
  cudaSetDevice(dst);
  cudaFree(b);
  return static_cast<double>(kBytes) / (best_ms * 1e-3) / 1e9;
}

class CudaBenchBackend final : public BenchBackend {
 public:
  Backend kind() const override { return Backend::kCuda; }
  std::string describe(int ranks) const override {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::string out = "cuda (" + std::to_string(ranks) + " x " + prop.name;
    if (floor_gbps_)
      out += ", peer copy " + std::to_string(static_cast<int>(*floor_gbps_)) + " GB/s";
    return out + ")";
  }

  std::vector<std::shared_ptr<Communicator>> communicators(int ranks) override {
    const int visible = moe_ep::cuda_device_count();
    if (ranks > visible) {
      throw InvalidArgument("--ranks=" + std::to_string(ranks) + " exceeds the " +
                            std::to_string(visible) + " visible CUDA devices");
    }
    if (ranks >= 2 && !floor_gbps_) floor_gbps_ = measure_peer_copy_gbps(0, 1);
    std::vector<int> devices(ranks);
    for (int r = 0; r < ranks; ++r) devices[r] = r;
    ranks_.resize(ranks);
    return make_local_nccl_communicators(devices);
  }

  void bind_rank(int rank) override {
    check(cudaSetDevice(rank), "cudaSetDevice");
    RankState& st = ranks_[rank];
    if (st.stream != nullptr) return;
    check(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (int l = 0; l < kNumLegs; ++l) {
      check(cudaEventCreate(&st.start[l]), "cudaEventCreate");
      check(cudaEventCreate(&st.stop[l]), "cudaEventCreate");
    }
  }
  void* stream(int rank) override { return ranks_[rank].stream; }

  BenchTensor alloc(int rank, const TensorView& shape) override {
    const size_t bytes = static_cast<size_t>(shape.nbytes());
    void* data = nullptr;
    check(cudaMalloc(&data, bytes == 0 ? 256 : bytes), "cudaMalloc");
    check(cudaMemset(data, 0, bytes == 0 ? 256 : bytes), "cudaMemset");
    BenchTensor t;
    t.storage = std::shared_ptr<void>(data, [](void* p) { cudaFree(p); });
    t.view = shape;
    t.view.data = data;
    t.view.device = DeviceType::kCuda;
    t.view.device_index = rank;
    return t;
  }

  void upload(int rank, const void* host, const BenchTensor& dst) override {
    if (dst.view.nbytes() == 0) return;
    check(cudaMemcpyAsync(dst.view.data, host, dst.view.nbytes(), cudaMemcpyHostToDevice,
                          ranks_[rank].stream),
          "upload");
    synchronize(rank);
  }
  void download(int rank, const TensorView& src, void* host) override {
    if (src.nbytes() == 0) return;
    check(
        cudaMemcpyAsync(host, src.data, src.nbytes(), cudaMemcpyDeviceToHost, ranks_[rank].stream),
        "download");
    synchronize(rank);
  }
  void synchronize(int rank) override {
    check(cudaStreamSynchronize(ranks_[rank].stream), "cudaStreamSynchronize");
  }

  void timer_start(int rank, Leg leg) override {
    check(cudaEventRecord(ranks_[rank].start[static_cast<int>(leg)], ranks_[rank].stream),
          "cudaEventRecord");
  }
  void timer_stop(int rank, Leg leg) override {
    check(cudaEventRecord(ranks_[rank].stop[static_cast<int>(leg)], ranks_[rank].stream),
          "cudaEventRecord");
  }
  double elapsed_us(int rank, Leg leg) override {
    float ms = 0;
    const int l = static_cast<int>(leg);
    check(cudaEventElapsedTime(&ms, ranks_[rank].start[l], ranks_[rank].stop[l]),
          "cudaEventElapsedTime");
    return ms * 1e3;
  }

  std::optional<double> link_floor_gbps() const override { return floor_gbps_; }

 private:
  struct RankState {
    cudaStream_t stream = nullptr;
    cudaEvent_t start[kNumLegs] = {};
    cudaEvent_t stop[kNumLegs] = {};
  };
  std::vector<RankState> ranks_;  // [ranks]; each rank's thread touches only its own entry
  std::optional<double> floor_gbps_;
};

}  // namespace

std::unique_ptr<BenchBackend> make_cuda_bench_backend() {
  return std::make_unique<CudaBenchBackend>();
}

int cuda_device_count() { return moe_ep::cuda_device_count(); }

}  // namespace moe_ep::cli
