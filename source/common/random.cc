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
  char out[kUuidSize];
  Uuid(out);
  return std::string(out, kUuidSize);
}

void Random::Uuid(char out[kUuidSize]) {
  static const char kHex[] = "0123456789abcdef";
  uint64_t a = Next(), b = Next();
  a = (a & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // variant 10
  // xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx, from the high nibble down; one branch-free pass.
  static constexpr int kPos[32] = {0,  1,  2,  3,  4,  5,  6,  7,  9,  10, 11, 12, 14, 15, 16, 17,
                                   19, 20, 21, 22, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35};
  for (int i = 0; i < 16; ++i) out[kPos[i]] = kHex[(a >> (60 - 4 * i)) & 0xf];
  for (int i = 0; i < 16; ++i) out[kPos[16 + i]] = kHex[(b >> (60 - 4 * i)) & 0xf];
  out[8] = out[13] = out[18] = out[23] = '-';
}

}  // namespace rpx
