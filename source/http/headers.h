// Request and response heads. Header names are stored lower-cased (as Envoy does), values as
// received. A HeaderMap is owned by one stream on one worker; Clear() keeps capacity so a
// keep-alive connection reuses it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "source/common/buffer.h"

namespace rpx {

class HeaderMap {
 public:
  using Entry = std::pair<std::string, std::string>;

  // `name` must be lower case.
  const std::string* Get(std::string_view name) const;
  void Add(std::string_view name, std::string_view value);
  // Replaces every value of `name` with one.
  void Set(std::string_view name, std::string_view value);
  // Returns how many were removed.
  int Remove(std::string_view name);
  void Clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }
  const std::vector<Entry>& entries() const { return entries_; }
  std::vector<Entry>& mutable_entries() { return entries_; }

 private:
  std::vector<Entry> entries_;
};

struct RequestHead {
  std::string method;
  std::string path;  // request-target as received (origin-form, or absolute-form)
  std::string host;  // :authority: the Host header, or the authority of an absolute-form target
  int version_minor = 1;  // HTTP/1.x
  HeaderMap headers;
  bool keep_alive = true;
  bool chunked = false;
  bool has_content_length = false;
  uint64_t content_length = 0;
  bool expect_continue = false;
  // The Upgrade header's value (as received) when the request asks to switch protocols
  // (`Connection: upgrade` plus `Upgrade`), else empty. The router decides whether to honour it.
  std::string upgrade;

  bool has_body() const { return chunked || content_length > 0; }
  void Clear();
};

struct ResponseHead {
  int status = 0;
  std::string reason;
  int version_minor = 1;
  HeaderMap headers;
  bool keep_alive = true;
  bool chunked = false;
  bool has_content_length = false;
  uint64_t content_length = 0;
  void Clear();
};

// Appends "name: value\r\n" for every header (HTTP/1 wire form).
void AppendHeaders(Buffer& out, const HeaderMap& headers);

// Lower-cases ASCII in place.
void ToLowerAscii(std::string* s);
bool EqualsIgnoreCase(std::string_view a, std::string_view b);
// The standard reason phrase for `status`, or "Unknown".
const char* ReasonPhrase(int status);

}  // namespace rpx
