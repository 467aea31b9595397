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

OpBase::CallScope::CallScope(OpBase& op, CallKind kind) : CallScope(op, to_string(kind)) {}

OpBase::CallScope::CallScope(OpBase& op, const char* call) : op_(op) {
  MOE_EP_CHECK_USAGE(!op.in_call_.exchange(true, std::memory_order_acquire), call, ": op uid ",
                     op.uid_, " (rank ", op.rank_, ") is already inside a call on ",
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

namespace {

const char* recv_call(CallKind kind) {
  return kind == CallKind::kLowLatencyCombine ? "low_latency_combine_recv"
                                              : "low_latency_dispatch_recv";
}

// "low-latency dispatch call 3 of op uid 7 (num_tokens=5)".
std::string describe_handle(const LowLatencyHandle& h) {
  return detail::concat("low-latency dispatch call ", h.call_seq, " of op uid ", h.op_uid,
                        " (num_tokens=", h.num_tokens, ")");
}

// "low_latency_combine_recv of the low-latency combine of low-latency dispatch call 3 of ...".
std::string describe_pending(CallKind kind, const LowLatencyHandle& h) {
  return detail::concat(
      recv_call(kind),
      kind == CallKind::kLowLatencyCombine ? " of the low-latency combine of " : " of ",
      describe_handle(h));
}

}  // namespace

void OpBase::check_nothing_pending() const {
  if (!pending_) return;
  throw InvalidUsage(detail::concat(
      describe_pending(pending_->kind, pending_->handle),
      " is pending (the call was made with return_recv_hook=true) on rank ", rank_, "; call ",
      recv_call(pending_->kind), "(handle) first: no other call on this op can be made before it"));
}

OpBase::PendingRecv OpBase::take_pending(CallKind kind, const LowLatencyHandle& handle,
                                         const char* call) {
  MOE_EP_CHECK_USAGE(pending_.has_value(), call, ": no receive is pending on op uid ", uid_,
                     " (rank ", rank_, "), handle given: ", describe_handle(handle), "; ", call,
                     " completes a ", to_string(kind), " made with return_recv_hook=true, once");
  MOE_EP_CHECK_USAGE(pending_->kind == kind, call, ": the receive pending on op uid ", uid_,
                     " (rank ", rank_, ") is ", describe_pending(pending_->kind, pending_->handle),
                     ", not ", call, " (handle given: ", describe_handle(handle), "); call ",
                     recv_call(pending_->kind), "(handle) first");
  const LowLatencyHandle& want = pending_->handle;
  MOE_EP_CHECK_ARG(handle.op_uid == want.op_uid && handle.call_seq == want.call_seq &&
                       handle.num_tokens == want.num_tokens,
                   call, ": handle is ", describe_handle(handle), ", but the pending receive is ",
                   describe_pending(pending_->kind, want),
                   "; pass the handle of the call made with return_recv_hook=true");
  PendingRecv taken = *pending_;
  pending_.reset();
  return taken;
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
