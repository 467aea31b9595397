// The one error path of the host code: check macros that build a message naming the argument,
// the value and the rule, and throw the matching moe_ep::Error. Library code never exits.
#pragma once

#include <sstream>
#include <string>

#include "moe_ep/errors.h"

namespace moe_ep::detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// The file name of a __FILE__ path: messages name where they come from without the absolute
// path of the machine that built the library.
constexpr const char* base_name(const char* path) {
  const char* name = path;
  for (const char* p = path; *p != '\0'; ++p) {
    if (*p == '/') name = p + 1;
  }
  return name;
}

}  // namespace moe_ep::detail

// MOE_EP_CHECK_ARG(cond, "hidden=", h, " must be a multiple of 128 for float8_blockwise")
#define MOE_EP_CHECK_ARG(cond, ...)                                                      \
  do {                                                                                   \
    if (!(cond)) throw ::moe_ep::InvalidArgument(::moe_ep::detail::concat(__VA_ARGS__)); \
  } while (0)

#define MOE_EP_CHECK_USAGE(cond, ...)                                                 \
  do {                                                                                \
    if (!(cond)) throw ::moe_ep::InvalidUsage(::moe_ep::detail::concat(__VA_ARGS__)); \
  } while (0)

#define MOE_EP_CHECK_INTERNAL(cond, ...)                                                       \
  do {                                                                                         \
    if (!(cond))                                                                               \
      throw ::moe_ep::Internal(::moe_ep::detail::concat(::moe_ep::detail::base_name(__FILE__), \
                                                        ":", __LINE__, ": ", __VA_ARGS__));    \
  } while (0)
