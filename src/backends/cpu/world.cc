// CpuWorld::create and the creation rendezvous of the CPU backend; see world.h.
#include "backends/cpu/world.h"

#include <atomic>
#include <cmath>

#include "core/check.h"
#include "moe_ep/config.h"

namespace moe_ep {
namespace cpu_backend {

WorldState::WorldState(int world_size, double timeout_s, uint64_t group_id)
    : world_size_(world_size),
      timeout_s_(timeout_s),
      group_id_(group_id),
      num_created_(world_size, 0) {}

std::shared_ptr<OpShared> WorldState::join_create(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t number = num_created_[rank]++;
  Pending& pending = pending_[number];
  if (!pending.shared) pending.shared = std::make_shared<OpShared>(world_size_, timeout_s_);
  std::shared_ptr<OpShared> shared = pending.shared;
  if (++pending.num_joined == world_size_) pending_.erase(number);
  return shared;
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
  MOE_EP_CHECK_ARG(world_size >= 1 && world_size <= kMaxCpuRanks,
                   "CpuWorld: world_size=", world_size, " must be in [1, ", kMaxCpuRanks, "]");
  MOE_EP_CHECK_ARG(std::isfinite(timeout_s) && timeout_s >= 0, "CpuWorld: timeout_s=", timeout_s,
                   " must be finite and >= 0 (0 takes MOE_EP_TIMEOUT_S)");
  const double timeout = timeout_s > 0 ? timeout_s : Knobs::get().timeout_s;
  static std::atomic<uint64_t> next_group_id{1};
  auto state = std::make_shared<cpu_backend::WorldState>(world_size, timeout, next_group_id++);
  return std::make_shared<cpu_backend::CpuWorldImpl>(std::move(state));
}

}  // namespace moe_ep
