// Histogram: a latency distribution in Envoy's default buckets (milliseconds), kept the way
// Counter is: each worker records into its own Histogram (one writer, relaxed atomics, no lock on
// the request path) and the admin sums the workers' buckets when it is asked (/stats,
// /stats/prometheus). Values are whole milliseconds, as Envoy records them.
#pragma once

#include <cstdint>

#include "source/common/stats.h"

namespace rpx {

// Envoy's default bucket bounds (ms): 0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000,
// 10000, 30000, 60000, 300000, 600000, 1800000, 3600000.
constexpr int kHistogramBuckets = 19;
extern const double kHistogramBounds[kHistogramBuckets];

class Histogram {
 public:
  void Record(uint64_t ms) {
    // The bounds as whole milliseconds: a value v is at most 0.5 only when it is 0.
    static constexpr uint64_t kIntBounds[kHistogramBuckets] = {
        0,    1,    5,     10,    25,    50,     100,    250,     500,    1000,
        2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000};
    int i = 0;
    while (i < kHistogramBuckets && ms > kIntBounds[i]) ++i;
    buckets_[i].Inc();  // i == kHistogramBuckets: above the last bound (+Inf)
    sum_.Inc(ms);
  }
  // The count in bucket i alone (not cumulative); i == kHistogramBuckets is the overflow.
  uint64_t bucket(int i) const { return buckets_[i].Value(); }
  uint64_t sum() const { return sum_.Value(); }

 private:
  Counter buckets_[kHistogramBuckets + 1];
  Counter sum_;
};

// Several workers' histograms summed (the admin's view).
struct HistogramTotals {
  uint64_t buckets[kHistogramBuckets + 1] = {};
  uint64_t sum = 0;
  uint64_t count = 0;
  void Add(const Histogram& h) {
    for (int i = 0; i <= kHistogramBuckets; ++i) {
      uint64_t n = h.bucket(i);
      buckets[i] += n;
      count += n;
    }
    sum += h.sum();
  }
  // The q-quantile (0..1), interpolated linearly inside its bucket; 0 when empty.
  double Quantile(double q) const;
};

}  // namespace rpx
