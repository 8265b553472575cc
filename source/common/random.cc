#include "source/common/random.h"

namespace rpx {

Random::Random(uint64_t seed) {
  // splitmix64 spreads any seed (even 0) over the state.
  for (auto& s : s_) {
    seed += 0x9e3779b97f4a7c15ULL;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    s = z ^ (z >> 31);
  }
}

std::string Random::Uuid() {
  static const char kHex[] = "0123456789abcdef";
  uint64_t a = Next(), b = Next();
  a = (a & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // variant 10
  std::string out(36, '-');
  int pos = 0;
  for (int i = 0; i < 32; ++i) {
    if (pos == 8 || pos == 13 || pos == 18 || pos == 23) ++pos;
    uint64_t word = i < 16 ? a : b;
    int shift = 60 - 4 * (i % 16);
    out[pos++] = kHex[(word >> shift) & 0xf];
  }
  return out;
}

}  // namespace rpx
