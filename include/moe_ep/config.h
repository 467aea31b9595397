// Configuration: the MOE_EP_* knobs, read once per process into struct Knobs, the resolution of
// the two wire dtypes with the source of each choice, and the levelled logger. Resolution order,
// strongest first: the caller's value (if not auto), MOE_EP_DISPATCH_DTYPE / MOE_EP_COMBINE_DTYPE,
// the deprecated MOE_EP_FP8_DISP / MOE_EP_FP4_DISP, then the auto rule on the expert weight dtype
// (docs/config.md describes every knob and rule).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "moe_ep/dtypes.h"

namespace moe_ep {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };
const char* to_string(LogLevel level);  // "error", "warn", "info", "debug"

// One registered knob: its variable, type, default and meaning (for `moe-ep config` and docs).
struct KnobInfo {
  const char* name;
  const char* type;
  const char* default_value;
  const char* help;
};
const std::vector<KnobInfo>& knob_registry();

using EnvMap = std::map<std::string, std::string>;

// Typed values of every MOE_EP_* knob. Knobs::get() reads the process environment once, logs
// the variables that are set, and caches the result; Knobs::from(env) parses a given map (tests).
// A value that does not parse raises InvalidArgument naming the variable, value and valid values.
// A knob is its field here, whose initializer is its default, plus one entry of the knob table in
// src/core/knobs.cc (variable, parser, help), from which the registry and the parse are made.
struct Knobs {
  std::optional<DispatchDtype> dispatch_dtype;  // MOE_EP_DISPATCH_DTYPE, nullopt = auto/unset
  std::optional<CombineDtype> combine_dtype;    // MOE_EP_COMBINE_DTYPE, nullopt = auto/unset
  bool dispatch_dtype_set = false;              // the variable is present (even as "auto")
  bool combine_dtype_set = false;
  std::optional<bool> fp8_disp;          // MOE_EP_FP8_DISP (deprecated)
  std::optional<bool> fp4_disp;          // MOE_EP_FP4_DISP (deprecated)
  bool validate = false;                 // MOE_EP_VALIDATE
  double timeout_s = 100.0;              // MOE_EP_TIMEOUT_S
  LogLevel log_level = LogLevel::kWarn;  // MOE_EP_LOG
  int num_sms = 0;                       // MOE_EP_NUM_SMS, 0 = library default
  bool copy_engine = false;              // MOE_EP_COPY_ENGINE: default of OpConfig::copy_engine
  EnvMap set_variables;                  // every MOE_EP_* variable that was present, as given

  static const Knobs& get();
  static Knobs from(const EnvMap& env);
  static EnvMap process_env();  // the MOE_EP_* variables of this process
};

enum class DtypeSource { kCaller, kEnv, kDeprecatedEnv, kAuto };
const char* to_string(DtypeSource source);

struct DtypeResolution {
  DispatchDtype dispatch = DispatchDtype::bf16;
  CombineDtype combine = CombineDtype::bf16;
  DtypeSource dispatch_source = DtypeSource::kAuto;
  DtypeSource combine_source = DtypeSource::kAuto;
  std::string dispatch_origin;  // e.g. "MOE_EP_DISPATCH_DTYPE=fp8" or "auto: weights mxfp4"
  std::string combine_origin;
  std::vector<std::string> warnings;  // every warning that applies to this resolution
};

// Resolves both dtypes. Warnings are returned every time; the deprecation warning is also
// logged once per process. Both deprecated flags true raises InvalidArgument.
DtypeResolution resolve_dtypes(std::optional<DispatchDtype> requested_dispatch,
                               std::optional<CombineDtype> requested_combine, WeightDtype weights,
                               const Knobs& knobs = Knobs::get());

struct OpConfig;
// OpConfig::copy_engine as an op of `world_size` ranks uses it: the caller's true; else
// MOE_EP_COPY_ENGINE (knobs.copy_engine), but only for an op that can take the copy-engine path,
// normal mode on one node (low_latency false, ranks_per_node 0 or world_size); other ops keep
// the SM path. The CUDA backend resolves it before its creation agreement, so ranks whose
// environments differ fail the creation naming copy_engine. A caller's true on an op that cannot
// use it is check_config's error, not changed here.
bool resolve_copy_engine(const OpConfig& config, int world_size, const Knobs& knobs = Knobs::get());

// Levelled logger (MOE_EP_LOG). Messages go to stderr unless a sink is installed (tests).
void log(LogLevel level, const std::string& message);
using LogSink = std::function<void(LogLevel, const std::string&)>;
void set_log_sink(LogSink sink);  // empty function restores stderr

}  // namespace moe_ep
