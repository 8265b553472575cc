#include "source/common/buffer.h"

#include <algorithm>

#include "source/common/free_blocks.h"

namespace rpx {

namespace {
// Blocks kept per thread: 8 MiB at most, far more than one event loop has in flight at once.
using Blocks = FreeBlocks<Buffer::kBlockSize, 256>;

char* TakeBlock() { return static_cast<char*>(Blocks::Take()); }

// Storage of any other size came from new[].
void FreeBlock(char* p, size_t capacity) {
  if (capacity == Buffer::kBlockSize) {
    Blocks::Give(p);
  } else {
    delete[] p;
  }
}
}  // namespace

void Buffer::FreeStorage() {
  if (data_) FreeBlock(data_, capacity_);
  data_ = nullptr;
  capacity_ = begin_ = end_ = 0;
}

char* Buffer::ReserveSlow(size_t n) {
  size_t used = size();
  if (!data_ && n <= kBlockSize) {
    data_ = TakeBlock();
    capacity_ = kBlockSize;
    begin_ = end_ = 0;
    return data_;
  }
  // Slide the live bytes to the front only when that frees at least as much room as it copies
  // (begin_ >= used): then each byte is moved O(1) times. Sliding a large buffer on every small
  // append would be quadratic (a 1 MiB memmove per 16 KiB read).
  if (capacity_ >= used + n && begin_ >= used) {
    memmove(data_, data_ + begin_, used);
    begin_ = 0;
    end_ = used;
    return data_ + end_;
  }
  size_t cap = std::max<size_t>(capacity_ * 2, kBlockSize);
  while (cap < used + n) cap *= 2;
  char* next = cap == kBlockSize ? TakeBlock() : new char[cap];
  if (used) memcpy(next, data_ + begin_, used);
  if (data_) FreeBlock(data_, capacity_);
  data_ = next;
  capacity_ = cap;
  begin_ = 0;
  end_ = used;
  return data_ + end_;
}

void Buffer::AppendDecimal(uint64_t v) {
  char tmp[20];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  char* p = Reserve(n);
  for (int i = 0; i < n; ++i) p[i] = tmp[n - 1 - i];
  Commit(n);
}

void Buffer::AppendHex(uint64_t v) {
  static const char kHex[] = "0123456789abcdef";
  char tmp[16];
  int n = 0;
  do {
    tmp[n++] = kHex[v & 0xf];
    v >>= 4;
  } while (v);
  char* p = Reserve(n);
  for (int i = 0; i < n; ++i) p[i] = tmp[n - 1 - i];
  Commit(n);
}

}  // namespace rpx
