// Request and response heads. Header names are stored lower-cased (as Envoy does), values as
// received. A HeaderMap is owned by one stream on one worker.
//
// A HeaderMap keeps every name and value in one character arena and the fields as offsets into
// it: parsing a head copies each byte once and allocates nothing once the arena and the field
// list have grown to the size of a typical head (Clear() keeps both, so a reused map allocates
// nothing at all). The string_views it hands out point into the arena: they are valid until the
// map is next changed (Add, Set, Remove, Clear), and Add/Set accept views into the same map.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "source/common/buffer.h"

namespace rpx {

class HeaderMap {
  // The bytes of every name and value: a growable array that only appends (and forgets its tail
  // on Clear/DropPending), with the append check inlined. Copies copy what is used.
  class Arena {
   public:
    Arena() = default;
    Arena(const Arena& o) { *this = o; }
    Arena& operator=(const Arena& o) {
      if (this != &o) {
        size_ = 0;
        Append(o.data_.get(), o.size_);
      }
      return *this;
    }
    Arena(Arena&& o) noexcept { *this = std::move(o); }
    Arena& operator=(Arena&& o) noexcept {
      data_ = std::move(o.data_);
      size_ = o.size_;
      cap_ = o.cap_;
      o.size_ = o.cap_ = 0;  // empty, not a null with a capacity
      return *this;
    }
    const char* data() const { return data_.get(); }
    char* data() { return data_.get(); }
    size_t size() const { return size_; }
    // `n` more bytes at the end, to be written by the caller.
    char* Extend(size_t n) {
      if (cap_ - size_ < n) Grow(n);
      char* p = data_.get() + size_;
      size_ += n;
      return p;
    }
    void Append(const char* p, size_t n) {
      if (n) memcpy(Extend(n), p, n);  // (memcpy must not see the null of an empty arena)
    }
    void Truncate(size_t n) { size_ = n; }
    void Reserve(size_t more) {
      if (cap_ - size_ < more) Grow(more);
    }

   private:
    void Grow(size_t n);
    std::unique_ptr<char[]> data_;
    size_t size_ = 0;
    size_t cap_ = 0;
  };

 public:
  struct Field {
    std::string_view name;
    std::string_view value;
  };

  // `name` must be lower case. The first value of `name`, if there is one.
  std::optional<std::string_view> Get(std::string_view name) const;
  void Add(std::string_view name, std::string_view value);
  // Replaces every value of `name` with one.
  void Set(std::string_view name, std::string_view value);
  // Returns how many were removed.
  int Remove(std::string_view name);
  // Removes every field for which `drop(Field)` is true, keeping the others' order.
  template <class Pred>
  int RemoveIf(Pred drop) {
    size_t out = 0;
    for (size_t i = 0; i < fields_.size(); ++i) {
      if (!drop(At(fields_[i]))) fields_[out++] = fields_[i];
    }
    int removed = static_cast<int>(fields_.size() - out);
    fields_.resize(out);
    return removed;
  }
  void Clear() {
    fields_.clear();
    arena_.Truncate(0);
    pending_ = false;
  }
  size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }
  Field operator[](size_t i) const { return At(fields_[i]); }

  class Iterator {
   public:
    Iterator(const HeaderMap* m, size_t i) : m_(m), i_(i) {}
    Field operator*() const { return (*m_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    const HeaderMap* m_;
    size_t i_;
  };
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(this, fields_.size()); }

  // Building a field piece by piece, as a parser sees it (a name or value may arrive in several
  // pieces). AppendName lower-cases what it appends; the value starts with the first
  // AppendValue; CommitPending adds the field, DropPending forgets it. Other changes to the map
  // must not happen while a field is pending.
  void AppendName(const char* data, size_t len);
  void AppendValue(const char* data, size_t len);
  std::string_view pending_name() const;
  std::string_view pending_value() const;
  // Adds the pending field, its value without trailing spaces and tabs.
  void CommitPending();
  void DropPending();

 private:
  struct Slot {
    uint32_t name_off;
    uint32_t name_len;
    uint32_t value_off;
    uint32_t value_len;
  };
  Field At(const Slot& s) const {
    return {std::string_view(arena_.data() + s.name_off, s.name_len),
            std::string_view(arena_.data() + s.value_off, s.value_len)};
  }
  void StartPending();

  Arena arena_;
  std::vector<Slot> fields_;
  Slot pending_slot_{};
  bool pending_ = false;  // a field is being built at the arena's end
};

struct RequestHead {
  std::string method;
  std::string path;  // request-target as received (origin-form, or absolute-form)
  std::string host;  // :authority: the Host header, or the authority of an absolute-form target
  int version_minor = 1;  // HTTP/1.x
  int version_major = 1;  // 2: the request came over HTTP/2 (a body without Content-Length
                          // then says chunked: its length is known only at its end)
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

// Appends "name: value\r\n" for every header (HTTP/1 wire form), but those named `skip` (a
// header the caller writes itself).
void AppendHeaders(Buffer& out, const HeaderMap& headers, std::string_view skip = {});

// Calls fn(token) for each element of a comma-separated header list (RFC 9110 5.6.1), spaces and
// tabs around it trimmed, empty elements skipped; stops when fn returns false.
template <class Fn>
void ForEachListToken(std::string_view list, Fn fn) {
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view token = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t'))
      token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (!token.empty() && !fn(token)) return;
  }
}

// Lower-cases ASCII in place.
void ToLowerAscii(std::string* s);
bool EqualsIgnoreCase(std::string_view a, std::string_view b);
// The standard reason phrase for `status`, or "Unknown".
const char* ReasonPhrase(int status);

}  // namespace rpx
