#include "source/network/original_dst.h"

#include <netinet/in.h>
#include <sys/socket.h>

namespace rpx {
namespace {
// From <linux/netfilter_ipv4.h> and <linux/netfilter_ipv6/ip6_tables.h>, which cannot be
// included next to glibc's <netinet/in.h>.
constexpr int SO_ORIGINAL_DST = 80;
constexpr int IP6T_SO_ORIGINAL_DST = 80;
}  // namespace

bool OriginalDestination(int fd, const SocketAddress& local, SocketAddress* out) {
  if (local.len == 0) return false;
  SocketAddress a;
  a.len = sizeof(a.storage);
  int rc;
  if (local.storage.ss_family == AF_INET6) {
    rc = ::getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &a.storage, &a.len);
    if (rc != 0) {
      // An IPv4 client on a dual-stack socket (a v4-mapped local address): IPv4's conntrack.
      a.len = sizeof(a.storage);
      rc = ::getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &a.storage, &a.len);
    }
  } else if (local.storage.ss_family == AF_INET) {
    rc = ::getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &a.storage, &a.len);
  } else {
    return false;
  }
  if (rc != 0 || a.len == 0 || a == local) return false;
  *out = a;
  return true;
}

}  // namespace rpx
