#include "source/network/listener.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "source/common/logger.h"

namespace rpx {

absl::StatusOr<int> OpenListenSocket(const SocketAddress& addr, bool reuse_port, int backlog,
                                     const SocketOptions& options, bool listen_now) {
  int fd = socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket(): ", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (reuse_port) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  // Accepted sockets inherit it: no setsockopt per connection (Listener checks it held).
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // The configured options come after rpx's own, so that they can override them (as in Envoy).
  auto applied = ApplySocketOptions(fd, options, SocketOption::State::kPrebind);
  if (!applied.ok()) {
    close(fd);
    return applied;
  }
  if (bind(fd, addr.sa(), addr.len) != 0) {
    int e = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot bind ", addr.ToString(), ": ", strerror(e)));
  }
  applied = ApplySocketOptions(fd, options, SocketOption::State::kBound);
  if (!applied.ok()) {
    close(fd);
    return applied;
  }
  if (listen_now) {
    applied = StartListening(fd, addr, backlog, options);
    if (!applied.ok()) {
      close(fd);
      return applied;
    }
  }
  return fd;
}

absl::Status StartListening(int fd, const SocketAddress& addr, int backlog,
                            const SocketOptions& options) {
  int listening = 0;
  socklen_t len = sizeof(listening);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening) {
    return absl::OkStatus();
  }
  if (listen(fd, backlog) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", addr.ToString(), ": ", strerror(errno)));
  }
  return ApplySocketOptions(fd, options, SocketOption::State::kListening);
}

absl::StatusOr<std::vector<int>> OpenWorkerSockets(SocketAddress addr, bool reuse_port,
                                                   uint32_t workers, const SocketOptions& options,
                                                   bool replacing_own) {
  std::vector<int> fds;
  if (reuse_port && addr.port() != 0 && !replacing_own) {
    // SO_REUSEPORT would let us share a port with a stranger's socket: check it is free first.
    auto probe = OpenListenSocket(addr, false, 1);
    if (!probe.ok()) return probe.status();
    close(*probe);
  }
  if (replacing_own) {
    bool any = false;
    for (const auto& o : options) any |= o.state == SocketOption::State::kListening;
    if (any) {
      auto scratch = SocketAddress::FromIpPort(addr.Ip(), 0);
      if (scratch.ok()) {
        auto fd = OpenListenSocket(*scratch, false, 1, options);
        if (!fd.ok()) return fd.status();
        close(*fd);
      }
    }
  }
  uint32_t n = reuse_port ? workers : 1;
  for (uint32_t i = 0; i < n; ++i) {
    auto fd = OpenListenSocket(addr, reuse_port, kListenBacklog, options, !replacing_own);
    if (!fd.ok()) {
      for (int f : fds) close(f);
      return fd.status();
    }
    if (i == 0 && addr.port() == 0) {
      socklen_t len = sizeof(addr.storage);
      getsockname(*fd, reinterpret_cast<sockaddr*>(&addr.storage), &len);
    }
    fds.push_back(*fd);
  }
  return fds;
}

Listener::Listener(Dispatcher& dispatcher, int fd, AcceptCallback cb)
    : dispatcher_(dispatcher), fd_(fd), cb_(std::move(cb)) {
  // Off when a configured socket option turned it off (or a socket came from elsewhere).
  int on = 0;
  socklen_t len = sizeof(on);
  nodelay_inherited_ = getsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, &len) == 0 && on != 0;
  event_ = dispatcher_.CreateFileEvent(
      fd_, [this](uint32_t) { OnReadable(); }, FileEvent::kRead);
}

Listener::~Listener() {
  event_.reset();
  close(fd_);
}

void Listener::Pause(bool paused) { event_->SetInterest(paused ? 0 : FileEvent::kRead); }

SocketAddress Listener::LocalAddress() const {
  SocketAddress a;
  a.len = sizeof(a.storage);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&a.storage), &a.len);
  return a;
}

void Listener::TakeQueued(const AcceptCallback& cb) { Accept(cb, SIZE_MAX); }

// Accept a bounded batch so one busy listener cannot starve established connections.
void Listener::OnReadable() { Accept(cb_, 64); }

void Listener::Accept(const AcceptCallback& cb, size_t max) {
  for (size_t i = 0; i < max; ++i) {
    sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;  // that one is gone; next
      if (errno == EAGAIN) return;
      if (errno == EMFILE || errno == ENFILE) {
        RPX_LOG(kWarn, "accept: %s (out of file descriptors)", strerror(errno));
        return;
      }
      RPX_LOG(kWarn, "accept: %s", strerror(errno));
      return;
    }
    if (!nodelay_inherited_) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    cb(fd, SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len));
  }
}

}  // namespace rpx
