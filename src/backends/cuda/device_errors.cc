// Turns what the kernels reported (device_error.h) into the exception every rank raises, ranked
// as docs/design.md#collective-calls-and-agreement says: calls out of step (InvalidUsage), then
// this rank's own rejection, then a peer's (InvalidArgument, naming the rank, the argument and
// the value); a timeout poisons the op. After an argument or usage error the op's queued work is
// drained and the error state cleared, so the op stays usable.
#include <atomic>
#include <cstring>

#include "backends/cuda/cuda_op.h"
#include "core/log.h"
#include "moe_ep/config.h"

namespace moe_ep::cuda_backend {
namespace {

const char* phase_name(int32_t phase) {
  switch (phase) {
    case kPhaseStep: return "step agreement";
    case kPhaseNotify: return "dispatch/notify";
    case kPhaseDispatchWait: return "dispatch/receive";
    case kPhaseCombineWait: return "combine/receive";
    case kPhaseCreate: return "create_op";
    case kPhaseTransport: return "transport exchange";
  }
  return "unknown phase";
}

}  // namespace

std::string CudaOp::describe_record(const DeviceError& e) const {
  switch (e.code) {
    case kDevBadExpert:
      return detail::concat("topk_idx[", e.token, "][", e.column, "]=", e.value,
                            " is out of range: expert ids must be in [-1, ", config_.num_experts,
                            ")");
    case kDevDupExpert:
      return detail::concat("topk_idx[", e.token, "] names expert ", e.value, " twice (slots ",
                            e.expected, " and ", e.seen, "): each expert may appear once per ",
                            "token (validation mode, MOE_EP_VALIDATE=1)");
    case kDevNonfiniteX:
      return detail::concat("x[", e.token, "][", e.column, "] is not finite (validation mode, ",
                            "MOE_EP_VALIDATE=1)");
    case kDevNonfiniteW:
      return detail::concat("topk_weights[", e.token, "][", e.column, "] is not finite ",
                            "(validation mode, MOE_EP_VALIDATE=1)");
    case kDevReceiveWithoutSend:
      return detail::concat(
          "the receive part (",
          e.phase == kPhaseCombineWait ? "low_latency_combine_recv" : "low_latency_dispatch_recv",
          ") on rank ", e.rank, " had no send part to complete: its send part's decode step ",
          e.expected,
          " did not run on the device (a peer rejected that call or the ranks were "
          "out of step; the latest call of its kind that ran took step ",
          e.seen, "), so nothing was received and the outputs are not this call's");
  }
  return detail::concat("kernel reported error code ", e.code);
}

void CudaOp::raise_device_error(const char* call, const StepVerdict* mine, bool before_step) {
  std::atomic_thread_fence(std::memory_order_acquire);
  DeviceError e;
  std::memcpy(&e, const_cast<const DeviceError*>(&host_.host()->error), sizeof(e));
  const bool own_rejection = mine != nullptr && !mine->error.empty();
  if (e.code == kDevOk && !own_rejection) return;
  const std::string where = detail::concat(" (rank ", rank_, ", ", call, ")");
  if (e.code == kDevTimeout) {
    // Every rank that times out logs its table: a wait whose peer did store its word points at
    // tables that disagree (docs/perf-history.md, v17, the one-GPU world's stalls).
    MOE_EP_LOG(LogLevel::kWarn, describe_peers(), " (at the timeout of ", call, ")");
    poison_and_throw(Timeout(detail::concat(
        "timed out after ", Knobs::get().timeout_s, " s in ", phase_name(e.phase), ": rank ",
        e.rank, " waited for rank ", e.peer, " (expected ", e.expected, ", saw ", e.seen,
        "); the peer is dead or not calling the same op (MOE_EP_TIMEOUT_S)")));
  }
  if (e.code == kDevSendCall) {
    poison_and_throw(
        Internal(detail::concat("rank ", e.rank, "'s decode send stored its rows for call ",
                                e.expected, " but its step kernel recorded call ", e.seen,
                                " as the one that ran; nothing was expanded", where)));
  }
  if (e.code == kDevPartialMissing) {
    poison_and_throw(RemoteError(detail::concat(
        "node ", e.value, "'s partials of this call did not reach rank ", e.rank,
        ": its forwarder, rank ", e.peer, ", did not forward them (its message holds step ", e.seen,
        ", expected ", e.expected, "); that rank's own error says why", where)));
  }
  const bool known = e.code == kDevOk || e.code == kDevStepFailed || e.code == kDevBadExpert ||
                     e.code == kDevDupExpert || e.code == kDevNonfiniteX ||
                     e.code == kDevNonfiniteW;
  if (!known && e.code != kDevReceiveWithoutSend) {
    poison_and_throw(
        Internal(detail::concat("kernel reported unknown error code ", e.code, where)));
  }
  // An argument or usage error: the op stays usable. Let the call's queued kernels finish (they
  // see the flag and move nothing), then clear the error state for the next call.
  StepOutcome outcome;
  try {
    if (have_call_) MOE_EP_CUDA_CHECK(cudaEventSynchronize(call_done_.get()));
    std::atomic_thread_fence(std::memory_order_acquire);
    std::memcpy(&outcome, const_cast<const StepOutcome*>(&host_.host()->step), sizeof(outcome));
    error_flag_.zero(comm_->internal_stream());
  } catch (const CudaError& err) {
    poison_and_throw(err);
  }
  std::memset(&host_.host()->error, 0, sizeof(DeviceError));
  // An outcome is raised once, then cleared: it belongs to the call that set the error flag
  // (normal and decode steps are numbered apart, so its step number cannot tell which).
  std::memset(static_cast<void*>(&host_.host()->step), 0, sizeof(StepOutcome));
  if (e.code == kDevReceiveWithoutSend) {
    // Not a step's verdict: a receive part found that its send part never ran (its failure was
    // raised by a call made while the receive was pending), so it moved nothing. Raised at the
    // start of the next call (or synchronize), before that call launches anything; the op
    // stays usable.
    // The device reports the call number of the latest dispatch that ran (`value`): neither the
    // send part nor any call queued after the report (their steps saw the error flag) ran. That
    // dispatch is the latest again; one no longer remembered leaves none (its combine is
    // rejected as stale rather than paired with other rows).
    LowLatencyHandle ran{};
    for (const LowLatencyHandle& h : accepted_low_latency_) {
      if (static_cast<int64_t>(h.call_seq) == e.value) ran = h;
    }
    latest_low_latency_ = previous_low_latency_ = ran;
    pending_.reset();
    receive_error_ = describe_record(e) + where;
    if (!before_step) take_receive_error();
    return;  // raised by this call's verdict, on every rank
  }
  const StepVerdict verdict = mine != nullptr ? *mine : last_verdict_;
  const bool step_failed = outcome.status != kStepOk;
  if (step_failed && verdict.kind == CallKind::kCombine) combined_ = false;
  std::vector<RankVerdict> others;
  if (step_failed) {
    RankVerdict peer;
    peer.rank = outcome.peer;
    peer.verdict.kind = static_cast<CallKind>(StepInfo::kind(outcome.peer_info));
    peer.verdict.call = StepInfo::call(outcome.peer_info);
    if (outcome.status == kStepPeerRejected) {
      const StepReason& r = outcome.reason;
      peer.verdict.error =
          r.has_record ? describe_record(r.record)
                       : std::string(r.text, std::min<size_t>(r.text_bytes, sizeof(r.text)));
      if (peer.verdict.error.empty()) peer.verdict.error = "(no reason given)";
    }
    others.push_back(peer);
  }
  StepVerdict settled = verdict;
  const bool scan_rejected = e.code != kDevOk && e.code != kDevStepFailed;
  if (scan_rejected && settled.error.empty()) settled.error = describe_record(e);
  try {
    settle_step(rank_, settled, others);
  } catch (const Error&) {
    if (mine == nullptr) {
      // The latest call queued, which this rank accepted, did not run on the device: its step
      // failed or its data scan rejected it. A low-latency dispatch then never became the latest
      // (the device did not count it), and a receive it left pending has nothing to receive:
      // while one is pending, every other call with a step is rejected and raised at once, so
      // the error is the send part's.
      if (verdict.kind == CallKind::kLowLatencyDispatch && verdict.error.empty()) {
        latest_low_latency_ = previous_low_latency_;
      }
      pending_.reset();
    }
    throw;
  }
  // Nothing left to raise: a stale report of an earlier step.
}

void CudaOp::take_receive_error() {
  if (receive_error_.empty()) return;
  const std::string message = std::move(receive_error_);
  receive_error_.clear();
  throw InvalidUsage(message);
}

}  // namespace moe_ep::cuda_backend
