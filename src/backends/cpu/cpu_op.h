// One rank's CPU op (DESIGN 2-3, 6): the readable reference of dispatch and combine. Each call is
// the same three steps:
//   1. check this rank's arguments (never throws for bad input: the verdict is published), then
//      barrier "<call>/publish": every rank learns every rank's verdict and send counts, and if
//      any rank rejected its input every rank throws InvalidArgument before data moves;
//   2. sender role: store this rank's rows into the destination ranks' receive buffers;
//      barrier "<call>/exchange": all stores are done (and inputs may be released);
//   3. receiver role: finish the outputs from this rank's own buffers.
// Timeouts and other failures after step 1 starts poison the op (errors.h, poisons_op).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/shared.h"
#include "core/routing.h"
#include "moe_ep/op.h"

namespace moe_ep::cpu_backend {

class CpuOp : public Op {
 public:
  // Collective: publishes `config` (and this rank's verdict on it), checks that every rank
  // passed the same one and allocates this rank's receive buffers.
  static std::shared_ptr<CpuOp> create(std::shared_ptr<OpShared> shared, int rank, int world_size,
                                       const OpConfig& config);

  const OpConfig& config() const override { return config_; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  Backend backend() const override { return Backend::kCpu; }
  uint64_t uid() const override { return uid_; }

  DispatchResult dispatch(const DispatchArgs& args) override;
  void combine(const Handle& handle, const TensorView& y, const TensorView& out,
               void* stream = nullptr) override;

 private:
  CpuOp(std::shared_ptr<OpShared> shared, int rank, int world_size, const OpConfig& config);

  // Collective plumbing (cpu_op.cc).
  void check_usable() const;
  RankPost& my_post();                       // the post for the next barrier
  const RankPost& post_of(int rank) const;   // a post for the barrier just passed
  void sync(const char* phase);              // the barrier; poisons the op on failure
  void throw_if_rejected(const char* call);  // step 1 verdicts
  void poison(ErrorCode code, const std::string& message);
  void guarded(const std::function<void()>& fn);  // runs fn, poisoning the op if it fails

  // Dispatch (dispatch.cc).
  void check_dispatch_args(const DispatchArgs& args, int64_t* num_tokens) const;
  void send_dispatch_rows(const DispatchArgs& args, const SendPlan& plan);
  DispatchResult receive_dispatch();

  // Combine (combine.cc).
  void check_combine_args(const Handle& handle, const TensorView& y, const TensorView& out) const;
  void send_combine_rows(const TensorView& y);
  void receive_combine(const TensorView& out);

  std::shared_ptr<OpShared> shared_;
  const int rank_;
  const int world_size_;
  const OpConfig config_;
  const RoutingShape shape_;
  const uint64_t uid_;
  uint64_t num_syncs_ = 0;  // barriers passed; all ranks of the op agree on it
  std::string poisoned_;    // first poisoning error, empty while usable

  // State of the latest successful dispatch, which its combine needs.
  uint64_t call_seq_ = 0;                     // 0: no dispatch yet
  int64_t num_tokens_ = 0;                    // this rank's T
  int64_t num_recv_ = 0;                      // rows this rank received
  SendPlan plan_;                             // this rank's tokens per destination
  std::vector<std::vector<int64_t>> counts_;  // [W src][W dst] rows of the dispatch
  std::vector<int32_t> route_src_rank_;       // [num_recv] private copy of recv_src_rank
  std::vector<int32_t> route_src_token_;      // [num_recv] private copy of recv_src_token
};

}  // namespace moe_ep::cpu_backend
