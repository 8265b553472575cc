#include "source/network/http_inspector.h"

#include <cstring>

namespace rpx {
namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kPrefaceLen = sizeof(kPreface) - 1;

// RFC 9110 tchar.
bool IsToken(uint8_t c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

}  // namespace

HttpInspectResult InspectHttp(const uint8_t* data, size_t len) {
  // The preface first: "PRI" is also a valid method, and an HTTP/1 request line "PRI * HTTP/2.0"
  // would be refused below for its version anyway.
  size_t n = len < kPrefaceLen ? len : kPrefaceLen;
  if (std::memcmp(data, kPreface, n) == 0) {
    return len >= kPrefaceLen ? HttpInspectResult::kH2c : HttpInspectResult::kNeedMoreData;
  }
  // METHOD: one or more token characters, then one space.
  size_t i = 0;
  while (i < len && IsToken(data[i])) ++i;
  if (i == len)
    return len >= kMaxHttpInspectBytes ? HttpInspectResult::kNotHttp
                                       : HttpInspectResult::kNeedMoreData;
  if (i == 0 || data[i] != ' ') return HttpInspectResult::kNotHttp;
  ++i;
  // request-target: visible characters up to the next space.
  size_t target = i;
  while (i < len && data[i] > 0x20 && data[i] < 0x7f) ++i;
  if (i == len)
    return len >= kMaxHttpInspectBytes ? HttpInspectResult::kNotHttp
                                       : HttpInspectResult::kNeedMoreData;
  if (i == target || data[i] != ' ') return HttpInspectResult::kNotHttp;
  ++i;
  // "HTTP/1.0" or "HTTP/1.1", then CRLF (a bare LF is accepted, as llhttp does).
  static constexpr char kVersion[] = "HTTP/1.";
  for (size_t k = 0; k < sizeof(kVersion) - 1; ++k, ++i) {
    if (i == len) return HttpInspectResult::kNeedMoreData;
    if (data[i] != static_cast<uint8_t>(kVersion[k])) return HttpInspectResult::kNotHttp;
  }
  if (i == len) return HttpInspectResult::kNeedMoreData;
  uint8_t minor = data[i++];
  if (minor != '0' && minor != '1') return HttpInspectResult::kNotHttp;
  if (i == len) return HttpInspectResult::kNeedMoreData;
  if (data[i] == '\r') {
    if (++i == len) return HttpInspectResult::kNeedMoreData;
  }
  if (data[i] != '\n') return HttpInspectResult::kNotHttp;
  return minor == '1' ? HttpInspectResult::kHttp11 : HttpInspectResult::kHttp10;
}

const std::vector<std::string>* HttpInspectProtocols(HttpInspectResult r) {
  static const std::vector<std::string> kHttp10{"http/1.0"}, kHttp11{"http/1.1"}, kH2c{"h2c"};
  switch (r) {
    case HttpInspectResult::kHttp10:
      return &kHttp10;
    case HttpInspectResult::kHttp11:
      return &kHttp11;
    case HttpInspectResult::kH2c:
      return &kH2c;
    default:
      return nullptr;
  }
}

}  // namespace rpx
