// A growable byte buffer with a consumed front and free space at the back. Not thread-safe: it
// belongs to one connection on one worker. Storage comes in blocks of kBlockSize from a per-thread
// pool: a connection gives its block back whenever its buffer empties (ReleaseIfEmpty), so an idle
// keep-alive connection holds no buffer memory, and the next busy one reuses a block that is
// still in cache. Buffers that grow past a block (large bodies to slow readers) are plain heap
// memory, freed when they empty.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

namespace rpx {

class Buffer {
 public:
  static constexpr size_t kBlockSize = 32 * 1024;

  Buffer() = default;
  ~Buffer() { FreeStorage(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  size_t size() const { return end_ - begin_; }
  bool empty() const { return end_ == begin_; }
  const char* data() const { return data_ + begin_; }
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
  char* Reserve(size_t n) {
    if (capacity_ - end_ >= n) return data_ + end_;
    return ReserveSlow(n);
  }
  void Commit(size_t n) { end_ += n; }
  size_t WritableBytes() const { return capacity_ - end_; }

  void Drain(size_t n) {
    begin_ += n;
    if (begin_ >= end_) begin_ = end_ = 0;
  }
  void Clear() { begin_ = end_ = 0; }
  // Gives the storage of an empty buffer back (to the thread's pool, or the heap).
  void ReleaseIfEmpty() {
    if (empty() && data_) FreeStorage();
  }
  size_t capacity() const { return capacity_; }

 private:
  char* ReserveSlow(size_t n);
  void FreeStorage();

  char* data_ = nullptr;
  size_t capacity_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace rpx
