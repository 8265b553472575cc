#include "source/network/address.h"

#include <arpa/inet.h>
#include <netdb.h>
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

absl::StatusOr<std::vector<SocketAddress>> ResolveHost(const std::string& host, uint32_t port) {
  auto literal = SocketAddress::FromIpPort(host, port);
  if (literal.ok()) return std::vector<SocketAddress>{*literal};
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  std::vector<SocketAddress> out;
  for (auto* ai = res; ai; ai = ai->ai_next) {
    SocketAddress a = SocketAddress::FromSockaddr(ai->ai_addr, ai->ai_addrlen);
    if (a.family() == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port = htons(port);
    } else if (a.family() == AF_INET6) {
      reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port = htons(port);
    } else {
      continue;
    }
    bool dup = false;
    for (auto& o : out) dup |= (o == a);
    if (!dup) out.push_back(a);
  }
  freeaddrinfo(res);
  if (out.empty()) return absl::UnavailableError(absl::StrCat("no addresses for '", host, "'"));
  return out;
}

}  // namespace rpx
