#include "source/network/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace rpx {

absl::StatusOr<SocketAddress> SocketAddress::FromIpPort(const std::string& ip, uint32_t port) {
  if (port > 65535) return absl::InvalidArgumentError(absl::StrCat("port ", port, " out of range"));
  SocketAddress a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    a.len = sizeof(sockaddr_in);
    return a;
  }
  if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    a.len = sizeof(sockaddr_in6);
    return a;
  }
  return absl::InvalidArgumentError(absl::StrCat("'", ip, "' is not an IPv4 or IPv6 address"));
}

SocketAddress SocketAddress::LocalOf(int fd) {
  SocketAddress a;
  a.len = sizeof(a.storage);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0)
    return SocketAddress();
  return a;
}

SocketAddress SocketAddress::FromSockaddr(const sockaddr* sa, socklen_t len) {
  SocketAddress a;
  memcpy(&a.storage, sa, len);
  a.len = len;
  return a;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
}

std::string FormatIpv4(const uint8_t bytes[4]) {
  char buf[16];
  char* p = buf;
  for (int i = 0; i < 4; ++i) {
    unsigned v = bytes[i];
    if (i > 0) *p++ = '.';
    if (v >= 100) *p++ = static_cast<char>('0' + v / 100);
    if (v >= 10) *p++ = static_cast<char>('0' + v / 10 % 10);
    *p++ = static_cast<char>('0' + v % 10);
  }
  return std::string(buf, p - buf);
}

std::string SocketAddress::Ip() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET) {
    return FormatIpv4(reinterpret_cast<const uint8_t*>(
        &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr));
  } else if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, buf,
              sizeof(buf));
  }
  return buf;
}

std::string SocketAddress::ToString() const {
  if (family() == AF_INET6) return absl::StrCat("[", Ip(), "]:", port());
  return absl::StrCat(Ip(), ":", port());
}

bool SocketAddress::operator==(const SocketAddress& o) const {
  if (family() != o.family()) return false;
  if (family() == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    const auto* b = reinterpret_cast<const sockaddr_in*>(&o.storage);
    return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
  }
  if (family() == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    const auto* b = reinterpret_cast<const sockaddr_in6*>(&o.storage);
    return a->sin6_port == b->sin6_port &&
           memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) == 0;
  }
  return len == o.len && memcmp(&storage, &o.storage, len) == 0;
}

absl::StatusOr<SocketAddress> SocketAddress::ParseIpPort(std::string_view s) {
  const std::string str(s);  // for messages
  std::string_view ip, port;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("'", str, "' is not [ipv6]:port"));
    }
    ip = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string_view::npos || s.find(':') != colon) {
      return absl::InvalidArgumentError(absl::StrCat("'", str, "' is not ip:port"));
    }
    ip = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  uint32_t p = 0;
  if (port.empty() || port.size() > 5) {
    return absl::InvalidArgumentError(absl::StrCat("'", str, "' has no valid port"));
  }
  for (char c : port) {
    if (c < '0' || c > '9') {
      return absl::InvalidArgumentError(absl::StrCat("'", str, "' has no valid port"));
    }
    p = p * 10 + static_cast<uint32_t>(c - '0');
  }
  if (p == 0 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", str, "' has no valid port"));
  }
  return FromIpPort(std::string(ip), p);
}

SocketAddress SocketAddress::WithPort(uint16_t port) const {
  SocketAddress a = *this;
  if (family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port = htons(port);
  } else if (family() == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port = htons(port);
  }
  return a;
}

SocketAddress SocketAddress::AnyWithPort() const {
  SocketAddress a;
  if (family() == AF_INET) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = reinterpret_cast<const sockaddr_in*>(&storage)->sin_port;
    return FromSockaddr(reinterpret_cast<const sockaddr*>(&in), sizeof(in));
  }
  if (family() == AF_INET6) {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_port = reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port;
    return FromSockaddr(reinterpret_cast<const sockaddr*>(&in6), sizeof(in6));
  }
  return a;
}

}  // namespace rpx
