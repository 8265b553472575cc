// JSON string literals for the JSON rpx writes by hand (access logs, admin pages): quotes,
// backslashes and control characters escaped, other bytes (UTF-8) as they are. Any thread.
#pragma once

#include <string>
#include <string_view>

namespace rpx {

// Appends `s` as a JSON string, with its quotes.
void AppendJsonString(std::string_view s, std::string* out);

inline std::string JsonQuote(std::string_view s) {
  std::string out;
  AppendJsonString(s, &out);
  return out;
}

}  // namespace rpx
