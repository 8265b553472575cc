// A connected TCP pair on 127.0.0.1 for tests that drive a Connection over a real socket: `ours`
// is non-blocking (for the Connection), `peer` blocking (for the test). The caller closes both.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace rpx {

struct TcpPair {
  int ours = -1, peer = -1;
};

inline TcpPair MakeTcpPair() {
  TcpPair p;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(l);
    return p;
  }
  p.peer = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(p.peer, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    p.ours = accept4(l, nullptr, nullptr, SOCK_NONBLOCK);
  }
  close(l);
  return p;
}

// Closes `fd` with a reset (RST) instead of an orderly end of stream (FIN).
inline void CloseWithReset(int fd) {
  struct linger reset = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  close(fd);
}

}  // namespace rpx
