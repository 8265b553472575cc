#include "source/common/histogram.h"

namespace rpx {

const double kHistogramBounds[kHistogramBuckets] = {
    0.5,  1,    5,     10,    25,    50,     100,    250,     500,    1000,
    2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000};

double HistogramTotals::Quantile(double q) const {
  if (count == 0) return 0;
  double rank = q * static_cast<double>(count);
  uint64_t seen = 0;
  for (int i = 0; i <= kHistogramBuckets; ++i) {
    if (buckets[i] == 0) continue;
    if (static_cast<double>(seen + buckets[i]) >= rank) {
      double lo = i == 0 ? 0 : kHistogramBounds[i - 1];
      double hi = i < kHistogramBuckets ? kHistogramBounds[i] : lo;
      double within = (rank - static_cast<double>(seen)) / static_cast<double>(buckets[i]);
      if (within < 0) within = 0;
      return lo + (hi - lo) * within;
    }
    seen += buckets[i];
  }
  return kHistogramBounds[kHistogramBuckets - 1];
}

}  // namespace rpx
