// The CUDA backend's op: one rank per GPU (or per stream, in the single-GPU test world), a
// symmetric communication buffer from the communicator (cuda_comm.h), kernels that store
// straight into peers' buffers. Every call is queued on the caller's stream behind the op's
// previous call (an internal event), so calls may move between streams; it starts with the step
// agreement (agreement.cuh): a rank whose host checks reject its arguments still launches it,
// with a rejected verdict, so every rank learns of the rejection before anything moves.
// A dispatch runs validate -> step -> notify -> data kernel, then waits on the host for the
// number of received rows; a combine runs step -> combine kernel without a host wait, so its
// errors are raised at the op's next entry or synchronize().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_comm.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/resources.h"
#include "core/op_base.h"

namespace moe_ep::cuda_backend {

// MOE_EP_TIMEOUT_S in nanoseconds: the bound of every device-side wait.
uint64_t timeout_ns();

// What an op's buffers are sized from: its configuration (copy_engine resolved), the world,
// this rank's node and the SM budget. Pure: the op takes its layouts from it, and op_memory
// sizes the same arrays before any creation (CudaOp::visit_arrays).
struct CudaOpGeometry {
  BufferLayout layout;
  NodeInfo nodes;
  StageLayout stage_layout;             // several nodes
  DecodeMessageLayout ll_msg_dispatch;  // decode mode across nodes
  DecodeMessageLayout ll_msg_combine;   // decode mode across nodes
  bool ce_combine_from_y = false;       // copy engine: bf16 rows copied straight from y
  int data_blocks = 0;                  // num_sms x Policy::kDataBlocksPerSm
  static CudaOpGeometry of(const OpConfig& config, int world_size, int rank, int num_sms);
};

class CudaOp final : public OpBase {
 public:
  // Local part of creation: every allocation of this rank (create_op.cc agrees with the other
  // ranks that all of them succeeded, then calls publish()).
  CudaOp(std::shared_ptr<CudaComm> comm, const OpConfig& config, int num_sms);
  ~CudaOp() override;
  // Collective: makes the op's buffer known to every rank.
  void publish();
  // The bytes of every array visit_arrays lists for an op of this geometry (sizes of zero take
  // one element, as DeviceArray allocates).
  static int64_t private_bytes(const OpConfig& config, int world_size, const CudaOpGeometry& g);
  OpMemory memory() const override;
  bool captured() const override { return captured_.load(std::memory_order_relaxed); }

  Backend backend() const override { return Backend::kCuda; }
  DispatchResult dispatch(const DispatchArgs& args) override;
  void combine(const Handle& handle, const TensorView& y, const TensorView& out,
               void* stream) override;
  void synchronize(void* stream) override;
  void reject(CallKind kind, const std::string& reason, void* stream) override;
  // Decode mode (low_latency_op.cc): asynchronous, capturable in a CUDA graph, with or without
  // overlap hooks (the receive parts launch the kernels that wait for the peers' stores).
  LowLatencyDispatchResult low_latency_dispatch(const LowLatencyDispatchArgs& args) override;
  void low_latency_combine(const TensorView& y, const LowLatencyHandle& handle,
                           const TensorView& out, void* stream,
                           bool return_recv_hook = false) override;
  void low_latency_dispatch_recv(const LowLatencyHandle& handle, void* stream) override;
  void low_latency_combine_recv(const LowLatencyHandle& handle, void* stream) override;

 private:
  // Mapped host memory shared with the kernels.
  struct HostShared {
    DeviceError error;
    StepOutcome step;
    StepReason my_reason;
    int64_t num_recv;
    // Several nodes: rows this rank staged per node [N] (node_positions_kernel) and rows the
    // rail peers staged for this node, by remote node slot [N - 1].
    int32_t node_staged[Policy::kMaxPeers];
    int32_t node_forwarded[Policy::kMaxPeers];
    // Copy-engine path: notify's counts, for the sizes of the host's copies.
    CopyEngineCounts ce;
  };

  RankInfo rank_info() const;
  // Decode mode: the parameters every decode kernel shares, and the views of the slabs.
  LowLatencyParams ll_params(CallKind kind, bool host_rejected) const;
  LowLatencyDispatchResult ll_result() const;
  // Decode mode across nodes (low_latency_op.cc): the dispatch's step agreed inside the node
  // (ll_node_step), then, after the send when there is one, ll_dispatch_across_nodes: the
  // persistent exchange of the messages, the forwarder's stores and the settle over all W words.
  // Every dispatch call takes both on every rank, accepted or not (same launches every call).
  void ll_dispatch_across_nodes(const LowLatencyParams& p, cudaStream_t stream);
  // The combine's counterpart, after ll_node_step and the send part of launch_ll_combine when
  // there is one: the forwarder's sums into its messages, the persistent exchange, the step words
  // forwarded and the settle. Every combine call takes it on every rank, accepted or not, hooked
  // or not (one exchange per call); the node-ordered sum (launch_ll_combine_reduce) follows, or
  // is the receive part with a hook.
  void ll_combine_across_nodes(const LowLatencyParams& p, cudaStream_t stream);
  // Starts a call on `stream` behind the op's previous one (skipped while the stream is being
  // captured: the graph orders its nodes) and ends it.
  bool capturing(cudaStream_t stream) const;
  // Normal mode's calls cannot be captured in a CUDA graph: the host numbers their steps, so a
  // replay would repeat a step its peers have passed (its waits could even match the captured
  // call's old flags and read stale rows), and a dispatch or a rejection waits on the host for
  // the device. Raises InvalidUsage naming the call and the stream when `stream` is capturing,
  // before the call's step: nothing is launched, the op stays usable, and every rank that
  // captures refuses alike (a peer that does not capture waits for this rank until its timeout,
  // as for any rank that does not make the call). Decode mode's calls are capturable.
  void refuse_capture(const char* call, cudaStream_t stream) const;
  // Starts a call on `stream`: after the op's previous call, with the step agreement.
  // `rejection` empty means this rank accepted its arguments. An accepted dispatch passes `scan`
  // and `notify`: with one node the input scan, the step and notify run in one kernel
  // (count_kernel); with several, the scan and the step run here and notify is the caller's.
  void begin_step(cudaStream_t stream, const StepVerdict& verdict,
                  const ValidateParams* scan = nullptr, const NotifyParams* notify = nullptr);
  // This rank's reason for rejecting its call, where its step kernel copies it to the peers.
  void write_my_reason(const std::string& error);
  // Where kernels report errors: the mapped record and the device flag.
  ErrorSink error_sink() const { return ErrorSink{&host_.device()->error, error_flag_.get()}; }
  // The scan of an accepted dispatch's ids (and, with MOE_EP_VALIDATE, values) before its step:
  // its parameters, and its launch on its own (decode mode; several nodes).
  ValidateParams validation_params(const DispatchArgs& args, bool prequantized,
                                   int64_t num_tokens) const;
  void launch_validation(const DispatchArgs& args, bool prequantized, int64_t num_tokens,
                         cudaStream_t stream);
  void end_call(cudaStream_t stream);
  // The host's wait for one of this op's events: bounded by the device's own timeouts with one
  // node; across nodes by wait_bounded, since the stream holds the transport's exchanges.
  void host_wait(cudaEvent_t event, const char* what);
  // One node's SM path, an accepted dispatch: the host's wait for num_recv, polled in mapped
  // memory, where the receiver stores it once every count word came in (notify.cuh); or, when it
  // never does (the call failed), for the call's end (call_done_, queried every 20 us). Bounded
  // as host_wait: the call's kernels' waits time out. No event between count_kernel and the data
  // kernel, which would keep the data kernel from launching early.
  void wait_num_recv(const char* what);
  // Several nodes (nodes_op.cc). After the data kernel: once the step is known to have passed,
  // the staged row counts, then the staged rows, cross the transport and this rank forwards
  // what it received; then the wait for every source's done word.
  void forward_staged_rows(const DispatchParams& dp, cudaStream_t stream);
  // Several nodes, the control words: the step words of the other nodes' ranks and this rank's
  // cross through the transport (every call, on every rank), the node's by stores; then, once
  // the step is known to have passed, notify's counts row and expert words for the other nodes'
  // ranks cross between its send and receive launches.
  void step_across_nodes(StepParams sp, cudaStream_t stream);
  void notify_across_nodes(NotifyParams np, cudaStream_t stream);
  // After the combine's sends (combine_kernel without reduce items): this rank's forwarder
  // partials, then (once the step is known to have passed) the partials cross the transport and
  // the node-ordered sum writes `out`.
  void combine_across_nodes(const Handle& handle, const TensorView& out, cudaStream_t stream);
  // True when this rank's device error record is clear (after a host wait on `event`): the step
  // passed on every rank and nothing failed, so every rank takes the transport's exchange.
  bool step_passed(cudaEvent_t event);
  // Several nodes: a host wait for `event` bounded by twice the op's timeout. The stream may hold
  // transport exchanges, and NCCL's send and receive wait for a missing peer forever (the
  // kernels' own waits time out, NCCL's do not), so past the limit the host raises Timeout
  // naming `what` and this rank's rail peers, and poisons the op (the stream stays blocked until
  // the caller aborts the NCCL communicator).
  void wait_bounded(cudaEvent_t event, const char* what);
  NodeParams node_params() const;
  // True when this rank's device error record is clear, read after a host wait on an event of
  // the current call: its step (and notify) passed, so the copies of the copy-engine path may
  // go. Every rank of a passed step sees it pass.
  bool device_clear() const;
  // Copy-engine path (docs/copy-engine.md), after the host learned the
  // counts: dispatch's copies of the staged rows, field by field, into every other rank's receive
  // rows; combine's copy of each source's rows (staged, or for bf16 straight from y) into its
  // slot of that source's combine rows. Then the done word in every receiver (ce_signal_kernel).
  void ce_dispatch_copies(cudaStream_t stream);
  void ce_combine_copies(const uint16_t* y, cudaStream_t stream);
  void ce_signal(uint64_t mask, cudaStream_t stream);
  // Combine with the copy-engine path: encode (not bf16), step, a host wait for the step, then
  // the copies, the done words and the reduce; a failed step is raised here, before any copy.
  void combine_copy_engine(const Handle& handle, const TensorView& y, const TensorView& out,
                           const StepVerdict& verdict, cudaStream_t stream);
  // Raises what the device reported for the call that ended (or an earlier asynchronous one):
  // calls out of step (InvalidUsage), this rank's own rejection, a peer's rejection
  // (InvalidArgument; the op stays usable), or a timeout (poisons). `mine` is this rank's
  // verdict of that call, when it is the current one. An earlier call raised here did not run:
  // a low-latency dispatch's handle is no longer the latest, and a receive it left pending
  // (overlap hooks) is dropped. A receive part that found its send part had not run is raised
  // here too, unless `before_step`: a call about to take a step keeps it for its verdict
  // (take_receive_error), so that every rank learns it through the step.
  void raise_device_error(const char* call, const StepVerdict* mine = nullptr,
                          bool before_step = false);
  // Inside a collect_rejection: throws the kept receive error (InvalidUsage), once.
  void take_receive_error();
  std::string describe_record(const DeviceError& e) const;
  // This rank's buffer and the base of every rank's as its kernels use them, for the logs.
  std::string describe_peers() const;
  // The step words' tags in this rank's buffer and this rank's tags in its peers' buffers, read
  // back by the host (for the timeout's log line).
  std::string describe_step_words() const;
  std::vector<MemoryRange> owned_memory() const;
  // Every private device array of an op, in one list: visit(&CudaOp::member, element count,
  // whether it starts zeroed) for each array the geometry needs. The constructor allocates them
  // from it and private_bytes() sums it, so what op_memory says before a creation is what the
  // creation allocates.
  template <typename Visit>
  static void visit_arrays(const OpConfig& config, int world_size, const CudaOpGeometry& g,
                           Visit&& visit);
  // Allocates every array of visit_arrays (zeroed where it says), counting allocated_bytes_.
  void allocate_arrays(const CudaOpGeometry& g);

  // A receive part's report that its send part never ran, kept by raise_device_error for the
  // verdict of the next call with a step (empty when none).
  std::string receive_error_;
  std::shared_ptr<CudaComm> comm_;
  const int device_;
  const int num_sms_;      // SM budget
  const int data_blocks_;  // num_sms_ x Policy::kDataBlocksPerSm
  int l2_bytes_ = 0;       // the device's L2 (combine_prefetch_bytes)
  BufferLayout layout_;
  int64_t allocated_bytes_ = 0;  // of the arrays visit_arrays lists (memory())
  std::unique_ptr<SymmetricMemory> buffer_;
  // The peer table the call kernels get (publish): the buffer's, without the other nodes' ranks
  // when there are several nodes.
  PeerTable peers_{};
  // [2] when the latest step kernel and validation scan began (global timer), for reports
  DeviceArray<uint64_t> step_started_;
  uint64_t* scan_started() const { return step_started_.get() + 1; }
  int64_t step_launched_ns_ = 0;  // host clock at the latest step's launch, for reports
  DeviceArray<int32_t> pos_;      // [2][W, max_tokens]: the latest, the spare
  int pos_half_ = 0;              // the latest dispatch's half of pos_
  int32_t* pos() const {
    return pos_.get() + static_cast<size_t>(pos_half_) * world_size_ * config_.max_tokens_per_rank;
  }
  DeviceArray<int32_t> send_offset_;            // [W]
  DeviceArray<int32_t> recv_from_self_;         // [1]: rows received from this rank itself
  DeviceArray<int32_t> recv_expert_count_;      // [E / W]
  DeviceArray<unsigned int> counters_;          // [4]: notify tickets [2], combine tickets [2]
  DeviceArray<uint64_t> notify_part_words_;     // [W, kNotifyMaxParts] (launch.h, NotifyParams)
  DeviceArray<uint64_t> notify_part_experts_;   // [W, kNotifyMaxParts - 1, E/W]
  DeviceArray<unsigned int> block_counter_;     // [1]: dispatch last-block-done counter
  DeviceArray<unsigned int> scan_blocks_done_;  // [1]: count_kernel's scan shares finished
  DeviceArray<uint64_t> step_done_;             // [1]: count_kernel's latest settled step
  DeviceArray<int32_t> error_flag_;             // device copy of the error code (ErrorSink::flag)
  HostMapped<HostShared> host_;
  Event notified_;   // after notify: num_recv is known (copy-engine path, several nodes)
  Event call_done_;  // after the op's latest call, on the stream it ran on
  bool have_call_ = false;
  std::atomic<bool> captured_{false};         // a call was issued into a CUDA graph (Op::captured)
  uint64_t steps_ = 0;                        // collective steps so far, equal on every rank
  bool combined_ = false;                     // the latest dispatch was combined
  CallKind last_kind_ = CallKind::kDispatch;  // of the latest call queued
  StepVerdict last_verdict_;                  // of the latest call queued
  // latest_low_latency_ before the latest low-latency dispatch queued, restored when a peer's
  // rejection of that dispatch is raised later (the device did not count it).
  LowLatencyHandle previous_low_latency_{};
  // The handles of the latest accepted low-latency dispatches, newest last (at most 8): a
  // receive part that finds its send part never ran reports the call number of the latest
  // dispatch that did run, and raise_device_error makes that one the latest again.
  std::vector<LowLatencyHandle> accepted_low_latency_;
  // Several nodes (ranks_per_node < W), allocated only then; N - 1 remote nodes by slot. Their
  // host-visible counts live in HostShared: a creation allocates no mapped memory of its own
  // beyond it (freeing pinned memory waits for the whole device).
  NodeInfo nodes_;
  StageLayout stage_layout_;
  DeviceArray<int32_t> node_pos_;              // [N, Tmax]
  DeviceArray<int32_t> node_rows_;             // [N] staged rows per node (the count parts)
  DeviceArray<int32_t> forwarded_rows_;        // [N - 1] received count parts
  DeviceArray<char> stage_out_;                // [N - 1, Tmax, stride]
  DeviceArray<char> stage_in_;                 // [N - 1, Tmax, stride]
  DeviceArray<uint16_t> partial_bf16_;         // [N - 1, Tmax, H]
  DeviceArray<char> partial_out_;              // [N - 1, Tmax, combine row bytes]
  DeviceArray<char> partial_in_;               // [N - 1, Tmax, combine row bytes]
  DeviceArray<unsigned int> forward_counter_;  // [1]
  DeviceArray<uint64_t> scratch_flag_;         // [1]
  std::unique_ptr<Event> exchanged_;           // after the count parts crossed
  DeviceArray<StepWire> step_out_;             // [1] this rank's step word, for the transport
  DeviceArray<StepWire> steps_in_;             // [W] the other nodes' ranks' step words
  DeviceArray<uint64_t> remote_experts_;       // [W, E/W] notify's expert words for them
  // The transfers of the latest dispatch that moved data, by remote node slot: what this rank
  // staged (its partials come back in the same numbers) and what it forwarded.
  std::vector<int32_t> staged_rows_, forwarded_rows_host_;
  // Copy-engine path, allocated only with OpConfig::copy_engine. The dispatch staging area has the
  // layout of the receive rows (payload .. source token): rows [d * Tmax, d * Tmax + n) of each
  // field hold this rank's n rows for rank d, so each field's rows for d are one copy.
  DeviceArray<char> ce_stage_;            // [offset of kFwdRow] bytes, mirrors the receive rows
  DeviceArray<int32_t> ce_stage_offset_;  // [W] NotifyParams::ce_stage_offset
  DeviceArray<char> ce_combine_stage_;    // [W * Tmax, combine row bytes]; not for bf16
  PeerTable ce_pack_peers_{};             // the staging area for others, the buffer for itself
  std::vector<int32_t> ce_recv_count_;    // rows from each source in the latest dispatch
  bool ce_combine_from_y_ = false;        // bf16 combine: rows are copied straight from y
  // Decode mode, allocated only with OpConfig::low_latency.
  DeviceArray<LowLatencyState> ll_state_;  // [1]
  DeviceArray<unsigned int> ll_tickets_;   // [3]
  DeviceArray<uint64_t> ll_sent_calls_;    // [data blocks] (LowLatencyParams::sent_calls)
  DeviceArray<int32_t> ll_send_counts_;    // [E] (LowLatencyParams::send_counts)
  DeviceArray<int32_t> ll_slot_ranks_;     // [Tmax, K] (LowLatencyParams::slot_ranks)
  DeviceArray<uint64_t> ll_token_mask_;    // [Tmax]
  DeviceArray<int32_t> ll_slot_rows_;      // [W, Tmax, K]
  DeviceArray<char> ll_slab_payload_;      // [E/W, W*Tmax, payload bytes]
  DeviceArray<char> ll_slab_scales_;       // [E/W, W*Tmax, scale bytes]
  DeviceArray<int32_t> ll_count_;          // [E/W]
  DeviceArray<int32_t> ll_src_rank_;       // [E/W, W*Tmax]
  DeviceArray<int32_t> ll_src_token_;      // [E/W, W*Tmax]
  DeviceArray<int32_t> ll_src_slot_;       // [E/W, W*Tmax]
  // Decode mode across nodes (low_latency_nodes.cuh), allocated only with low_latency and
  // several nodes: the dispatch's messages to and from the rail peers on the other nodes, by
  // remote node slot, and the persistent exchange that moves them (made in publish()).
  DecodeMessageLayout ll_msg_dispatch_;
  DeviceArray<char> ll_msg_out_;                  // [N - 1][ll_msg_dispatch_.bytes]
  DeviceArray<char> ll_msg_in_;                   // [N - 1][ll_msg_dispatch_.bytes]
  DeviceArray<unsigned int> ll_forward_counter_;  // [1]
  std::unique_ptr<PersistentExchange> ll_dispatch_exchange_;
  // The combine's: the forwarders' partials (DecodeMessageLayout::combine), out to and in from
  // the rail peers, by remote node slot, and their exchange (made in publish(), after the
  // dispatch's).
  DecodeMessageLayout ll_msg_combine_;
  DeviceArray<char> ll_cmsg_out_;  // [N - 1][ll_msg_combine_.bytes]
  DeviceArray<char> ll_cmsg_in_;   // [N - 1][ll_msg_combine_.bytes]
  std::unique_ptr<PersistentExchange> ll_combine_exchange_;
};

}  // namespace moe_ep::cuda_backend
