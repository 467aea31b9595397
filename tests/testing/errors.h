// Single-call error assertions for tests that need the message of an InvalidArgument.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "moe_ep/errors.h"

namespace moe_ep::testing {

// Runs `fn`, which must throw InvalidArgument, and returns its message ("" and a test failure
// when it throws something else or nothing).
template <typename Fn>
std::string invalid_argument_message(Fn fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InvalidArgument, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected InvalidArgument, nothing was thrown";
  return "";
}

}  // namespace moe_ep::testing
