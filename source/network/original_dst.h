// Where a redirected connection was going: the core of Envoy's envoy.filters.listener.original_dst.
// A connection the kernel redirected to rpx (iptables/nftables REDIRECT or DNAT) has rpx's own
// address as its local address; SO_ORIGINAL_DST (IPv4) and IP6T_SO_ORIGINAL_DST (IPv6) give the
// destination the client asked for, from the connection-tracking entry.
// Thread-safe (a getsockopt on the caller's socket).
#pragma once

#include "source/network/address.h"

namespace rpx {

// The original destination of accepted socket `fd`, whose local address is `local`. False when
// the kernel has none for it (connection tracking not loaded, not a redirected connection) or it
// is `local` itself: the local address is then the destination.
bool OriginalDestination(int fd, const SocketAddress& local, SocketAddress* out);

}  // namespace rpx
