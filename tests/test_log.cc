// Tests of the logger (docs/config.md): its level filter, the macro that builds a message only
// when its level passes, and the sink. Every message of this process is captured by the sink of
// testing/log_capture.h, installed before main with MOE_EP_LOG pinned to info.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/log.h"
#include "testing/log_capture.h"

namespace moe_ep {
namespace {

using testing::install_capture_sink;
using testing::LogRecord;

class ConfigLog : public testing::LogTest {};

TEST_F(ConfigLog, LevelFilterFollowsMoeEpLog) {
  // MOE_EP_LOG=info was pinned before main: debug is dropped, the rest reaches the sink.
  log(LogLevel::kDebug, "probe-debug");
  log(LogLevel::kInfo, "probe-info");
  log(LogLevel::kWarn, "probe-warn");
  log(LogLevel::kError, "probe-error");
  const std::vector<LogRecord> logged = logged_since_start();
  ASSERT_EQ(logged.size(), 3u);
  EXPECT_EQ(logged[0].level, LogLevel::kInfo);
  EXPECT_EQ(logged[0].message, "probe-info");
  EXPECT_EQ(logged[1].level, LogLevel::kWarn);
  EXPECT_EQ(logged[1].message, "probe-warn");
  EXPECT_EQ(logged[2].level, LogLevel::kError);
  EXPECT_EQ(logged[2].message, "probe-error");
}

TEST_F(ConfigLog, MacroFormatsOnlyEnabledLevels) {
  // MOE_EP_LOG=info was pinned before main.
  EXPECT_TRUE(log_enabled(LogLevel::kError));
  EXPECT_TRUE(log_enabled(LogLevel::kWarn));
  EXPECT_TRUE(log_enabled(LogLevel::kInfo));
  EXPECT_FALSE(log_enabled(LogLevel::kDebug));
  int evaluated = 0;
  const auto piece = [&evaluated] { return ++evaluated; };
  MOE_EP_LOG(LogLevel::kDebug, "probe-macro-debug ", piece());
  EXPECT_EQ(evaluated, 0);  // a filtered-out message is not even built
  MOE_EP_LOG(LogLevel::kInfo, "probe-macro ", piece(), " of ", 2.5, '!');
  EXPECT_EQ(evaluated, 1);
  const std::vector<LogRecord> logged = logged_since_start();
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_EQ(logged[0].level, LogLevel::kInfo);
  EXPECT_EQ(logged[0].message, "probe-macro 1 of 2.5!");
}

TEST_F(ConfigLog, EmptySinkRestoresStderr) {
  set_log_sink({});
  ::testing::internal::CaptureStderr();
  log(LogLevel::kWarn, "probe to stderr");
  log(LogLevel::kInfo, "probe info");
  log(LogLevel::kDebug, "probe dropped");
  const std::string err = ::testing::internal::GetCapturedStderr();
  install_capture_sink();
  EXPECT_EQ(err, "moe-ep [warn] probe to stderr\nmoe-ep [info] probe info\n");
  EXPECT_TRUE(logged_since_start().empty());  // nothing reached the replaced sink
}

}  // namespace
}  // namespace moe_ep
