// The part of an op every backend shares (docs/design.md#errors,
// #collective-calls-and-agreement): configuration and identity, the poisoned state and its one
// path (the first poisoning error is kept; later calls raise "op unusable after: <it>"), the
// guard that lets one thread at a time into the op, the identity of the next call, the handles
// of the latest dispatch and of the latest low-latency dispatch, and the aliasing check of inputs
// against the op's own buffers. A backend derives from it and adds how a step's verdicts travel
// and how data moves.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
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

 private:
  std::atomic<bool> in_call_{false};
  std::string poisoned_;  // first poisoning error, empty while usable
};

}  // namespace moe_ep
