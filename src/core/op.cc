// The backend-independent part of the op (docs/design.md#configuration, #errors): OpConfig
// equality and description, the pure configuration check (every rule names the field, its value
// and the rule), create_op and reject_create, which pick the backend from the communicator, the
// decode-mode calls of backends that lack them (they throw InvalidUsage), and the per-rank LRU
// OpCache. The cache is keyed by (group, rank, full configuration); because every rank of a group
// makes the same get() calls in the same order, every rank creates and evicts the same ops in the
// same order, which is what makes collective creation and destruction safe.
#include "moe_ep/op.h"

#include <list>
#include <sstream>
#include <utility>

#include "backends/cpu/backend.h"
#include "core/check.h"
#include "core/log.h"
#include "formats/row_format.h"
#include "moe_ep/config.h"

#if MOE_EP_WITH_CUDA
#include "backends/cuda/factory.h"
#endif

namespace moe_ep {
namespace {

// Upper limits: far above any deployment (DeepSeek-V3: E=256, K=8, H=7168; the largest public
// MoEs use E<=512, K<=16, H<=16384) and low enough that sizes stay well inside int32 row indices
// and int64 byte offsets: W * max_tokens <= 2^10 * 2^20 = 2^30 rows.
constexpr int kMaxRanks = 1024;
constexpr int kMaxExperts = 4096;
constexpr int kMaxTopk = 64;
constexpr int kMaxHidden = 65536;
constexpr int kMaxTokensPerRank = 1 << 20;
// Far above any GPU's SM count (132 on H100/H200, 148 on B200); a backend checks the device's.
constexpr int kMaxNumSms = 1024;

bool valid_enum(DispatchDtype d) {
  return static_cast<int>(d) <= static_cast<int>(DispatchDtype::fp4);
}
bool valid_enum(CombineDtype d) {
  return static_cast<int>(d) <= static_cast<int>(CombineDtype::int8_e3m4);
}

// hidden must be a multiple of the block size of the format.
template <typename Dtype>
void check_block_for(int hidden, Dtype dtype, const char* leg) {
  const int block = block_size(dtype);
  MOE_EP_CHECK_ARG(block == 0 || hidden % block == 0, "hidden=", hidden, " is not a multiple of ",
                   block, ", the block size of ", to_string(dtype), " (", leg, ")");
}

// Every payload row on the wire is a whole number of 16-byte units (kRowAlignBytes). After the
// block and bf16 rules this only bites for float8_direct_cast, whose rows are `hidden` bytes.
template <typename Dtype>
void check_row_bytes_for(int hidden, Dtype dtype, const char* leg) {
  const int64_t row_bytes = payload_bytes(dtype, hidden);
  MOE_EP_CHECK_ARG(row_bytes % kRowAlignBytes == 0, "hidden=", hidden, " gives ", row_bytes,
                   "-byte rows in ", to_string(dtype), " (", leg, "); rows must be whole ",
                   kRowAlignBytes, "-byte units (hidden a multiple of ",
                   kRowAlignBytes * hidden / row_bytes, ")");
}

// Column-major scales whose columns do not start at 16-byte boundaries: a TMA load (as grouped
// GEMMs make) needs its global addresses 16-byte aligned, so such a caller must copy them. The
// op does not pad the columns (docs/decode-mode.md#scale-layout); rank 0 says so once per op.
void warn_unaligned_columns(const Op& op) {
  const OpConfig& c = op.config();
  const formats::RowFormat wire = formats::row_format(c.dispatch_dtype, c.hidden);
  if (!c.column_major_scales || !wire.has_scales() || op.rank() != 0) return;
  const int64_t column_bytes =
      static_cast<int64_t>(op.world_size()) * c.max_tokens_per_rank * element_size(wire.scale_type);
  if (column_bytes % 16 == 0) return;
  MOE_EP_LOG(LogLevel::kWarn, "op uid ", op.uid(), ": column_major_scales columns of W * ",
             "max_tokens_per_rank = ", op.world_size(), " * ", c.max_tokens_per_rank,
             " scales are ", column_bytes,
             " bytes, not a multiple of 16: a TMA load of recv_x_scales needs a ",
             "copy (choose max_tokens_per_rank so that the columns are)");
}

}  // namespace

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
  }
  return "unknown";
}

OpMemory Op::memory() const {
  throw InvalidUsage(
      detail::concat("memory() is not implemented by the ", to_string(backend()), " backend"));
}

LowLatencyDispatchResult Op::low_latency_dispatch(const LowLatencyDispatchArgs& /*args*/) {
  throw InvalidUsage(
      detail::concat("decode mode is not implemented by the ", to_string(backend()), " backend"));
}

void Op::low_latency_combine(const TensorView& /*y*/, const LowLatencyHandle& /*handle*/,
                             const TensorView& /*out*/, void* /*stream*/,
                             bool /*return_recv_hook*/) {
  throw InvalidUsage(
      detail::concat("decode mode is not implemented by the ", to_string(backend()), " backend"));
}

void Op::low_latency_dispatch_recv(const LowLatencyHandle& /*handle*/, void* /*stream*/) {
  throw InvalidUsage(
      detail::concat("decode mode is not implemented by the ", to_string(backend()), " backend"));
}

void Op::low_latency_combine_recv(const LowLatencyHandle& /*handle*/, void* /*stream*/) {
  throw InvalidUsage(
      detail::concat("decode mode is not implemented by the ", to_string(backend()), " backend"));
}

bool OpConfig::operator==(const OpConfig& other) const {
  return num_experts == other.num_experts && hidden == other.hidden && topk == other.topk &&
         max_tokens_per_rank == other.max_tokens_per_rank &&
         dispatch_dtype == other.dispatch_dtype && combine_dtype == other.combine_dtype &&
         instance_id == other.instance_id && num_sms == other.num_sms &&
         low_latency == other.low_latency && ranks_per_node == other.ranks_per_node &&
         copy_engine == other.copy_engine && column_major_scales == other.column_major_scales;
}

std::string OpConfig::describe() const {
  std::ostringstream os;
  os << "num_experts=" << num_experts << " hidden=" << hidden << " topk=" << topk
     << " max_tokens_per_rank=" << max_tokens_per_rank
     << " dispatch_dtype=" << (valid_enum(dispatch_dtype) ? to_string(dispatch_dtype) : "invalid")
     << " combine_dtype=" << (valid_enum(combine_dtype) ? to_string(combine_dtype) : "invalid")
     << " instance_id=" << instance_id;
  if (num_sms != 0) os << " num_sms=" << num_sms;
  if (low_latency) os << " low_latency=1";
  if (ranks_per_node != 0) os << " ranks_per_node=" << ranks_per_node;
  if (copy_engine) os << " copy_engine=1";
  if (column_major_scales) os << " column_major_scales=1";
  return os.str();
}

void check_config(const OpConfig& config, int world_size) {
  MOE_EP_CHECK_ARG(world_size >= 1, "world_size=", world_size, " must be >= 1");
  MOE_EP_CHECK_ARG(world_size <= kMaxRanks, "world_size=", world_size, " exceeds the limit ",
                   kMaxRanks);

  const int e = config.num_experts;
  MOE_EP_CHECK_ARG(e >= 1, "num_experts=", e, " must be >= 1");
  MOE_EP_CHECK_ARG(e <= kMaxExperts, "num_experts=", e, " exceeds the limit ", kMaxExperts);
  MOE_EP_CHECK_ARG(e % world_size == 0, "num_experts=", e,
                   " is not divisible by world_size=", world_size);

  const int k = config.topk;
  MOE_EP_CHECK_ARG(k >= 1 && k <= e, "topk=", k, " must be in [1, num_experts=", e, "]");
  MOE_EP_CHECK_ARG(k <= kMaxTopk, "topk=", k, " exceeds the limit ", kMaxTopk);

  MOE_EP_CHECK_ARG(valid_enum(config.dispatch_dtype),
                   "dispatch_dtype=", static_cast<int>(config.dispatch_dtype),
                   " is not a valid DispatchDtype; valid values: ", valid_dispatch_values());
  MOE_EP_CHECK_ARG(valid_enum(config.combine_dtype),
                   "combine_dtype=", static_cast<int>(config.combine_dtype),
                   " is not a valid CombineDtype; valid values: ", valid_combine_values());

  const int h = config.hidden;
  MOE_EP_CHECK_ARG(h >= 1, "hidden=", h, " must be >= 1");
  MOE_EP_CHECK_ARG(h <= kMaxHidden, "hidden=", h, " exceeds the limit ", kMaxHidden);
  // Block sizes first: they are the rule a user of a quantized format most likely broke.
  check_block_for(h, config.dispatch_dtype, "dispatch");
  check_block_for(h, config.combine_dtype, "combine");
  // x, y and out are bf16 whatever the wire formats are.
  MOE_EP_CHECK_ARG(h % 8 == 0, "hidden=", h,
                   " is not a multiple of 8: bf16 rows must be whole 16-byte units");
  check_row_bytes_for(h, config.dispatch_dtype, "dispatch");
  check_row_bytes_for(h, config.combine_dtype, "combine");

  const int t = config.max_tokens_per_rank;
  MOE_EP_CHECK_ARG(t >= 1, "max_tokens_per_rank=", t, " must be >= 1");
  MOE_EP_CHECK_ARG(t <= kMaxTokensPerRank, "max_tokens_per_rank=", t, " exceeds the limit ",
                   kMaxTokensPerRank);

  MOE_EP_CHECK_ARG(config.num_sms >= 0 && config.num_sms <= kMaxNumSms, "num_sms=", config.num_sms,
                   " must be in [0, ", kMaxNumSms,
                   "] (0 takes MOE_EP_NUM_SMS or the library default)");

  // Nodes of L ranks each (docs/design.md#several-nodes); 0 is one node of every rank.
  const int l = config.ranks_per_node;
  MOE_EP_CHECK_ARG(l >= 0, "ranks_per_node=", l,
                   " must be >= 0 (0: every rank on one node, i.e. world_size=", world_size, ")");
  MOE_EP_CHECK_ARG(l <= world_size, "ranks_per_node=", l, " exceeds world_size=", world_size);
  MOE_EP_CHECK_ARG(l == 0 || world_size % l == 0, "ranks_per_node=", l,
                   " does not divide world_size=", world_size,
                   " (every node must hold the same number of ranks)");

  // The copy-engine path (docs/copy-engine.md) is normal mode on one node.
  if (config.copy_engine) {
    MOE_EP_CHECK_ARG(!config.low_latency,
                     "copy_engine=true with low_latency=true: the copy-engine path is normal mode "
                     "only (decode mode's calls are captured in graphs with no host wait for the "
                     "row counts); use copy_engine=false for a decode-mode op");
    MOE_EP_CHECK_ARG(l == 0 || l == world_size, "copy_engine=true with ranks_per_node=", l,
                     " < world_size=", world_size,
                     ": the copy-engine path works on one node only (ranks_per_node=0 or ",
                     world_size, ")");
  }
  MOE_EP_CHECK_ARG(!config.column_major_scales || config.low_latency,
                   "column_major_scales=true with low_latency=false: the layout is decode mode's "
                   "(its slabs of W * max_tokens_per_rank rows per expert); normal mode returns "
                   "scale rows");
}

bool resolve_copy_engine(const OpConfig& config, int world_size, const Knobs& knobs) {
  if (config.copy_engine) return true;
  const bool one_node = config.ranks_per_node == 0 || config.ranks_per_node == world_size;
  return knobs.copy_engine && !config.low_latency && one_node;
}

std::shared_ptr<Op> create_op(const std::shared_ptr<Communicator>& comm, const OpConfig& config) {
  MOE_EP_CHECK_ARG(comm != nullptr, "create_op: comm is null");
  // Each backend checks the configuration inside its creation rendezvous, so that a
  // configuration rejected on one rank fails every rank at once instead of leaving them waiting.
  std::shared_ptr<Op> op;
  switch (comm->backend()) {
    case Backend::kCpu: op = cpu_backend::create_op(comm, config); break;
    case Backend::kCuda:
#if MOE_EP_WITH_CUDA
      op = cuda_backend::create_op(comm, config);
      break;
#else
      throw InvalidArgument("create_op: backend cuda is not built into this moe-ep");
#endif
  }
  if (op) {
    warn_unaligned_columns(*op);
    return op;
  }
  throw InvalidArgument(detail::concat("create_op: communicator backend ",
                                       static_cast<int>(comm->backend()), " is not cpu or cuda"));
}

OpMemory op_memory(const std::shared_ptr<Communicator>& comm, const OpConfig& config) {
  MOE_EP_CHECK_ARG(comm != nullptr, "op_memory: comm is null");
  switch (comm->backend()) {
    case Backend::kCpu: return cpu_backend::op_memory(comm, config);
    case Backend::kCuda:
#if MOE_EP_WITH_CUDA
      return cuda_backend::op_memory(comm, config);
#else
      throw InvalidArgument("op_memory: backend cuda is not built into this moe-ep");
#endif
  }
  throw InvalidArgument(detail::concat("op_memory: communicator backend ",
                                       static_cast<int>(comm->backend()), " is not cpu or cuda"));
}

void reject_create(const std::shared_ptr<Communicator>& comm, const std::string& reason) {
  MOE_EP_CHECK_ARG(comm != nullptr, "reject_create: comm is null");
  switch (comm->backend()) {
    case Backend::kCpu: return cpu_backend::reject_create(comm, reason);
    case Backend::kCuda:
#if MOE_EP_WITH_CUDA
      return cuda_backend::reject_create(comm, reason);
#else
      throw InvalidArgument("reject_create: backend cuda is not built into this moe-ep");
#endif
  }
  throw InvalidArgument(detail::concat("reject_create: communicator backend ",
                                       static_cast<int>(comm->backend()), " is not cpu or cuda"));
}

// ---------------------------------------------------------------------------------------------
// OpCache: a list in recency order (front = most recent). Capacities are tiny (4), so a linear
// search is simpler than a map and as fast. Not thread-safe: one cache per rank, like the ops.

struct OpCache::Impl {
  struct Entry {
    uint64_t group_id;
    int rank;
    OpConfig config;
    std::shared_ptr<Op> op;
  };
  size_t capacity;
  std::list<Entry> entries;  // most recently used first
  std::vector<std::string> eviction_log;
  std::vector<std::shared_ptr<Op>> retained;  // evicted, but captured in a CUDA graph
};

OpCache::OpCache(size_t capacity) : impl_(std::make_unique<Impl>()) {
  MOE_EP_CHECK_ARG(capacity >= 1, "OpCache capacity=", capacity, " must be >= 1");
  impl_->capacity = capacity;
}

OpCache::~OpCache() = default;

std::shared_ptr<Op> OpCache::get(const std::shared_ptr<Communicator>& comm,
                                 const OpConfig& config) {
  MOE_EP_CHECK_ARG(comm != nullptr, "OpCache::get: comm is null");
  const uint64_t group_id = comm->group_id();
  const int rank = comm->rank();
  auto& entries = impl_->entries;
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->group_id == group_id && it->rank == rank && it->config == config) {
      entries.splice(entries.begin(), entries, it);  // now the most recent
      return entries.front().op;
    }
  }
  // Create first: a creation that throws leaves the cache as it was on every rank.
  std::shared_ptr<Op> op = create_op(comm, config);
  if (entries.size() >= impl_->capacity) {
    Impl::Entry& victim = entries.back();
    impl_->eviction_log.push_back(victim.config.describe());
    if (victim.op->captured()) {
      // Ranks that captured the same calls (the usual case: every rank runs the same graph)
      // keep the same ops.
      MOE_EP_LOG(LogLevel::kWarn, "op cache: the evicted op ", victim.config.describe(),
                 " had calls captured in a CUDA graph, which may still replay them: kept until "
                 "the cache is cleared (OpCache::clear, Python clear_op_cache)");
      impl_->retained.push_back(victim.op);
    }
    entries.pop_back();  // releases the cache's reference; the op goes with the last one
  }
  entries.push_front(Impl::Entry{group_id, rank, config, op});
  return op;
}

size_t OpCache::size() const { return impl_->entries.size(); }
size_t OpCache::capacity() const { return impl_->capacity; }
const std::vector<std::string>& OpCache::eviction_log() const { return impl_->eviction_log; }
size_t OpCache::retained() const { return impl_->retained.size(); }
void OpCache::clear() {
  impl_->entries.clear();
  impl_->retained.clear();
}

}  // namespace moe_ep
