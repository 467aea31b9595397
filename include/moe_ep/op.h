// The op: one rank's handle on a collective dispatch/combine pair (DESIGN 2-3, 5-6).
// Lifecycle: check_config (pure) -> create_op (collective: allocates communication buffers and
// checks that every rank passed the same configuration) -> dispatch / combine (collective).
// Every rank of the communicator makes the same calls in the same order.
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

  bool operator==(const OpConfig& other) const;
  std::string describe() const;
};

// Throws InvalidArgument naming the field, its value and the rule. Pure; O(1).
void check_config(const OpConfig& config, int world_size);

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
  // Waits for this op's work queued on `stream` and raises any error its kernels reported
  // (e.g. a Timeout inside combine). Calls also raise such errors at their next entry.
  virtual void synchronize(void* stream = nullptr) { (void)stream; }
};

// Collective: every rank of `comm` calls it with the same config.
std::shared_ptr<Op> create_op(const std::shared_ptr<Communicator>& comm, const OpConfig& config);

// LRU cache of ops keyed by (group, configuration), capacity 4 by default (DESIGN 5). One cache
// per rank; because every rank makes the same calls, every rank evicts the same ops in the same
// order. The evicted op is released when the last reference to it goes.
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
  void clear();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe_ep
