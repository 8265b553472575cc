// Socket options from configuration (Envoy's core.v3.SocketOption): a raw setsockopt(level, name,
// value) applied to a listener's sockets or to a cluster's upstream connections at a given point
// of the socket's life. rpx does not interpret them: the kernel decides what a level and name
// mean (e.g. IPPROTO_TCP/TCP_CONGESTION with "cubic", SOL_SOCKET/SO_KEEPALIVE with 1).
// Plain values and a pure function; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace rpx {

struct SocketOption {
  enum class State { kPrebind, kBound, kListening };
  std::string description;  // for messages only
  int level = 0;
  int name = 0;
  bool is_int = true;  // int_value (passed as a C int) or buf_value (passed as bytes)
  int int_value = 0;
  std::string buf_value;
  State state = State::kPrebind;

  bool operator==(const SocketOption& o) const {
    return level == o.level && name == o.name && is_int == o.is_int && int_value == o.int_value &&
           buf_value == o.buf_value && state == o.state;
  }
  // "TCP_CONGESTION (level 6, name 13)"-style text for errors: the description if any, then the
  // numbers.
  std::string Describe() const;
};

using SocketOptions = std::vector<SocketOption>;

// Applies every option of `options` whose state is `state` to `fd`, in order. Stops at the first
// that the kernel refuses and returns an error naming it and errno's text.
absl::Status ApplySocketOptions(int fd, const SocketOptions& options, SocketOption::State state);

}  // namespace rpx
