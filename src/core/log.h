// The library side of the levelled logger declared in moe_ep/config.h: MOE_EP_LOG(level, ...),
// which builds its message only when `level` passes the MOE_EP_LOG filter, the cheap filter test
// behind it, and the parse of a level name shared by the logger and the MOE_EP_LOG knob. Library
// code logs through the macro so that a disabled debug line costs one comparison, not a string.
#pragma once

#include <optional>
#include <string_view>

#include "core/check.h"
#include "moe_ep/config.h"

namespace moe_ep {

// The environment variable that sets the logger's level. The logger reads it itself, with getenv,
// because Knobs::get() logs while it is initialised; the knob table registers it under this name.
inline constexpr const char* kLogVariable = "MOE_EP_LOG";

// Whether a message at `level` would be written. No lock and no allocation: after the first call
// it reads a level that is fixed for the life of the process.
bool log_enabled(LogLevel level);

// "error", "warn", "info" or "debug", in any case; nullopt for anything else.
std::optional<LogLevel> parse_log_level(std::string_view text);

}  // namespace moe_ep

// MOE_EP_LOG(LogLevel::kDebug, "rank ", rank, " waits for ", peer): the pieces are streamed into
// one message (as detail::concat does) and logged, but neither evaluated nor formatted when the
// level is filtered out.
#define MOE_EP_LOG(level, ...)                                                 \
  do {                                                                         \
    const ::moe_ep::LogLevel moe_ep_log_level_ = (level);                      \
    if (::moe_ep::log_enabled(moe_ep_log_level_)) {                            \
      ::moe_ep::log(moe_ep_log_level_, ::moe_ep::detail::concat(__VA_ARGS__)); \
    }                                                                          \
  } while (0)
