#include "source/http/headers.h"

#include <algorithm>
#include <cstring>

namespace rpx {

void HeaderMap::Arena::Grow(size_t n) {
  size_t cap = std::max<size_t>({cap_ * 2, size_ + n, 256});
  std::unique_ptr<char[]> grown(new char[cap]);
  if (size_) memcpy(grown.get(), data_.get(), size_);
  data_ = std::move(grown);
  cap_ = cap;
}

std::optional<std::string_view> HeaderMap::Get(std::string_view name) const {
  for (const Slot& s : fields_) {
    if (s.name_len == name.size() &&
        memcmp(arena_.data() + s.name_off, name.data(), name.size()) == 0) {
      return std::string_view(arena_.data() + s.value_off, s.value_len);
    }
  }
  return std::nullopt;
}

void HeaderMap::Add(std::string_view name, std::string_view value) {
  // The views may point into arena_ (a value copied from another field): keep them as offsets
  // across the growth of the arena.
  uintptr_t base = reinterpret_cast<uintptr_t>(arena_.data());
  uintptr_t n_at = reinterpret_cast<uintptr_t>(name.data());
  uintptr_t v_at = reinterpret_cast<uintptr_t>(value.data());
  bool name_inside = base && n_at >= base && n_at < base + arena_.size();
  bool value_inside = base && v_at >= base && v_at < base + arena_.size();
  size_t name_at = n_at - base, value_at = v_at - base;
  arena_.Reserve(name.size() + value.size());
  const char* n = name_inside ? arena_.data() + name_at : name.data();
  const char* v = value_inside ? arena_.data() + value_at : value.data();
  Slot s;
  s.name_off = static_cast<uint32_t>(arena_.size());
  s.name_len = static_cast<uint32_t>(name.size());
  arena_.Append(n, name.size());
  s.value_off = static_cast<uint32_t>(arena_.size());
  s.value_len = static_cast<uint32_t>(value.size());
  arena_.Append(v, value.size());
  fields_.push_back(s);
}

void HeaderMap::Set(std::string_view name, std::string_view value) {
  // Remove only drops slots and leaves the arena alone, so views into a removed field stay valid
  // for Add (which keeps views into the arena valid across its growth).
  Remove(name);
  Add(name, value);
}

int HeaderMap::Remove(std::string_view name) {
  return RemoveIf([name](const Field& f) { return f.name == name; });
}

void HeaderMap::StartPending() {
  pending_ = true;
  pending_slot_.name_off = static_cast<uint32_t>(arena_.size());
  pending_slot_.name_len = 0;
  pending_slot_.value_off = pending_slot_.name_off;
  pending_slot_.value_len = 0;
}

namespace {
// 'A'..'Z' gain 0x20 in each of the 8 bytes (SWAR; bytes >= 0x80 are left alone).
inline uint64_t LowerWord(uint64_t x) {
  uint64_t low7 = x & 0x7f7f7f7f7f7f7f7fULL;
  uint64_t ge_a = low7 + 0x3f3f3f3f3f3f3f3fULL;  // bit 7 set where the byte >= 'A'
  uint64_t gt_z = low7 + 0x2525252525252525ULL;  // ... where it > 'Z'
  return x | (((ge_a ^ gt_z) & ~x & 0x8080808080808080ULL) >> 2);
}
}  // namespace

void HeaderMap::AppendName(const char* data, size_t len) {
  if (!pending_) StartPending();
  char* out = arena_.Extend(len);
  // Lower-cased 8 bytes at a time; the last word overlaps the one before it (lower-casing twice
  // changes nothing), and a name shorter than a word goes through a padded copy.
  uint64_t x;
  if (len >= 8) {
    for (size_t i = 0; i + 8 <= len; i += 8) {
      memcpy(&x, data + i, 8);
      x = LowerWord(x);
      memcpy(out + i, &x, 8);
    }
    memcpy(&x, data + len - 8, 8);
    x = LowerWord(x);
    memcpy(out + len - 8, &x, 8);
  } else if (len > 0) {
    x = 0;
    memcpy(&x, data, len);
    x = LowerWord(x);
    memcpy(out, &x, len);
  }
  pending_slot_.name_len = static_cast<uint32_t>(arena_.size() - pending_slot_.name_off);
  pending_slot_.value_off = static_cast<uint32_t>(arena_.size());
}

void HeaderMap::AppendValue(const char* data, size_t len) {
  if (!pending_) StartPending();
  arena_.Append(data, len);
  pending_slot_.value_len += static_cast<uint32_t>(len);
}

std::string_view HeaderMap::pending_name() const {
  if (!pending_) return {};
  return std::string_view(arena_.data() + pending_slot_.name_off, pending_slot_.name_len);
}

std::string_view HeaderMap::pending_value() const {
  if (!pending_) return {};
  return std::string_view(arena_.data() + pending_slot_.value_off, pending_slot_.value_len);
}

void HeaderMap::CommitPending() {
  if (!pending_) StartPending();
  Slot s = pending_slot_;
  while (s.value_len > 0) {
    char c = arena_.data()[s.value_off + s.value_len - 1];
    if (c != ' ' && c != '\t') break;
    --s.value_len;
  }
  fields_.push_back(s);
  pending_ = false;
}

void HeaderMap::DropPending() {
  if (!pending_) return;
  arena_.Truncate(pending_slot_.name_off);
  pending_ = false;
}

void RequestHead::Clear() {
  method.clear();
  path.clear();
  host.clear();
  version_minor = 1;
  version_major = 1;
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

void AppendHeaders(Buffer& out, const HeaderMap& headers, std::string_view skip) {
  for (const HeaderMap::Field f : headers) {
    if (!skip.empty() && f.name == skip) continue;
    // One reservation per field instead of four appends' worth of checks.
    size_t n = f.name.size() + f.value.size() + 4;
    char* p = out.Reserve(n);
    memcpy(p, f.name.data(), f.name.size());
    p += f.name.size();
    *p++ = ':';
    *p++ = ' ';
    memcpy(p, f.value.data(), f.value.size());
    p += f.value.size();
    *p++ = '\r';
    *p = '\n';
    out.Commit(n);
  }
}

void ToLowerAscii(std::string* s) {
  for (char& c : *s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + ('a' - 'A'));
  }
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  // A word at a time (LowerWord folds only ASCII letters, so bytes >= 0x80 must match exactly).
  size_t n = a.size();
  if (n != b.size()) return false;
  uint64_t x, y;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    memcpy(&x, a.data() + i, 8);
    memcpy(&y, b.data() + i, 8);
    if (LowerWord(x) != LowerWord(y)) return false;
  }
  if (i == n) return true;
  x = y = 0;
  memcpy(&x, a.data() + i, n - i);
  memcpy(&y, b.data() + i, n - i);
  return LowerWord(x) == LowerWord(y);
}

const char* ReasonPhrase(int status) {
  // clang-format off
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
  // clang-format on
}

}  // namespace rpx
