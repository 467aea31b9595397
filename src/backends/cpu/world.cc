// CpuWorld::create and the creation rendezvous of the CPU backend; see world.h.
#include "backends/cpu/world.h"

#include <atomic>
#include <chrono>
#include <cmath>

#include "core/agreement.h"
#include "core/check.h"
#include "moe_ep/config.h"

namespace moe_ep {
namespace cpu_backend {

WorldState::WorldState(int world_size, double timeout_s, uint64_t group_id)
    : world_size_(world_size),
      timeout_s_(timeout_s),
      group_id_(group_id),
      ranks_(world_size),
      seen_(world_size, std::vector<uint64_t>(world_size, 0)) {}

void WorldState::fail_locked(const std::shared_ptr<Creation>& c, ErrorCode code,
                             const std::string& message) {
  if (c->complete || c->failed) return;
  c->failed = true;
  c->fail_code = code;
  c->fail_message = message;
  const auto it = open_.find(c->config.describe());
  if (it != open_.end() && it->second == c) open_.erase(it);
  cv_.notify_all();
}

std::string WorldState::unaccounted_rejection_locked(int rank, const Creation& c) const {
  for (int q = 0; q < world_size_; ++q) {
    const RankState& other = ranks_[q];
    // A rejection counts against this creation when this rank has not seen it yet and it was
    // made at this round or later: ranks that make the same calls count their creation attempts
    // alike, so a rejection from an earlier round (when this rank rejected or skipped too) is
    // not about this one.
    if (q == rank || c.joined[q] || other.rejected_at <= seen_[rank][q] ||
        other.rejected_at < ranks_[rank].attempts) {
      continue;
    }
    std::string difference;
    if (other.reject_config) {
      difference = first_config_difference(config_values(*other.reject_config, world_size_), q,
                                           config_values(c.config, world_size_), rank);
    }
    return detail::concat("create_op aborted: rank ", q, " rejected its configuration",
                          difference.empty() ? "" : " (" + difference + ")", ": ",
                          other.reject_reason);
  }
  return {};
}

void WorldState::account_locked(int rank) {
  for (int q = 0; q < world_size_; ++q) seen_[rank][q] = ranks_[q].attempts;
}

CreationMisses WorldState::missing_report_locked(int rank, const Creation& c) const {
  CreationMisses misses;
  for (int q = 0; q < world_size_; ++q) {
    if (c.joined[q]) continue;
    const RankState& other = ranks_[q];
    // A rank that waited in another creation while this one was open disagrees with it, even
    // if its own wait has ended by now.
    const bool elsewhere =
        other.creating != nullptr || (other.last_config && other.left >= c.opened);
    if (elsewhere) {
      const OpConfig& theirs = other.creating ? other.creating->config : *other.last_config;
      const std::string difference = first_config_difference(
          config_values(theirs, world_size_), q, config_values(c.config, world_size_), rank);
      misses.add(q,
                 detail::concat("rank ", q, other.creating ? " is" : " was",
                                " creating another configuration (", difference, ")"),
                 difference);
    } else {
      misses.add(q, other.rejected_at != 0 && other.rejected_at == other.attempts
                        ? detail::concat("rank ", q,
                                         " last rejected a configuration: ", other.reject_reason)
                        : detail::concat("rank ", q, " is not creating an op"));
    }
  }
  return misses;
}

void WorldState::record_attempt_locked(int rank, const std::optional<OpConfig>& config) {
  RankState& me = ranks_[rank];
  me.previous = me.latest;
  me.latest = Attempt{me.attempts, config};
}

CreationMisses WorldState::left_round_locked(int rank, const Creation& c) const {
  const uint64_t round = ranks_[rank].attempts;
  CreationMisses left;
  for (int q = 0; q < world_size_; ++q) {
    const RankState& other = ranks_[q];
    if (q == rank || c.joined[q] || other.latest.number <= round ||
        other.previous.number != round || !other.previous.config) {
      continue;
    }
    const std::string difference =
        first_config_difference(config_values(*other.previous.config, world_size_), q,
                                config_values(c.config, world_size_), rank);
    left.add(q, left_creation_text(q, difference), difference);
  }
  return left;
}

std::shared_ptr<OpShared> WorldState::join_create(int rank, const OpConfig& config) {
  std::unique_lock<std::mutex> lock(mu_);
  RankState& me = ranks_[rank];
  ++me.attempts;
  record_attempt_locked(rank, config);
  const std::string key = config.describe();
  std::shared_ptr<Creation>& slot = open_[key];
  if (!slot) {
    slot = std::make_shared<Creation>();
    slot->config = config;
    slot->joined.assign(world_size_, 0);
    slot->shared = std::make_shared<OpShared>(world_size_, timeout_s_);
    slot->opened = std::chrono::steady_clock::now();
  }
  const std::shared_ptr<Creation> c = slot;
  // A rejection this rank has not seen yet is about this creation: fail it, without touching
  // the creation (ranks already in it have seen the rejection and wait for the next one).
  const std::string rejection = unaccounted_rejection_locked(rank, *c);
  if (!rejection.empty()) {
    if (c->num_joined == 0) open_.erase(key);
    account_locked(rank);
    throw InvalidArgument(rejection);
  }
  // A rank already past this round, its attempt of the round another creation (or this one,
  // left unmatched), will never join: this rank fails at once, naming what that rank created
  // instead, as on the CUDA backend (whose creation slots keep the previous attempt for this).
  // Ranks already waiting in the creation keep waiting out their bound, as before.
  const CreationMisses left = left_round_locked(rank, *c);
  if (left.count > 0) {
    if (c->num_joined == 0) open_.erase(key);
    account_locked(rank);
    throw_error(left.code(), left.message(detail::concat(
                                 "create_op: rank ", rank, " found ranks [", left.missing,
                                 "] past this creation (expected ", world_size_, " arrivals, seen ",
                                 c->num_joined + 1, ")")));
  }
  c->joined[rank] = 1;
  ++c->num_joined;
  if (c->num_joined == world_size_) {
    c->complete = true;
    open_.erase(key);
    cv_.notify_all();
  }
  me.creating = c;
  me.last_config = config;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s_));
  const bool settled = cv_.wait_until(lock, deadline, [&] { return c->complete || c->failed; });
  me.creating.reset();
  me.left = std::chrono::steady_clock::now();
  if (!settled) {
    const CreationMisses misses = missing_report_locked(rank, *c);
    const std::string waited = detail::concat("create_op: rank ", rank, " timed out after ",
                                              timeout_s_, " s waiting for ranks [", misses.missing,
                                              "] to create the same op (expected ", world_size_,
                                              " arrivals, seen ", c->num_joined, ")");
    fail_locked(c, misses.code(), misses.message(waited));
  }
  account_locked(rank);
  if (c->failed) throw_error(c->fail_code, c->fail_message);
  return c->shared;
}

void WorldState::reject_create(int rank, const std::string& reason,
                               const std::optional<OpConfig>& config) {
  std::lock_guard<std::mutex> lock(mu_);
  RankState& me = ranks_[rank];
  me.rejected_at = ++me.attempts;
  record_attempt_locked(rank, std::nullopt);
  me.reject_reason = reason;
  me.reject_config = config;
  std::vector<std::shared_ptr<Creation>> open;
  for (const auto& entry : open_) open.push_back(entry.second);
  for (const std::shared_ptr<Creation>& c : open) {
    if (c->joined[rank]) continue;
    // Seen from the first rank waiting in c; every rank in it fails the same way.
    int observer = 0;
    while (!c->joined[observer]) ++observer;
    const std::string rejection = unaccounted_rejection_locked(observer, *c);
    if (!rejection.empty()) fail_locked(c, ErrorCode::kInvalidArgument, rejection);
  }
}

namespace {

class CpuWorldImpl : public CpuWorld {
 public:
  explicit CpuWorldImpl(std::shared_ptr<WorldState> state) {
    for (int r = 0; r < state->world_size(); ++r) {
      comms_.push_back(std::make_shared<CpuCommunicator>(state, r));
    }
  }
  int size() const override { return static_cast<int>(comms_.size()); }
  std::shared_ptr<Communicator> communicator(int rank) override {
    MOE_EP_CHECK_ARG(rank >= 0 && rank < size(), "CpuWorld::communicator: rank=", rank,
                     " must be in [0, world_size=", size(), ")");
    return comms_[rank];
  }

 private:
  std::vector<std::shared_ptr<CpuCommunicator>> comms_;  // [W]
};

}  // namespace
}  // namespace cpu_backend

std::shared_ptr<CpuWorld> CpuWorld::create(int world_size, double timeout_s) {
  // Ranks are threads; beyond a few hundred the machine, not this check, is the limit.
  constexpr int kMaxCpuRanks = 1024;
  // The same bound as MOE_EP_TIMEOUT_S: beyond it the deadline would overflow the clock.
  constexpr double kMaxTimeoutS = 1e9;
  MOE_EP_CHECK_ARG(world_size >= 1 && world_size <= kMaxCpuRanks,
                   "CpuWorld: world_size=", world_size, " must be in [1, ", kMaxCpuRanks, "]");
  constexpr double kMinTimeoutS = 1e-3;
  const bool timeout_ok =
      std::isfinite(timeout_s) &&
      (timeout_s == 0 || (timeout_s >= kMinTimeoutS && timeout_s <= kMaxTimeoutS));
  MOE_EP_CHECK_ARG(timeout_ok, "CpuWorld: timeout_s=", timeout_s, " must be 0 (MOE_EP_TIMEOUT_S) ",
                   "or a number of seconds in [", kMinTimeoutS, ", ", kMaxTimeoutS, "]");
  const double timeout = timeout_s > 0 ? timeout_s : Knobs::get().timeout_s;
  static std::atomic<uint64_t> next_group_id{1};
  auto state = std::make_shared<cpu_backend::WorldState>(world_size, timeout, next_group_id++);
  return std::make_shared<cpu_backend::CpuWorldImpl>(std::move(state));
}

}  // namespace moe_ep
