// `moe-ep config` (docs/bench.md, docs/config.md): the resolved dispatch and combine dtypes for
// the given weights and requests, where each came from, the warnings that apply, the MOE_EP_*
// variables that are set, and the registry of every knob. A bad variable or option exits 2
// naming it.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>

#include "commands.h"
#include "moe_ep/config.h"
#include "moe_ep/dtypes.h"
#include "moe_ep/errors.h"

namespace moe_ep::cli {
namespace {

struct ConfigOptions {
  std::string weights = "bf16";
  std::string dispatch_dtype = "auto";
  std::string combine_dtype = "auto";
};

int run(const ConfigOptions& o, LogBuffer& logs) {
  WeightDtype weights;
  std::optional<DispatchDtype> dispatch;
  std::optional<CombineDtype> combine;
  try {
    weights = parse_weight_dtype(o.weights, "--weights");
  } catch (const InvalidArgument&) {
    bad_argument("--weights", o.weights, "allowed: bf16|fp8|fp4|bfloat16|float8|mxfp4");
  }
  try {
    dispatch = parse_dispatch_choice(o.dispatch_dtype);
  } catch (const InvalidArgument&) {
    bad_argument("--dispatch-dtype", o.dispatch_dtype,
                 "'" + o.dispatch_dtype + "' is not a dispatch dtype; valid values: auto|" +
                     valid_dispatch_values());
  }
  try {
    combine = parse_combine_choice(o.combine_dtype);
  } catch (const InvalidArgument&) {
    bad_argument("--combine-dtype", o.combine_dtype,
                 "'" + o.combine_dtype + "' is not a combine dtype; valid values: auto|" +
                     valid_combine_values());
  }
  const Knobs& knobs = Knobs::get();  // a bad MOE_EP_* value is an InvalidArgument naming it
  const DtypeResolution res = resolve_dtypes(dispatch, combine, weights, knobs);

  // Everything the library logged (unknown variables, deprecations) plus the resolution's own
  // warnings, each once.
  std::vector<std::string> warnings = res.warnings;
  for (const LogBuffer::Line& line : logs.take()) {
    if (std::find(warnings.begin(), warnings.end(), line.message) == warnings.end()) {
      warnings.push_back(std::string(to_string(line.level)) == "warn"
                             ? line.message
                             : std::string(to_string(line.level)) + ": " + line.message);
    }
  }

  std::cout << "moe-ep config (weights " << to_string(weights) << ")\n";
  std::cout << fmt::format("  dispatch dtype: {:<18} ({})  source: {:<15} from: {}\n",
                           to_string(res.dispatch), short_name(res.dispatch),
                           to_string(res.dispatch_source), res.dispatch_origin);
  std::cout << fmt::format("  combine dtype:  {:<18} ({})  source: {:<15} from: {}\n",
                           to_string(res.combine), short_name(res.combine),
                           to_string(res.combine_source), res.combine_origin);
  std::cout << "warnings:" << (warnings.empty() ? " none" : "") << "\n";
  for (const std::string& w : warnings) std::cout << "  " << w << "\n";
  std::cout << "MOE_EP_* variables set:" << (knobs.set_variables.empty() ? " none" : "") << "\n";
  for (const auto& [name, value] : knobs.set_variables) {
    std::cout << "  " << name << "=" << value << "\n";
  }
  std::cout << "knobs:\n";
  for (const KnobInfo& knob : knob_registry()) {
    std::cout << fmt::format("  {:<22} {:<7} default {:<6} {}\n", knob.name, knob.type,
                             knob.default_value, knob.help);
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace

CommandFn add_config_command(CLI::App& app) {
  auto options = std::make_shared<ConfigOptions>();
  CLI::App* cmd = app.add_subcommand(
      "config", "print the resolved wire dtypes, where each came from, warnings and knobs");
  cmd->add_option("--weights", options->weights, "expert weight dtype: bf16|fp8|fp4");
  cmd->add_option("--dispatch-dtype", options->dispatch_dtype,
                  "auto|" + valid_dispatch_values() + "; default auto");
  cmd->add_option("--combine-dtype", options->combine_dtype,
                  "auto|" + valid_combine_values() + "; default auto");
  return [options](LogBuffer& logs) { return run(*options, logs); };
}

}  // namespace moe_ep::cli
