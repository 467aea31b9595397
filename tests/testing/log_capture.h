// Every message the library logs in a test process, captured by one sink installed during static
// initialisation, before main and before anything logs, with MOE_EP_LOG pinned to info before the
// logger first reads it (docs/config.md, testing notes). Include it in one test file per binary.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/log.h"

namespace moe_ep::testing {

struct LogRecord {
  LogLevel level;
  std::string message;
};

inline std::mutex g_log_mutex;
inline std::vector<LogRecord> g_log;  // every message logged in this process, in order

inline void install_capture_sink() {
  set_log_sink([](LogLevel level, const std::string& message) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log.push_back({level, message});
  });
}

// Static initialisation of the including file runs before main and before anything logs (the library
// logs nothing at static-init time), so the logger reads MOE_EP_LOG=info on its first call.
inline const bool kCaptureInstalled = [] {
  setenv("MOE_EP_LOG", "info", /*overwrite=*/1);
  install_capture_sink();
  return true;
}();

inline std::vector<LogRecord> log_snapshot() {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  return g_log;
}

// Each test records where the process log stood when it started.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kCaptureInstalled);
    start_ = log_snapshot().size();
  }
  std::vector<LogRecord> logged_since_start() const {
    const std::vector<LogRecord> all = log_snapshot();
    return std::vector<LogRecord>(all.begin() + static_cast<std::ptrdiff_t>(start_), all.end());
  }
  size_t start_ = 0;
};

}  // namespace moe_ep::testing
