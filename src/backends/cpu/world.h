// The CPU world (moe_ep/cpu.h): W ranks as threads of one process. WorldState is what the W
// communicators share: the group id, the wait bound, and the rendezvous that makes the k-th
// create_op of every rank meet in the same OpShared (every rank creates its ops in the same
// order, as DESIGN 5 requires of all collective calls).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/cpu/shared.h"
#include "moe_ep/cpu.h"

namespace moe_ep::cpu_backend {

class WorldState {
 public:
  WorldState(int world_size, double timeout_s, uint64_t group_id);
  int world_size() const { return world_size_; }
  double timeout_s() const { return timeout_s_; }
  uint64_t group_id() const { return group_id_; }

  // The shared state of the next op `rank` creates. The first rank to ask for creation number k
  // allocates it; it is forgotten here once all W ranks have taken it.
  std::shared_ptr<OpShared> join_create(int rank);

 private:
  struct Pending {
    std::shared_ptr<OpShared> shared;
    int num_joined = 0;
  };
  const int world_size_;
  const double timeout_s_;
  const uint64_t group_id_;
  std::mutex mu_;
  std::vector<uint64_t> num_created_;    // [W] create_op calls each rank has started
  std::map<uint64_t, Pending> pending_;  // creation number -> its shared state
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
