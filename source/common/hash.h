// Stable hashes: the same value on every worker, in every process and after every restart (unlike
// absl::Hash, which is seeded per process). XxHash64 is xxHash's XXH64, the function Envoy uses
// for hash_policy keys and ring hash / Maglev host placement. Any thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace rpx {

uint64_t XxHash64(std::string_view data, uint64_t seed = 0);

}  // namespace rpx
