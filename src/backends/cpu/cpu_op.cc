// Creation and the collective plumbing of the CPU op: the creation rendezvous (each rank checks
// its configuration, publishes it with its verdict, and after the barrier every rank compares all
// of them against rank 0's, so a mismatch or a rejection fails every rank with the same story),
// buffer allocation, the barrier wrapper that poisons the op, and the backend entry point.
#include "backends/cpu/cpu_op.h"

#include <atomic>
#include <new>
#include <utility>

#include "backends/cpu/backend.h"
#include "backends/cpu/world.h"
#include "core/check.h"

namespace moe_ep::cpu_backend {
namespace {

uint64_t next_uid() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

// The first field in which `a` (on rank_a) and `b` (on rank 0) differ, as
// "hidden=4096 on rank 1, hidden=7168 on rank 0"; empty when equal.
std::string first_difference(const OpConfig& a, int rank_a, const OpConfig& b) {
  const auto diff = [&](const char* field, const auto& va, const auto& vb) {
    return detail::concat(field, "=", va, " on rank ", rank_a, ", ", field, "=", vb, " on rank 0");
  };
  if (a.num_experts != b.num_experts) return diff("num_experts", a.num_experts, b.num_experts);
  if (a.hidden != b.hidden) return diff("hidden", a.hidden, b.hidden);
  if (a.topk != b.topk) return diff("topk", a.topk, b.topk);
  if (a.max_tokens_per_rank != b.max_tokens_per_rank) {
    return diff("max_tokens_per_rank", a.max_tokens_per_rank, b.max_tokens_per_rank);
  }
  // Compare the enums numerically: a garbage value must not reach to_string's table.
  if (a.dispatch_dtype != b.dispatch_dtype) {
    return diff("dispatch_dtype", static_cast<int>(a.dispatch_dtype),
                static_cast<int>(b.dispatch_dtype));
  }
  if (a.combine_dtype != b.combine_dtype) {
    return diff("combine_dtype", static_cast<int>(a.combine_dtype),
                static_cast<int>(b.combine_dtype));
  }
  if (a.instance_id != b.instance_id) return diff("instance_id", a.instance_id, b.instance_id);
  return {};
}

// Sizes every receive buffer for the worst case of config on world_size ranks.
void allocate_buffers(RankBuffers& buf, const OpConfig& config, int world_size) {
  const int64_t rows = static_cast<int64_t>(world_size) * config.max_tokens_per_rank;
  const int64_t h = config.hidden;
  buf.recv_payload.assign(rows * payload_bytes(config.dispatch_dtype, h), 0);
  buf.recv_scales.assign(rows * scale_bytes(config.dispatch_dtype, h), 0);
  buf.recv_topk_idx.assign(rows * config.topk, -1);
  buf.recv_topk_weights.assign(rows * config.topk, 0.0f);
  buf.recv_src_rank.assign(rows, -1);
  buf.recv_src_token.assign(rows, -1);
  buf.recv_count_per_local_expert.assign(config.num_experts / world_size, 0);
  buf.combine_payload.assign(rows * payload_bytes(config.combine_dtype, h), 0);
  buf.combine_scales.assign(rows * scale_bytes(config.combine_dtype, h), 0);
}

}  // namespace

std::shared_ptr<Op> create_op(const std::shared_ptr<Communicator>& comm, const OpConfig& config) {
  const auto* cpu_comm = dynamic_cast<const CpuCommunicator*>(comm.get());
  MOE_EP_CHECK_ARG(cpu_comm != nullptr,
                   "create_op: the communicator reports backend cpu but does not come from a "
                   "CpuWorld (moe_ep/cpu.h)");
  std::shared_ptr<OpShared> shared = cpu_comm->world().join_create(cpu_comm->rank());
  return CpuOp::create(std::move(shared), cpu_comm->rank(), cpu_comm->size(), config);
}

CpuOp::CpuOp(std::shared_ptr<OpShared> shared, int rank, int world_size, const OpConfig& config)
    : shared_(std::move(shared)),
      rank_(rank),
      world_size_(world_size),
      config_(config),
      shape_{world_size, config.num_experts, config.topk},
      uid_(next_uid()),
      num_syncs_(1),  // the creation barrier
      counts_(world_size, std::vector<int64_t>(world_size, 0)) {}

std::shared_ptr<CpuOp> CpuOp::create(std::shared_ptr<OpShared> shared, int rank, int world_size,
                                     const OpConfig& config) {
  RankSlot& mine = shared->slots[rank];
  mine.config = config;
  try {
    check_config(config, world_size);
    allocate_buffers(shared->buffers[rank], config, world_size);
  } catch (const Error& e) {
    mine.create_error_code = e.code();
    mine.create_error = e.what();
  } catch (const std::bad_alloc&) {
    mine.create_error_code = ErrorCode::kInternal;
    mine.create_error =
        detail::concat("create_op: rank ", rank, " could not allocate its receive buffers for ",
                       config.describe());
  }
  // Nothing can be poisoned yet: a failure here only loses this creation.
  shared->barrier.arrive_and_wait(rank, "create/publish");

  if (!mine.create_error.empty()) throw_error(mine.create_error_code, mine.create_error);
  const OpConfig& reference = shared->slots[0].config;
  for (int r = 1; r < world_size; ++r) {
    const std::string difference = first_difference(shared->slots[r].config, r, reference);
    MOE_EP_CHECK_ARG(difference.empty(), "configuration differs between ranks: ", difference);
  }
  for (int r = 0; r < world_size; ++r) {
    const RankSlot& slot = shared->slots[r];
    if (slot.create_error.empty()) continue;
    throw_error(slot.create_error_code,
                detail::concat("create_op aborted: rank ", r,
                               " rejected the configuration: ", slot.create_error));
  }
  return std::shared_ptr<CpuOp>(new CpuOp(std::move(shared), rank, world_size, config));
}

void CpuOp::check_usable() const {
  MOE_EP_CHECK_USAGE(poisoned_.empty(), "op unusable after: ", poisoned_);
}

RankPost& CpuOp::my_post() { return shared_->slots[rank_].post[num_syncs_ % 2]; }

const RankPost& CpuOp::post_of(int rank) const {
  return shared_->slots[rank].post[(num_syncs_ - 1) % 2];
}

void CpuOp::poison(ErrorCode code, const std::string& message) {
  if (poisoned_.empty()) poisoned_ = message;
  shared_->barrier.break_group(rank_, code, message);
}

void CpuOp::sync(const char* phase) {
  try {
    shared_->barrier.arrive_and_wait(rank_, phase);
  } catch (const Error& e) {
    poison(e.code(), e.what());
    throw;
  }
  ++num_syncs_;
}

void CpuOp::throw_if_rejected(const char* call) {
  const RankPost& mine = post_of(rank_);
  if (!mine.error.empty()) throw InvalidArgument(detail::concat(call, ": ", mine.error));
  for (int r = 0; r < world_size_; ++r) {
    const RankPost& post = post_of(r);
    if (post.error.empty()) continue;
    throw InvalidArgument(
        detail::concat(call, " aborted: rank ", r, " rejected its input: ", post.error));
  }
}

// Once data starts moving, peers depend on this rank finishing the call: any failure leaves the
// group inconsistent, so it poisons the op (and breaks the barrier so peers fail fast). A
// non-poisoning error here would be a bug, and is reported as Internal.
void CpuOp::guarded(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    if (poisons_op(e.code())) {
      poison(e.code(), e.what());
      throw;
    }
    const std::string message = detail::concat("unexpected error while moving data: ", e.what());
    poison(ErrorCode::kInternal, message);
    throw Internal(message);
  } catch (const std::exception& e) {
    const std::string message = detail::concat("unexpected error while moving data: ", e.what());
    poison(ErrorCode::kInternal, message);
    throw Internal(message);
  }
}

}  // namespace moe_ep::cpu_backend
