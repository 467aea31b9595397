// What `moe-ep bench` needs from a backend beyond the public op API: communicators, device
// buffers, copies to and from the host, stream synchronisation, per-leg timers and the link
// bandwidth floor. The harness runs one thread per rank; every per-rank method is called only from
// that rank's thread, after bind_rank(rank) on it, so an implementation may keep per-rank state
// (a CUDA device, stream and events) without locks as long as ranks do not share it. The CPU
// implementation is bench_backend_cpu.cc; the CUDA one (bench_backend_cuda.cc, built only with
// MOE_EP_WITH_CUDA) binds each rank's thread to its GPU with cudaSetDevice in bind_rank and times
// with events recorded on the rank's stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moe_ep/op.h"
#include "moe_ep/tensor.h"

// The tool builds the CUDA bench backend when the library has CUDA and the file is present
// (tools/CMakeLists.txt defines MOE_EP_BENCH_NO_CUDA_BACKEND otherwise).
#if defined(MOE_EP_WITH_CUDA) && MOE_EP_WITH_CUDA && !defined(MOE_EP_BENCH_NO_CUDA_BACKEND)
#define MOE_EP_BENCH_HAS_CUDA 1
#else
#define MOE_EP_BENCH_HAS_CUDA 0
#endif

namespace moe_ep::cli {

// The two timed legs of one iteration.
enum class Leg { kDispatch = 0, kCombine = 1 };
inline constexpr int kNumLegs = 2;

// A buffer owned by the harness on one rank's device, and the view of it passed to the op.
struct BenchTensor {
  std::shared_ptr<void> storage;  // releases the memory through the backend's deallocator
  TensorView view;
};

class BenchBackend {
 public:
  virtual ~BenchBackend() = default;

  virtual Backend kind() const = 0;
  // One line for the report header, e.g. "cpu (4 threads)" or "cuda (8 x NVIDIA H200)".
  virtual std::string describe(int ranks) const = 0;

  // Main thread, once, before anything else but describe(): one communicator per rank, rank i
  // at index i. A backend may measure its link floor here.
  virtual std::vector<std::shared_ptr<Communicator>> communicators(int ranks) = 0;

  // Under mpirun (bench_world.h), one rank per process. Process 0 calls nccl_unique_id() and
  // every process gets its bytes; then every process calls process_communicators(): a vector of
  // `ranks` entries with only `rank`'s set, that rank on `device` of this host. Instead of
  // communicators(). The defaults (cpu): no id, and a world of one rank only.
  virtual std::string nccl_unique_id() { return ""; }
  virtual std::vector<std::shared_ptr<Communicator>> process_communicators(
      int rank, int ranks, int device, const std::string& unique_id);

  // First call on a rank's thread (CUDA: cudaSetDevice, then create the stream and events once).
  // A rank may be bound again by a later thread (one set of threads per dtype pair).
  virtual void bind_rank(int rank) = 0;
  // The stream passed to dispatch and combine; nullptr for the CPU backend.
  virtual void* stream(int rank) = 0;

  // A zero-initialised buffer on the rank's device shaped like `shape` (its data is ignored).
  // Zero rows allocate a small non-null buffer so that the view stays valid.
  virtual BenchTensor alloc(int rank, const TensorView& shape) = 0;
  // Host -> device: dst.view.nbytes() bytes from `host`. Complete when it returns.
  virtual void upload(int rank, const void* host, const BenchTensor& dst) = 0;
  // Device -> host: src.nbytes() bytes of any view on the rank's device (the op's outputs too).
  // Ordered after the work queued on stream(rank); complete when it returns.
  virtual void download(int rank, const TensorView& src, void* host) = 0;
  // Waits for all work queued on stream(rank).
  virtual void synchronize(int rank) = 0;

  // Timers, one per leg and rank: start/stop around the call on stream(rank) (CUDA: events),
  // elapsed_us after synchronize(rank).
  virtual void timer_start(int rank, Leg leg) = 0;
  virtual void timer_stop(int rank, Leg leg) = 0;
  virtual double elapsed_us(int rank, Leg leg) = 0;

  // Graphs (decode mode times replays, not host calls). capture() records what `issue` enqueues on
  // stream(rank) into a graph, without running it, and returns a callable that replays the graph
  // on stream(rank) (asynchronous, like the calls it holds). An empty function where the backend
  // has no graphs (CPU): the caller then issues the calls directly.
  virtual std::function<void()> capture(int rank, const std::function<void()>& issue) {
    (void)rank;
    (void)issue;
    return {};
  }

  // Unidirectional bandwidth (GB/s) that bounds what one rank can send to the others, for the
  // %floor column (CUDA: the NVLink bandwidth of the device); nullopt when there is none (CPU).
  // Valid after communicators().
  virtual std::optional<double> link_floor_gbps() const = 0;

  // The NCCL all-to-allv baseline of --baseline nccl (docs/bench.md). A backend that supports it
  // (CUDA) sets up its own NCCL communicators, separate from the op's, in communicators(). The
  // defaults (CPU) support nothing: the calls below throw Internal.
  virtual bool supports_nccl_baseline() const { return false; }
  // Main thread, before communicators().
  virtual void enable_nccl_baseline();
  // Rank thread: grows the rank's baseline send and receive buffers to at least these sizes
  // (bytes), outside any timed region, before the barriered iterations of the baseline.
  virtual void nccl_reserve(int rank, int64_t send_bytes, int64_t recv_bytes);
  // Rank thread, all ranks concurrently (each right after the same barrier): one all-to-allv on
  // stream(rank), send_bytes[p] bytes to rank p and recv_bytes[p] bytes from rank p, self
  // included, as ncclSend/ncclRecv of ncclUint8 in one group. send_bytes[p] of rank r must equal
  // recv_bytes[r] of rank p. Returns its time in microseconds (events around the group), after
  // waiting for it (bounded by MOE_EP_TIMEOUT_S).
  virtual double nccl_alltoallv_us(int rank, const std::vector<int64_t>& send_bytes,
                                   const std::vector<int64_t>& recv_bytes);
};

std::unique_ptr<BenchBackend> make_cpu_bench_backend();
// Defined in bench_backend_cuda.cc, compiled only with MOE_EP_WITH_CUDA.
std::unique_ptr<BenchBackend> make_cuda_bench_backend();
// Number of visible CUDA devices. bench_backend.cc holds a weak definition that returns 0;
// bench_backend_cuda.cc overrides it.
int cuda_device_count();

// The backend for a resolved --backend choice (cpu or cuda).
std::unique_ptr<BenchBackend> make_bench_backend(Backend kind);

}  // namespace moe_ep::cli
