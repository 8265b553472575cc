// Helpers shared by the fuzz targets: an invariant check that aborts (so libFuzzer, and the corpus
// replay under the normal test run, report it), and input-derived choices (split points, modes)
// taken from a hash of the input so that the corpus files stay plain protocol bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

namespace rpx {
namespace fuzz {

// FNV-1a: cheap and stable, so a corpus file always replays with the same choices.
inline uint64_t HashInput(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= data[i];
    h *= 1099511628211ull;
  }
  return h;
}

// A deterministic stream of choices seeded by the input's hash (SplitMix64).
class Choices {
 public:
  explicit Choices(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform-ish in [0, n); n > 0.
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t state_;
};

// Sorted, distinct offsets in (0, size) at which the input is cut into reads, as a socket might
// deliver it: sometimes one byte per read over the first 64 bytes, plus 1..max_cuts other cuts.
inline std::vector<size_t> SplitPoints(size_t size, Choices& c, size_t max_cuts) {
  std::vector<size_t> cuts;
  if (size < 2) return cuts;
  if (c.Below(4) == 0) {
    // One byte per read for the first bytes: every boundary case of the incremental parser.
    size_t n = size < 64 ? size : 64;
    for (size_t i = 1; i < n; ++i) cuts.push_back(i);
  }
  size_t extra = 1 + c.Below(max_cuts);
  for (size_t i = 0; i < extra; ++i) cuts.push_back(1 + c.Below(size - 1));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

// For source bugs found and reported but not fixed yet (test/fuzz/README.md, "Findings"): their
// invariants are only checked with RPX_FUZZ_KNOWN_BUGS=1, so that fuzzing can go on past them
// and the corpus replay stays green until the fix lands.
inline bool KnownBugsEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("RPX_FUZZ_KNOWN_BUGS");
    return v != nullptr && v[0] == '1';
  }();
  return enabled;
}

}  // namespace fuzz
}  // namespace rpx
