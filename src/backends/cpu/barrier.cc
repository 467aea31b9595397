// The bounded barrier of the CPU backend; see barrier.h for the failure rules.
#include "backends/cpu/barrier.h"

#include <algorithm>

#include "core/check.h"

namespace moe_ep::cpu_backend {

BoundedBarrier::BoundedBarrier(int world_size, double timeout_s)
    : world_size_(world_size), timeout_s_(timeout_s), arrived_(world_size, 0) {}

std::string BoundedBarrier::waiting_report(int rank, const char* phase, bool expired) const {
  std::string missing;
  for (int r = 0; r < world_size_; ++r) {
    if (!arrived_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  const std::string waited = expired ? detail::concat(" after ", timeout_s_, " s") : std::string();
  std::string report =
      detail::concat(phase, ": rank ", rank, " timed out", waited, " waiting for ranks [", missing,
                     "] (expected ", world_size_, " arrivals, seen ", num_arrived_, ")");
  if (!expired) {
    report +=
        detail::concat(": rank ", broken_rank_, " reached the ", timeout_s_, " s limit first");
  }
  return report;
}

void BoundedBarrier::throw_broken(int rank, const char* phase, bool was_waiting) const {
  if (was_waiting && broken_code_ == ErrorCode::kTimeout) {
    // Another waiter of this generation gave up first; this rank waited on the same ranks.
    throw Timeout(waiting_report(rank, phase, /*expired=*/false));
  }
  throw RemoteError(detail::concat(phase, ": rank ", rank, " cannot proceed: rank ", broken_rank_,
                                   " failed in this op: ", broken_message_));
}

void BoundedBarrier::arrive_and_wait(int rank, const char* phase) {
  MOE_EP_CHECK_INTERNAL(rank >= 0 && rank < world_size_, "barrier rank ", rank, " of ",
                        world_size_);
  std::unique_lock<std::mutex> lock(mu_);
  if (broken_) throw_broken(rank, phase, /*was_waiting=*/false);
  MOE_EP_CHECK_INTERNAL(!arrived_[rank], phase, ": rank ", rank, " arrived twice");
  arrived_[rank] = 1;
  ++num_arrived_;
  const uint64_t generation = generation_;
  if (num_arrived_ == world_size_) {
    std::fill(arrived_.begin(), arrived_.end(), 0);
    num_arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s_));
  const auto released = [&] { return generation_ != generation || broken_; };
  if (!cv_.wait_until(lock, deadline, released)) {
    const std::string message = waiting_report(rank, phase, /*expired=*/true);
    broken_ = true;
    broken_code_ = ErrorCode::kTimeout;
    broken_rank_ = rank;
    broken_message_ = message;
    cv_.notify_all();
    throw Timeout(message);
  }
  if (generation_ != generation) return;
  throw_broken(rank, phase, /*was_waiting=*/true);
}

void BoundedBarrier::break_group(int rank, ErrorCode code, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return;
  broken_ = true;
  broken_code_ = code;
  broken_rank_ = rank;
  broken_message_ = message;
  cv_.notify_all();
}

}  // namespace moe_ep::cpu_backend
