#include "source/common/assert.h"

#include "gtest/gtest.h"

namespace rpx {
namespace {

TEST(AssertTest, TrueConditionPasses) {
  int evaluated = 0;
  RPX_ASSERT(++evaluated == 1);
#ifdef NDEBUG
  EXPECT_EQ(evaluated, 0);  // compiled out: the condition is not evaluated
#else
  EXPECT_EQ(evaluated, 1);
#endif
}

#ifndef NDEBUG
TEST(AssertDeathTest, FalseConditionAbortsNamingIt) {
  EXPECT_DEATH(RPX_ASSERT(1 + 1 == 3), "assert_test.cc:[0-9]+: assertion failed: 1 \\+ 1 == 3");
}
#endif

}  // namespace
}  // namespace rpx
