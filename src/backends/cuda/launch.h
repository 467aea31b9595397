// Host-side interface of the CUDA kernels: trivially copyable parameter structs and the
// launchers, callable from plain C++ (cuda_op.cc). The kernels live in the .cuh files beside
// this one and are instantiated in the thin .cu files. Every launcher takes its grid from the
// op's SM budget and its block shape from the policy (policy.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/device_error.h"
#include "backends/cuda/low_latency_items.h"
#include "backends/cuda/node_geometry.h"
#include "backends/cuda/notify_parts.h"
#include "backends/cuda/policy.h"
#include "core/agreement.h"
#include "core/layout.h"
#include "moe_ep/dtypes.h"
#include "moe_ep/op.h"

namespace moe_ep::cuda_backend {

// Base address of every rank's symmetric buffer, as seen from this GPU.
struct PeerTable {
  char* base[Policy::kMaxPeers];
};

struct RankInfo {
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t num_experts = 1;
  int32_t experts_per_rank = 1;
  int32_t topk = 1;
  int32_t hidden = 0;
  int32_t max_tokens = 0;
};

// The agreement every call starts with (docs/design.md#collective-calls-and-agreement): thread
// q stores this rank's step word (and, when it rejects, its reason) into peer q, then waits for
// peer q's word of the same step in this rank's buffer and compares the calls.
// Several nodes: the step words cross between nodes through the transport, not by stores. A
// launch with kStepPost writes this rank's word into `word_out`; the transport carries it to
// every rank of the other nodes (into their `words_in`); a launch with kStepSettle then delivers
// the other nodes' words from `words_in` into this rank's own slots, exchanges words with its
// node's ranks by stores, and settles as with one node (kStepAll).
enum StepPhase : int32_t {
  kStepAll = 0,
  kStepPost = 1,
  kStepSettle = 2,
};
// A step word as it crosses the transport: info, tag (the step), the reason.
struct StepWire {
  uint64_t info;
  uint64_t tag;
  StepReason reason;
};
static_assert(sizeof(StepWire) % 16 == 0, "step words cross in whole 16-byte units");

struct StepParams {
  RankInfo info;
  PeerTable peers;
  BufferLayout layout;
  uint64_t step;                // the op's collective step number, from 1
  uint64_t info_word;           // StepInfo::pack(kind, rejected by the host, call)
  const StepReason* my_reason;  // mapped host memory: the host's reason when it rejected
  StepOutcome* outcome;         // mapped host memory
  uint64_t timeout_ns;
  ErrorSink err;  // a data-scan error already in it means "rejected"
  // Several nodes (StepPhase).
  NodeInfo nodes;
  int32_t phase = kStepAll;
  StepWire* word_out = nullptr;        // [1]
  const StepWire* words_in = nullptr;  // [W], the other nodes' ranks' slots filled
  uint64_t* started_ns = nullptr;      // [1] when the exchange began (global timer), for reports
};

// Checks topk_idx (always: range; validation mode: duplicates) and, in validation mode, x and
// the weights for non-finite values. Reports into the error word.
struct ValidateParams {
  RankInfo info;
  const int32_t* topk_idx;    // [T, K]
  const uint16_t* x_bf16;     // [T, H] or nullptr (pre-quantized x is not scanned)
  const float* topk_weights;  // [T, K]
  int32_t num_tokens;
  bool validate;
  ErrorSink err;
  uint64_t* started_ns = nullptr;  // [1] when the scan began (global timer), for timeout reports
};

// The copy-engine path (OpConfig::copy_engine, copy_engine.cuh): what the host needs to size
// its copies, written by notify into mapped host memory.
struct CopyEngineCounts {
  int32_t send_count[Policy::kMaxPeers];   // rows this rank sends to d
  int32_t send_offset[Policy::kMaxPeers];  // where they start in d's receive rows
  int32_t recv_count[Policy::kMaxPeers];   // rows this rank receives from s
};

// Counts exchange: per destination position of every token, send offsets, receive totals.
struct NotifyParams {
  RankInfo info;
  PeerTable peers;
  BufferLayout layout;
  const int32_t* topk_idx;  // [T, K]
  int32_t num_tokens;
  int32_t* pos;                // [W, max_tokens]: row of token t among those sent to d, or -1
  int32_t* send_offset;        // [W]: first row of this rank's block in destination d
  int32_t* recv_expert_count;  // [E / W]
  int64_t* host_num_recv;      // mapped host memory
  unsigned int* tickets;       // [1] block tickets, reset by the receiving block
  uint64_t step;
  uint64_t timeout_ns;
  ErrorSink err;
  // Several nodes: the words for another node's ranks cross through the transport, so a
  // launch with kNotifySend stores only into this node's ranks (and this rank's own row), keeping
  // the expert words for other nodes' ranks in `remote_experts`; the host then moves this rank's
  // counts row and those expert words, and a launch with kNotifyReceive derives the layout.
  NodeInfo nodes;
  int32_t phase = 0;                   // NotifyPhase
  uint64_t* remote_experts = nullptr;  // [W, E/W] words for other nodes' ranks
  // Copy-engine path (null otherwise): the counts for the host's copies (mapped host memory), and
  // where the pack kernel puts this rank's rows for each destination d: row d * max_tokens of the
  // staging area for d != rank, its own receive row send_offset[rank] for itself ([W], device).
  CopyEngineCounts* ce_counts = nullptr;
  int32_t* ce_stage_offset = nullptr;
  // Several parts per destination (notify_parts): [W, kNotifyMaxParts] part words (rows) and
  // [W, kNotifyMaxParts - 1, E/W] the lower parts' per-expert counts, each word tagged with the
  // step (notify.cuh), so nothing is reset between calls.
  uint64_t* part_words = nullptr;
  uint64_t* part_experts = nullptr;
  // [1], device: the rows this rank receives from itself (where they start is send_offset[rank]),
  // for the combine's in-place sum; null when unused.
  int32_t* recv_from_self = nullptr;
};
// An accepted one-node dispatch's first kernel (count_kernel, notify.cuh): the input scan in
// scan_tickets shares, the step agreement, notify.
struct CountParams {
  ValidateParams scan;
  StepParams step;
  NotifyParams notify;  // its step is step.step
  int32_t scan_tickets;
  unsigned int* scans_done;  // [1] shares of the scan finished, zero between launches
  uint64_t* step_done;       // [1] the latest step whose agreement is settled
};

enum NotifyPhase : int32_t {
  kNotifyAll = 0,
  kNotifySend = 1,
  kNotifyReceive = 2,
};

// Several nodes, after notify: the position of each token among this rank's tokens bound for
// node n (any of its ranks), by a block scan per node, and the rows staged for each node.
struct NodePositionsParams {
  RankInfo info;
  NodeInfo nodes;
  const int32_t* pos;  // [W, max_tokens] from notify
  int32_t num_tokens;
  int32_t* node_pos;   // [N, max_tokens]: row of token t among those staged for node n, or -1
  int32_t* node_rows;  // [N]: tokens bound for node n (device, the transport's count parts)
  int32_t* host_rows;  // [N]: the same, in mapped host memory
  ErrorSink err;
};

struct DispatchParams {
  RankInfo info;
  NodeInfo nodes;
  PeerTable peers;
  BufferLayout layout;
  const void* x;              // [T, H] bf16, or pre-quantized payload [T, payload_bytes]
  const void* x_scales;       // pre-quantized scales [T, scale_bytes] or nullptr
  const int32_t* topk_idx;    // [T, K]
  const float* topk_weights;  // [T, K]
  int32_t num_tokens;
  const int32_t* pos;           // [W, max_tokens]
  const int32_t* send_offset;   // [W]
  unsigned int* block_counter;  // [1] last-block-done counter, reset by the last block
  uint64_t step;
  uint64_t timeout_ns;
  ErrorSink err;
  // Several nodes: rows bound for another node are staged (StageLayout) instead of stored.
  const int32_t* node_pos;  // [N, max_tokens] (NodePositionsParams)
  char* stage;              // [N - 1, max_tokens, stage.stride], by remote node slot
  StageLayout stage_layout;
  // Copy-engine path: the launch packs (peers and send_offset then name the staging area and
  // NotifyParams::ce_stage_offset) and releases no done word; the host's copies and
  // ce_signal_kernel do (copy_engine.cuh). dispatch_wait_kernel: wait for done words (the
  // copy-engine path, several nodes), not for done counts (one node's SM path).
  bool copy_engine = false;
};

// Several nodes: the forwarder's side. rows_in[m] staged rows arrived from the rail peer on
// remote node slot m; each is stored into the receive rows of every rank of this node it names
// (with the source fields of its source and its staged index in fwd_row), then the done word of
// each of those sources is released in every rank of the node. Also the combine's forwarder
// partials (node_partial_kernel) and the source's node-ordered sum (node_reduce_kernel).
struct NodeParams {
  RankInfo info;
  NodeInfo nodes;
  PeerTable peers;
  BufferLayout layout;
  StageLayout stage_layout;
  const char* stage_in;  // [N - 1, max_tokens, stage.stride]
  int32_t rows_in[Policy::kMaxPeers];
  unsigned int* block_counter;  // [1] forward kernel's last-block-done counter
  // combine
  uint16_t* partial_bf16;   // [N - 1, max_tokens, H] the forwarder's sums, rounded
  char* partial_out;        // [N - 1, max_tokens, combine row bytes] encoded, to send back
  const char* partial_in;   // [N - 1, max_tokens, combine row bytes] from the forwarders
  uint64_t* scratch_flag;   // where partial encodes put their (unread) ready flag
  const int32_t* pos;       // [W, max_tokens] of the matching dispatch
  const int32_t* node_pos;  // [N, max_tokens] of the matching dispatch
  uint16_t* out;            // [T, H] bf16
  int32_t num_tokens;
  uint64_t step;
  uint64_t timeout_ns;
  ErrorSink err;
};

struct CombineParams {
  RankInfo info;
  NodeInfo nodes;  // several nodes: rows from other nodes go back through their forwarder
  PeerTable peers;
  BufferLayout layout;
  const uint16_t* y;  // [R, H] bf16
  int64_t num_recv;
  uint16_t* out;  // [T, H] bf16
  int32_t num_tokens;
  const int32_t* pos;     // [W, max_tokens] from the matching dispatch
  unsigned int* tickets;  // [2] work tickets and finished warps, reset by the last warp
  uint64_t step;
  uint64_t timeout_ns;
  ErrorSink err;
  // One node: [W] where this rank's rows from each source start in each destination (notify's
  // send_offset of the matching dispatch); the combine then sums this rank's own rows in place.
  // Null: every row is sent (several nodes).
  const int32_t* send_offset = nullptr;
  // With send_offset: [1], the rows this rank received from itself (notify's recv_from_self);
  // they are rows [send_offset[rank], + recv_from_self[0]) of y, and get no send ticket.
  const int32_t* recv_from_self = nullptr;
  // Copy-engine path: [R, combine row bytes], where ce_combine_pack_kernel encodes the rows of y
  // bound for other ranks, at their received row index (copy_engine.cuh).
  char* ce_stage = nullptr;
  // Own-only whole rows: the bytes of each row after its first unrolled step that lane 0 asks L2
  // for first, or 0 where the grid's rows in flight would not fit L2 (combine_prefetch_bytes,
  // policy.h).
  int32_t prefetch_bytes = 0;
};

// Copy-engine path: thread q release-stores `value` at byte `offset` of rank q's buffer for every
// q in `mask`, once the copies queued before it on the stream have completed (copy_engine.cuh).
struct CopyEngineSignalParams {
  PeerTable peers;
  int32_t world_size;
  uint64_t mask;
  int64_t offset;
  uint64_t value;
  ErrorSink err;
};

// The creation rendezvous over a communicator's control area (cuda_comm.h): thread q stores this
// rank's attempt into peer q's area, then waits for peer q's matching attempt in this rank's.
struct CreateOutcome {
  int32_t status[Policy::kMaxPeers];  // kCreateMatched, kCreatePeerRejected or kCreateTimedOut
  uint64_t tag[Policy::kMaxPeers];    // the peer's latest attempt word seen
  uint64_t reject_attempt[Policy::kMaxPeers];
  int64_t config[Policy::kMaxPeers][kNumConfigFields];  // the peer's latest configuration seen
  int32_t rejected_by;  // lowest peer whose rejection was seen, -1 when none
  StepReason reason;    // that peer's reason
};
enum CreateStatus : int32_t {
  kCreatePending = 0,
  kCreateMatched = 1,
  kCreatePeerRejected = 2,
  kCreateTimedOut = 3,
  kCreatePeerLeft = 4,  // the peer is past this round: its attempt of it did not match
};

struct CreateParams {
  int32_t rank;
  int32_t world_size;
  PeerTable control;  // every rank's control area
  uint64_t tag;       // this rank's attempt word
  uint64_t reject_attempt;
  int64_t config[kNumConfigFields];
  const StepReason* my_reason;  // mapped host memory, when rejecting
  uint64_t seen[Policy::kMaxPeers];
  uint64_t prev_tag;  // this rank's previous attempt (CreateSlot::prev_tag), 0 when none
  int64_t prev_config[kNumConfigFields];
  uint64_t timeout_ns;
  CreateOutcome* outcome;  // mapped host memory
  // Several domains (CudaComm::domain_size): the control area reaches only this rank's domain;
  // the other ranks' attempts came through the transport into `slots_in` ([W] CreateSlot).
  int32_t domain_size = 0;
  const void* slots_in = nullptr;
};

// Decode mode's counters, in device memory so graph replays advance them (low_latency.cuh).
struct LowLatencyState {
  uint64_t step;            // the decode step of the call in flight (set by its step kernel)
  uint64_t dispatch_calls;  // low-latency dispatches that ran
  uint64_t dispatch_step;   // the step of the latest one
  // The step of the latest low-latency combine that ran. A deferred receive part (overlap hooks)
  // reads its call's step from here and from dispatch_step, not from `step`: a call rejected
  // while the receive is pending still takes a step on every rank.
  uint64_t combine_step;
  // The step of the latest send part made with a hook (return_recv_hook) that this rank's host
  // accepted, whether or not it ran. Its receive part checks that this step is the one that ran
  // (dispatch_step or combine_step): if the send part's step failed and the failure was raised
  // by another call, the pending receive would otherwise take an earlier call's rows.
  uint64_t hooked_step;
  // Several nodes (low_latency_nodes.cuh): the step whose agreement inside this rank's node
  // passed (its sends may go; 0 when it failed), and the step whose node agreement gave up on a
  // wait (already reported: the settle does not wait again).
  uint64_t send_step;
  uint64_t node_gave_up;
};

struct LowLatencyParams {
  RankInfo info;
  PeerTable peers;
  BufferLayout layout;
  LowLatencyState* state;
  // the decode step
  int kind;                     // CallKind::kLowLatencyDispatch or kLowLatencyCombine
  bool host_rejected;           // this rank's host checks rejected the call
  bool hooked_send;             // the step of a send part made with a hook (sets hooked_step)
  bool deferred_receive;        // a receive part: checks hooked_step first
  const StepReason* my_reason;  // mapped host memory
  StepOutcome* outcome;         // mapped host memory
  // A one-node dispatch's step kernel ranks its slots first (ll_rank_slots: slot_ranks and
  // send_counts); with step_scans it also checks the ids' range (outside validation mode, where
  // validate_kernel did not run) and notes when that began in scan_started_ns.
  bool step_ranks;
  bool step_scans;
  // One node's send: [send_blocks] (the op's data blocks, the largest grid a send takes),
  // dispatch_calls as send block b saw it once its step kernel had ended. Block b of the next
  // send stores its rows into the stage of that number + 1's parity before its step's verdict
  // (ll_send_kernel), and checks once the step kernel has ended that the call ran under it.
  uint64_t* sent_calls;
  int send_blocks;
  uint64_t* scan_started_ns;
  // dispatch
  const void* x;              // [T, H] bf16, or pre-quantized payload [T, payload bytes]
  const void* x_scales;       // pre-quantized scales [T, scale bytes] or nullptr
  const int32_t* topk_idx;    // [T, K]
  const float* topk_weights;  // [T, K]
  int32_t num_tokens;         // T of this rank's latest low-latency dispatch
  uint64_t* token_mask;       // [Tmax] destination ranks of this rank's tokens
  int32_t* slot_rows;         // [W, Tmax, K] slab row (e * W*Tmax + row) of each local slot
  char* slab_payload;         // [E/W, W*Tmax, payload bytes]
  char* slab_scales;          // [E/W, W*Tmax, scale bytes], or columns (column_scale_bytes)
  int32_t* count;             // [E/W]
  int32_t* src_rank;          // [E/W, W*Tmax]
  int32_t* src_token;         // [E/W, W*Tmax]
  int32_t* src_slot;          // [E/W, W*Tmax]
  // combine
  const uint16_t* y;      // [E/W, W*Tmax, H] bf16 (not read by kLlCombineReceive)
  uint16_t* out;          // [T, H] bf16 (not written by kLlCombineSend)
  int32_t combine_phase;  // LlCombinePhase (low_latency_items.h)
  // [E] this rank's tokens per expert: ll_rank_slots's (one node), or the send's atomics, reset
  // by its last block (several nodes)
  int32_t* send_counts;
  int32_t* slot_ranks;    // [Tmax, K] ll_rank_slots's slot ranks (one node)
  unsigned int* tickets;  // [3]: combine tickets [2], send block counter
  uint64_t timeout_ns;
  ErrorSink err;
  // Several nodes (nodes.several(); low_latency_nodes.cuh): the messages of the leg in flight
  // (the dispatch's or the combine's, by `kind`), one per remote node slot (DecodeMessageLayout
  // `msg`, `msg.bytes` apart): this rank's to its rail peers, and theirs as the persistent
  // exchange delivered them.
  NodeInfo nodes;
  DecodeMessageLayout msg;
  char* msg_out;                  // [N - 1][msg.bytes]
  const char* msg_in;             // [N - 1][msg.bytes]
  unsigned int* forward_counter;  // [1] ll_forward's last-block-done counter
  // OpConfig::column_major_scales (core/slab_scales.h): the bytes of one scale (4 fp32, 1 e8m0);
  // 0 for scale rows
  int32_t column_scale_bytes;
};

cudaError_t launch_step(const StepParams& p, cudaStream_t stream);
cudaError_t launch_validate(const ValidateParams& p, int max_blocks, cudaStream_t stream);
cudaError_t launch_notify(const NotifyParams& p, int max_blocks, cudaStream_t stream);
// count_kernel (notify.cuh) for c, its scan_tickets set here; at most max_blocks blocks.
cudaError_t launch_count(CountParams c, int max_blocks, cudaStream_t stream);
// The data kernel, then (with_wait) the kernel that waits for every source's rows (done counts
// on one node's SM path, done words otherwise). Several nodes launch the wait after forwarding
// (launch_dispatch_wait).
cudaError_t launch_dispatch(DispatchDtype dtype, bool prequantized, const DispatchParams& p,
                            int num_blocks, cudaStream_t stream, bool with_wait = true);
cudaError_t launch_dispatch_wait(const DispatchParams& p, cudaStream_t stream);
// Several nodes (nodes.cu): node positions after notify; the forwarder's stores; the combine's
// forwarder partials and the source's sum in node order.
cudaError_t launch_node_positions(const NodePositionsParams& p, cudaStream_t stream);
cudaError_t launch_forward(const NodeParams& p, int num_blocks, cudaStream_t stream);
cudaError_t launch_node_partials(CombineDtype dtype, const NodeParams& p, int num_blocks,
                                 cudaStream_t stream);
cudaError_t launch_node_reduce(CombineDtype dtype, const NodeParams& p, int num_blocks,
                               cudaStream_t stream);
// Any number of blocks is safe: work that other warps wait for is handed out by tickets before
// the waits (combine.cuh), so whatever subset of the grid is resident finishes it.
cudaError_t launch_combine(CombineDtype dtype, const CombineParams& p, int num_blocks,
                           cudaStream_t stream);
// Copy-engine path (copy_engine.cu): the done words after the copies; combine's encode of the rows
// of y into the staging area (not for bf16, whose rows are copied from y); combine's reduce, which
// waits for each source's done word instead of per-row flags. No kernel of them waits for
// another warp of its grid, so any number of blocks is safe.
cudaError_t launch_ce_signal(const CopyEngineSignalParams& p, cudaStream_t stream);
cudaError_t launch_ce_combine_pack(CombineDtype dtype, const CombineParams& p, int num_blocks,
                                   cudaStream_t stream);
cudaError_t launch_ce_reduce(CombineDtype dtype, const CombineParams& p, int num_blocks,
                             cudaStream_t stream);
cudaError_t launch_create_rendezvous(const CreateParams& p, cudaStream_t stream);
// Decode mode: the step kernel, then send + expand (dispatch) or combine, all inside the budget.
// With overlap hooks the dispatch's send part launches the send kernel and its receive part the
// expand kernel (launch_ll_dispatch is both); the combine's parts launch the combine kernel with
// p.combine_phase kLlCombineSend and kLlCombineReceive.
cudaError_t launch_ll_step(const LowLatencyParams& p, cudaStream_t stream);
cudaError_t launch_ll_send(DispatchDtype dtype, bool prequantized, const LowLatencyParams& p,
                           int num_blocks, cudaStream_t stream);
cudaError_t launch_ll_expand(DispatchDtype dtype, const LowLatencyParams& p, int num_blocks,
                             cudaStream_t stream);
cudaError_t launch_ll_dispatch(DispatchDtype dtype, bool prequantized, const LowLatencyParams& p,
                               int num_blocks, cudaStream_t stream);
cudaError_t launch_ll_combine(CombineDtype dtype, const LowLatencyParams& p, int num_blocks,
                              cudaStream_t stream);
// Decode mode across nodes (low_latency_nodes.cu; docs/multi-node.md, "Decode mode across
// nodes"): the step agreed inside the node, with this rank's word put into its messages; after
// the persistent exchange, the forwarder's stores into its node's ranks; the settle over all W
// step words. launch_ll_send takes its path across nodes when p.nodes.several().
cudaError_t launch_ll_node_step(const LowLatencyParams& p, cudaStream_t stream);
cudaError_t launch_ll_forward(const LowLatencyParams& p, int num_blocks, cudaStream_t stream);
// Marks this rank's outgoing combine messages with the step they hold (0: not forwarded).
cudaError_t launch_ll_combine_seal(const LowLatencyParams& p, cudaStream_t stream);
cudaError_t launch_ll_settle(const LowLatencyParams& p, cudaStream_t stream);
// The combine across nodes: the forwarder's sums of its node's parts into its messages (after
// launch_ll_combine's send part, before the exchange), and the source's node-ordered sum (after
// the settle; the receive part with hooks). A combine's launch_ll_forward stores step words only.
cudaError_t launch_ll_combine_forward(CombineDtype dtype, const LowLatencyParams& p, int num_blocks,
                                      cudaStream_t stream);
cudaError_t launch_ll_combine_reduce(CombineDtype dtype, const LowLatencyParams& p, int num_blocks,
                                     cudaStream_t stream);
// The one-GPU world's persistent exchange (loopback.cu): send part b waits until the receiver's
// `ready` flag (in this rank's ready flags) holds the launch's sequence number, goes from `src`
// to the receiver's `dst`, then the number goes to the receiver's data `flag` for this rank.
struct LoopbackSend {
  char* dst;
  const char* src;
  uint64_t bytes;
  uint64_t* flag;
  const uint64_t* ready;
  int32_t peer;
};
struct LoopbackParams {
  LoopbackSend sends[Policy::kMaxPeers];
  int32_t num_sends;
  int32_t rank;
  int32_t world_size;
  uint64_t recv_mask;  // bit q: this rank receives from q
  uint64_t* flags;     // [W] this rank's data flags, flags[q] written by sender q
  uint64_t* ready_at[Policy::kMaxPeers];  // [q]: sender q's ready flag for this rank
  uint64_t* seq;                          // [1] launches so far
  unsigned int* done;                     // [1] blocks of the current launch that finished
  uint64_t timeout_ns;
  ErrorSink err;
};
cudaError_t launch_loopback_exchange(const LoopbackParams& p, cudaStream_t stream);

// Resolves the peer base addresses of a registered NCCL window (symmetric.cu).
cudaError_t resolve_peer_pointers(void* window, int world_size, char** out_device,
                                  cudaStream_t stream);

// Loads `kernel` on the current device (cudaFuncGetAttributes) and notes the local memory each of
// its threads needs (note_local_bytes), for reserve_local_memory.
void note_local_bytes(size_t bytes);
template <typename Kernel>
cudaError_t load_kernel(Kernel* kernel) {
  cudaFuncAttributes a;
  const cudaError_t status = cudaFuncGetAttributes(&a, kernel);
  if (status == cudaSuccess) note_local_bytes(a.localSizeBytes);
  return status;
}

// Loads `kernel` (load_kernel) and checks that `blocks_per_sm` of its blocks of `threads`
// threads, with `smem` bytes of dynamic shared memory, fit one SM of the current device
// (cudaOccupancyMaxActiveBlocksPerMultiprocessor), as the SM budget assumes: a budget of N SMs
// launches at most N * blocks_per_sm of them (Policy). A kernel that does not fit is noted
// (note_budget_overrun) and named by preload_kernels' warning and budget_overruns(): its
// launches can hold more SMs than the budget (v34 in docs/perf-history.md: count_kernel's
// 1024-thread blocks at 64 registers were counted two an SM).
void note_budget_overrun(const std::string& what);
template <typename Kernel>
cudaError_t load_budgeted_kernel(Kernel* kernel, const char* name, int threads, int blocks_per_sm,
                                 size_t smem) {
  cudaError_t status = load_kernel(kernel);
  if (status != cudaSuccess) return status;
  int fit = 0;
  status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, threads, smem);
  if (status == cudaSuccess && fit < blocks_per_sm) {
    note_budget_overrun(std::string(name) + ": " + std::to_string(blocks_per_sm) + " blocks of " +
                        std::to_string(threads) + " threads an SM of budget, but " +
                        std::to_string(fit) + " fit an SM");
  }
  return status;
}
// What note_budget_overrun noted in this process, in order (empty: every budgeted kernel fits);
// preload_kernels warns of those its device added.
std::vector<std::string> budget_overruns();

// Makes the driver size the current device's local memory for `bytes` per thread now, by running
// a kernel that needs at least that much (256, 1024 or 4096 bytes; false when `bytes` is larger),
// on a stream of its own, and waiting for it. A launch whose kernel needs more local memory than
// the device has is an implicit synchronisation point of the whole device (the driver grows the
// allocation once every running kernel is done): in the single-GPU world the first rank to launch
// the library's first kernel with a stack frame (dispatch_kernel's prequantized instantiations,
// 8 bytes) waited, with the launches it had queued before it, for its peers' kernels, which were
// waiting for it (docs/perf-history.md, v20).
bool reserve_local_memory(size_t bytes);

// Loads every kernel of the library on the current device (load_kernel). With CUDA's
// lazy loading (the default), a kernel's first launch may wait for the device's running work
// (the CUDA programming guide's lazy-loading hazards); a rank's first launch would then wait for
// a peer's kernel that is waiting for this rank, until the timeout. preload_kernels (preload.cc)
// runs these once per device, before any kernel of the library can be waiting.
cudaError_t preload_agreement_kernels();
cudaError_t preload_notify_kernels();
cudaError_t preload_dispatch_kernels();
cudaError_t preload_combine_kernels();
cudaError_t preload_copy_engine_kernels();
cudaError_t preload_node_kernels();
cudaError_t preload_ll_kernels();
cudaError_t preload_ll_node_kernels();
cudaError_t preload_symmetric_kernels();
cudaError_t preload_loopback_kernels();
// Once per device and process, then reserve_local_memory for the largest local memory of any of
// them; later calls return at once. Throws on a CUDA error.
void preload_kernels(int device);

}  // namespace moe_ep::cuda_backend
