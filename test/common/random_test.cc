#include "source/common/random.h"

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

TEST(RandomTest, DifferentSeedsDiffer) {
  Random a(1), b(2);
  EXPECT_NE(a.Next(), b.Next());
}

}  // namespace
}  // namespace rpx
