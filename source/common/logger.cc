#include "source/common/logger.h"

#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

namespace rpx {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
const char* const kNames[] = {"trace", "debug", "info", "warning", "error", "critical", "off"};
}  // namespace

bool ParseLogLevel(const std::string& name, LogLevel* out) {
  for (int i = 0; i <= static_cast<int>(LogLevel::kOff); ++i) {
    if (name == kNames[i]) {
      *out = static_cast<LogLevel>(i);
      return true;
    }
  }
  if (name == "warn") {
    *out = LogLevel::kWarn;
    return true;
  }
  return false;
}

const char* LogLevelName(LogLevel level) { return kNames[static_cast<int>(level)]; }

void SetLogLevel(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }
LogLevel GetLogLevel() { return g_level.load(std::memory_order_relaxed); }

void LogLine(LogLevel level, const std::string& message) {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char prefix[64];
  int n = snprintf(prefix, sizeof(prefix), "[%04d-%02d-%02d %02d:%02d:%02d.%03ld][%s] ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   static_cast<long>(tv.tv_usec / 1000), kNames[static_cast<int>(level)]);
  std::string line(prefix, n);
  line += message;
  line += '\n';
  ssize_t unused = write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace rpx
