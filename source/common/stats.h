// Counters and gauges. Each one has exactly one writer thread (the worker or main thread that owns
// it), so updates are a relaxed load and store, not a locked read-modify-write; any thread (the
// admin handler) may read them. Stats of one kind are kept per worker and summed when read.
#pragma once

#include <atomic>
#include <cstdint>

namespace rpx {

class Counter {
 public:
  void Inc(uint64_t n = 1) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  uint64_t Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// A gauge may go down; one writer, so it is a counter that can also decrement.
class Gauge {
 public:
  void Inc() { v_.store(v_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  void Dec() { v_.store(v_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed); }
  int64_t Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

}  // namespace rpx
