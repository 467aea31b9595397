// The part of an op every backend shares (docs/design.md#errors,
// #collective-calls-and-agreement): configuration and identity, the poisoned state and its one
// path (the first poisoning error is kept; later calls raise "op unusable after: <it>"), the
// guard that lets one thread at a time into the op, the identity of the next call, the handles
// of the latest dispatch and of the latest low-latency dispatch, the receive still owed by a
// decode call made with an overlap hook, and the aliasing check of inputs against the op's own
// buffers. A backend derives from it and adds how a step's verdicts travel and how data moves.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/agreement.h"
#include "core/check.h"
#include "moe_ep/op.h"

namespace moe_ep {

// A range of memory the op owns (e.g. its receive rows), for the aliasing checks.
struct MemoryRange {
  const void* begin = nullptr;
  size_t bytes = 0;
};

class OpBase : public Op {
 public:
  const OpConfig& config() const override { return config_; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  uint64_t uid() const override { return uid_; }

 protected:
  OpBase(const OpConfig& config, int rank, int world_size);

  // Admits one thread at a time into the op's calls: a second thread that enters while a call
  // is running raises InvalidUsage at once (it never joins the collective step).
  class CallScope {
   public:
    CallScope(OpBase& op, CallKind kind);
    CallScope(OpBase& op, const char* call);  // e.g. "low_latency_dispatch_recv"
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    OpBase& op_;
  };

  // Raises InvalidUsage("op unusable after: ...") once the op is poisoned.
  void check_usable() const;
  // Records `error` as the op's first poisoning error (later ones are dropped) and calls
  // on_poison, where a backend tells its peers (the CPU backend breaks its barrier).
  void poison(const Error& error);
  [[noreturn]] void poison_and_throw(const Error& error);
  virtual void on_poison(const Error& error) { (void)error; }
  bool poisoned() const { return !poisoned_.empty(); }

  // Runs fn once data may be moving: peers depend on this rank finishing, so any error that
  // escapes poisons the op; a non-poisoning one there is a bug and becomes Internal.
  template <typename Fn>
  void guarded(Fn&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      if (poisons_op(e.code())) poison_and_throw(e);
      poison_and_throw(Internal(detail::concat("unexpected error while moving data: ", e.what())));
    } catch (const std::exception& e) {
      poison_and_throw(Internal(detail::concat("unexpected error while moving data: ", e.what())));
    }
  }

  // This rank's statement for its next call of `kind`: dispatch #(latest + 1), or combine of the
  // latest dispatch, and the same for the low-latency kinds with the latest low-latency dispatch;
  // error left empty.
  StepVerdict next_step(CallKind kind) const;

  // Overlap hooks (docs/decode-mode.md#overlap-hooks). The receive part still owed by the op's
  // latest decode call made with return_recv_hook; an op holds at most one, because its staging
  // and combine areas hold one call in flight.
  struct PendingRecv {
    CallKind kind = CallKind::kLowLatencyDispatch;  // the call whose receive part it is
    LowLatencyHandle handle;                        // the low-latency dispatch it belongs to
    TensorView out;                                 // combine: where the receive part writes
  };
  // Throws InvalidUsage naming the pending receive and the call that completes it while one is
  // pending. Every collective call runs it among its argument checks, so that all ranks, which
  // make the same calls, reject the call through the step's verdicts and nothing moves.
  void check_nothing_pending() const;
  // The receive calls, which have no step: checks on this rank alone (the misuse is the same on
  // every rank) that the receive of `kind` is pending for `handle`, and takes it. Throws
  // InvalidUsage when none or one of the other kind is pending, InvalidArgument for another
  // handle, naming what was given and what is pending; the pending receive then stays.
  PendingRecv take_pending(CallKind kind, const LowLatencyHandle& handle, const char* call);

  // Rejects (InvalidArgument) an input view that overlaps memory the op owns, naming it: an
  // output view of an earlier call passed back in would be overwritten while it is read.
  static void check_not_aliased(const char* name, const TensorView& view,
                                const std::vector<MemoryRange>& owned);

  const OpConfig config_;
  const int rank_;
  const int world_size_;
  const uint64_t uid_;
  Handle latest_{};  // the latest successful dispatch; call_seq 0 before the first
  LowLatencyHandle latest_low_latency_{};  // the latest successful low-latency dispatch, likewise
  std::optional<PendingRecv> pending_;     // set by a hooked send part, taken by its receive

 private:
  std::atomic<bool> in_call_{false};
  std::string poisoned_;  // first poisoning error, empty while usable
};

}  // namespace moe_ep
