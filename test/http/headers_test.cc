#include "source/http/headers.h"

#include "gtest/gtest.h"

namespace rpx {
namespace {

TEST(HeaderMapTest, AddSetRemove) {
  HeaderMap h;
  h.Add("a", "1");
  h.Add("a", "2");
  h.Add("b", "3");
  EXPECT_EQ(*h.Get("a"), "1");
  h.Set("a", "9");
  EXPECT_EQ(h.size(), 2u);
  EXPECT_EQ(*h.Get("a"), "9");
  EXPECT_EQ(h.Remove("b"), 1);
  EXPECT_EQ(h.Get("b"), nullptr);
}

TEST(HeadersTest, Helpers) {
  std::string s = "MiXeD";
  ToLowerAscii(&s);
  EXPECT_EQ(s, "mixed");
  EXPECT_TRUE(EqualsIgnoreCase("Chunked", "chunked"));
  EXPECT_FALSE(EqualsIgnoreCase("chunked", "chunke"));
  EXPECT_STREQ(ReasonPhrase(504), "Gateway Timeout");
}

}  // namespace
}  // namespace rpx
