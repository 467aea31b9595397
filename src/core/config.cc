// The knob registry, the typed parse of the MOE_EP_* environment, dtype resolution and the
// levelled logger (DESIGN 5). Every knob is declared once in kKnobs; Knobs::from parses a given
// map strictly (a value that does not parse is an InvalidArgument naming the variable, the value
// and the valid values; an unknown MOE_EP_* name is a warning), Knobs::get caches the parse of the
// process environment. resolve_dtypes applies caller > MOE_EP_*_DTYPE > deprecated booleans >
// auto and reports where each choice came from. The logger reads MOE_EP_LOG itself (never through
// Knobs::get, which logs while it initialises) and each distinct resolution warning is logged
// once per process.
#include "moe_ep/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <utility>

#include "core/check.h"

extern char** environ;  // POSIX; declared here because <unistd.h> only does with _GNU_SOURCE

namespace moe_ep {
namespace {

constexpr std::string_view kPrefix = "MOE_EP_";
constexpr const char* kDispatchVar = "MOE_EP_DISPATCH_DTYPE";
constexpr const char* kCombineVar = "MOE_EP_COMBINE_DTYPE";
constexpr const char* kFp8DispVar = "MOE_EP_FP8_DISP";
constexpr const char* kFp4DispVar = "MOE_EP_FP4_DISP";
constexpr const char* kValidateVar = "MOE_EP_VALIDATE";
constexpr const char* kTimeoutVar = "MOE_EP_TIMEOUT_S";
constexpr const char* kLogVar = "MOE_EP_LOG";
constexpr const char* kNumSmsVar = "MOE_EP_NUM_SMS";

constexpr const char* kBoolValues = "1|0|true|false|yes|no|on|off (case-insensitive)";
constexpr const char* kLogValues = "error|warn|info|debug";
// Upper bound keeps every later conversion of the timeout to int64 nanoseconds (overflow at
// 2^63 ns ~ 9.2e9 s) safe; 1e9 s is ~31.7 years, so "wait forever" is still expressible.
constexpr double kMaxTimeoutS = 1e9;
constexpr const char* kTimeoutValues = "a positive number of seconds up to 1e9, e.g. 100 or 2.5";
constexpr const char* kNumSmsValues = "an integer >= 0 (0 = library default)";

// The registry. The dtype value lists are spelled out here because KnobInfo holds literals;
// tests/test_config.cc checks that they equal what the dtype parsers accept.
const std::vector<KnobInfo> kKnobs = {
    {kDispatchVar, "enum", "auto",
     "Dispatch wire dtype: auto|bf16|fp8|fp4|bfloat16|float8_blockwise|mxfp4_blockwise. auto "
     "follows the expert weight dtype (fp8 -> fp8, fp4 -> fp4, else bf16)."},
    {kCombineVar, "enum", "auto",
     "Combine wire dtype: auto|bf16|fp8|fp8_direct_cast|bfloat16|float8_blockwise|"
     "float8_direct_cast. auto follows the expert weight dtype (fp4 -> fp8, else bf16)."},
    {kFp8DispVar, "bool", "unset",
     "Deprecated: use MOE_EP_DISPATCH_DTYPE=fp8. 1 selects fp8 dispatch when neither the caller "
     "nor MOE_EP_DISPATCH_DTYPE chooses one."},
    {kFp4DispVar, "bool", "unset",
     "Deprecated: use MOE_EP_DISPATCH_DTYPE=fp4. 1 selects fp4 dispatch when neither the caller "
     "nor MOE_EP_DISPATCH_DTYPE chooses one."},
    {kValidateVar, "bool", "0",
     "Validation mode: scan inputs for bad expert ids and non-finite values (DESIGN 6)."},
    {kTimeoutVar, "double", "100",
     "Bound in seconds on every device wait; on expiry the error names phase, rank and peer."},
    {kLogVar, "enum", "warn", "Log level: error|warn|info|debug. Messages go to stderr."},
    {kNumSmsVar, "int", "0", "SMs used by the communication kernels; 0 = library default."},
};

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<LogLevel> parse_log_level(std::string_view text) {
  const std::string t = lower(text);
  for (LogLevel level : {LogLevel::kError, LogLevel::kWarn, LogLevel::kInfo, LogLevel::kDebug}) {
    if (t == to_string(level)) return level;
  }
  return std::nullopt;
}

[[noreturn]] void throw_invalid(const std::string& name, const std::string& value,
                                std::string_view valid) {
  throw InvalidArgument(
      detail::concat(name, "='", value, "' is not a valid value; valid values: ", valid));
}

bool parse_bool(const std::string& name, const std::string& value) {
  const std::string t = lower(value);
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  throw_invalid(name, value, kBoolValues);
}

// from_chars takes no leading whitespace, '+', hex or trailing text, so "1e2" and "2.5" parse
// while " 5", "5s" and "0x10" do not.
double parse_timeout(const std::string& name, const std::string& value) {
  double seconds = 0.0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, seconds);
  const bool ok = ec == std::errc() && ptr == end && std::isfinite(seconds) && seconds > 0.0 &&
                  seconds <= kMaxTimeoutS;
  if (!ok) throw_invalid(name, value, kTimeoutValues);
  return seconds;
}

int parse_num_sms(const std::string& name, const std::string& value) {
  int num_sms = -1;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, num_sms);
  if (ec != std::errc() || ptr != end || num_sms < 0) throw_invalid(name, value, kNumSmsValues);
  return num_sms;
}

const KnobInfo* find_knob(std::string_view name) {
  for (const KnobInfo& knob : kKnobs) {
    if (name == knob.name) return &knob;
  }
  return nullptr;
}

// Levenshtein distance, for the "did you mean" hint on an unknown MOE_EP_* name.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string unknown_variable_warning(const std::string& name) {
  // A distance of 3 covers a dropped or swapped letter pair ("MOE_EP_TIMEOUT" for
  // "MOE_EP_TIMEOUT_S" is 2) without matching unrelated names, which differ in most letters.
  constexpr size_t kMaxHintDistance = 3;
  const KnobInfo* best = nullptr;
  size_t best_distance = kMaxHintDistance + 1;
  for (const KnobInfo& knob : kKnobs) {
    const size_t d = edit_distance(name, knob.name);
    if (d < best_distance) best = &knob, best_distance = d;
  }
  std::string msg = "unknown variable " + name + " is ignored";
  if (best != nullptr) msg += detail::concat(" (did you mean ", best->name, "?)");
  return msg;
}

// The logger's own level: MOE_EP_LOG read with getenv, once. It must not use Knobs::get(), which
// logs while it is being initialised. An invalid value falls back to warn here; Knobs::get()
// reports it as an error.
LogLevel logger_level() {
  static const LogLevel level = [] {
    const char* text = std::getenv(kLogVar);
    const std::optional<LogLevel> parsed = text ? parse_log_level(text) : std::nullopt;
    return parsed.value_or(LogLevel::kWarn);
  }();
  return level;
}

std::mutex& sink_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::shared_ptr<const LogSink>& sink_slot() {
  static std::shared_ptr<const LogSink> sink;
  return sink;
}

// Logs `message` at warn level the first time this process sees it. In a real process the
// environment is fixed, so each deprecation or override warning appears exactly once however many
// ops resolve their dtypes; tests that vary the knobs see each distinct text once.
void warn_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> logged;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!logged.insert(message).second) return;
  }
  log(LogLevel::kWarn, message);
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

// Dispatch side of DESIGN 5. `res` receives dispatch, its source and origin, and warnings.
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

// Combine side of DESIGN 5: no deprecated variables.
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
  // The auto rule of DESIGN 5: only fp4 weights move combine off bf16 (to fp8 blockwise).
  res.combine = weights == WeightDtype::fp4 ? CombineDtype::fp8 : CombineDtype::bf16;
  res.combine_source = DtypeSource::kAuto;
  res.combine_origin = detail::concat("auto: weights ", to_string(weights));
}

}  // namespace

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

const std::vector<KnobInfo>& knob_registry() { return kKnobs; }

Knobs Knobs::from(const EnvMap& env) {
  Knobs knobs;
  std::vector<std::string> unknown;
  for (const auto& [name, value] : env) {
    if (name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    knobs.set_variables[name] = value;
    if (name == kDispatchVar) {
      knobs.dispatch_dtype_set = true;
      knobs.dispatch_dtype = parse_dispatch_choice(value, kDispatchVar);
    } else if (name == kCombineVar) {
      knobs.combine_dtype_set = true;
      knobs.combine_dtype = parse_combine_choice(value, kCombineVar);
    } else if (name == kFp8DispVar) {
      knobs.fp8_disp = parse_bool(name, value);
    } else if (name == kFp4DispVar) {
      knobs.fp4_disp = parse_bool(name, value);
    } else if (name == kValidateVar) {
      knobs.validate = parse_bool(name, value);
    } else if (name == kTimeoutVar) {
      knobs.timeout_s = parse_timeout(name, value);
    } else if (name == kLogVar) {
      const std::optional<LogLevel> level = parse_log_level(value);
      if (!level) throw_invalid(name, value, kLogValues);
      knobs.log_level = *level;
    } else if (name == kNumSmsVar) {
      knobs.num_sms = parse_num_sms(name, value);
    } else {
      MOE_EP_CHECK_INTERNAL(find_knob(name) == nullptr, "registered knob ", name, " not parsed");
      unknown.push_back(name);
    }
  }
  // Unknown names are most likely typos of a real knob: say so, but do not fail, so that a
  // variable meant for a newer version does not break an older one.
  for (const std::string& name : unknown) log(LogLevel::kWarn, unknown_variable_warning(name));
  return knobs;
}

EnvMap Knobs::process_env() {
  EnvMap env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    if (text.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    const size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

const Knobs& Knobs::get() {
  // A throwing initialiser leaves the static uninitialised, so every call reports the bad value.
  static const Knobs knobs = [] {
    Knobs parsed = from(process_env());
    for (const auto& [name, value] : parsed.set_variables) {
      log(LogLevel::kInfo, detail::concat(name, "=", value));
    }
    return parsed;
  }();
  return knobs;
}

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

void log(LogLevel level, const std::string& message) {
  if (static_cast<int>(level) > static_cast<int>(logger_level())) return;
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard<std::mutex> lock(sink_mutex());
    sink = sink_slot();
  }
  // The sink runs outside the lock so that it may itself log or replace the sink.
  if (sink) {
    (*sink)(level, message);
    return;
  }
  // One fprintf per line keeps lines from different threads whole.
  std::fprintf(stderr, "moe-ep [%s] %s\n", to_string(level), message.c_str());
}

void set_log_sink(LogSink sink) {
  std::shared_ptr<const LogSink> next;
  if (sink) next = std::make_shared<const LogSink>(std::move(sink));
  std::lock_guard<std::mutex> lock(sink_mutex());
  sink_slot() = std::move(next);
}

}  // namespace moe_ep
