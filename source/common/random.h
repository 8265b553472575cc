// A fast, non-cryptographic random generator (xorshift128+). One per worker, not thread-safe.
// Used for load balancing, weighted clusters and x-request-id, where speed matters more than
// unpredictability.
#pragma once

#include <cstdint>
#include <string>

namespace rpx {

class Random {
 public:
  explicit Random(uint64_t seed);
  uint64_t Next() {
    uint64_t s1 = s_[0];
    const uint64_t s0 = s_[1];
    s_[0] = s0;
    s1 ^= s1 << 23;
    s_[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return s_[1] + s0;
  }
  // A random (version 4) UUID in its canonical 36-character form.
  static constexpr size_t kUuidSize = 36;
  std::string Uuid();
  // The same into `out` (no allocation; the request path uses this one).
  void Uuid(char out[kUuidSize]);

 private:
  uint64_t s_[2];
};

}  // namespace rpx
