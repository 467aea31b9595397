// See op_base.h.
#include "core/op_base.h"

#include <atomic>

namespace moe_ep {
namespace {

uint64_t next_uid() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

}  // namespace

OpBase::OpBase(const OpConfig& config, int rank, int world_size)
    : config_(config), rank_(rank), world_size_(world_size), uid_(next_uid()) {
  latest_.op_uid = uid_;
  latest_low_latency_.op_uid = uid_;
}

OpBase::CallScope::CallScope(OpBase& op, CallKind kind) : op_(op) {
  MOE_EP_CHECK_USAGE(!op.in_call_.exchange(true, std::memory_order_acquire), to_string(kind),
                     ": op uid ", op.uid_, " (rank ", op.rank_, ") is already inside a call on ",
                     "another thread; calls of one op must not overlap");
}

OpBase::CallScope::~CallScope() { op_.in_call_.store(false, std::memory_order_release); }

void OpBase::check_usable() const {
  MOE_EP_CHECK_USAGE(poisoned_.empty(), "op unusable after: ", poisoned_);
}

void OpBase::poison(const Error& error) {
  if (poisoned_.empty()) poisoned_ = error.what();
  on_poison(error);
}

void OpBase::poison_and_throw(const Error& error) {
  poison(error);
  throw_error(error.code(), error.what());
}

StepVerdict OpBase::next_step(CallKind kind) const {
  StepVerdict v;
  v.kind = kind;
  switch (kind) {
    case CallKind::kDispatch: v.call = latest_.call_seq + 1; break;
    case CallKind::kCombine: v.call = latest_.call_seq; break;
    case CallKind::kLowLatencyDispatch: v.call = latest_low_latency_.call_seq + 1; break;
    case CallKind::kLowLatencyCombine: v.call = latest_low_latency_.call_seq; break;
  }
  return v;
}

void OpBase::check_not_aliased(const char* name, const TensorView& view,
                               const std::vector<MemoryRange>& owned) {
  if (!view.defined() || view.data == nullptr || view.nbytes() == 0) return;
  const auto* begin = static_cast<const char*>(view.data);
  const char* end = begin + view.nbytes();
  for (const MemoryRange& range : owned) {
    const auto* r_begin = static_cast<const char*>(range.begin);
    const char* r_end = r_begin + range.bytes;
    MOE_EP_CHECK_ARG(end <= r_begin || begin >= r_end, name, "=", view.describe(),
                     " overlaps this op's own buffers (an output view of an earlier call); the op ",
                     "writes them during the call, so copy the data out first");
  }
}

}  // namespace moe_ep
