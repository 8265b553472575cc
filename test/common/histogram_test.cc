#include "source/common/histogram.h"

#include "gtest/gtest.h"

namespace rpx {
namespace {

TEST(HistogramTest, EnvoysBucketsAndSums) {
  Histogram h;
  for (uint64_t v : {0, 1, 2, 5, 6, 3600000, 3600001}) h.Record(v);
  EXPECT_EQ(h.bucket(0), 1u);                  // 0 <= 0.5
  EXPECT_EQ(h.bucket(1), 1u);                  // 1
  EXPECT_EQ(h.bucket(2), 2u);                  // 2, 5
  EXPECT_EQ(h.bucket(3), 1u);                  // 6 <= 10
  EXPECT_EQ(h.bucket(18), 1u);                 // 3600000
  EXPECT_EQ(h.bucket(kHistogramBuckets), 1u);  // above every bound
  EXPECT_EQ(h.sum(), 0u + 1 + 2 + 5 + 6 + 3600000 + 3600001);
}

TEST(HistogramTest, TotalsAndQuantiles) {
  Histogram a, b;
  for (int i = 0; i < 50; ++i) a.Record(3);   // (1, 5]
  for (int i = 0; i < 50; ++i) b.Record(40);  // (25, 50]
  HistogramTotals t;
  EXPECT_EQ(t.Quantile(0.5), 0);
  t.Add(a);
  t.Add(b);
  EXPECT_EQ(t.count, 100u);
  EXPECT_EQ(t.sum, 50u * 3 + 50u * 40);
  EXPECT_DOUBLE_EQ(t.Quantile(0.25), 3);     // halfway through (1, 5]
  EXPECT_DOUBLE_EQ(t.Quantile(0.5), 5);      // the top of (1, 5]
  EXPECT_DOUBLE_EQ(t.Quantile(0.75), 37.5);  // halfway through (25, 50]
  EXPECT_DOUBLE_EQ(t.Quantile(1), 50);
}

}  // namespace
}  // namespace rpx
