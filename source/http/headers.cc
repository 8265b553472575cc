#include "source/http/headers.h"

#include <algorithm>

namespace rpx {

const std::string* HeaderMap::Get(std::string_view name) const {
  for (const auto& e : entries_) {
    if (e.first == name) return &e.second;
  }
  return nullptr;
}

void HeaderMap::Add(std::string_view name, std::string_view value) {
  entries_.emplace_back(std::string(name), std::string(value));
}

void HeaderMap::Set(std::string_view name, std::string_view value) {
  Remove(name);
  Add(name, value);
}

int HeaderMap::Remove(std::string_view name) {
  auto it = std::remove_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.first == name; });
  int n = static_cast<int>(entries_.end() - it);
  entries_.erase(it, entries_.end());
  return n;
}

void RequestHead::Clear() {
  method.clear();
  path.clear();
  host.clear();
  version_minor = 1;
  headers.Clear();
  keep_alive = true;
  chunked = false;
  has_content_length = false;
  content_length = 0;
  expect_continue = false;
  upgrade.clear();
}

void ResponseHead::Clear() {
  status = 0;
  reason.clear();
  version_minor = 1;
  headers.Clear();
  keep_alive = true;
  chunked = false;
  has_content_length = false;
  content_length = 0;
}

void AppendHeaders(Buffer& out, const HeaderMap& headers) {
  for (const auto& e : headers.entries()) {
    out.Append(e.first);
    out.Append(": ", 2);
    out.Append(e.second);
    out.Append("\r\n", 2);
  }
}

void ToLowerAscii(std::string* s) {
  for (char& c : *s) {
    if (c >= 'A' && c <= 'Z') c = c - 'A' + 'a';
  }
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = x - 'A' + 'a';
    if (y >= 'A' && y <= 'Z') y = y - 'A' + 'a';
    if (x != y) return false;
  }
  return true;
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 426: return "Upgrade Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

}  // namespace rpx
