// The CUDA backend's op: one rank per GPU, communication buffers in NCCL symmetric memory
// (ncclMemAlloc + ncclCommWindowRegister), kernels that store straight into peers' buffers.
// A dispatch runs validate -> notify (counts exchange), synchronises once to learn the number of
// received rows, then runs the data kernel; a combine runs send + reduce without a host sync.
// Kernels report through an error word in mapped host memory that this file turns into
// exceptions; Timeout and the other poisoning errors make the op unusable.
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/factory.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/nccl_check.h"
#include "backends/cuda/nccl_comm.h"
#include "core/arg_checks.h"
#include "moe_ep/config.h"

namespace moe_ep::cuda_backend {
namespace {

std::atomic<uint64_t> g_next_uid{1ull << 40};  // distinct from CPU op uids

// Mapped host memory shared with the kernels.
struct HostShared {
  DeviceError error;
  int64_t num_recv;
};

// Fields compared across ranks at creation (DESIGN 6: configuration identical on all ranks).
struct Fingerprint {
  int64_t values[8];
};
constexpr const char* kFingerprintFields[8] = {
    "world_size",          "num_experts",    "hidden",        "topk",
    "max_tokens_per_rank", "dispatch_dtype", "combine_dtype", "instance_id"};

ScalarType payload_scalar(DispatchDtype dtype) {
  switch (dtype) {
    case DispatchDtype::bf16: return ScalarType::kBFloat16;
    case DispatchDtype::fp8: return ScalarType::kFloat8E4M3;
    case DispatchDtype::fp4: return ScalarType::kFloat4E2M1;
  }
  return ScalarType::kUInt8;
}

class CudaOp final : public Op {
 public:
  CudaOp(std::shared_ptr<NcclCommunicator> comm, const OpConfig& config);
  ~CudaOp() override;

  const OpConfig& config() const override { return config_; }
  int rank() const override { return comm_->rank(); }
  int world_size() const override { return comm_->size(); }
  Backend backend() const override { return Backend::kCuda; }
  uint64_t uid() const override { return uid_; }

  DispatchResult dispatch(const DispatchArgs& args) override;
  void combine(const Handle& handle, const TensorView& y, const TensorView& out,
               void* stream) override;
  void synchronize(void* stream) override;

 private:
  void check_usable() const;
  // Turns a reported device error into an exception; poisons the op for non-argument errors.
  void raise_device_error(const char* call);
  [[noreturn]] void poison_and_throw(const Error& error);
  RankInfo rank_info() const;
  void exchange_fingerprints(cudaStream_t stream);

  std::shared_ptr<NcclCommunicator> comm_;
  OpConfig config_;
  uint64_t uid_;
  int device_;
  int num_blocks_ = 0;
  int combine_blocks_ = 0;  // num_blocks_ capped at what is co-resident (combine.cuh)
  BufferLayout layout_;
  void* buffer_ = nullptr;  // symmetric, layout_.total_bytes()
  ncclWindow_t window_ = nullptr;
  PeerTable peers_{};
  int32_t* pos_ = nullptr;                // [W, max_tokens]
  int32_t* send_offset_ = nullptr;        // [W]
  int32_t* recv_expert_count_ = nullptr;  // [E / W]
  unsigned int* counters_ = nullptr;      // [1]: the dispatch kernel's block counter
  int32_t* error_flag_ = nullptr;         // device copy of the error code (ErrorSink::flag)
  cudaEvent_t notified_ = nullptr;        // recorded after notify: num_recv is then known
  HostShared* host_ = nullptr;            // mapped
  HostShared* host_dev_ = nullptr;        // device alias of host_
  uint64_t seq_ = 0;                      // dispatch calls so far
  bool combined_ = false;
  Handle last_{};
  std::string poisoned_;  // first poisoning error, empty while usable
};

CudaOp::CudaOp(std::shared_ptr<NcclCommunicator> comm, const OpConfig& config)
    : comm_(std::move(comm)), config_(config), uid_(g_next_uid++), device_(comm_->device()) {
  last_.op_uid = uid_;  // no dispatch yet: call_seq 0
  const int world = comm_->size();
  MOE_EP_CHECK_ARG(world <= kMaxWorldSize, "world_size=", world,
                   " exceeds the CUDA backend's limit of ", kMaxWorldSize, " ranks");
  DeviceGuard guard(device_);
  layout_.world_size = world;
  layout_.local_experts = config.num_experts / world;
  layout_.topk = config.topk;
  layout_.max_tokens = config.max_tokens_per_rank;
  layout_.dispatch_payload_bytes = payload_bytes(config.dispatch_dtype, config.hidden);
  layout_.dispatch_scale_bytes = scale_bytes(config.dispatch_dtype, config.hidden);
  const int64_t combine_bytes = payload_bytes(config.combine_dtype, config.hidden) +
                                scale_bytes(config.combine_dtype, config.hidden);
  layout_.combine_row_bytes = (combine_bytes + 15) / 16 * 16;  // rows stay 16-byte aligned

  int sms = 0;
  MOE_EP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
  num_blocks_ = Knobs::get().num_sms > 0 ? Knobs::get().num_sms : sms * kDefaultBlocksPerSm;
  const int coresident = combine_max_coresident_blocks(config.combine_dtype, device_);
  MOE_EP_CHECK_INTERNAL(coresident > 0, "combine kernel occupancy query failed on device ",
                        device_);
  combine_blocks_ = std::min(num_blocks_, coresident);
  log(LogLevel::kDebug, detail::concat("cuda op: ", num_blocks_, " data blocks, combine ",
                                       combine_blocks_, " (", coresident, " co-resident)"));

  const size_t bytes = static_cast<size_t>(layout_.total_bytes());
  MOE_EP_NCCL_CHECK(ncclMemAlloc(&buffer_, bytes));
  MOE_EP_CUDA_CHECK(cudaMemset(buffer_, 0, bytes));
  MOE_EP_NCCL_CHECK(
      ncclCommWindowRegister(comm_->comm(), buffer_, bytes, &window_, NCCL_WIN_COLL_SYMMETRIC));

  MOE_EP_CUDA_CHECK(cudaMalloc(&pos_, sizeof(int32_t) * world * config.max_tokens_per_rank));
  MOE_EP_CUDA_CHECK(cudaMalloc(&send_offset_, sizeof(int32_t) * world));
  MOE_EP_CUDA_CHECK(cudaMalloc(&recv_expert_count_, sizeof(int32_t) * layout_.local_experts));
  MOE_EP_CUDA_CHECK(cudaMalloc(&counters_, sizeof(unsigned int)));
  MOE_EP_CUDA_CHECK(cudaMemset(counters_, 0, sizeof(unsigned int)));
  MOE_EP_CUDA_CHECK(cudaMalloc(&error_flag_, sizeof(int32_t)));
  MOE_EP_CUDA_CHECK(cudaMemset(error_flag_, 0, sizeof(int32_t)));
  MOE_EP_CUDA_CHECK(cudaEventCreateWithFlags(&notified_, cudaEventDisableTiming));
  MOE_EP_CUDA_CHECK(cudaHostAlloc(&host_, sizeof(HostShared), cudaHostAllocMapped));
  std::memset(host_, 0, sizeof(HostShared));
  MOE_EP_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_dev_), host_, 0));

  cudaStream_t stream = nullptr;
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  char** peers_device = nullptr;
  try {
    if (world == 1) {
      // A one-rank window has no peer mapping to resolve (ncclGetPeerPointer faults on it).
      peers_.base[0] = static_cast<char*>(buffer_);
    } else {
      MOE_EP_CUDA_CHECK(cudaMalloc(&peers_device, sizeof(char*) * world));
      MOE_EP_CUDA_CHECK(resolve_peer_pointers(window_, world, peers_device, stream));
      MOE_EP_CUDA_CHECK(cudaMemcpyAsync(peers_.base, peers_device, sizeof(char*) * world,
                                        cudaMemcpyDeviceToHost, stream));
    }
    // The fingerprint exchange also orders every rank's cudaMemset before any peer store.
    exchange_fingerprints(stream);
  } catch (...) {
    cudaFree(peers_device);
    cudaStreamDestroy(stream);
    throw;
  }
  cudaFree(peers_device);
  cudaStreamDestroy(stream);
}

CudaOp::~CudaOp() {
  cudaSetDevice(device_);
  if (poisoned_.empty()) {
    // Collective: every rank destroys its op (an OpCache evicts in the same order everywhere).
    cudaDeviceSynchronize();
    if (window_) ncclCommWindowDeregister(comm_->comm(), window_);
    if (buffer_) ncclMemFree(buffer_);
  }
  // A poisoned op leaks its symmetric buffer: deregistration is collective and a dead peer
  // would hang it.
  cudaFree(pos_);
  cudaFree(send_offset_);
  cudaFree(recv_expert_count_);
  cudaFree(counters_);
  cudaFree(error_flag_);
  cudaEventDestroy(notified_);
  cudaFreeHost(host_);
}

void CudaOp::exchange_fingerprints(cudaStream_t stream) {
  const int world = comm_->size();
  Fingerprint mine{{world, config_.num_experts, config_.hidden, config_.topk,
                    config_.max_tokens_per_rank, static_cast<int64_t>(config_.dispatch_dtype),
                    static_cast<int64_t>(config_.combine_dtype), config_.instance_id}};
  Fingerprint* all_device = nullptr;
  MOE_EP_CUDA_CHECK(cudaMalloc(&all_device, sizeof(Fingerprint) * world));
  std::vector<Fingerprint> all(world);
  try {
    MOE_EP_CUDA_CHECK(cudaMemcpyAsync(all_device + comm_->rank(), &mine, sizeof(mine),
                                      cudaMemcpyHostToDevice, stream));
    MOE_EP_NCCL_CHECK(ncclAllGather(all_device + comm_->rank(), all_device, sizeof(Fingerprint),
                                    ncclUint8, comm_->comm(), stream));
    MOE_EP_CUDA_CHECK(cudaMemcpyAsync(all.data(), all_device, sizeof(Fingerprint) * world,
                                      cudaMemcpyDeviceToHost, stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    cudaFree(all_device);
    throw;
  }
  cudaFree(all_device);
  for (int r = 0; r < world; ++r) {
    for (int f = 0; f < 8; ++f) {
      MOE_EP_CHECK_ARG(all[r].values[f] == all[0].values[f],
                       "configuration differs between ranks: ", kFingerprintFields[f], "=",
                       all[r].values[f], " on rank ", r, ", ", kFingerprintFields[f], "=",
                       all[0].values[f], " on rank 0");
    }
  }
}

RankInfo CudaOp::rank_info() const {
  RankInfo info;
  info.rank = comm_->rank();
  info.world_size = comm_->size();
  info.num_experts = config_.num_experts;
  info.experts_per_rank = config_.num_experts / comm_->size();
  info.topk = config_.topk;
  info.hidden = config_.hidden;
  info.max_tokens = config_.max_tokens_per_rank;
  return info;
}

void CudaOp::check_usable() const {
  MOE_EP_CHECK_USAGE(poisoned_.empty(), "op unusable after: ", poisoned_);
}

void CudaOp::poison_and_throw(const Error& error) {
  if (poisoned_.empty()) poisoned_ = error.what();
  throw_error(error.code(), error.what());
}

void CudaOp::raise_device_error(const char* call) {
  std::atomic_thread_fence(std::memory_order_acquire);
  DeviceError e;
  std::memcpy(&e, const_cast<const DeviceError*>(&host_->error), sizeof(e));
  if (e.code == kDevOk) return;
  const std::string where = detail::concat(call, " on rank ", comm_->rank(), ": ");
  std::string message;
  bool argument_error = true;
  switch (e.code) {
    case kDevBadExpert:
      message =
          detail::concat("topk_idx[", e.token, "][", e.column, "]=", e.value,
                         " is out of range: expert ids must be in [-1, ", config_.num_experts, ")");
      break;
    case kDevDupExpert:
      message = detail::concat("topk_idx[", e.token, "] names expert ", e.value, " twice (slots ",
                               e.expected, " and ", e.seen, "): each expert may appear once per ",
                               "token (validation mode, MOE_EP_VALIDATE=1)");
      break;
    case kDevNonfiniteX:
      message = detail::concat("x[", e.token, "][", e.column, "] is not finite (validation mode, ",
                               "MOE_EP_VALIDATE=1)");
      break;
    case kDevNonfiniteW:
      message = detail::concat("topk_weights[", e.token, "][", e.column, "] is not finite ",
                               "(validation mode, MOE_EP_VALIDATE=1)");
      break;
    case kDevPeerRejected:
      message = detail::concat("dispatch aborted: rank ", e.peer, " rejected its input");
      break;
    case kDevTimeout: {
      const char* phase = e.phase == kPhaseNotify         ? "dispatch/notify"
                          : e.phase == kPhaseDispatchWait ? "dispatch/receive"
                                                          : "combine/receive";
      message = detail::concat("timed out after ", Knobs::get().timeout_s, " s in ", phase,
                               ": rank ", e.rank, " waited for rank ", e.peer, " (expected call ",
                               e.expected, ", saw ", e.seen, "); the peer is dead or not calling ",
                               "the same op (MOE_EP_TIMEOUT_S)");
      argument_error = false;
      break;
    }
    default:
      message = detail::concat("kernel reported unknown error code ", e.code);
      argument_error = false;
  }
  if (argument_error) {
    // The op stays usable: let the aborted call's queued kernels finish (they see the flag and
    // skip their work), then clear both copies of the error.
    cudaDeviceSynchronize();
    std::memset(&host_->error, 0, sizeof(DeviceError));
    cudaMemset(error_flag_, 0, sizeof(int32_t));
    throw InvalidArgument(where + message);
  }
  if (e.code == kDevTimeout) poison_and_throw(Timeout(where + message));
  poison_and_throw(Internal(where + message));
}

DispatchResult CudaOp::dispatch(const DispatchArgs& args) {
  check_usable();
  DeviceGuard guard(device_);
  raise_device_error("dispatch");  // an error left by an earlier asynchronous combine
  bool prequantized = false;
  const int64_t num_tokens =
      check_dispatch_args(config_, args, {DeviceType::kCuda, device_}, &prequantized);
  auto stream = static_cast<cudaStream_t>(args.stream);
  const RankInfo info = rank_info();
  const uint64_t seq = ++seq_;
  const uint64_t timeout_ns = static_cast<uint64_t>(Knobs::get().timeout_s * 1e9);
  host_->num_recv = -1;

  try {
    ValidateParams vp{info,
                      args.topk_idx.ptr<int32_t>(),
                      prequantized ? nullptr : args.x.ptr<uint16_t>(),
                      args.topk_weights.ptr<float>(),
                      static_cast<int32_t>(num_tokens),
                      Knobs::get().validate,
                      ErrorSink{&host_dev_->error, error_flag_}};
    MOE_EP_CUDA_CHECK(launch_validate(vp, stream));
    NotifyParams np{info,
                    peers_,
                    layout_,
                    args.topk_idx.ptr<int32_t>(),
                    static_cast<int32_t>(num_tokens),
                    pos_,
                    send_offset_,
                    recv_expert_count_,
                    &host_dev_->num_recv,
                    seq,
                    timeout_ns,
                    ErrorSink{&host_dev_->error, error_flag_}};
    MOE_EP_CUDA_CHECK(launch_notify(np, stream));
    MOE_EP_CUDA_CHECK(cudaEventRecord(notified_, stream));
    // The data kernel needs only device state (positions, offsets), so it is queued before the
    // host learns num_recv; it skips its work when notify reported an error.
    DispatchParams dp{info,
                      peers_,
                      layout_,
                      args.x.data,
                      args.x_scales.data,
                      args.topk_idx.ptr<int32_t>(),
                      args.topk_weights.ptr<float>(),
                      static_cast<int32_t>(num_tokens),
                      pos_,
                      send_offset_,
                      &counters_[0],
                      seq,
                      timeout_ns,
                      ErrorSink{&host_dev_->error, error_flag_}};
    MOE_EP_CUDA_CHECK(
        launch_dispatch(config_.dispatch_dtype, prequantized, dp, num_blocks_, stream));
    MOE_EP_CUDA_CHECK(cudaEventSynchronize(notified_));  // bounded: device waits time out
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
  raise_device_error("dispatch");
  const int64_t num_recv = host_->num_recv;
  if (num_recv < 0 || num_recv > layout_.max_recv_rows()) {
    poison_and_throw(Internal(detail::concat("dispatch: notify produced num_recv=", num_recv,
                                             " outside [0, ", layout_.max_recv_rows(), "]")));
  }

  last_ = Handle{uid_, seq, num_tokens, num_recv};
  combined_ = false;
  char* self = peers_.base[comm_->rank()];
  const int64_t hidden = config_.hidden;
  const DeviceType cuda = DeviceType::kCuda;
  DispatchResult r;
  r.num_recv = num_recv;
  r.handle = last_;
  const ScalarType payload_type = payload_scalar(config_.dispatch_dtype);
  const int64_t payload_cols = config_.dispatch_dtype == DispatchDtype::fp4 ? hidden / 2 : hidden;
  r.recv_x = TensorView::matrix(self + layout_.recv_payload_offset(0), payload_type, num_recv,
                                payload_cols, cuda, device_);
  if (config_.dispatch_dtype != DispatchDtype::bf16) {
    const ScalarType scale_type = config_.dispatch_dtype == DispatchDtype::fp8
                                      ? ScalarType::kFloat32
                                      : ScalarType::kFloat8E8M0;
    r.recv_x_scales = TensorView::matrix(self + layout_.recv_scales_offset(0), scale_type, num_recv,
                                         scale_dim(config_.dispatch_dtype, hidden), cuda, device_);
  }
  r.recv_topk_idx = TensorView::matrix(self + layout_.recv_topk_idx_offset(0), ScalarType::kInt32,
                                       num_recv, config_.topk, cuda, device_);
  r.recv_topk_weights =
      TensorView::matrix(self + layout_.recv_topk_weights_offset(0), ScalarType::kFloat32, num_recv,
                         config_.topk, cuda, device_);
  r.recv_src_rank = TensorView::vector(self + layout_.recv_src_rank_offset(0), ScalarType::kInt32,
                                       num_recv, cuda, device_);
  r.recv_src_token = TensorView::vector(self + layout_.recv_src_token_offset(0), ScalarType::kInt32,
                                        num_recv, cuda, device_);
  r.recv_count_per_local_expert = TensorView::vector(recv_expert_count_, ScalarType::kInt32,
                                                     layout_.local_experts, cuda, device_);
  return r;
}

void CudaOp::combine(const Handle& handle, const TensorView& y, const TensorView& out,
                     void* stream) {
  check_usable();
  DeviceGuard guard(device_);
  raise_device_error("combine");
  check_combine_args(config_, last_, handle, y, out, {DeviceType::kCuda, device_});
  MOE_EP_CHECK_ARG(!combined_, "handle of dispatch call ", handle.call_seq,
                   " was already combined: the CUDA backend combines each dispatch once");
  CombineParams cp{rank_info(),
                   peers_,
                   layout_,
                   y.ptr<uint16_t>(),
                   handle.num_recv,
                   out.ptr<uint16_t>(),
                   static_cast<int32_t>(handle.num_tokens),
                   pos_,
                   handle.call_seq,
                   static_cast<uint64_t>(Knobs::get().timeout_s * 1e9),
                   ErrorSink{&host_dev_->error, error_flag_}};
  try {
    MOE_EP_CUDA_CHECK(launch_combine(config_.combine_dtype, cp, combine_blocks_,
                                     static_cast<cudaStream_t>(stream)));
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
  combined_ = true;
}

void CudaOp::synchronize(void* stream) {
  check_usable();
  DeviceGuard guard(device_);
  try {
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  } catch (const CudaError& e) {
    poison_and_throw(e);
  }
  raise_device_error("synchronize");
}

}  // namespace

std::shared_ptr<Op> create_op(const std::shared_ptr<Communicator>& comm, const OpConfig& config) {
  auto nccl = std::dynamic_pointer_cast<NcclCommunicator>(comm);
  MOE_EP_CHECK_ARG(nccl != nullptr, "comm is a ", to_string(comm->backend()),
                   " communicator that is not an NCCL communicator of moe_ep/cuda.h");
  return std::make_shared<CudaOp>(std::move(nccl), config);
}

}  // namespace moe_ep::cuda_backend
