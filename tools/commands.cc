// The shared pieces of commands.h: the bad-argument error and the log buffer.
#include "commands.h"

#include <fmt/format.h>

#include <cstdio>

#include "moe_ep/errors.h"

namespace moe_ep::cli {

void bad_argument(const std::string& flag, const std::string& value, const std::string& rule) {
  throw InvalidArgument(flag + "=" + value + ": " + rule);
}

LogBuffer::~LogBuffer() { set_log_sink({}); }

void LogBuffer::install() {
  set_log_sink([this](LogLevel level, const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    lines_.push_back({level, message});
  });
}

void LogBuffer::flush_to_stderr() {
  set_log_sink({});
  for (const Line& line : take()) {
    fmt::print(stderr, "moe-ep [{}] {}\n", to_string(line.level), line.message);
  }
}

std::vector<LogBuffer::Line> LogBuffer::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Line> lines;
  lines.swap(lines_);
  return lines;
}

}  // namespace moe_ep::cli
