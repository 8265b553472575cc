#include "source/common/buffer.h"

#include <algorithm>

namespace rpx {

char* Buffer::Reserve(size_t n) {
  if (capacity_ - end_ >= n) return data_.get() + end_;
  size_t used = size();
  // Slide the live bytes to the front only when that frees at least as much room as it copies
  // (begin_ >= used): then each byte is moved O(1) times. Sliding a large buffer on every small
  // append would be quadratic (a 1 MiB memmove per 16 KiB read).
  if (capacity_ >= used + n && begin_ >= used) {
    memmove(data_.get(), data_.get() + begin_, used);
    begin_ = 0;
    end_ = used;
    return data_.get() + end_;
  }
  size_t cap = std::max<size_t>(capacity_ * 2, 4096);
  while (cap < used + n) cap *= 2;
  std::unique_ptr<char[]> next(new char[cap]);
  if (used) memcpy(next.get(), data_.get() + begin_, used);
  data_ = std::move(next);
  capacity_ = cap;
  begin_ = 0;
  end_ = used;
  return data_.get() + end_;
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
