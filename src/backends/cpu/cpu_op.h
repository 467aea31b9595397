// One rank's CPU op (docs/design.md#dispatch, #combine, #decode-mode): the readable reference of
// dispatch and combine in both modes. Each call is the same three steps:
//   1. check this rank's arguments (never throws for bad input: the verdict is published with
//      the call's identity), then barrier "<call>/publish": every rank learns every rank's
//      verdict, call and send counts, and settle_step (core/agreement.h) fails every rank
//      together, before any data moves, if calls are out of step or any rank rejected;
//   2. sender role: store this rank's rows into the destination ranks' receive buffers;
//      barrier "<call>/exchange": all stores are done (and inputs may be released);
//   3. receiver role: finish the outputs from this rank's own buffers.
// With several nodes (ranks_per_node < W, docs/design.md#several-nodes) the sender role reaches
// other nodes only through their forwarders: it stages rows there, barrier "<call>/forward",
// and the forwarder role passes them on before "<call>/exchange" (forward.cc).
// Timeouts and other failures after step 1 poison the op (errors.h, poisons_op). A decode call
// made with return_recv_hook stops after its sends (steps 1 and 2 up to the barrier); its
// receive call passes "<call>/exchange" and does step 3 (docs/decode-mode.md#overlap-hooks).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/shared.h"
#include "core/op_base.h"
#include "core/routing.h"

namespace moe_ep::cpu_backend {

class CpuOp : public OpBase {
 public:
  // After the world's creation rendezvous: allocates this rank's receive buffers and agrees with
  // the other ranks that every one of them could (barrier "create/allocate").
  static std::shared_ptr<CpuOp> create(std::shared_ptr<OpShared> shared, int rank, int world_size,
                                       const OpConfig& config);

  Backend backend() const override { return Backend::kCpu; }

  DispatchResult dispatch(const DispatchArgs& args) override;
  void combine(const Handle& handle, const TensorView& y, const TensorView& out,
               void* stream = nullptr) override;
  LowLatencyDispatchResult low_latency_dispatch(const LowLatencyDispatchArgs& args) override;
  void low_latency_combine(const TensorView& y, const LowLatencyHandle& handle,
                           const TensorView& out, void* stream = nullptr,
                           bool return_recv_hook = false) override;
  void low_latency_dispatch_recv(const LowLatencyHandle& handle, void* stream = nullptr) override;
  void low_latency_combine_recv(const LowLatencyHandle& handle, void* stream = nullptr) override;
  void reject(CallKind kind, const std::string& reason, void* stream = nullptr) override;
  // Its receive area in the world (peer_bytes); the host vectors a call sizes to its rows are
  // not counted.
  OpMemory memory() const override;

 private:
  CpuOp(std::shared_ptr<OpShared> shared, int rank, int world_size, const OpConfig& config);

  // Collective plumbing (cpu_op.cc).
  RankPost& my_post();                      // the post for the next barrier
  const RankPost& post_of(int rank) const;  // a post for the barrier just passed
  void sync(const char* phase);             // the barrier; poisons the op on failure
  // Publishes `verdict` (with whatever else the caller put in my_post()), passes the barrier
  // "<kind>/publish" and settles the step: returns only when every rank is in the same call and
  // accepted it.
  void publish_and_settle(const StepVerdict& verdict);
  void on_poison(const Error& error) override;
  std::vector<MemoryRange> owned_memory() const;

  // Dispatch (dispatch.cc).
  void check_dispatch_args(const DispatchArgs& args, int64_t* num_tokens) const;
  void send_dispatch_rows(const DispatchArgs& args, const SendPlan& plan);
  DispatchResult receive_dispatch();

  // Shared by the sender roles: writes token t of `args` in the dispatch wire format (encoded,
  // or copied when pre-quantized) into one payload row and one scale row.
  void write_dispatch_row(const DispatchArgs& args, int64_t t, uint8_t* payload_row,
                          uint8_t* scale_row) const;

  // Several nodes (forward.cc). Sender: stages this rank's tokens bound for each other node at
  // that node's forwarder, once per node. Forwarder: stores the staged rows into its node's
  // receive buffers at their canonical rows, remembering the routes; in combine, sums the rows
  // its node returns for each forwarded token and sends the partial home.
  bool several_nodes() const { return shape_.num_nodes() > 1; }
  void stage_dispatch_rows(const DispatchArgs& args, const SendPlan& plan);
  // Both modes' staging: for every other node n, the tokens of this rank that some rank of n
  // takes, ascending, at rows (this rank, i) of n's forwarder for this rank: each token's index
  // and global expert ids, `extra(forwarder, row, t)` for what else the mode stages, and their
  // number.
  void stage_for_forwarders(
      const SendPlan& plan, const TensorView& topk_idx,
      const std::function<void(RankBuffers& fwd, int64_t row, int64_t t)>& extra);
  void forward_dispatch_rows();
  // Forwarder role of both modes' combines: `tokens[s]` and `to[s]` are the routes recorded by
  // the latest dispatch of that mode (forward_tokens_ / forward_to_, or their decode-mode copies).
  void forward_combine_partials(const std::vector<std::vector<int32_t>>& tokens,
                                const std::vector<std::vector<uint8_t>>& to);
  // Records, as the forwarder of this node, the routes of the staged rows of every source served
  // (its tokens ascending and which ranks of this node take each) into tokens and to.
  void record_forward_routes(std::vector<std::vector<int32_t>>* tokens,
                             std::vector<std::vector<uint8_t>>* to) const;

  // Combine (combine.cc). receive_combine serves both modes: out[t] sums the rows of the ranks
  // that `plan` sent token t to.
  void check_combine_args(const Handle& handle, const TensorView& y, const TensorView& out) const;
  void send_combine_rows(const TensorView& y);
  // Where the partial result of (src rank, src token t) goes, in both modes: row (this rank, t)
  // of src's combine buffer when src is on this node, else this rank's row for (src's node, t)
  // at the forwarder of this node for src (forward.cc).
  struct CombineRow {
    uint8_t* payload;
    uint8_t* scales;
  };
  CombineRow combine_row_for(int src, int64_t t);
  void receive_combine(const SendPlan& plan, int64_t num_tokens, const TensorView& out);

  // Decode mode (low_latency.cc).
  void send_low_latency_tokens(const LowLatencyDispatchArgs& args, const SendPlan& plan);
  void receive_low_latency();
  LowLatencyDispatchResult low_latency_views() const;  // of the slabs, for latest_low_latency_
  void check_low_latency_combine_args(const TensorView& y, const LowLatencyHandle& handle,
                                      const TensorView& out) const;
  void send_low_latency_partials(const TensorView& y);
  // The receive part of low_latency_combine: with several nodes the forwarders' step, then the
  // source's node-by-node sum into out.
  void receive_low_latency_combine(const TensorView& out);

  std::shared_ptr<OpShared> shared_;
  const RoutingShape shape_;
  uint64_t num_syncs_ = 0;  // barriers passed; all ranks of the op agree on it

  // State of the latest successful dispatch, which its combine needs (latest_ is the handle).
  SendPlan plan_;                             // this rank's tokens per destination
  std::vector<std::vector<int64_t>> counts_;  // [W src][W dst] rows of the dispatch
  std::vector<int32_t> route_src_rank_;       // [num_recv] private copy of recv_src_rank
  std::vector<int32_t> route_src_token_;      // [num_recv] private copy of recv_src_token
  // As a forwarder (several nodes): for each source s served, the tokens forwarded (ascending)
  // and which ranks of this node took each.
  std::vector<std::vector<int32_t>> forward_tokens_;  // [W][n_s]
  std::vector<std::vector<uint8_t>> forward_to_;      // [W][n_s, L] 1 if rank j of the node did

  // State of the latest successful low-latency dispatch (latest_low_latency_ is the handle), in
  // private copies: n indexes the received (source rank, token) pairs in canonical order.
  SendPlan low_latency_plan_;                   // this rank's tokens per destination
  std::vector<int32_t> low_latency_src_rank_;   // [n]
  std::vector<int32_t> low_latency_src_token_;  // [n]
  std::vector<float> low_latency_weights_;      // [n, K] the token's top-k weights
  std::vector<int64_t> low_latency_slot_rows_;  // [n, K] row of y (e * W*Tmax + row) or -1
  // As a forwarder (several nodes), as forward_tokens_ / forward_to_ for the decode dispatch.
  std::vector<std::vector<int32_t>> low_latency_forward_tokens_;  // [W][n_s]
  std::vector<std::vector<uint8_t>> low_latency_forward_to_;      // [W][n_s, L]
};

}  // namespace moe_ep::cpu_backend
