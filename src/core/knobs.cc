// The MOE_EP_* knobs. The table kKnobs defines every knob once: its variable, the codec that reads
// its text (which gives its type, its valid values and its parse), the field of struct Knobs that
// it fills, and its help. Both the registry (knob_registry(), printed by `moe-ep config`) and the
// parse (Knobs::from) are generated from that table, and a knob's default is the member
// initializer of its field, which the registry prints. Parsing is strict: a value that does not
// parse is an InvalidArgument naming the variable, the value and the valid values; an unknown
// MOE_EP_* name is only a warning, with a "did you mean" hint. Knobs::get() parses the process
// environment once and logs the variables that are set.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/log.h"
#include "moe_ep/config.h"

extern char** environ;  // POSIX; declared here because <unistd.h> only does with _GNU_SOURCE

namespace moe_ep {
namespace {

constexpr std::string_view kPrefix = "MOE_EP_";

[[noreturn]] void throw_invalid(const std::string& name, const std::string& text,
                                const std::string& valid) {
  throw InvalidArgument(
      detail::concat(name, "='", text, "' is not a valid value; valid values: ", valid));
}

// Codecs: how the text of a variable becomes a typed value. Each has kType (the type column of
// the registry), valid() (the valid values, for error messages and the registry's help) and
// parse(name, text), which throws InvalidArgument naming the variable, the text and valid().

struct BoolCodec {
  static constexpr const char* kType = "bool";
  static std::string valid() { return "1|0|true|false|yes|no|on|off (case-insensitive)"; }
  static bool parse(const std::string& name, const std::string& text) {
    std::string t(text);
    for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
    if (t == "0" || t == "false" || t == "no" || t == "off") return false;
    throw_invalid(name, text, valid());
  }
};

// A wait in seconds. The lower bound keeps every wait at least 1 ms once it is converted to
// nanoseconds: a tiny positive value such as 1e-320 would round to 0 ns, and every wait would
// expire at once. The upper bound keeps that conversion to int64 nanoseconds (overflow at
// 2^63 ns ~ 9.2e9 s) safe; 1e9 s is ~31.7 years, so "wait forever" is still expressible.
// from_chars takes no leading whitespace, '+', hex or trailing text, so "1e2" and "2.5" parse
// while " 5", "5s" and "0x10" do not; nan, inf and negative values fail the range test.
struct SecondsCodec {
  static constexpr const char* kType = "double";
  static constexpr double kMin = 1e-3;
  static constexpr double kMax = 1e9;
  static std::string valid() {
    return "a positive number of seconds in [0.001, 1e9], e.g. 100 or 2.5";
  }
  static double parse(const std::string& name, const std::string& text) {
    double seconds = 0.0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, seconds);
    const bool ok = ec == std::errc() && ptr == end && seconds >= kMin && seconds <= kMax;
    if (!ok) throw_invalid(name, text, valid());
    return seconds;
  }
};

// A count of streaming multiprocessors; 0 leaves the choice to the library.
struct SmCountCodec {
  static constexpr const char* kType = "int";
  static std::string valid() { return "an integer >= 0 (0 = library default)"; }
  static int parse(const std::string& name, const std::string& text) {
    int count = -1;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, count);
    if (ec != std::errc() || ptr != end || count < 0) throw_invalid(name, text, valid());
    return count;
  }
};

struct LogLevelCodec {
  static constexpr const char* kType = "enum";
  static std::string valid() { return "error|warn|info|debug"; }
  static LogLevel parse(const std::string& name, const std::string& text) {
    const std::optional<LogLevel> level = parse_log_level(text);
    if (!level) throw_invalid(name, text, valid());
    return *level;
  }
};

// The dtype codecs use the dtype parsers, which word their errors like throw_invalid; "auto" is
// nullopt.
struct DispatchChoiceCodec {
  static constexpr const char* kType = "enum";
  static std::string valid() { return "auto|" + valid_dispatch_values(); }
  static std::optional<DispatchDtype> parse(const std::string& name, const std::string& text) {
    return parse_dispatch_choice(text, name);
  }
};

struct CombineChoiceCodec {
  static constexpr const char* kType = "enum";
  static std::string valid() { return "auto|" + valid_combine_values(); }
  static std::optional<CombineDtype> parse(const std::string& name, const std::string& text) {
    return parse_combine_choice(text, name);
  }
};

// A default as the registry shows it, written the way the codecs read it ("unset" for a knob
// that has no value unless the variable is present, "auto" for a dtype left to the auto rule).
std::string default_text(bool value) { return value ? "1" : "0"; }
std::string default_text(const std::optional<bool>& value) {
  return value ? default_text(*value) : "unset";
}
std::string default_text(double value) { return detail::concat(value); }
std::string default_text(int value) { return std::to_string(value); }
std::string default_text(LogLevel value) { return to_string(value); }
template <typename Dtype>
std::string default_text(const std::optional<Dtype>& value) {
  return value ? short_name(*value) : "auto";
}

// One knob, type-erased: what make_knob() below generates from one entry of kKnobs.
struct KnobDef {
  const char* name;
  const char* type;
  const char* help;
  std::string (*valid)();
  std::string (*default_text)();  // the field's value in a default-constructed Knobs
  void (*parse_into)(Knobs& knobs, const std::string& name, const std::string& text);
};

// The definition of one knob: variable `name`, read by `Codec` into the field kField of Knobs.
// kPresent, when given, is a bool field set whenever the variable is present, even when its value
// (such as "auto") leaves kField empty.
template <auto kField, typename Codec, auto kPresent = nullptr>
constexpr KnobDef make_knob(const char* name, const char* help) {
  return KnobDef{name,
                 Codec::kType,
                 help,
                 &Codec::valid,
                 [] { return default_text(Knobs().*kField); },
                 [](Knobs& knobs, const std::string& var, const std::string& text) {
                   knobs.*kField = Codec::parse(var, text);
                   if constexpr (!std::is_null_pointer_v<decltype(kPresent)>) {
                     knobs.*kPresent = true;
                   }
                 }};
}

// Every knob. Adding one is adding its field (with its default) to struct Knobs and one entry
// here; the registry, the parse, the unknown-variable hints and `moe-ep config` follow.
constexpr KnobDef kKnobs[] = {
    make_knob<&Knobs::dispatch_dtype, DispatchChoiceCodec, &Knobs::dispatch_dtype_set>(
        "MOE_EP_DISPATCH_DTYPE",
        "Dispatch wire dtype. auto follows the expert weight dtype (fp8 -> fp8, fp4 -> fp4, else "
        "bf16)."),
    make_knob<&Knobs::combine_dtype, CombineChoiceCodec, &Knobs::combine_dtype_set>(
        "MOE_EP_COMBINE_DTYPE",
        "Combine wire dtype. auto follows the expert weight dtype (fp4 -> fp8, else bf16)."),
    make_knob<&Knobs::fp8_disp, BoolCodec>(
        "MOE_EP_FP8_DISP",
        "Deprecated: use MOE_EP_DISPATCH_DTYPE=fp8. 1 selects fp8 dispatch when neither the caller "
        "nor MOE_EP_DISPATCH_DTYPE chooses one."),
    make_knob<&Knobs::fp4_disp, BoolCodec>(
        "MOE_EP_FP4_DISP",
        "Deprecated: use MOE_EP_DISPATCH_DTYPE=fp4. 1 selects fp4 dispatch when neither the caller "
        "nor MOE_EP_DISPATCH_DTYPE chooses one."),
    make_knob<&Knobs::validate, BoolCodec>(
        "MOE_EP_VALIDATE",
        "Validation mode: scan the inputs of every op for bad expert ids and non-finite values."),
    make_knob<&Knobs::timeout_s, SecondsCodec>(
        "MOE_EP_TIMEOUT_S",
        "Bound in seconds on every device wait; on expiry the error names phase, rank and peer."),
    // kLogVariable is "MOE_EP_LOG"; the logger also reads it, with getenv (core/log.h).
    make_knob<&Knobs::log_level, LogLevelCodec>(kLogVariable, "Log level. Messages go to stderr."),
    make_knob<&Knobs::num_sms, SmCountCodec>(
        "MOE_EP_NUM_SMS",
        "Number of SMs (streaming multiprocessors) of the GPU that the communication kernels may "
        "occupy per op: the process default for OpConfig::num_sms. 0 means the library default "
        "(at most 32 SMs for normal mode)."),
    make_knob<&Knobs::copy_engine, BoolCodec>(
        "MOE_EP_COPY_ENGINE",
        "Move the rows of normal-mode dispatch and combine with the GPU's copy engines instead "
        "of SMs: the process default for OpConfig::copy_engine (CUDA backend). Applies only to "
        "ops in normal mode on one node; decode-mode ops, ops across nodes and the CPU backend "
        "keep the SM path."),
};

constexpr bool same_name(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}

constexpr bool names_are_unique_and_prefixed() {
  for (size_t i = 0; i < std::size(kKnobs); ++i) {
    for (size_t j = 0; j < kPrefix.size(); ++j) {
      if (kKnobs[i].name[j] != kPrefix[j]) return false;
    }
    for (size_t j = 0; j < i; ++j) {
      if (same_name(kKnobs[i].name, kKnobs[j].name)) return false;
    }
  }
  return true;
}
static_assert(names_are_unique_and_prefixed(), "every knob is MOE_EP_*, and defined once");

const KnobDef* find_knob(std::string_view name) {
  for (const KnobDef& knob : kKnobs) {
    if (name == knob.name) return &knob;
  }
  return nullptr;
}

// The registry: KnobInfo holds C strings, so the generated texts live here for the process.
class Registry {
 public:
  Registry() {
    for (const KnobDef& knob : kKnobs) {
      defaults_.push_back(knob.default_text());
      const std::string_view help = knob.help;
      const char* stop = !help.empty() && help.back() == '.' ? "" : ".";
      helps_.push_back(detail::concat(help, stop, " Valid values: ", knob.valid(), "."));
    }
    // Both vectors are complete, so the c_str() pointers below stay valid.
    for (size_t i = 0; i < std::size(kKnobs); ++i) {
      infos_.push_back({kKnobs[i].name, kKnobs[i].type, defaults_[i].c_str(), helps_[i].c_str()});
    }
  }
  const std::vector<KnobInfo>& infos() const { return infos_; }

 private:
  std::vector<std::string> defaults_;
  std::vector<std::string> helps_;
  std::vector<KnobInfo> infos_;
};

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
  const KnobDef* best = nullptr;
  size_t best_distance = kMaxHintDistance + 1;
  for (const KnobDef& knob : kKnobs) {
    const size_t d = edit_distance(name, knob.name);
    if (d < best_distance) best = &knob, best_distance = d;
  }
  std::string msg = "unknown variable " + name + " is ignored";
  if (best != nullptr) msg += detail::concat(" (did you mean ", best->name, "?)");
  return msg;
}

}  // namespace

const std::vector<KnobInfo>& knob_registry() {
  static const Registry registry;
  return registry.infos();
}

Knobs Knobs::from(const EnvMap& env) {
  Knobs knobs;
  std::vector<std::string> unknown;
  for (const auto& [name, value] : env) {
    if (name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    knobs.set_variables[name] = value;
    if (const KnobDef* knob = find_knob(name)) {
      knob->parse_into(knobs, name, value);
    } else {
      unknown.push_back(name);
    }
  }
  // Unknown names are most likely typos of a real knob: say so, but do not fail, so that a
  // variable meant for a newer version does not break an older one.
  for (const std::string& name : unknown) {
    MOE_EP_LOG(LogLevel::kWarn, unknown_variable_warning(name));
  }
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
      MOE_EP_LOG(LogLevel::kInfo, name, "=", value);
    }
    return parsed;
  }();
  return knobs;
}

}  // namespace moe_ep
