// The levelled logger: log() writes "moe-ep [level] message" to stderr, or hands it to the sink
// installed with set_log_sink(), when its level passes the filter set by MOE_EP_LOG (default
// warn). The logger reads MOE_EP_LOG itself, with getenv, once: it never goes through
// Knobs::get(), which logs while it initialises. An invalid value falls back to warn here;
// Knobs::get() reports it as an error.
#include "core/log.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace moe_ep {
namespace {

LogLevel logger_level() {
  static const LogLevel level = [] {
    const char* text = std::getenv(kLogVariable);
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

std::optional<LogLevel> parse_log_level(std::string_view text) {
  std::string lowered(text);
  for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (LogLevel level : {LogLevel::kError, LogLevel::kWarn, LogLevel::kInfo, LogLevel::kDebug}) {
    if (lowered == to_string(level)) return level;
  }
  return std::nullopt;
}

bool log_enabled(LogLevel level) {
  return static_cast<int>(level) <= static_cast<int>(logger_level());
}

void log(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
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
