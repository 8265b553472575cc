// A growable byte buffer with a consumed front and free space at the back. Not thread-safe: it
// belongs to one connection on one worker. Memory is reused across requests (Drain keeps the
// allocation), so a keep-alive connection does not allocate per request once warm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

namespace rpx {

class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  size_t size() const { return end_ - begin_; }
  bool empty() const { return end_ == begin_; }
  const char* data() const { return data_.get() + begin_; }
  std::string_view view() const { return std::string_view(data(), size()); }

  void Append(const char* p, size_t n) {
    if (n == 0) return;
    char* dst = Reserve(n);
    memcpy(dst, p, n);
    end_ += n;
  }
  void Append(std::string_view s) { Append(s.data(), s.size()); }
  // Appends `v` in decimal / lower-case hex (no snprintf on the request path).
  void AppendDecimal(uint64_t v);
  void AppendHex(uint64_t v);

  // Returns a pointer to at least `n` writable bytes at the back; call Commit with what was used.
  char* Reserve(size_t n);
  void Commit(size_t n) { end_ += n; }
  size_t WritableBytes() const { return capacity_ - end_; }

  void Drain(size_t n) {
    begin_ += n;
    if (begin_ >= end_) begin_ = end_ = 0;
  }
  void Clear() { begin_ = end_ = 0; }
  // Frees memory held by an empty buffer, so idle connections stay small.
  void ShrinkIfEmpty() {
    if (empty() && capacity_ > kKeepWhenIdle) {
      data_.reset();
      capacity_ = 0;
    }
  }
  size_t capacity() const { return capacity_; }

 private:
  // Kept across responses: below glibc's mmap threshold, so reuse costs no page faults.
  static constexpr size_t kKeepWhenIdle = 64 * 1024;
  std::unique_ptr<char[]> data_;
  size_t capacity_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace rpx
