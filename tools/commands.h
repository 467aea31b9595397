// Plumbing shared by the `moe-ep` commands: how each command registers on the CLI11 app, the
// error types that map to exit codes (a bad argument or environment variable: 2; a failed run:
// 1), and the buffer that holds the library's log lines until the arguments are known to be good,
// so that a rejected command line prints exactly one line on stderr.
#pragma once

#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe_ep/config.h"

namespace CLI {
class App;
}

namespace moe_ep::cli {

// Throws InvalidArgument("<flag>=<value>: <rule>"); main prints it as one line and exits 2.
[[noreturn]] void bad_argument(const std::string& flag, const std::string& value,
                               const std::string& rule);

// The items of a comma-separated list ("8,16,32"), or of one split at `separator`
// ("groups:8:4"); an empty item stays, to be rejected.
std::vector<std::string> split_list(const std::string& text, char separator = ',');

// A failure while running (not a bad argument): main prints it as one line and exits 1.
class RunFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Captures moe_ep::log output while installed (it replaces the stderr sink).
class LogBuffer {
 public:
  struct Line {
    LogLevel level;
    std::string message;
  };
  LogBuffer() = default;
  LogBuffer(const LogBuffer&) = delete;
  LogBuffer& operator=(const LogBuffer&) = delete;
  ~LogBuffer();  // restores the stderr sink; lines still held are dropped
  void install();
  // Restores the stderr sink and writes the held lines there, in the library's format.
  void flush_to_stderr();
  std::vector<Line> take();

 private:
  std::mutex mutex_;
  std::vector<Line> lines_;
};

// Each command adds its subcommand and options to `app` and returns what runs once the command
// line parsed; that function returns the exit code and may throw (see main.cc).
using CommandFn = std::function<int(LogBuffer& logs)>;
CommandFn add_bench_command(CLI::App& app);
CommandFn add_config_command(CLI::App& app);

}  // namespace moe_ep::cli
