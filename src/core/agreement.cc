// See agreement.h.
#include "core/agreement.h"

#include "core/check.h"

namespace moe_ep {
namespace {

constexpr const char* kConfigFieldNames[kNumConfigFields] = {"world_size",
                                                             "num_experts",
                                                             "hidden",
                                                             "topk",
                                                             "max_tokens_per_rank",
                                                             "dispatch_dtype",
                                                             "combine_dtype",
                                                             "instance_id",
                                                             "num_sms",
                                                             "low_latency",
                                                             "ranks_per_node",
                                                             "copy_engine",
                                                             "column_major_scales"};

// A field's value as a message shows it: dtype enums by name when valid.
std::string field_text(int field, int64_t value) {
  if (field == 5 && value >= 0 && value <= static_cast<int64_t>(DispatchDtype::fp4)) {
    return to_string(static_cast<DispatchDtype>(value));
  }
  if (field == 6 && value >= 0 && value <= static_cast<int64_t>(CombineDtype::int8_e3m4)) {
    return to_string(static_cast<CombineDtype>(value));
  }
  return std::to_string(value);
}

}  // namespace

const char* to_string(CallKind kind) {
  switch (kind) {
    case CallKind::kDispatch: return "dispatch";
    case CallKind::kCombine: return "combine";
    case CallKind::kLowLatencyDispatch: return "low_latency_dispatch";
    case CallKind::kLowLatencyCombine: return "low_latency_combine";
  }
  return "unknown call";
}

std::string describe_call(CallKind kind, uint64_t call) {
  return detail::concat(to_string(kind), " #", call);
}

void settle_step(int rank, const StepVerdict& mine, const std::vector<RankVerdict>& others) {
  for (const RankVerdict& other : others) {
    const StepVerdict& v = other.verdict;
    if (v.kind == mine.kind && v.call == mine.call) continue;
    throw InvalidUsage(detail::concat(
        to_string(mine.kind), " aborted: calls out of step: rank ", rank, " is in ",
        describe_call(mine.kind, mine.call), ", rank ", other.rank, " in ",
        describe_call(v.kind, v.call),
        "; every rank must make the same calls in the same order (nothing was sent)"));
  }
  if (!mine.error.empty()) throw_own_rejection(mine);
  for (const RankVerdict& other : others) {
    if (other.verdict.error.empty()) continue;
    throw InvalidArgument(detail::concat(to_string(mine.kind), " aborted: rank ", other.rank,
                                         " rejected its input: ", other.verdict.error));
  }
}

void throw_own_rejection(const StepVerdict& mine) {
  throw_error(mine.usage_error ? ErrorCode::kInvalidUsage : ErrorCode::kInvalidArgument,
              detail::concat(to_string(mine.kind), ": ", mine.error));
}

ConfigValues config_values(const OpConfig& c, int world_size) {
  return {world_size,
          c.num_experts,
          c.hidden,
          c.topk,
          c.max_tokens_per_rank,
          static_cast<int64_t>(c.dispatch_dtype),
          static_cast<int64_t>(c.combine_dtype),
          c.instance_id,
          c.num_sms,
          c.low_latency ? 1 : 0,
          c.ranks_per_node,
          c.copy_engine ? 1 : 0,
          c.column_major_scales ? 1 : 0};
}

const char* config_field_name(int field) {
  return field >= 0 && field < kNumConfigFields ? kConfigFieldNames[field] : "unknown field";
}

std::string first_config_difference(const ConfigValues& a, int rank_a, const ConfigValues& b,
                                    int rank_b) {
  for (int f = 0; f < kNumConfigFields; ++f) {
    if (a[f] == b[f]) continue;
    const char* name = kConfigFieldNames[f];
    return detail::concat(name, "=", field_text(f, a[f]), " on rank ", rank_a, ", ", name, "=",
                          field_text(f, b[f]), " on rank ", rank_b);
  }
  return {};
}

void CreationMisses::add(int rank, const std::string& what, const std::string& difference) {
  ++count;
  missing += (missing.empty() ? "" : ", ") + std::to_string(rank);
  doing += "; " + what;
  if (difference.empty()) {
    all_elsewhere = false;
  } else if (first_difference.empty()) {
    first_difference = difference;
  }
}

ErrorCode CreationMisses::code() const {
  return all_elsewhere ? ErrorCode::kInvalidArgument : ErrorCode::kTimeout;
}

std::string CreationMisses::message(const std::string& head) const {
  if (!all_elsewhere) return head + doing;
  return detail::concat("configuration differs between ranks: ", first_difference, " (", head,
                        doing, ")");
}

std::string left_creation_text(int rank, const std::string& difference) {
  if (difference.empty()) {
    return detail::concat("rank ", rank,
                          " left this creation without a match (it failed there, e.g. waiting for ",
                          "another rank)");
  }
  return detail::concat("rank ", rank, " left this creation, made with another configuration (",
                        difference, ")");
}

}  // namespace moe_ep
