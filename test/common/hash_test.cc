#include "source/common/hash.h"

#include <string>

#include "gtest/gtest.h"

namespace rpx {
namespace {

// Reference values from the xxHash library (Debian's libxxhash0, XXH64), every length class:
// empty, under 4, under 8 and 16, one 32-byte stripe with a tail, several stripes.
TEST(HashTest, XxHash64MatchesTheReference) {
  EXPECT_EQ(XxHash64(""), 0xef46db3751d8e999ULL);
  EXPECT_EQ(XxHash64("a"), 0xd24ec4f1a98c6e5bULL);
  EXPECT_EQ(XxHash64("abc"), 0x44bc2cf5ad770999ULL);
  EXPECT_EQ(XxHash64("127.0.0.1:8080_0"), 0xf673a43b9624fa24ULL);
  EXPECT_EQ(XxHash64("Nobody inspects the spammish repetition"), 0xfbcea83c8a378bf1ULL);
  std::string bytes;
  for (int i = 0; i < 100; ++i) bytes.push_back(static_cast<char>(i));
  EXPECT_EQ(XxHash64(bytes), 0x6ac1e58032166597ULL);
  EXPECT_EQ(XxHash64("", 1), 0xd5afba1336a3be4bULL);
  EXPECT_EQ(XxHash64("abc", 1), 0xbea9ca8199328908ULL);
  EXPECT_EQ(XxHash64(bytes, 1), 0x3d19a3a2098a7023ULL);
}

}  // namespace
}  // namespace rpx
