// A reusable barrier for the ranks (threads) of one CPU op whose every wait is bounded
// (docs/design.md#errors). On expiry the waiting rank throws Timeout naming the phase, itself, the
// ranks that did not arrive and the expected and seen arrival counts, and the barrier is broken for
// good: ranks still waiting in that generation also get a Timeout (they waited on the same missing
// ranks), and any later arrival gets RemoteError at once instead of waiting for a group that has
// fallen apart. A rank that fails for another reason breaks the barrier the same way (break_group),
// so its peers fail fast with RemoteError rather than time out.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "moe_ep/errors.h"

namespace moe_ep::cpu_backend {

class BoundedBarrier {
 public:
  BoundedBarrier(int world_size, double timeout_s);

  // Returns when all world_size ranks have arrived in this generation. `phase` names the step
  // for error messages, e.g. "dispatch/publish". Writes a rank makes before arriving are visible
  // to every rank after the barrier returns (the mutex orders them).
  void arrive_and_wait(int rank, const char* phase);

  // Marks the group broken by `rank`'s failure; the first break wins. Waiters wake and throw.
  void break_group(int rank, ErrorCode code, const std::string& message);

  double timeout_s() const { return timeout_s_; }

 private:
  // Why this rank cannot go on; called with mu_ held and broken_ set.
  [[noreturn]] void throw_broken(int rank, const char* phase, bool was_waiting) const;
  // "phase: rank R timed out [after S s] waiting for ranks [..] (expected W arrivals, seen N)";
  // expired is false for a rank woken because another waiter's time ran out.
  std::string waiting_report(int rank, const char* phase, bool expired) const;

  const int world_size_;
  const double timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int num_arrived_ = 0;
  std::vector<char> arrived_;  // [world_size] arrivals of the current generation

  bool broken_ = false;
  ErrorCode broken_code_ = ErrorCode::kInternal;
  int broken_rank_ = -1;
  std::string broken_message_;
};

}  // namespace moe_ep::cpu_backend
