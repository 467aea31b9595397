// Dtype resolution: resolve_dtypes() picks the dispatch and the combine wire dtype, each on its
// own, by the first rule that applies: the caller's value (if not auto), MOE_EP_DISPATCH_DTYPE /
// MOE_EP_COMBINE_DTYPE (if not auto), the deprecated MOE_EP_FP8_DISP / MOE_EP_FP4_DISP (dispatch
// only), then the auto rule on the expert weight dtype. It reports where each choice came from and
// every warning that applies, on every call, and logs each distinct warning once per process
// (docs/config.md explains the choices).
#include <mutex>
#include <set>
#include <string>

#include "core/check.h"
#include "core/log.h"
#include "moe_ep/config.h"

namespace moe_ep {
namespace {

// The variables that resolution names in its messages; their knobs are in src/core/knobs.cc.
constexpr const char* kDispatchVar = "MOE_EP_DISPATCH_DTYPE";
constexpr const char* kCombineVar = "MOE_EP_COMBINE_DTYPE";
constexpr const char* kFp8DispVar = "MOE_EP_FP8_DISP";
constexpr const char* kFp4DispVar = "MOE_EP_FP4_DISP";

// Logs `message` at warn level the first time this process sees it. In a real process the
// environment is fixed, so each deprecation or override warning appears exactly once however many
// ops resolve their dtypes; tests that vary the knobs see each distinct text once. Deduplicating
// by text, not with one flag, means that one warning never hides a different one.
void warn_once(const std::string& message) {
  if (!log_enabled(LogLevel::kWarn)) return;
  static std::mutex mutex;
  static std::set<std::string> logged;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!logged.insert(message).second) return;
  }
  MOE_EP_LOG(LogLevel::kWarn, message);
}

// The value as the user wrote it when known (Knobs built by from()), else `fallback`.
std::string given_value(const Knobs& knobs, const char* name, const std::string& fallback) {
  const auto it = knobs.set_variables.find(name);
  return it != knobs.set_variables.end() ? it->second : fallback;
}

struct DeprecatedFlag {
  const char* name;
  const std::optional<bool>& value;
  DispatchDtype dtype;
};

// The dispatch leg: caller > MOE_EP_DISPATCH_DTYPE > deprecated booleans > auto. `res` receives
// dispatch, its source and origin, and the warnings.
void resolve_dispatch(std::optional<DispatchDtype> requested, WeightDtype weights,
                      const Knobs& knobs, DtypeResolution& res) {
  const DeprecatedFlag flags[] = {{kFp8DispVar, knobs.fp8_disp, DispatchDtype::fp8},
                                  {kFp4DispVar, knobs.fp4_disp, DispatchDtype::fp4}};
  const std::string env_text =
      knobs.dispatch_dtype ? given_value(knobs, kDispatchVar, short_name(*knobs.dispatch_dtype))
                           : std::string();
  if (requested) {
    res.dispatch = *requested;
    res.dispatch_source = DtypeSource::kCaller;
    res.dispatch_origin = "caller";
    if (knobs.dispatch_dtype && *knobs.dispatch_dtype != *requested) {
      res.warnings.push_back(detail::concat(kDispatchVar, "=", env_text,
                                            " is ignored: the caller chose dispatch dtype ",
                                            to_string(*requested)));
    }
  } else if (knobs.dispatch_dtype) {
    res.dispatch = *knobs.dispatch_dtype;
    res.dispatch_source = DtypeSource::kEnv;
    res.dispatch_origin = detail::concat(kDispatchVar, "=", env_text);
  }

  // The deprecated booleans: every one that is set earns a warning naming MOE_EP_DISPATCH_DTYPE.
  // They decide only when nothing stronger did; "both true" is an error only in that case, since
  // otherwise neither is used.
  const bool decided = res.dispatch_source != DtypeSource::kAuto;
  const DeprecatedFlag* chosen = nullptr;
  for (const DeprecatedFlag& flag : flags) {
    if (!flag.value) continue;
    const std::string given =
        detail::concat(flag.name, "=", given_value(knobs, flag.name, *flag.value ? "1" : "0"));
    const std::string replacement = detail::concat(kDispatchVar, "=", short_name(flag.dtype));
    if (requested) {
      res.warnings.push_back(
          detail::concat(given, " is deprecated and ignored: the caller chose dispatch dtype ",
                         to_string(res.dispatch), "; use ", kDispatchVar, " instead"));
    } else if (decided) {
      res.warnings.push_back(detail::concat(given, " is deprecated and ignored because ",
                                            res.dispatch_origin, " is set; unset ", flag.name));
    } else if (*flag.value) {
      MOE_EP_CHECK_ARG(chosen == nullptr, chosen ? chosen->name : "", "=1 and ", flag.name,
                       "=1 are both set; they select different dispatch dtypes. Set ", kDispatchVar,
                       "=fp8 or ", kDispatchVar, "=fp4 instead");
      chosen = &flag;
      res.warnings.push_back(
          detail::concat(given, " is deprecated; use ", replacement, " instead"));
    } else {
      res.warnings.push_back(detail::concat(
          given, " is deprecated and has no effect; unset it and use ", kDispatchVar, " instead"));
    }
  }
  if (chosen != nullptr) {
    res.dispatch = chosen->dtype;
    res.dispatch_source = DtypeSource::kDeprecatedEnv;
    res.dispatch_origin =
        detail::concat(chosen->name, "=", given_value(knobs, chosen->name, "1"), " (deprecated)");
    return;
  }
  if (decided) return;
  switch (weights) {
    case WeightDtype::fp8: res.dispatch = DispatchDtype::fp8; break;
    case WeightDtype::fp4: res.dispatch = DispatchDtype::fp4; break;
    default: res.dispatch = DispatchDtype::bf16; break;
  }
  res.dispatch_source = DtypeSource::kAuto;
  res.dispatch_origin = detail::concat("auto: weights ", to_string(weights));
}

// The combine leg: caller > MOE_EP_COMBINE_DTYPE > auto; it has no deprecated variables.
void resolve_combine(std::optional<CombineDtype> requested, WeightDtype weights, const Knobs& knobs,
                     DtypeResolution& res) {
  const std::string env_text =
      knobs.combine_dtype ? given_value(knobs, kCombineVar, short_name(*knobs.combine_dtype))
                          : std::string();
  if (requested) {
    res.combine = *requested;
    res.combine_source = DtypeSource::kCaller;
    res.combine_origin = "caller";
    if (knobs.combine_dtype && *knobs.combine_dtype != *requested) {
      res.warnings.push_back(detail::concat(kCombineVar, "=", env_text,
                                            " is ignored: the caller chose combine dtype ",
                                            to_string(*requested)));
    }
    return;
  }
  if (knobs.combine_dtype) {
    res.combine = *knobs.combine_dtype;
    res.combine_source = DtypeSource::kEnv;
    res.combine_origin = detail::concat(kCombineVar, "=", env_text);
    return;
  }
  // The auto rule: only fp4 weights move combine off bf16 (to fp8 blockwise).
  res.combine = weights == WeightDtype::fp4 ? CombineDtype::fp8 : CombineDtype::bf16;
  res.combine_source = DtypeSource::kAuto;
  res.combine_origin = detail::concat("auto: weights ", to_string(weights));
}

}  // namespace

const char* to_string(DtypeSource source) {
  switch (source) {
    case DtypeSource::kCaller: return "caller";
    case DtypeSource::kEnv: return "env";
    case DtypeSource::kDeprecatedEnv: return "deprecated env";
    case DtypeSource::kAuto: return "auto";
  }
  return "unknown";
}

DtypeResolution resolve_dtypes(std::optional<DispatchDtype> requested_dispatch,
                               std::optional<CombineDtype> requested_combine, WeightDtype weights,
                               const Knobs& knobs) {
  DtypeResolution res;
  resolve_dispatch(requested_dispatch, weights, knobs, res);
  resolve_combine(requested_combine, weights, knobs, res);
  for (const std::string& warning : res.warnings) warn_once(warning);
  return res;
}

}  // namespace moe_ep
