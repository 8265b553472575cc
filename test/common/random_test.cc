#include "source/common/random.h"

#include <cstdio>
#include <set>

#include "gtest/gtest.h"

namespace rpx {
namespace {

TEST(RandomTest, UuidIsVersion4AndUnique) {
  Random r(1);
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    std::string u = r.Uuid();
    ASSERT_EQ(u.size(), 36u);
    EXPECT_EQ(u[8], '-');
    EXPECT_EQ(u[13], '-');
    EXPECT_EQ(u[14], '4');
    EXPECT_TRUE(u[19] == '8' || u[19] == '9' || u[19] == 'a' || u[19] == 'b') << u;
    EXPECT_TRUE(seen.insert(u).second);
  }
}

// The 32 digits are the two random words (version and variant bits set), high digit first.
TEST(RandomTest, UuidDigitsAreTheRandomWords) {
  for (uint64_t seed : {1u, 7u, 12345u}) {
    Random r(seed), same(seed);
    char want[64];
    for (int i = 0; i < 100; ++i) {
      uint64_t a = same.Next(), b = same.Next();
      a = (a & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;
      b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;
      snprintf(want, sizeof(want), "%08llx-%04llx-%04llx-%04llx-%012llx",
               static_cast<unsigned long long>(a >> 32),
               static_cast<unsigned long long>((a >> 16) & 0xffff),
               static_cast<unsigned long long>(a & 0xffff),
               static_cast<unsigned long long>(b >> 48),
               static_cast<unsigned long long>(b & 0xffffffffffffULL));
      ASSERT_EQ(r.Uuid(), want);
    }
  }
}

TEST(RandomTest, DifferentSeedsDiffer) {
  Random a(1), b(2);
  EXPECT_NE(a.Next(), b.Next());
}

}  // namespace
}  // namespace rpx
