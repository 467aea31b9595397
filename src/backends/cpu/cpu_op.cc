// Creation and the collective plumbing of the CPU op: the backend entry points (create_op and
// reject_create join the world's creation rendezvous, world.h), buffer allocation agreed on by
// every rank, the barrier wrapper that poisons the op, and the publish-and-settle step every
// call starts with.
#include "backends/cpu/cpu_op.h"

#include <new>
#include <type_traits>
#include <utility>

#include "backends/cpu/backend.h"
#include "backends/cpu/world.h"
#include "core/check.h"

namespace moe_ep::cpu_backend {
namespace {

// Every receive buffer of a rank, sized for the worst case of config on world_size ranks, in one
// list: size(vector, element count, fill) for each buffer the configuration needs. Allocation
// and op_memory both walk it, so the size reported before a creation is the size allocated.
template <typename Size>
void size_buffers(RankBuffers& buf, const OpConfig& config, int world_size, Size&& size) {
  const int64_t rows = static_cast<int64_t>(world_size) * config.max_tokens_per_rank;
  const int64_t h = config.hidden;
  size(buf.recv_payload, rows * payload_bytes(config.dispatch_dtype, h), uint8_t{0});
  size(buf.recv_scales, rows * scale_bytes(config.dispatch_dtype, h), uint8_t{0});
  size(buf.recv_topk_idx, rows * config.topk, -1);
  size(buf.recv_topk_weights, rows * config.topk, 0.0f);
  size(buf.recv_src_rank, rows, -1);
  size(buf.recv_src_token, rows, -1);
  size(buf.recv_count_per_local_expert, config.num_experts / world_size, 0);
  size(buf.combine_payload, rows * payload_bytes(config.combine_dtype, h), uint8_t{0});
  size(buf.combine_scales, rows * scale_bytes(config.combine_dtype, h), uint8_t{0});
  // Several nodes, only when there are: the forwarder's staging of W * Tmax dispatch rows and
  // L * (W/L) * Tmax = W * Tmax combine rows.
  const int node_size = config.ranks_per_node > 0 ? config.ranks_per_node : world_size;
  if (node_size < world_size) {
    size(buf.fwd_payload, rows * payload_bytes(config.dispatch_dtype, h), uint8_t{0});
    size(buf.fwd_scales, rows * scale_bytes(config.dispatch_dtype, h), uint8_t{0});
    size(buf.fwd_topk_idx, rows * config.topk, -1);
    size(buf.fwd_topk_weights, rows * config.topk, 0.0f);
    size(buf.fwd_src_token, rows, -1);
    size(buf.fwd_count, world_size, 0);
    size(buf.fwd_combine_payload, rows * payload_bytes(config.combine_dtype, h), uint8_t{0});
    size(buf.fwd_combine_scales, rows * scale_bytes(config.combine_dtype, h), uint8_t{0});
  }
  // Decode mode, only when asked for: staging of W * Tmax rows, and E/W slabs of W * Tmax rows
  // each (E * Tmax rows).
  if (!config.low_latency) return;
  const int64_t slab_rows = static_cast<int64_t>(config.num_experts) * config.max_tokens_per_rank;
  size(buf.stage_payload, rows * payload_bytes(config.dispatch_dtype, h), uint8_t{0});
  size(buf.stage_scales, rows * scale_bytes(config.dispatch_dtype, h), uint8_t{0});
  size(buf.stage_topk_idx, rows * config.topk, -1);
  size(buf.stage_topk_weights, rows * config.topk, 0.0f);
  size(buf.stage_src_token, rows, -1);
  size(buf.stage_count, world_size, 0);
  size(buf.slab_payload, slab_rows * payload_bytes(config.dispatch_dtype, h), uint8_t{0});
  size(buf.slab_scales, slab_rows * scale_bytes(config.dispatch_dtype, h), uint8_t{0});
  size(buf.slab_count, config.num_experts / world_size, 0);
  size(buf.slab_src_rank, slab_rows, -1);
  size(buf.slab_src_token, slab_rows, -1);
  size(buf.slab_src_slot, slab_rows, -1);
}

void allocate_buffers(RankBuffers& buf, const OpConfig& config, int world_size) {
  size_buffers(buf, config, world_size, [](auto& v, int64_t count, auto fill) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    v.assign(static_cast<size_t>(count), static_cast<T>(fill));
  });
}

// The bytes of the buffers size_buffers lists: as `config` would size them (buf empty), or as
// `buf` holds them (count_held).
int64_t buffer_bytes(RankBuffers& buf, const OpConfig& config, int world_size, bool count_held) {
  int64_t bytes = 0;
  size_buffers(buf, config, world_size, [&](auto& v, int64_t count, auto /*fill*/) {
    const int64_t n = count_held ? static_cast<int64_t>(v.size()) : count;
    bytes += n * static_cast<int64_t>(sizeof(typename std::decay_t<decltype(v)>::value_type));
  });
  return bytes;
}

// The barrier phases of a call of `kind`.
const char* publish_phase(CallKind kind) {
  switch (kind) {
    case CallKind::kDispatch: return "dispatch/publish";
    case CallKind::kCombine: return "combine/publish";
    case CallKind::kLowLatencyDispatch: return "low_latency_dispatch/publish";
    case CallKind::kLowLatencyCombine: return "low_latency_combine/publish";
  }
  return "unknown call/publish";
}

const CpuCommunicator& cpu_communicator(const std::shared_ptr<Communicator>& comm) {
  const auto* cpu_comm = dynamic_cast<const CpuCommunicator*>(comm.get());
  MOE_EP_CHECK_ARG(cpu_comm != nullptr,
                   "create_op: the communicator reports backend cpu but does not come from a "
                   "CpuWorld (moe_ep/cpu.h)");
  return *cpu_comm;
}

}  // namespace

std::shared_ptr<Op> create_op(const std::shared_ptr<Communicator>& comm, const OpConfig& config) {
  const CpuCommunicator& cpu_comm = cpu_communicator(comm);
  WorldState& world = cpu_comm.world();
  try {
    check_config(config, cpu_comm.size());
  } catch (const InvalidArgument& e) {
    world.reject_create(cpu_comm.rank(), e.what(), config);
    throw;
  }
  std::shared_ptr<OpShared> shared = world.join_create(cpu_comm.rank(), config);
  return CpuOp::create(std::move(shared), cpu_comm.rank(), cpu_comm.size(), config);
}

void reject_create(const std::shared_ptr<Communicator>& comm, const std::string& reason) {
  const CpuCommunicator& cpu_comm = cpu_communicator(comm);
  cpu_comm.world().reject_create(cpu_comm.rank(), reason, std::nullopt);
}

OpMemory op_memory(const std::shared_ptr<Communicator>& comm, const OpConfig& config) {
  const CpuCommunicator& cpu_comm = cpu_communicator(comm);
  check_config(config, cpu_comm.size());
  RankBuffers none;
  OpMemory m;
  m.peer_bytes = buffer_bytes(none, config, cpu_comm.size(), /*count_held=*/false);
  return m;
}

OpMemory CpuOp::memory() const {
  OpMemory m;
  m.peer_bytes = buffer_bytes(shared_->buffers[rank_], config_, world_size_, /*count_held=*/true);
  return m;
}

CpuOp::CpuOp(std::shared_ptr<OpShared> shared, int rank, int world_size, const OpConfig& config)
    : OpBase(config, rank, world_size),
      shared_(std::move(shared)),
      shape_{world_size, config.num_experts, config.topk, config.ranks_per_node},
      num_syncs_(1),  // the allocation barrier
      counts_(world_size, std::vector<int64_t>(world_size, 0)) {}

std::shared_ptr<CpuOp> CpuOp::create(std::shared_ptr<OpShared> shared, int rank, int world_size,
                                     const OpConfig& config) {
  // Every rank agreed on the configuration; now every rank must also have its buffers, or
  // nobody keeps the op (a rank without buffers would leave its peers waiting in every call).
  RankPost& mine = shared->slots[rank].post[0];
  mine.verdict = StepVerdict{};
  try {
    allocate_buffers(shared->buffers[rank], config, world_size);
  } catch (const std::bad_alloc&) {
    mine.verdict.error = detail::concat(
        "rank ", rank, " could not allocate its receive buffers for ", config.describe());
  }
  shared->barrier.arrive_and_wait(rank, "create/allocate");
  for (int r = 0; r < world_size; ++r) {
    const std::string& error = shared->slots[r].post[0].verdict.error;
    MOE_EP_CHECK_ARG(error.empty(), "create_op aborted: ", error);
  }
  return std::shared_ptr<CpuOp>(new CpuOp(std::move(shared), rank, world_size, config));
}

RankPost& CpuOp::my_post() { return shared_->slots[rank_].post[num_syncs_ % 2]; }

const RankPost& CpuOp::post_of(int rank) const {
  return shared_->slots[rank].post[(num_syncs_ - 1) % 2];
}

void CpuOp::on_poison(const Error& error) {
  shared_->barrier.break_group(rank_, error.code(), error.what());
}

void CpuOp::sync(const char* phase) {
  try {
    shared_->barrier.arrive_and_wait(rank_, phase);
  } catch (const Error& e) {
    poison(e);
    throw;
  }
  ++num_syncs_;
}

void CpuOp::publish_and_settle(const StepVerdict& verdict) {
  my_post().verdict = verdict;
  sync(publish_phase(verdict.kind));
  std::vector<RankVerdict> others;
  for (int r = 0; r < world_size_; ++r) {
    if (r != rank_) others.push_back(RankVerdict{r, post_of(r).verdict});
  }
  settle_step(rank_, verdict, others);
}

void CpuOp::reject(CallKind kind, const std::string& reason, void* /*stream*/) {
  CallScope scope(*this, kind);
  check_usable();
  RankPost& post = my_post();
  post.num_tokens = 0;
  post.send_counts.assign(world_size_, 0);
  StepVerdict verdict = next_step(kind);
  verdict.error = reason.empty() ? std::string("rejected by the caller") : reason;
  try {
    check_nothing_pending();
  } catch (const InvalidUsage& e) {
    verdict.error += detail::concat("; also, ", e.what());
  }
  publish_and_settle(verdict);  // throws: this rank rejected
  throw Internal("reject: the step settled although this rank rejected it");
}

std::vector<MemoryRange> CpuOp::owned_memory() const {
  const RankBuffers& b = shared_->buffers[rank_];
  const auto range = [](const auto& v) { return MemoryRange{v.data(), v.size() * sizeof(v[0])}; };
  return {range(b.recv_payload),
          range(b.recv_scales),
          range(b.recv_topk_idx),
          range(b.recv_topk_weights),
          range(b.recv_src_rank),
          range(b.recv_src_token),
          range(b.recv_count_per_local_expert),
          range(b.combine_payload),
          range(b.combine_scales),
          range(b.stage_payload),
          range(b.stage_scales),
          range(b.stage_topk_idx),
          range(b.stage_topk_weights),
          range(b.stage_src_token),
          range(b.stage_count),
          range(b.slab_payload),
          range(b.slab_scales),
          range(b.slab_count),
          range(b.slab_src_rank),
          range(b.slab_src_token),
          range(b.slab_src_slot),
          range(b.fwd_payload),
          range(b.fwd_scales),
          range(b.fwd_topk_idx),
          range(b.fwd_topk_weights),
          range(b.fwd_src_token),
          range(b.fwd_count),
          range(b.fwd_combine_payload),
          range(b.fwd_combine_scales)};
}

}  // namespace moe_ep::cpu_backend
