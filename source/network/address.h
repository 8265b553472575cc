// IPv4/IPv6 socket addresses. Plain values, any thread.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace rpx {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;

  // `ip` must be a numeric IPv4 or IPv6 address.
  static absl::StatusOr<SocketAddress> FromIpPort(const std::string& ip, uint32_t port);
  static SocketAddress FromSockaddr(const sockaddr* sa, socklen_t len);
  // "1.2.3.4:80" or "[::1]:80" (what ToString prints), with a numeric address and a port in
  // [1, 65535]; an error naming what is wrong otherwise.
  static absl::StatusOr<SocketAddress> ParseIpPort(std::string_view s);
  // The local address of socket `fd` (getsockname(2)); empty (len 0) if it has none.
  static SocketAddress LocalOf(int fd);
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
  uint16_t port() const;
  std::string Ip() const;
  std::string ToString() const;  // "1.2.3.4:80" or "[::1]:80"
  // Same family, address and port (what ToString shows), compared without formatting: pools and
  // health state are matched by address on every host-set update.
  bool operator==(const SocketAddress& o) const;
  // The same address with another port.
  SocketAddress WithPort(uint16_t port) const;
  // The wildcard address of this one's family (0.0.0.0 or ::) with its port.
  SocketAddress AnyWithPort() const;
};

// "a.b.c.d" for an IPv4 address given as its 4 bytes in network order: what inet_ntop prints,
// without the sprintf it uses (the client address goes into every request's x-forwarded-for).
std::string FormatIpv4(const uint8_t bytes[4]);

}  // namespace rpx
