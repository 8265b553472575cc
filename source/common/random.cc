#include "source/common/random.h"

#include <cstring>

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
  char out[kUuidSize];
  Uuid(out);
  return std::string(out, kUuidSize);
}

void Random::Uuid(char out[kUuidSize]) {
  // Two hex digits per byte from one table.
  static const struct Pairs {
    char c[256][2];
    Pairs() {
      static const char kHex[] = "0123456789abcdef";
      for (int i = 0; i < 256; ++i) {
        c[i][0] = kHex[i >> 4];
        c[i][1] = kHex[i & 0xf];
      }
    }
  } kPairs;
  uint64_t a = Next(), b = Next();
  a = (a & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // variant 10
  // xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx from the high byte down: the dashes fall between
  // bytes, so each byte is one two-digit copy.
  char* o = out;
  auto bytes = [&](uint64_t v, int from, int to) {
    for (int i = from; i < to; ++i) {
      memcpy(o, kPairs.c[(v >> (56 - 8 * i)) & 0xff], 2);
      o += 2;
    }
  };
  bytes(a, 0, 4);
  *o++ = '-';
  bytes(a, 4, 6);
  *o++ = '-';
  bytes(a, 6, 8);
  *o++ = '-';
  bytes(b, 0, 2);
  *o++ = '-';
  bytes(b, 2, 8);
}

}  // namespace rpx
