// Op creation on the CUDA backend (docs/design.md#collective-calls-and-agreement): every rank's
// verdict on its configuration and the configuration itself are agreed on through the
// communicator's control area (create_rendezvous_kernel) before anything collective happens;
// then every rank allocates, agrees again that all of them could, and only then takes part in
// the collective registration of the buffers. A rank that rejects tells the others, who fail at
// once; creations are matched by configuration, so a missed creation costs that creation only.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_comm.h"
#include "backends/cuda/cuda_op.h"
#include "backends/cuda/factory.h"
#include "backends/cuda/resources.h"
#include "moe_ep/config.h"

namespace moe_ep::cuda_backend {
namespace {

void fill_reason(StepReason& r, const std::string& text) {
  std::memset(&r, 0, sizeof(r));
  const size_t n = std::min(text.size(), sizeof(r.text) - 1);
  std::memcpy(r.text, text.data(), n);
  r.text_bytes = static_cast<int32_t>(n);
}

std::string reason_text(const StepReason& r) {
  return std::string(r.text, std::min<size_t>(std::max(r.text_bytes, 0), sizeof(r.text)));
}

ConfigValues values_of(const int64_t (&config)[kNumConfigFields]) {
  ConfigValues v;
  std::copy(std::begin(config), std::end(config), v.begin());
  return v;
}

// One round of the rendezvous: this rank's attempt (joining with `values`, or rejecting with
// `rejection`), then, when joining, the wait for every peer's matching attempt. Throws what this
// rank must raise.
void rendezvous(CudaComm& comm, const ConfigValues& values, const std::string& rejection) {
  CreateLedger& ledger = comm.ledger();
  std::lock_guard<std::mutex> lock(ledger.mu);
  const int world = comm.size();
  const int rank = comm.rank();
  const bool rejecting = !rejection.empty();
  const uint64_t attempt = ++ledger.attempts;
  if (rejecting) ledger.rejected_at = attempt;

  DeviceGuard guard(comm.device());
  HostMapped<CreateOutcome>& outcome = *ledger.outcome;
  HostMapped<StepReason>& reason = *ledger.reason;
  std::memset(static_cast<void*>(outcome.host()), 0, sizeof(CreateOutcome));
  outcome.host()->rejected_by = -1;
  if (rejecting) fill_reason(*reason.host(), rejection);
  CreateParams p{};
  p.rank = rank;
  p.world_size = world;
  p.control = comm.control().peers();
  p.tag = attempt << 2 | (rejecting ? kCreateRejected : kCreateJoining);
  p.reject_attempt = ledger.rejected_at;
  std::copy(values.begin(), values.end(), p.config);
  p.my_reason = reason.device();
  for (int q = 0; q < world; ++q) p.seen[q] = std::max(ledger.seen[q], ledger.failed_round);
  p.prev_tag = ledger.last_tag;
  std::copy(ledger.last_values.begin(), ledger.last_values.end(), p.prev_config);
  ledger.last_tag = p.tag;
  ledger.last_values = values;
  p.timeout_ns = timeout_ns();
  p.outcome = outcome.device();
  p.domain_size = comm.domain_size();
  cudaStream_t stream = ledger.stream->get();
  const bool domains = comm.domain_size() < world;
  if (domains) {
    // The other domains' ranks see no store of this rank: the attempt crosses the transport
    // (every rank takes this exchange in every round) and the kernel delivers theirs.
    CreateSlot slot{};
    slot.tag = p.tag;
    slot.reject_attempt = p.reject_attempt;
    std::copy(std::begin(p.config), std::end(p.config), slot.config);
    slot.prev_tag = p.prev_tag;
    std::copy(std::begin(p.prev_config), std::end(p.prev_config), slot.prev_config);
    if (rejecting) fill_reason(slot.reason, rejection);
    MOE_EP_CUDA_CHECK(cudaMemcpyAsync(ledger.slot_out->get(), &slot, sizeof(slot),
                                      cudaMemcpyHostToDevice, stream));
    std::vector<TransferPart> sends, recvs;
    for (int q = 0; q < world; ++q) {
      if (comm.same_domain(q)) continue;
      sends.push_back({q, ledger.slot_out->get(), sizeof(CreateSlot)});
      recvs.push_back({q, ledger.slots_in->get() + q, sizeof(CreateSlot)});
    }
    comm.transport().exchange(sends, recvs, stream);
    p.slots_in = ledger.slots_in->get();
  }
  MOE_EP_CUDA_CHECK(launch_create_rendezvous(p, stream));
  if (domains) {
    // NCCL's receive waits for a missing peer forever: bound the host's wait (twice the
    // kernel's own limit, so that its report comes first).
    const double limit_s = 2 * Knobs::get().timeout_s;
    if (!poll_done([stream] { return cudaStreamQuery(stream); }, limit_s)) {
      throw Timeout(detail::concat("create_op: rank ", rank, " timed out after ", limit_s,
                                   " s in the creation exchange with the other domains' ranks (",
                                   comm.transport().name(),
                                   "); a peer is dead or not creating an op (MOE_EP_TIMEOUT_S)"));
    }
  } else {
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));  // bounded by the kernel's timeout
  }
  if (rejecting) {
    ledger.failed_round = attempt;
    throw InvalidArgument(rejection);
  }

  const CreateOutcome& o = *outcome.host();
  // Every attempt seen up to this round is accounted for, whatever the outcome. A peer already
  // in a later round (its tag or rejection newer than this attempt) is not: that attempt belongs
  // to the next round, which must still see it (docs/perf-history.md, v17: accounting it made the
  // next round wait for the round after, and ranks slipped by one).
  for (int q = 0; q < world; ++q) {
    ledger.seen[q] = std::max(
        {ledger.seen[q], std::min(o.tag[q] >> 2, attempt), std::min(o.reject_attempt[q], attempt)});
  }
  bool matched = o.rejected_by < 0;
  for (int q = 0; q < world && matched; ++q) matched = o.status[q] == kCreateMatched;
  if (!matched) ledger.failed_round = attempt;
  if (o.rejected_by >= 0) {
    const int q = o.rejected_by;
    // A rejection made before any configuration existed (reject_create) carries none.
    const bool has_config = o.config[q][0] != 0;
    const std::string difference =
        has_config ? first_config_difference(values_of(o.config[q]), q, values, rank) : "";
    throw InvalidArgument(detail::concat(
        "create_op aborted: rank ", q, " rejected its configuration",
        difference.empty() ? "" : " (" + difference + ")", ": ", reason_text(o.reason)));
  }
  CreationMisses misses;
  bool timed_out = false;
  for (int q = 0; q < world; ++q) {
    if (o.status[q] == kCreateMatched) continue;
    timed_out = timed_out || o.status[q] == kCreateTimedOut;
    const bool creating = (o.tag[q] & 3) == kCreateJoining && (o.tag[q] >> 2) > 0;
    const std::string difference =
        creating ? first_config_difference(values_of(o.config[q]), q, values, rank) : "";
    if (o.status[q] == kCreatePeerLeft) {
      // A peer past this round, reported by its attempt of this round.
      misses.add(q, left_creation_text(q, difference), difference);
    } else if (!difference.empty()) {
      misses.add(q,
                 detail::concat("rank ", q, "'s latest creation is another configuration (",
                                difference, ")"),
                 difference);
    } else {
      // The attempt numbers tell whether the two ranks were in the same round, and the one the
      // kernel waited to exceed whether this rank's bookkeeping had counted q's attempt already
      // (v58 in docs/perf-notes.md: two groups of ranks, each timing out on the other).
      const uint64_t peer_attempt = o.tag[q] >> 2;
      misses.add(
          q, detail::concat("rank ", q, " has not joined (its latest attempt seen: ",
                            peer_attempt == 0 ? std::string("none") : std::to_string(peer_attempt),
                            ", waited for one above ", p.seen[q], "; this rank's: ", attempt, ")"));
    }
  }
  if (misses.count == 0) return;
  const std::string head =
      timed_out ? detail::concat("create_op: rank ", rank, " timed out after ",
                                 Knobs::get().timeout_s, " s waiting for ranks [", misses.missing,
                                 "] to create the same op (expected ", world, " arrivals, seen ",
                                 world - misses.count, ")")
                : detail::concat("create_op: rank ", rank, " found ranks [", misses.missing,
                                 "] past this creation (expected ", world, " arrivals, seen ",
                                 world - misses.count, ")");
  throw_error(misses.code(), misses.message(head));
}

// The SM budget of an op: OpConfig::num_sms, else MOE_EP_NUM_SMS, else the policy's default;
// at most what the communicator allows one op of this rank. An explicit budget above that is
// an error; the default is clamped to it.
int resolve_num_sms(const OpConfig& config, const CudaComm& comm) {
  const int cap = comm.max_sms();
  const int requested = config.num_sms > 0 ? config.num_sms : Knobs::get().num_sms;
  if (requested == 0) return std::min(Policy::kDefaultNumSms, cap);
  const char* from = config.num_sms > 0 ? "num_sms" : "MOE_EP_NUM_SMS";
  MOE_EP_CHECK_ARG(requested <= cap, from, "=", requested, " exceeds the ", cap,
                   " SMs one op of this rank may use on device ", comm.device());
  return requested;
}

// The configuration as this rank's creation takes it: MOE_EP_COPY_ENGINE applied before the
// agreement, like the other environment defaults that change the protocol would have to be, so
// ranks whose environments differ do not pair and fail naming copy_engine. The op reports the
// path it takes (config().copy_engine).
OpConfig resolved_config(const OpConfig& requested, const CudaComm& cuda) {
  OpConfig config = requested;
  config.copy_engine = resolve_copy_engine(requested, cuda.size());
  return config;
}

// Checks a resolved configuration as the creation does (InvalidArgument) and returns its SM
// budget.
int check_and_budget(const OpConfig& config, const CudaComm& cuda) {
  check_config(config, cuda.size());
  MOE_EP_CHECK_ARG(cuda.size() <= Policy::kMaxPeers, "world_size=", cuda.size(),
                   " exceeds the CUDA backend's limit of ", Policy::kMaxPeers, " ranks");
  // Several nodes (docs/multi-node.md): normal mode forwards through the transport, decode
  // mode through one persistent exchange per call (its capturable path across nodes).
  // A node's ranks must reach each other by stores: each node inside one domain.
  const int domain = cuda.domain_size();
  if (domain < cuda.size()) {
    const int l = config.ranks_per_node;
    MOE_EP_CHECK_ARG(l > 0 && domain % l == 0, "ranks_per_node=", l,
                     ": the ranks of a node must be load/store peers, and this communicator's ",
                     "domains (its NVLink domains) hold ", domain,
                     " ranks each, so ranks_per_node must divide ", domain,
                     " (0, one node, would need every rank in one domain)");
  }
  return resolve_num_sms(config, cuda);
}

}  // namespace

OpMemory op_memory(const std::shared_ptr<Communicator>& comm, const OpConfig& requested) {
  const std::shared_ptr<CudaComm> cuda = cuda_comm_of(comm);
  const OpConfig config = resolved_config(requested, *cuda);
  const int num_sms = check_and_budget(config, *cuda);
  const CudaOpGeometry g = CudaOpGeometry::of(config, cuda->size(), cuda->rank(), num_sms);
  OpMemory m;
  m.peer_bytes = g.layout.total_bytes();
  m.private_bytes = CudaOp::private_bytes(config, cuda->size(), g);
  return m;
}

std::shared_ptr<CudaComm> cuda_comm_of(const std::shared_ptr<Communicator>& comm) {
  auto cuda = std::dynamic_pointer_cast<CudaComm>(comm);
  MOE_EP_CHECK_ARG(cuda != nullptr, "comm is a ", to_string(comm->backend()),
                   " communicator that is not a CUDA communicator of moe_ep/cuda.h");
  return cuda;
}

std::shared_ptr<Op> create_op(const std::shared_ptr<Communicator>& comm,
                              const OpConfig& requested) {
  const std::shared_ptr<CudaComm> cuda = cuda_comm_of(comm);
  const OpConfig config = resolved_config(requested, *cuda);
  const ConfigValues values = config_values(config, cuda->size());
  std::string rejection;
  int num_sms = 0;
  try {
    num_sms = check_and_budget(config, *cuda);
  } catch (const InvalidArgument& e) {
    rejection = e.what();
  }
  rendezvous(*cuda, values, rejection);
  // Every rank agreed; now every rank allocates, and all agree that all could.
  std::shared_ptr<CudaOp> op;
  std::string failure;
  try {
    op = std::make_shared<CudaOp>(cuda, config, num_sms);
  } catch (const Error& e) {
    failure = detail::concat("rank ", cuda->rank(), " could not allocate: ", e.what());
  }
  rendezvous(*cuda, values, failure);
  op->publish();
  return op;
}

void reject_create(const std::shared_ptr<Communicator>& comm, const std::string& reason) {
  const std::shared_ptr<CudaComm> cuda = cuda_comm_of(comm);
  try {
    rendezvous(*cuda, ConfigValues{}, reason.empty() ? "rejected by the caller" : reason);
  } catch (const InvalidArgument&) {
    // The rejection itself: the caller raises its own error.
  }
}

}  // namespace moe_ep::cuda_backend
