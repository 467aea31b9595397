// The CPU world (moe_ep/cpu.h): W ranks as threads of one process. WorldState is what the W
// communicators share: the group id, the wait bound and the creation rendezvous. Creations are
// matched by configuration (docs/design.md#collective-calls-and-agreement): a rank creating an
// op joins the open creation with the same configuration, and the op exists once all W ranks
// have joined it. A rank that rejects its configuration tells the others, whose open creations
// fail at once; a creation that some rank never joins fails after the wait bound, naming what
// the missing rank is doing instead (another configuration, a rejection, nothing). Matching by
// configuration rather than by counting calls means one missed creation costs that creation only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/shared.h"
#include "core/agreement.h"
#include "moe_ep/cpu.h"

namespace moe_ep::cpu_backend {

class WorldState {
 public:
  WorldState(int world_size, double timeout_s, uint64_t group_id);
  int world_size() const { return world_size_; }
  double timeout_s() const { return timeout_s_; }
  uint64_t group_id() const { return group_id_; }

  // Joins the creation of `config` and waits (bounded) until every rank has joined it; returns
  // the op's shared state. Throws InvalidArgument when another rank rejects its configuration
  // meanwhile, or when the wait ends with the missing ranks creating other configurations (the
  // message names the differing field); Timeout when a missing rank is doing nothing else.
  std::shared_ptr<OpShared> join_create(int rank, const OpConfig& config);

  // Records that `rank` rejected a creation (its configuration, if it has one, and why) and
  // fails every open creation it has not joined.
  void reject_create(int rank, const std::string& reason, const std::optional<OpConfig>& config);

 private:
  struct Creation {
    OpConfig config;
    std::vector<char> joined;  // [W]
    int num_joined = 0;
    bool complete = false;
    bool failed = false;
    ErrorCode fail_code = ErrorCode::kInternal;
    std::string fail_message;
    std::shared_ptr<OpShared> shared;
    std::chrono::steady_clock::time_point opened;
  };
  // One creation attempt of a rank: its number and, for a create_op, its configuration (none
  // for a rejection).
  struct Attempt {
    uint64_t number = 0;
    std::optional<OpConfig> config;
  };
  struct RankState {
    uint64_t attempts = 0;     // create_op and reject_create calls so far
    uint64_t rejected_at = 0;  // the attempt that was the latest rejection (0: none)
    std::string reject_reason;
    std::optional<OpConfig> reject_config;
    std::shared_ptr<Creation> creating;          // the creation it waits in, if any
    std::optional<OpConfig> last_config;         // of its latest create_op
    std::chrono::steady_clock::time_point left;  // when it last stopped waiting in a creation
    Attempt latest, previous;  // its last two attempts: a rank past a round is judged by it
  };

  // With mu_ held: fails `c` for everyone waiting in it, and closes it.
  void fail_locked(const std::shared_ptr<Creation>& c, ErrorCode code, const std::string& message);
  // With mu_ held: the message of a rejection by a rank missing from `c` that `rank` has not
  // accounted for yet; empty when there is none.
  std::string unaccounted_rejection_locked(int rank, const Creation& c) const;
  // With mu_ held: `rank` has seen every attempt made so far.
  void account_locked(int rank);
  // With mu_ held: the ranks missing from the creation `c` and what they do instead, from
  // `rank`'s point of view.
  CreationMisses missing_report_locked(int rank, const Creation& c) const;
  // With mu_ held: the ranks missing from `c` that are already past this round (this rank's
  // attempt number), judged by their attempt of the round in `previous` (none: count 0).
  CreationMisses left_round_locked(int rank, const Creation& c) const;
  // With mu_ held: `rank` makes attempt number attempts, with `config` (none: a rejection).
  void record_attempt_locked(int rank, const std::optional<OpConfig>& config);

  const int world_size_;
  const double timeout_s_;
  const uint64_t group_id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Creation>> open_;  // config description -> creation
  std::vector<RankState> ranks_;                           // [W]
  std::vector<std::vector<uint64_t>> seen_;  // [observer][rank]: attempts accounted for
};

class CpuCommunicator : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<WorldState> world, int rank)
      : world_(std::move(world)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_->world_size(); }
  Backend backend() const override { return Backend::kCpu; }
  uint64_t group_id() const override { return world_->group_id(); }
  WorldState& world() const { return *world_; }

 private:
  std::shared_ptr<WorldState> world_;
  int rank_;
};

}  // namespace moe_ep::cpu_backend
