// The `moe-ep` command line (docs/bench.md): `moe-ep bench` and `moe-ep config`. Exit codes: 0 on
// success; 1 when a run fails or a checked element is wrong; 2 for a bad argument or MOE_EP_*
// variable, reported as exactly one stderr line naming the argument, the value and what is
// allowed (CLI11's own parse errors included).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <new>
#include <string>

#include "commands.h"
#include "moe_ep/errors.h"

namespace moe_ep::cli {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitBadArgument = 2;

// One stderr line: "moe-ep: <message>", with any line breaks folded into spaces.
int fail(int code, std::string message) {
  for (char& c : message) c = (c == '\n' || c == '\r') ? ' ' : c;
  while (!message.empty() && message.back() == ' ') message.pop_back();
  fmt::print(stderr, "moe-ep: {}\n", message);
  return code;
}

int main_impl(int argc, char** argv) {
  // Library log lines (e.g. a deprecation warning) wait here until the arguments are accepted,
  // so that a rejected command line prints one line only.
  LogBuffer logs;
  logs.install();

  CLI::App app{"moe-ep: Mixture-of-Experts expert-parallel dispatch and combine", "moe-ep"};
  app.require_subcommand(1, 1);
  app.set_help_all_flag("--help-all", "help for every command");
  const CommandFn bench = add_bench_command(app);
  const CommandFn config = add_config_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      logs.flush_to_stderr();
      return app.exit(e);  // --help
    }
    return fail(kExitBadArgument, e.what());
  }

  const CommandFn& command = app.got_subcommand("bench") ? bench : config;
  try {
    return command(logs);
  } catch (const InvalidArgument& e) {
    return fail(kExitBadArgument, e.what());
  } catch (const RunFailure& e) {
    logs.flush_to_stderr();
    return fail(kExitFailure, e.what());
  } catch (const std::bad_alloc&) {
    logs.flush_to_stderr();
    return fail(kExitFailure, "out of host memory (std::bad_alloc); try fewer --tokens or ranks");
  } catch (const std::exception& e) {
    logs.flush_to_stderr();
    return fail(kExitFailure, e.what());
  }
}

}  // namespace
}  // namespace moe_ep::cli

int main(int argc, char** argv) { return moe_ep::cli::main_impl(argc, argv); }
