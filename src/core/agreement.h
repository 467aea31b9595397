// What ranks agree on before anything moves (docs/design.md#collective-calls-and-agreement):
// at the start of every collective step each rank states the identity of its call (kind and
// number) and its verdict on its own arguments; settle_step turns every rank's statement into the
// one outcome all ranks share. At creation they compare configurations field by field. Both
// backends use these, so a given disagreement reads the same on CPU and CUDA.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "moe_ep/errors.h"
#include "moe_ep/op.h"

namespace moe_ep {

// What one rank says at the start of a collective step.
struct StepVerdict {
  CallKind kind = CallKind::kDispatch;
  // dispatch #n is the op's n-th successful dispatch, combine #n combines it; the low-latency
  // kinds count low-latency dispatches the same way, separately.
  uint64_t call = 0;
  std::string error;  // empty: this rank accepted its arguments; else why it rejected them
  // The error says the call cannot be made now (a receive is pending), not that a value is bad:
  // this rank raises it as InvalidUsage. Peers see a rejection like any other.
  bool usage_error = false;
};

// Runs this rank's checks of a collective call's arguments and records how they failed, if they
// did: an InvalidArgument as the rejection's reason, an InvalidUsage (the call cannot be made now)
// as a usage error. The rank then states the verdict at the step like any other.
template <typename Checks>
void collect_rejection(StepVerdict& verdict, Checks&& checks) {
  try {
    checks();
  } catch (const InvalidArgument& e) {
    verdict.error = e.what();
  } catch (const InvalidUsage& e) {
    verdict.error = e.what();
    verdict.usage_error = true;
  }
}

struct RankVerdict {
  int rank = 0;
  StepVerdict verdict;
};

// "dispatch #7".
std::string describe_call(CallKind kind, uint64_t call);

// Settles one step on `rank`, given its own verdict and the other ranks' (all of them, or at
// least every one that differs from `mine`). Returns when every rank accepted the same call.
// Otherwise throws, in this order of precedence:
//   InvalidUsage    ranks are in different calls ("rank 0 is in dispatch #7, rank 1 in combine
//                   #6"): nothing is paired, the op stays usable;
//   InvalidArgument this rank rejected its arguments (its own message; InvalidUsage when
//                   mine.usage_error), or another rank did ("dispatch aborted: rank 1 rejected
//                   its input: <its message>").
void settle_step(int rank, const StepVerdict& mine, const std::vector<RankVerdict>& others);

// Raises this rank's own rejection as settle_step does ("<kind>: <error>"), for the paths where
// every rank rejects alike without exchanging verdicts.
[[noreturn]] void throw_own_rejection(const StepVerdict& mine);

// The fields that identify a configuration across ranks, in a fixed order, as int64 values
// (a fingerprint that fits device memory as well as host memory).
inline constexpr int kNumConfigFields = 13;
using ConfigValues = std::array<int64_t, kNumConfigFields>;
ConfigValues config_values(const OpConfig& config, int world_size);
const char* config_field_name(int field);

// The first field in which rank_a's and rank_b's configurations differ, written
// "hidden=4096 on rank 1, hidden=7168 on rank 0"; empty when they are equal.
std::string first_config_difference(const ConfigValues& a, int rank_a, const ConfigValues& b,
                                    int rank_b);

// The ranks a creation rendezvous found missing and what each was doing instead, worded alike
// on both backends. A rank is elsewhere when it was creating another configuration (`difference`
// is first_config_difference's text, non-empty).
struct CreationMisses {
  std::string missing;           // "0, 2"
  std::string doing;             // "; rank 0 ...; rank 2 ..."
  std::string first_difference;  // of the first rank elsewhere
  int count = 0;
  bool all_elsewhere = true;
  void add(int rank, const std::string& what, const std::string& difference = {});
  // InvalidArgument when every missing rank was elsewhere (the configurations differ), else
  // Timeout.
  ErrorCode code() const;
  // "configuration differs between ranks: <first difference> (<head><doing>)" when every missing
  // rank was elsewhere, else "<head><doing>".
  std::string message(const std::string& head) const;
};

// What a rank already past this creation did in it, judged by its attempt there: "rank q left
// this creation, made with another configuration (<difference>)", or, for the same
// configuration (empty difference), that it left it without a match.
std::string left_creation_text(int rank, const std::string& difference);

}  // namespace moe_ep
