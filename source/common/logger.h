// Leveled logging to stderr. Any thread may log; each line is written with one write(2) so lines
// from different workers do not interleave. The level is global and set once at startup.
#pragma once

#include <string>

#include "absl/strings/str_format.h"

namespace rpx {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarn, kError, kCritical, kOff };

// Parses Envoy's level names (trace, debug, info, warning/warn, error, critical, off).
bool ParseLogLevel(const std::string& name, LogLevel* out);
const char* LogLevelName(LogLevel level);  // Envoy's name: "info", "warning", ...
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void LogLine(LogLevel level, const std::string& message);

#define RPX_LOG(level, ...)                                                 \
  do {                                                                      \
    if (::rpx::LogLevel::level >= ::rpx::GetLogLevel()) {                   \
      ::rpx::LogLine(::rpx::LogLevel::level, absl::StrFormat(__VA_ARGS__)); \
    }                                                                       \
  } while (0)

}  // namespace rpx
