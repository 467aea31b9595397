// Tests of the knob registry, the typed parse of MOE_EP_* variables and dtype resolution
// (docs/config.md; the logger's own tests are in test_log.cc). Every message the library logs in
// this process is captured by one sink installed before main (testing/log_capture.h), so
// the once-per-process rules can be checked exactly whether ctest runs each test in its own
// process or the binary runs them all in one, in any order: a test looks either at the whole
// process log (for "exactly once") or at what was logged since it started.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "core/log.h"
#include "moe_ep/config.h"
#include "moe_ep/errors.h"
#include "testing/errors.h"
#include "testing/log_capture.h"

namespace moe_ep {
namespace {

using testing::log_snapshot;
using testing::LogRecord;
using testing::LogTest;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Number of records in `records` whose message contains every string of `parts`.
int count_matching(const std::vector<LogRecord>& records, const std::vector<std::string>& parts,
                   LogLevel level = LogLevel::kWarn) {
  int count = 0;
  for (const LogRecord& r : records) {
    bool all = r.level == level;
    for (const std::string& p : parts) all = all && contains(r.message, p);
    count += all ? 1 : 0;
  }
  return count;
}

// Number of warnings in `res` that contain every string of `parts`.
int count_warnings(const DtypeResolution& res, const std::vector<std::string>& parts) {
  int count = 0;
  for (const std::string& w : res.warnings) {
    bool all = true;
    for (const std::string& p : parts) all = all && contains(w, p);
    count += all ? 1 : 0;
  }
  return count;
}

// The message of the InvalidArgument that Knobs::from(env) must raise ("" and a failure if not).
std::string from_error(const EnvMap& env) {
  SCOPED_TRACE("env " + env.begin()->first + "='" + env.begin()->second + "'");
  return testing::invalid_argument_message([&] { Knobs::from(env); });
}

// The value of the bool knob `name` in `k` (nullopt for a deprecated flag that is not set).
std::optional<bool> bool_knob(const Knobs& k, const std::string& name) {
  if (name == "MOE_EP_FP8_DISP") return k.fp8_disp;
  if (name == "MOE_EP_FP4_DISP") return k.fp4_disp;
  if (name == "MOE_EP_VALIDATE") return k.validate;
  if (name == "MOE_EP_COPY_ENGINE") return k.copy_engine;
  ADD_FAILURE() << name << " is not a bool knob";
  return std::nullopt;
}

// Every typed field of `a` equals that of `b` (set_variables and the *_set flags aside).
void expect_same_values(const Knobs& a, const Knobs& b, const std::string& what) {
  EXPECT_EQ(a.dispatch_dtype, b.dispatch_dtype) << what;
  EXPECT_EQ(a.combine_dtype, b.combine_dtype) << what;
  EXPECT_EQ(a.fp8_disp, b.fp8_disp) << what;
  EXPECT_EQ(a.fp4_disp, b.fp4_disp) << what;
  EXPECT_EQ(a.validate, b.validate) << what;
  EXPECT_EQ(a.timeout_s, b.timeout_s) << what;
  EXPECT_EQ(a.log_level, b.log_level) << what;
  EXPECT_EQ(a.num_sms, b.num_sms) << what;
  EXPECT_EQ(a.copy_engine, b.copy_engine) << what;
}

class ConfigKnobs : public LogTest {};
class ConfigResolve : public LogTest {};

// ---------------------------------------------------------------------------------------------
// Registry and parsing

TEST_F(ConfigKnobs, RegistryListsEveryKnobOnce) {
  const std::set<std::string> expected = {
      "MOE_EP_DISPATCH_DTYPE", "MOE_EP_COMBINE_DTYPE", "MOE_EP_FP8_DISP", "MOE_EP_FP4_DISP",
      "MOE_EP_VALIDATE",       "MOE_EP_TIMEOUT_S",     "MOE_EP_LOG",      "MOE_EP_NUM_SMS",
      "MOE_EP_COPY_ENGINE"};
  std::set<std::string> names;
  for (const KnobInfo& knob : knob_registry()) {
    EXPECT_TRUE(names.insert(knob.name).second) << "duplicate " << knob.name;
    EXPECT_GT(std::string(knob.type).size(), 0u) << knob.name;
    EXPECT_GT(std::string(knob.default_value).size(), 0u) << knob.name;
    EXPECT_GT(std::string(knob.help).size(), 10u) << knob.name;
  }
  EXPECT_EQ(names, expected);
}

TEST_F(ConfigKnobs, RegistryDocumentsWhatTheParsersAccept) {
  for (const KnobInfo& knob : knob_registry()) {
    const std::string name = knob.name;
    const std::string help = knob.help;
    if (name == "MOE_EP_DISPATCH_DTYPE") {
      EXPECT_TRUE(contains(help, "auto|" + valid_dispatch_values())) << help;
      EXPECT_STREQ(knob.default_value, "auto");
    } else if (name == "MOE_EP_COMBINE_DTYPE") {
      EXPECT_TRUE(contains(help, "auto|" + valid_combine_values())) << help;
      EXPECT_STREQ(knob.default_value, "auto");
    } else if (name == "MOE_EP_FP8_DISP" || name == "MOE_EP_FP4_DISP") {
      EXPECT_TRUE(contains(help, "MOE_EP_DISPATCH_DTYPE")) << help;  // names the replacement
      EXPECT_STREQ(knob.type, "bool");
    } else if (name == "MOE_EP_LOG") {
      EXPECT_TRUE(contains(help, "error|warn|info|debug")) << help;
      EXPECT_STREQ(knob.default_value, "warn");
    } else if (name == "MOE_EP_VALIDATE") {
      EXPECT_STREQ(knob.default_value, "0");
    } else if (name == "MOE_EP_TIMEOUT_S") {
      EXPECT_STREQ(knob.default_value, "100");
      EXPECT_TRUE(contains(help, "[0.001, 1e9]")) << help;
    } else if (name == "MOE_EP_NUM_SMS") {
      EXPECT_STREQ(knob.default_value, "0");
      EXPECT_STREQ(knob.type, "int");
      EXPECT_TRUE(contains(help, "SMs (streaming multiprocessors)")) << help;
      EXPECT_TRUE(contains(help, "OpConfig::num_sms")) << help;
      EXPECT_TRUE(contains(help, "0 means the library default")) << help;
    } else if (name == "MOE_EP_COPY_ENGINE") {
      EXPECT_STREQ(knob.type, "bool");
      EXPECT_STREQ(knob.default_value, "0");
      EXPECT_TRUE(contains(help, "copy engines")) << help;
      EXPECT_TRUE(contains(help, "OpConfig::copy_engine")) << help;
      EXPECT_TRUE(contains(help, "normal mode on one node")) << help;
    }
  }
}

// The registry's defaults come from a default-constructed Knobs, written the way the parser reads
// them: setting a knob to its listed default changes no value.
TEST_F(ConfigKnobs, RegistryDefaultsParseToTheDefaults) {
  const Knobs defaults;
  for (const KnobInfo& knob : knob_registry()) {
    if (std::string(knob.default_value) == "unset") continue;  // deprecated flags: no value
    const Knobs k = Knobs::from({{knob.name, knob.default_value}});
    expect_same_values(k, defaults, std::string(knob.name) + "=" + knob.default_value);
  }
}

TEST_F(ConfigKnobs, EmptyEnvironmentGivesDefaults) {
  const Knobs k = Knobs::from({});
  EXPECT_EQ(k.dispatch_dtype, std::nullopt);
  EXPECT_EQ(k.combine_dtype, std::nullopt);
  EXPECT_FALSE(k.dispatch_dtype_set);
  EXPECT_FALSE(k.combine_dtype_set);
  EXPECT_EQ(k.fp8_disp, std::nullopt);
  EXPECT_EQ(k.fp4_disp, std::nullopt);
  EXPECT_FALSE(k.validate);
  EXPECT_EQ(k.timeout_s, 100.0);
  EXPECT_EQ(k.log_level, LogLevel::kWarn);
  EXPECT_EQ(k.num_sms, 0);
  EXPECT_FALSE(k.copy_engine);
  EXPECT_TRUE(k.set_variables.empty());
}

TEST_F(ConfigKnobs, DispatchDtypeAcceptsEveryNameAndAuto) {
  for (DispatchDtype d : kAllDispatchDtypes) {
    for (const char* text : {short_name(d), to_string(d)}) {
      const Knobs k = Knobs::from({{"MOE_EP_DISPATCH_DTYPE", text}});
      EXPECT_EQ(k.dispatch_dtype, d) << text;
      EXPECT_TRUE(k.dispatch_dtype_set);
      EXPECT_FALSE(k.combine_dtype_set);
    }
  }
  const Knobs k = Knobs::from({{"MOE_EP_DISPATCH_DTYPE", "auto"}});
  EXPECT_EQ(k.dispatch_dtype, std::nullopt);
  EXPECT_TRUE(k.dispatch_dtype_set);
  EXPECT_EQ(k.set_variables.at("MOE_EP_DISPATCH_DTYPE"), "auto");
}

TEST_F(ConfigKnobs, CombineDtypeAcceptsEveryNameAndAuto) {
  for (CombineDtype c : kAllCombineDtypes) {
    for (const char* text : {short_name(c), to_string(c)}) {
      const Knobs k = Knobs::from({{"MOE_EP_COMBINE_DTYPE", text}});
      EXPECT_EQ(k.combine_dtype, c) << text;
      EXPECT_TRUE(k.combine_dtype_set);
      EXPECT_FALSE(k.dispatch_dtype_set);
    }
  }
  const Knobs k = Knobs::from({{"MOE_EP_COMBINE_DTYPE", "auto"}});
  EXPECT_EQ(k.combine_dtype, std::nullopt);
  EXPECT_TRUE(k.combine_dtype_set);
}

TEST_F(ConfigKnobs, UnknownDtypeValuesNameVariableValueAndValidValues) {
  EXPECT_EQ(from_error({{"MOE_EP_DISPATCH_DTYPE", "fp16"}}),
            "MOE_EP_DISPATCH_DTYPE='fp16' is not a valid value; valid values: "
            "auto|bf16|fp8|fp4|bfloat16|float8_blockwise|mxfp4_blockwise");
  EXPECT_EQ(from_error({{"MOE_EP_COMBINE_DTYPE", "fp4"}}),
            "MOE_EP_COMBINE_DTYPE='fp4' is not a valid value; valid values: "
            "auto|bf16|fp8|fp8_direct_cast|int8_e3m4|bfloat16|float8_blockwise|"
            "float8_direct_cast|int8_e3m4_blockwise");
  // A combine-only format for dispatch, wrong case and an empty value are errors too.
  for (const char* bad : {"fp8_direct_cast", "int8_e3m4", "FP8", ""}) {
    EXPECT_EQ(from_error({{"MOE_EP_DISPATCH_DTYPE", bad}}),
              std::string("MOE_EP_DISPATCH_DTYPE='") + bad +
                  "' is not a valid value; valid values: auto|" + valid_dispatch_values());
  }
}

constexpr const char* kBoolKnobs[] = {"MOE_EP_FP8_DISP", "MOE_EP_FP4_DISP", "MOE_EP_VALIDATE",
                                      "MOE_EP_COPY_ENGINE"};

TEST_F(ConfigKnobs, BooleansAcceptTheUsualSpellings) {
  for (const char* name : kBoolKnobs) {
    for (const char* yes : {"1", "true", "TRUE", "True", "yes", "YES", "on", "On"}) {
      EXPECT_EQ(bool_knob(Knobs::from({{name, yes}}), name), true) << name << "=" << yes;
    }
    for (const char* no : {"0", "false", "FALSE", "no", "No", "off", "OFF"}) {
      EXPECT_EQ(bool_knob(Knobs::from({{name, no}}), name), false) << name << "=" << no;
    }
  }
}

TEST_F(ConfigKnobs, BooleansRejectOtherText) {
  for (const char* name : kBoolKnobs) {
    for (const char* bad : {"2", "y", "enable", " 1", ""}) {
      EXPECT_EQ(from_error({{name, bad}}),
                std::string(name) + "='" + bad +
                    "' is not a valid value; valid values: 1|0|true|false|yes|no|on|off "
                    "(case-insensitive)");
    }
  }
}

TEST_F(ConfigKnobs, TimeoutParsesPositiveSeconds) {
  const std::pair<const char*, double> cases[] = {{"100", 100.0},  {"2.5", 2.5},
                                                  {"1e3", 1000.0}, {"0.001", 0.001},
                                                  {"1e-3", 0.001}, {"1e9", 1e9}};
  for (const auto& [text, seconds] : cases) {
    EXPECT_EQ(Knobs::from({{"MOE_EP_TIMEOUT_S", text}}).timeout_s, seconds) << text;
  }
}

TEST_F(ConfigKnobs, TimeoutRejectsZeroNegativeTextAndOverflow) {
  for (const char* bad : {"0", "0.0", "-5", "-0", "abc", "10s", "", " 5", "nan", "inf", "1e10"}) {
    const std::string msg = from_error({{"MOE_EP_TIMEOUT_S", bad}});
    EXPECT_TRUE(contains(msg, std::string("MOE_EP_TIMEOUT_S='") + bad + "'")) << msg;
    EXPECT_TRUE(contains(msg, "valid values: a positive number of seconds in [0.001, 1e9]")) << msg;
  }
}

// A positive value below 1 ms would round to 0 ns (1e-320 is a subnormal double that parses),
// and every wait would expire at once.
TEST_F(ConfigKnobs, TimeoutRejectsLessThanOneMillisecond) {
  for (const char* bad : {"1e-320", "0.0001", "0.000999", "5e-324"}) {
    EXPECT_EQ(from_error({{"MOE_EP_TIMEOUT_S", bad}}),
              std::string("MOE_EP_TIMEOUT_S='") + bad +
                  "' is not a valid value; valid values: a positive number of seconds in "
                  "[0.001, 1e9], e.g. 100 or 2.5");
  }
}

TEST_F(ConfigKnobs, LogLevelParsesCaseInsensitively) {
  const std::pair<const char*, LogLevel> cases[] = {{"error", LogLevel::kError},
                                                    {"warn", LogLevel::kWarn},
                                                    {"info", LogLevel::kInfo},
                                                    {"debug", LogLevel::kDebug},
                                                    {"DEBUG", LogLevel::kDebug}};
  for (const auto& [text, level] : cases) {
    EXPECT_EQ(Knobs::from({{"MOE_EP_LOG", text}}).log_level, level) << text;
  }
  for (const char* bad : {"warning", "verbose", "3", ""}) {
    EXPECT_EQ(from_error({{"MOE_EP_LOG", bad}}),
              std::string("MOE_EP_LOG='") + bad +
                  "' is not a valid value; valid values: error|warn|info|debug");
  }
}

TEST_F(ConfigKnobs, NumSmsParsesNonNegativeIntegers) {
  EXPECT_EQ(Knobs::from({{"MOE_EP_NUM_SMS", "0"}}).num_sms, 0);
  EXPECT_EQ(Knobs::from({{"MOE_EP_NUM_SMS", "24"}}).num_sms, 24);
  EXPECT_EQ(Knobs::from({{"MOE_EP_NUM_SMS", "132"}}).num_sms, 132);
  for (const char* bad : {"-1", "abc", "1.5", "99999999999", "", "+4"}) {
    EXPECT_EQ(from_error({{"MOE_EP_NUM_SMS", bad}}),
              std::string("MOE_EP_NUM_SMS='") + bad +
                  "' is not a valid value; valid values: an integer >= 0 (0 = library default)");
  }
}

TEST_F(ConfigKnobs, CopyEngineIsABoolDefaultingToOff) {
  EXPECT_FALSE(Knobs::from({}).copy_engine);
  EXPECT_FALSE(Knobs::from({{"MOE_EP_COPY_ENGINE", "off"}}).copy_engine);
  EXPECT_FALSE(Knobs::from({{"MOE_EP_COPY_ENGINE", "0"}}).copy_engine);
  EXPECT_TRUE(Knobs::from({{"MOE_EP_COPY_ENGINE", "1"}}).copy_engine);
  EXPECT_TRUE(Knobs::from({{"MOE_EP_COPY_ENGINE", "yes"}}).copy_engine);
  // It now selects a path (the CUDA backend's), so setting it is no longer a warning.
  EXPECT_EQ(count_matching(logged_since_start(), {"MOE_EP_COPY_ENGINE"}), 0);
  EXPECT_EQ(from_error({{"MOE_EP_COPY_ENGINE", "2"}}).find("MOE_EP_COPY_ENGINE='2'"), 0u);
}

TEST_F(ConfigKnobs, SetVariablesRecordsEveryMoeEpVariableAsGiven) {
  const Knobs k = Knobs::from({{"MOE_EP_VALIDATE", "Yes"},
                               {"MOE_EP_TIMEOUT_S", "2.5"},
                               {"MOE_EP_NOT_A_KNOB", "3"},
                               {"NCCL_DEBUG", "INFO"},
                               {"MOE_EPX", "1"}});
  const EnvMap expected = {
      {"MOE_EP_VALIDATE", "Yes"}, {"MOE_EP_TIMEOUT_S", "2.5"}, {"MOE_EP_NOT_A_KNOB", "3"}};
  EXPECT_EQ(k.set_variables, expected);
  EXPECT_TRUE(k.validate);
  EXPECT_EQ(k.timeout_s, 2.5);
}

TEST_F(ConfigKnobs, UnknownVariableIsAWarningWithAHint) {
  const Knobs k = Knobs::from({{"MOE_EP_TIMEOUT", "5"}, {"MOE_EP_FROBNICATE", "1"}});
  EXPECT_EQ(k.timeout_s, 100.0);  // the typo did not set the real knob
  const std::vector<LogRecord> logged = logged_since_start();
  EXPECT_EQ(count_matching(logged, {"MOE_EP_TIMEOUT ", "did you mean MOE_EP_TIMEOUT_S?"}), 1);
  EXPECT_EQ(count_matching(logged, {"MOE_EP_FROBNICATE"}), 1);
  EXPECT_EQ(count_matching(logged, {"MOE_EP_FROBNICATE", "did you mean"}), 0);
  // Known variables are not reported as unknown.
  const size_t before = log_snapshot().size();
  Knobs::from({{"MOE_EP_TIMEOUT_S", "5"}, {"MOE_EP_LOG", "debug"}});
  EXPECT_EQ(log_snapshot().size(), before);
}

TEST_F(ConfigKnobs, ProcessEnvReadsOnlyMoeEpVariables) {
  setenv("MOE_EP_TEST_PROBE", "x=y", 1);
  setenv("NOT_MOE_EP_PROBE", "z", 1);
  const EnvMap env = Knobs::process_env();
  unsetenv("MOE_EP_TEST_PROBE");
  unsetenv("NOT_MOE_EP_PROBE");
  ASSERT_EQ(env.count("MOE_EP_TEST_PROBE"), 1u);
  EXPECT_EQ(env.at("MOE_EP_TEST_PROBE"), "x=y");  // split at the first '='
  EXPECT_EQ(env.at("MOE_EP_LOG"), "info");        // pinned before main
  EXPECT_EQ(env.count("NOT_MOE_EP_PROBE"), 0u);
  for (const auto& [name, value] : env) EXPECT_EQ(name.rfind("MOE_EP_", 0), 0u) << name;
}

TEST_F(ConfigKnobs, GetParsesTheProcessOnceAndLogsSetVariables) {
  const Knobs& first = Knobs::get();
  const Knobs& second = Knobs::get();
  EXPECT_EQ(&first, &second);
  const Knobs fresh = Knobs::from(Knobs::process_env());
  EXPECT_EQ(first.set_variables, fresh.set_variables);
  EXPECT_EQ(first.log_level, LogLevel::kInfo);
  EXPECT_EQ(first.validate, fresh.validate);
  EXPECT_EQ(first.timeout_s, fresh.timeout_s);
  // Whichever test called get() first, it logged each set variable once, at info.
  const std::vector<LogRecord> all = log_snapshot();
  for (const auto& [name, value] : first.set_variables) {
    EXPECT_EQ(count_matching(all, {name + "=" + value}, LogLevel::kInfo), 1) << name;
  }
}

// ---------------------------------------------------------------------------------------------
// Resolution

TEST_F(ConfigResolve, DtypeSourceNames) {
  EXPECT_STREQ(to_string(DtypeSource::kCaller), "caller");
  EXPECT_STREQ(to_string(DtypeSource::kEnv), "env");
  EXPECT_STREQ(to_string(DtypeSource::kDeprecatedEnv), "deprecated env");
  EXPECT_STREQ(to_string(DtypeSource::kAuto), "auto");
}

TEST_F(ConfigResolve, AutoRuleFollowsWeightDtype) {
  struct Row {
    WeightDtype weights;
    DispatchDtype dispatch;
    CombineDtype combine;
    const char* origin;
  };
  const Row rows[] = {
      {WeightDtype::bf16, DispatchDtype::bf16, CombineDtype::bf16, "auto: weights bfloat16"},
      {WeightDtype::fp8, DispatchDtype::fp8, CombineDtype::bf16, "auto: weights float8"},
      {WeightDtype::fp4, DispatchDtype::fp4, CombineDtype::fp8, "auto: weights mxfp4"}};
  const Knobs empty = Knobs::from({});
  const Knobs explicit_auto =
      Knobs::from({{"MOE_EP_DISPATCH_DTYPE", "auto"}, {"MOE_EP_COMBINE_DTYPE", "auto"}});
  for (const Knobs* knobs : {&empty, &explicit_auto}) {
    for (const Row& r : rows) {
      const DtypeResolution res = resolve_dtypes(std::nullopt, std::nullopt, r.weights, *knobs);
      EXPECT_EQ(res.dispatch, r.dispatch) << r.origin;
      EXPECT_EQ(res.combine, r.combine) << r.origin;
      EXPECT_EQ(res.dispatch_source, DtypeSource::kAuto);
      EXPECT_EQ(res.combine_source, DtypeSource::kAuto);
      EXPECT_EQ(res.dispatch_origin, r.origin);
      EXPECT_EQ(res.combine_origin, r.origin);
      EXPECT_TRUE(res.warnings.empty());
    }
  }
}

TEST_F(ConfigResolve, CallerWinsOverEnvDeprecatedAndAuto) {
  const Knobs k = Knobs::from({{"MOE_EP_DISPATCH_DTYPE", "fp4"},
                               {"MOE_EP_COMBINE_DTYPE", "fp8_direct_cast"},
                               {"MOE_EP_FP8_DISP", "1"}});
  const DtypeResolution res =
      resolve_dtypes(DispatchDtype::bf16, CombineDtype::fp8, WeightDtype::fp8, k);
  EXPECT_EQ(res.dispatch, DispatchDtype::bf16);
  EXPECT_EQ(res.combine, CombineDtype::fp8);
  EXPECT_EQ(res.dispatch_source, DtypeSource::kCaller);
  EXPECT_EQ(res.combine_source, DtypeSource::kCaller);
  EXPECT_EQ(res.dispatch_origin, "caller");
  EXPECT_EQ(res.combine_origin, "caller");
  EXPECT_EQ(count_warnings(res, {"MOE_EP_DISPATCH_DTYPE=fp4", "ignored", "bfloat16"}), 1);
  EXPECT_EQ(count_warnings(res, {"MOE_EP_COMBINE_DTYPE=fp8_direct_cast", "ignored"}), 1);
  EXPECT_EQ(count_warnings(res, {"MOE_EP_FP8_DISP=1", "deprecated", "MOE_EP_DISPATCH_DTYPE"}), 1);
  EXPECT_EQ(res.warnings.size(), 3u);
}

TEST_F(ConfigResolve, CallerEqualToEnvNeedsNoWarning) {
  const Knobs k =
      Knobs::from({{"MOE_EP_DISPATCH_DTYPE", "fp8"}, {"MOE_EP_COMBINE_DTYPE", "bfloat16"}});
  const DtypeResolution res =
      resolve_dtypes(DispatchDtype::fp8, CombineDtype::bf16, WeightDtype::bf16, k);
  EXPECT_EQ(res.dispatch_source, DtypeSource::kCaller);
  EXPECT_EQ(res.combine_source, DtypeSource::kCaller);
  EXPECT_TRUE(res.warnings.empty());
}

TEST_F(ConfigResolve, CallerDecidesEachLegIndependently) {
  const Knobs k = Knobs::from({{"MOE_EP_COMBINE_DTYPE", "fp8_direct_cast"}});
  const DtypeResolution res = resolve_dtypes(DispatchDtype::fp4, std::nullopt, WeightDtype::fp8, k);
  EXPECT_EQ(res.dispatch, DispatchDtype::fp4);
  EXPECT_EQ(res.dispatch_source, DtypeSource::kCaller);
  EXPECT_EQ(res.combine, CombineDtype::fp8_direct_cast);
  EXPECT_EQ(res.combine_source, DtypeSource::kEnv);
  EXPECT_EQ(res.combine_origin, "MOE_EP_COMBINE_DTYPE=fp8_direct_cast");
}

TEST_F(ConfigResolve, EnvWinsOverAutoAndShowsTheValueAsWritten) {
  const Knobs k =
      Knobs::from({{"MOE_EP_DISPATCH_DTYPE", "float8_blockwise"}, {"MOE_EP_COMBINE_DTYPE", "fp8"}});
  const DtypeResolution res = resolve_dtypes(std::nullopt, std::nullopt, WeightDtype::bf16, k);
  EXPECT_EQ(res.dispatch, DispatchDtype::fp8);
  EXPECT_EQ(res.combine, CombineDtype::fp8);
  EXPECT_EQ(res.dispatch_source, DtypeSource::kEnv);
  EXPECT_EQ(res.combine_source, DtypeSource::kEnv);
  EXPECT_EQ(res.dispatch_origin, "MOE_EP_DISPATCH_DTYPE=float8_blockwise");
  EXPECT_EQ(res.combine_origin, "MOE_EP_COMBINE_DTYPE=fp8");
  EXPECT_TRUE(res.warnings.empty());
}

TEST_F(ConfigResolve, NewVariableWinsOverDeprecatedWithAWarning) {
  const Knobs k = Knobs::from({{"MOE_EP_DISPATCH_DTYPE", "bf16"}, {"MOE_EP_FP8_DISP", "1"}});
  const DtypeResolution res = resolve_dtypes(std::nullopt, std::nullopt, WeightDtype::fp4, k);
  EXPECT_EQ(res.dispatch, DispatchDtype::bf16);
  EXPECT_EQ(res.dispatch_source, DtypeSource::kEnv);
  EXPECT_EQ(res.dispatch_origin, "MOE_EP_DISPATCH_DTYPE=bf16");
  EXPECT_EQ(res.combine, CombineDtype::fp8);  // combine still follows the fp4 weights
  EXPECT_EQ(res.combine_source, DtypeSource::kAuto);
  ASSERT_EQ(res.warnings.size(), 1u);
  EXPECT_EQ(res.warnings[0],
            "MOE_EP_FP8_DISP=1 is deprecated and ignored because MOE_EP_DISPATCH_DTYPE=bf16 is "
            "set; unset MOE_EP_FP8_DISP");
}

TEST_F(ConfigResolve, DeprecatedFp8Honoured) {
  const Knobs k = Knobs::from({{"MOE_EP_FP8_DISP", "1"}});
  const DtypeResolution res = resolve_dtypes(std::nullopt, std::nullopt, WeightDtype::bf16, k);
  EXPECT_EQ(res.dispatch, DispatchDtype::fp8);
  EXPECT_EQ(res.dispatch_source, DtypeSource::kDeprecatedEnv);
  EXPECT_EQ(res.dispatch_origin, "MOE_EP_FP8_DISP=1 (deprecated)");
  EXPECT_EQ(res.combine, CombineDtype::bf16);
  EXPECT_EQ(res.combine_source, DtypeSource::kAuto);
  ASSERT_EQ(res.warnings.size(), 1u);
  EXPECT_EQ(res.warnings[0],
            "MOE_EP_FP8_DISP=1 is deprecated; use MOE_EP_DISPATCH_DTYPE=fp8 instead");
}

TEST_F(ConfigResolve, DeprecatedFp4HonouredWithValueAsWritten) {
  const Knobs k = Knobs::from({{"MOE_EP_FP4_DISP", "yes"}});
  const DtypeResolution res = resolve_dtypes(std::nullopt, std::nullopt, WeightDtype::fp8, k);
  EXPECT_EQ(res.dispatch, DispatchDtype::fp4);  // beats the auto rule (fp8 weights -> fp8)
  EXPECT_EQ(res.dispatch_source, DtypeSource::kDeprecatedEnv);
  EXPECT_EQ(res.dispatch_origin, "MOE_EP_FP4_DISP=yes (deprecated)");
  EXPECT_EQ(res.combine, CombineDtype::bf16);
  EXPECT_EQ(count_warnings(res, {"MOE_EP_FP4_DISP", "deprecated", "MOE_EP_DISPATCH_DTYPE=fp4"}), 1);
}

TEST_F(ConfigResolve, DeprecatedFlagsUsedWhenNewVariableIsAuto) {
  const Knobs k = Knobs::from({{"MOE_EP_DISPATCH_DTYPE", "auto"}, {"MOE_EP_FP4_DISP", "1"}});
  const DtypeResolution res = resolve_dtypes(std::nullopt, std::nullopt, WeightDtype::bf16, k);
  EXPECT_EQ(res.dispatch, DispatchDtype::fp4);
  EXPECT_EQ(res.dispatch_source, DtypeSource::kDeprecatedEnv);
}

TEST_F(ConfigResolve, DeprecatedFalseHasNoEffectButWarns) {
  const Knobs k = Knobs::from({{"MOE_EP_FP8_DISP", "0"}});
  const DtypeResolution res = resolve_dtypes(std::nullopt, std::nullopt, WeightDtype::fp4, k);
  EXPECT_EQ(res.dispatch, DispatchDtype::fp4);
  EXPECT_EQ(res.dispatch_source, DtypeSource::kAuto);
  EXPECT_EQ(count_warnings(res, {"MOE_EP_FP8_DISP=0", "deprecated", "MOE_EP_DISPATCH_DTYPE"}), 1);
}

TEST_F(ConfigResolve, OneDeprecatedTrueAndOneFalseIsNotAConflict) {
  const Knobs k = Knobs::from({{"MOE_EP_FP8_DISP", "0"}, {"MOE_EP_FP4_DISP", "on"}});
  const DtypeResolution res = resolve_dtypes(std::nullopt, std::nullopt, WeightDtype::bf16, k);
  EXPECT_EQ(res.dispatch, DispatchDtype::fp4);
  EXPECT_EQ(res.dispatch_source, DtypeSource::kDeprecatedEnv);
  EXPECT_EQ(res.warnings.size(), 2u);  // each deprecated variable that is set is named
}

TEST_F(ConfigResolve, BothDeprecatedTrueIsAnError) {
  const Knobs k = Knobs::from({{"MOE_EP_FP8_DISP", "1"}, {"MOE_EP_FP4_DISP", "true"}});
  try {
    resolve_dtypes(std::nullopt, std::nullopt, WeightDtype::bf16, k);
    FAIL() << "both deprecated flags true must raise InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "MOE_EP_FP8_DISP")) << msg;
    EXPECT_TRUE(contains(msg, "MOE_EP_FP4_DISP")) << msg;
    EXPECT_TRUE(contains(msg, "MOE_EP_DISPATCH_DTYPE")) << msg;  // the way out
  }
}

TEST_F(ConfigResolve, BothDeprecatedTrueIsIgnoredWhenSomethingStrongerDecides) {
  const Knobs with_env = Knobs::from(
      {{"MOE_EP_FP8_DISP", "1"}, {"MOE_EP_FP4_DISP", "1"}, {"MOE_EP_DISPATCH_DTYPE", "fp8"}});
  const DtypeResolution env_res =
      resolve_dtypes(std::nullopt, std::nullopt, WeightDtype::bf16, with_env);
  EXPECT_EQ(env_res.dispatch, DispatchDtype::fp8);
  EXPECT_EQ(env_res.dispatch_source, DtypeSource::kEnv);
  EXPECT_EQ(count_warnings(env_res, {"MOE_EP_FP8_DISP=1", "ignored"}), 1);
  EXPECT_EQ(count_warnings(env_res, {"MOE_EP_FP4_DISP=1", "ignored"}), 1);

  const Knobs flags_only = Knobs::from({{"MOE_EP_FP8_DISP", "1"}, {"MOE_EP_FP4_DISP", "1"}});
  const DtypeResolution caller_res =
      resolve_dtypes(DispatchDtype::bf16, std::nullopt, WeightDtype::bf16, flags_only);
  EXPECT_EQ(caller_res.dispatch, DispatchDtype::bf16);
  EXPECT_EQ(caller_res.dispatch_source, DtypeSource::kCaller);
  EXPECT_EQ(count_warnings(caller_res, {"deprecated and ignored", "caller"}), 2);
}

// One warning per process (docs/config.md). The two calls produce the warning both times; the logger
// sees it once in the whole process (this test may or may not be the first to resolve with
// MOE_EP_FP8_DISP=1, so the count is over the process log, not over this test).
TEST_F(ConfigResolve, DeprecationWarningLoggedOncePerProcess) {
  const std::string warning =
      "MOE_EP_FP8_DISP=1 is deprecated; use MOE_EP_DISPATCH_DTYPE=fp8 instead";
  const Knobs k = Knobs::from({{"MOE_EP_FP8_DISP", "1"}});
  const DtypeResolution first = resolve_dtypes(std::nullopt, std::nullopt, WeightDtype::bf16, k);
  const DtypeResolution second = resolve_dtypes(std::nullopt, std::nullopt, WeightDtype::fp4, k);
  EXPECT_EQ(first.warnings, std::vector<std::string>{warning});
  EXPECT_EQ(second.warnings, std::vector<std::string>{warning});
  int logged = 0;
  for (const LogRecord& r : log_snapshot()) {
    if (r.message == warning) {
      EXPECT_EQ(r.level, LogLevel::kWarn);
      ++logged;
    }
  }
  EXPECT_EQ(logged, 1);
  for (const LogRecord& r : logged_since_start()) EXPECT_NE(r.level, LogLevel::kError);
}

TEST_F(ConfigResolve, DefaultKnobsAreTheProcessKnobs) {
  for (WeightDtype w : {WeightDtype::bf16, WeightDtype::fp8, WeightDtype::fp4}) {
    const DtypeResolution implicit = resolve_dtypes(std::nullopt, std::nullopt, w);
    const DtypeResolution explicit_ = resolve_dtypes(std::nullopt, std::nullopt, w, Knobs::get());
    EXPECT_EQ(implicit.dispatch, explicit_.dispatch);
    EXPECT_EQ(implicit.combine, explicit_.combine);
    EXPECT_EQ(implicit.dispatch_origin, explicit_.dispatch_origin);
    EXPECT_EQ(implicit.combine_origin, explicit_.combine_origin);
  }
}

}  // namespace
}  // namespace moe_ep
