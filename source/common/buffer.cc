#include "source/common/buffer.h"

#include <algorithm>

namespace rpx {

char* Buffer::Reserve(size_t n) {
  if (capacity_ - end_ >= n) return data_.get() + end_;
  size_t used = size();
  if (capacity_ >= used + n && begin_ > 0) {
    // Enough room if we slide the live bytes to the front.
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

}  // namespace rpx
