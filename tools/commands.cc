// The shared pieces of commands.h: the bad-argument error, list splitting and the log buffer.
#include "commands.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "moe_ep/errors.h"

namespace moe_ep::cli {

void bad_argument(const std::string& flag, const std::string& value, const std::string& rule) {
  throw InvalidArgument(flag + "=" + value + ": " + rule);
}

std::vector<std::string> split_list(const std::string& text, char separator) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(separator, start), text.size());
    items.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return items;
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
