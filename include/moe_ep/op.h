// The op: one rank's handle on a collective dispatch/combine pair (docs/design.md#dispatch,
// #combine, #errors). Lifecycle: check_config (pure) -> create_op (collective: every rank's
// verdict on its configuration and the configuration itself are agreed on before any buffer is
// allocated) -> dispatch / combine and, in decode mode, low_latency_dispatch /
// low_latency_combine, which overlap hooks split into a send part and a receive part
// (low_latency_dispatch_recv / low_latency_combine_recv) (collective). Every rank of the
// communicator makes the same calls in the same order; each call first agrees on every rank's
// verdict on its arguments and on the identity of the call
// (docs/design.md#collective-calls-and-agreement).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moe_ep/dtypes.h"
#include "moe_ep/tensor.h"

namespace moe_ep {

enum class Backend { kCpu, kCuda };
const char* to_string(Backend backend);

// A group of ranks. Implementations: CpuWorld's communicators (threads of one process) and the
// NCCL communicator of the CUDA backend (moe_ep/cuda.h).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;
  // Identifies the group: equal on every rank of one group, different between groups.
  virtual uint64_t group_id() const = 0;
};

struct OpConfig {
  int num_experts = 0;          // E, E % world_size == 0
  int hidden = 0;               // H, multiple of every block size in use and of 16 bytes
  int topk = 0;                 // K, 1 <= K <= E
  int max_tokens_per_rank = 0;  // upper bound on T per call
  DispatchDtype dispatch_dtype = DispatchDtype::bf16;  // resolved (see resolve_dtypes)
  CombineDtype combine_dtype = CombineDtype::bf16;
  int instance_id = 0;  // lets a caller keep two otherwise equal ops apart
  // SM budget of the CUDA kernels: they occupy at most the threads and registers of num_sms SMs
  // (docs/design.md#streams-and-the-sm-budget). 0 takes MOE_EP_NUM_SMS, and when that is 0 too,
  // the library default (min(32, SMs of the device) for normal mode). Ignored by the CPU backend.
  int num_sms = 0;
  // Decode mode (low_latency_dispatch / low_latency_combine, docs/decode-mode.md): the op then
  // also holds E/W slabs of W * max_tokens_per_rank rows, which normal mode does not need, so an
  // op allocates them only when asked; decode calls on an op without them are rejected.
  bool low_latency = false;
  // Several nodes (docs/design.md#several-nodes): ranks [n*L, (n+1)*L) form node n, one NVLink
  // domain; nodes reach each other over the network. L must divide the world size; 0 (the
  // default) means L = world size, one node. Dispatch outputs do not depend on it; combine sums
  // each remote node's rows on that node first. The CUDA backend needs each node inside one
  // NVLink domain of its communicator (checked at creation on every rank).
  int ranks_per_node = 0;
  // Copy-engine data path (CUDA backend, normal mode on one node; docs/cuda-backend.md): rows
  // are packed into a local staging area by a kernel and moved to each peer by the GPU's copy
  // engines (one cudaMemcpyAsync per field and destination in dispatch, one per source in
  // combine) instead of SM stores into the peer; the same bits as the SM path. false takes
  // MOE_EP_COPY_ENGINE for ops that can use it. true is refused with low_latency or with
  // ranks_per_node below the world size. Ignored by the CPU backend.
  bool copy_engine = false;
  // Decode mode's scale layout (docs/decode-mode.md#scale-layout): false stores
  // recv_x_scales row by row, [E/W, W*Tmax, scale_dim] as normal mode's scale rows; true stores
  // each expert's scales column by column, [E/W, scale_dim, W*Tmax] (DeepEP's low-latency
  // layout, which grouped GEMMs load with TMA). The same values either way; no effect without
  // scales (bf16 dispatch). true is refused without low_latency.
  bool column_major_scales = false;

  bool operator==(const OpConfig& other) const;
  std::string describe() const;
};

// Throws InvalidArgument naming the field, its value and the rule. Pure; O(1).
void check_config(const OpConfig& config, int world_size);

// The collective calls of an op. Each call of a rank carries its kind and number (dispatch #n is
// the n-th successful dispatch; combine #n combines dispatch #n), and ranks in different calls
// fail together instead of pairing. Decode mode counts its own calls: low_latency_dispatch #n is
// the n-th successful low-latency dispatch, low_latency_combine #n combines it.
enum class CallKind : uint8_t { kDispatch, kCombine, kLowLatencyDispatch, kLowLatencyCombine };
// "dispatch", "combine", "low_latency_dispatch", "low_latency_combine"
const char* to_string(CallKind kind);

// Ties a combine to the dispatch that produced it.
struct Handle {
  uint64_t op_uid = 0;    // unique per op object in this process
  uint64_t call_seq = 0;  // 1 for the first dispatch of the op, then 2, ...
  int64_t num_tokens = 0;
  int64_t num_recv = 0;
};

struct DispatchArgs {
  TensorView x;             // [T, H] bf16, or pre-quantized: [T, H] e4m3 / [T, H/2] e2m1x2
  TensorView x_scales;      // pre-quantized only: [T, H/128] fp32 or [T, H/32] e8m0
  TensorView topk_idx;      // [T, K] int32, -1 masks a slot
  TensorView topk_weights;  // [T, K] fp32
  void* stream = nullptr;   // cudaStream_t for the CUDA backend
};

// Views into buffers owned by the op, valid until the next dispatch on it.
struct DispatchResult {
  int64_t num_recv = 0;
  TensorView recv_x;                       // [R, H] bf16 / e4m3, or [R, H/2] e2m1x2
  TensorView recv_x_scales;                // [R, scale_dim] fp32 / e8m0; undefined for bf16
  TensorView recv_topk_idx;                // [R, K] int32, local expert id or -1
  TensorView recv_topk_weights;            // [R, K] fp32
  TensorView recv_src_rank;                // [R] int32
  TensorView recv_src_token;               // [R] int32
  TensorView recv_count_per_local_expert;  // [E / W] int32
  Handle handle;
};

// Decode mode (docs/decode-mode.md): fixed shapes, one slab of W * Tmax rows per local expert
// (Tmax = max_tokens_per_rank). Its arguments are those of dispatch, T <= Tmax, and the overlap
// hook.
struct LowLatencyDispatchArgs : DispatchArgs {
  LowLatencyDispatchArgs() = default;
  // Implicit: the arguments of a dispatch are those of a low-latency dispatch without the hook.
  LowLatencyDispatchArgs(const DispatchArgs& args, bool hook = false)
      : DispatchArgs(args), return_recv_hook(hook) {}
  // Overlap hook (docs/decode-mode.md#overlap-hooks): agree on the step and send only; the
  // result's views are set but not filled until Op::low_latency_dispatch_recv(handle).
  bool return_recv_hook = false;
};

// Ties a low_latency_combine to the low-latency dispatch that produced it.
struct LowLatencyHandle {
  uint64_t op_uid = 0;    // unique per op object in this process
  uint64_t call_seq = 0;  // 1 for the first low-latency dispatch of the op, then 2, ...
  int64_t num_tokens = 0;
};

// Views into buffers owned by the op, valid until the next low-latency dispatch on it. Every
// shape is fixed by the configuration. Local expert e's slab holds a row per (source rank s,
// token t) with a live slot naming e, in canonical order (s, then t) from row 0; rows at or
// after recv_count[e] are unspecified in recv_x and recv_x_scales and -1 in recv_src_*.
struct LowLatencyDispatchResult {
  TensorView recv_x;          // [E/W, W*Tmax, H] bf16 / e4m3, or [E/W, W*Tmax, H/2] e2m1x2
  TensorView recv_x_scales;   // [E/W, W*Tmax, scale_dim] fp32 / e8m0 (*); undefined for bf16
  TensorView recv_count;      // [E/W] int32: rows in use in each slab
  TensorView recv_src_rank;   // [E/W, W*Tmax] int32: sending rank, -1 past the count
  TensorView recv_src_token;  // [E/W, W*Tmax] int32: token index on that rank, -1 past the count
  TensorView recv_src_slot;   // [E/W, W*Tmax] int32: first top-k slot naming e, -1 past the count
  LowLatencyHandle handle;
  // (*) Made with OpConfig::column_major_scales: recv_x_scales is [E/W, scale_dim, W*Tmax]
  // instead, each scale column of a slab contiguous (docs/decode-mode.md#scale-layout).
  bool scales_column_major = false;
  // Made with return_recv_hook: the views point at their fixed memory but hold nothing of this
  // call until low_latency_dispatch_recv(handle) has run (on the CUDA backend: on its stream).
  bool recv_pending = false;
};

// The memory an op holds on each rank (docs/design.md#memory-per-op), in bytes: the buffer its
// peers read and write (the NCCL symmetric window on CUDA; the rank's receive area in the CPU
// world) and the arrays only this rank uses (device memory on CUDA). What the communicator
// holds itself (NCCL's own memory, the transport across nodes) is not counted, nor, on the CPU
// backend, the host vectors a call sizes to its rows.
struct OpMemory {
  int64_t peer_bytes = 0;
  int64_t private_bytes = 0;
  int64_t total() const { return peer_bytes + private_bytes; }
};

class Op {
 public:
  virtual ~Op() = default;
  virtual const OpConfig& config() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Backend backend() const = 0;
  virtual uint64_t uid() const = 0;

  virtual DispatchResult dispatch(const DispatchArgs& args) = 0;
  // y: [R, H] bf16 (R = handle.num_recv); out: [T, H] bf16 for this rank's T of that dispatch.
  virtual void combine(const Handle& handle, const TensorView& y, const TensorView& out,
                       void* stream = nullptr) = 0;
  // Decode mode (docs/decode-mode.md). Collective like dispatch and combine, and free to
  // interleave with them on one op. The defaults throw InvalidUsage("decode mode is not
  // implemented by the <backend> backend").
  virtual LowLatencyDispatchResult low_latency_dispatch(const LowLatencyDispatchArgs& args);
  // y: [E/W, W*Tmax, H] bf16, row i of slab e is local expert e's output for the slab's row i;
  // out: [T, H] bf16 for this rank's T of that low-latency dispatch. With return_recv_hook only
  // the partial sums are sent; low_latency_combine_recv(handle) then sums them into this `out`.
  virtual void low_latency_combine(const TensorView& y, const LowLatencyHandle& handle,
                                   const TensorView& out, void* stream = nullptr,
                                   bool return_recv_hook = false);
  // Overlap hooks (docs/decode-mode.md#overlap-hooks): the receive part of the op's latest
  // decode call made with return_recv_hook, given that call's handle. Collective: every rank
  // calls it. An op has at most one receive pending; until it is done, every other call on the
  // op is rejected on every rank, and a receive call with nothing pending, of the other kind or
  // with another handle is rejected here without waiting for any rank (every rank makes the
  // same mistake, since ranks make the same calls). The op stays usable in each case.
  virtual void low_latency_dispatch_recv(const LowLatencyHandle& handle, void* stream = nullptr);
  virtual void low_latency_combine_recv(const LowLatencyHandle& handle, void* stream = nullptr);
  // Waits for this op's work queued on `stream` and raises any error its kernels reported
  // (e.g. a Timeout inside combine). Calls also raise such errors at their next entry.
  virtual void synchronize(void* stream = nullptr) { (void)stream; }
  // For layers above this API whose own argument checks failed (the Python package): joins this
  // rank's next call of `kind` with a rejected verdict, so that every rank's call fails with
  // InvalidArgument naming this rank and `reason` instead of waiting for it; throws that error
  // here too. The op stays usable. `stream` orders it like the call it replaces (CUDA).
  virtual void reject(CallKind kind, const std::string& reason, void* stream = nullptr) = 0;
  // What this op allocated on this rank (op_memory before its creation said the same). The
  // default throws InvalidUsage naming the backend.
  virtual OpMemory memory() const;
  // True once a call of this op was issued on a stream that was capturing a CUDA graph (decode
  // mode on the CUDA backend; normal mode refuses captures): a graph may replay its kernels, so
  // the op must outlive every such graph. OpCache keeps such an op past its eviction.
  virtual bool captured() const { return false; }
};

// Collective: every rank of `comm` calls it with the same config. Creations are matched by
// configuration, not by counting calls: a rank that rejects its configuration (or misses a
// creation) fails that creation on every rank and the next creation works.
std::shared_ptr<Op> create_op(const std::shared_ptr<Communicator>& comm, const OpConfig& config);

// What create_op(comm, config) would allocate on this rank, without creating anything or
// talking to the other ranks: the configuration resolved as create_op resolves it (SM budget,
// MOE_EP_COPY_ENGINE) and checked as it checks it (InvalidArgument naming the field). For an
// engine that budgets memory before it makes its ops; Op::memory() of the op made is the same.
OpMemory op_memory(const std::shared_ptr<Communicator>& comm, const OpConfig& config);

// For layers above this API that reject an op creation before calling create_op (e.g. a dtype
// name that does not parse): tells the ranks of `comm` that are creating an op that this rank
// will not join, so they fail at once with InvalidArgument naming this rank and `reason`.
void reject_create(const std::shared_ptr<Communicator>& comm, const std::string& reason);

// LRU cache of ops keyed by (group, configuration), capacity 4 by default
// (docs/design.md#configuration). One cache per rank; because every rank makes the same calls,
// every rank evicts the same ops in the same order. The evicted op is released when the last
// reference to it goes, except an op whose calls a CUDA graph captured (Op::captured()): a replay
// of that graph would run its kernels on freed memory, so the cache keeps such an op (retained(),
// a warning logged at its eviction) until clear(), which the caller makes once no graph that
// captured it will run again. Not thread-safe: one cache per rank and thread.
class OpCache {
 public:
  explicit OpCache(size_t capacity = 4);
  ~OpCache();
  OpCache(const OpCache&) = delete;
  OpCache& operator=(const OpCache&) = delete;

  std::shared_ptr<Op> get(const std::shared_ptr<Communicator>& comm, const OpConfig& config);
  size_t size() const;
  size_t capacity() const;
  // Descriptions of the evicted configurations, oldest eviction first.
  const std::vector<std::string>& eviction_log() const;
  // Evicted ops kept because a CUDA graph captured their calls.
  size_t retained() const;
  // Drops every op, the retained ones included.
  void clear();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe_ep
