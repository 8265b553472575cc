#include "source/network/listener.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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

std::vector<int> InheritedSockets::Take(const SocketAddress& addr, size_t max) {
  std::vector<int> out;
  auto it = fds_.find(addr.ToString());
  if (it == fds_.end()) return out;
  while (out.size() < max && !it->second.empty()) {
    out.push_back(it->second.back());
    it->second.pop_back();
  }
  if (it->second.empty()) fds_.erase(it);
  return out;
}

std::vector<int> InheritedSockets::TakeRest() {
  std::vector<int> out;
  for (auto& [address, fds] : fds_) out.insert(out.end(), fds.begin(), fds.end());
  fds_.clear();
  return out;
}

size_t InheritedSockets::size() const {
  size_t n = 0;
  for (const auto& [address, fds] : fds_) n += fds.size();
  return n;
}

absl::StatusOr<std::vector<int>> OpenWorkerSockets(SocketAddress addr, bool reuse_port,
                                                   uint32_t workers, const SocketOptions& options,
                                                   bool replacing_own,
                                                   InheritedSockets* inherited) {
  std::vector<int> fds;
  uint32_t n = reuse_port ? workers : 1;
  if (inherited && addr.port() != 0 && !replacing_own) {
    fds = inherited->Take(addr, n);
    for (int fd : fds) {
      // The predecessor's options may differ from ours: ours apply from now on.
      for (auto state : {SocketOption::State::kPrebind, SocketOption::State::kBound,
                         SocketOption::State::kListening}) {
        auto applied = ApplySocketOptions(fd, options, state);
        if (!applied.ok()) {
          for (int f : fds) close(f);
          return applied;
        }
      }
    }
    if (!fds.empty()) {
      int has_reuse_port = 0;
      socklen_t len = sizeof(has_reuse_port);
      getsockopt(fds[0], SOL_SOCKET, SO_REUSEPORT, &has_reuse_port, &len);
      // Without SO_REUSEPORT on the inherited sockets no other socket can join them: the
      // workers without one leave the listener to those that have one.
      while (reuse_port && has_reuse_port && fds.size() < n) {
        auto fd = OpenListenSocket(addr, true, kListenBacklog, options);
        if (!fd.ok()) {
          for (int f : fds) close(f);
          return fd.status();
        }
        fds.push_back(*fd);
      }
      return fds;
    }
  }
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

class Listener::AcceptEvent final : public FileEvent {
 public:
  AcceptEvent(Dispatcher& d, int fd, Listener* owner) : FileEvent(d, fd, kRead), owner_(owner) {}

 private:
  void OnEvents(uint32_t) override { owner_->OnReadable(); }
  size_t AcceptAheadSlots(AcceptSlot** slots) override { return owner_->AcceptAheadSlots(slots); }
  void OnAcceptAhead(size_t slot, int result) override { owner_->OnAcceptAhead(slot, result); }
  Listener* owner_;
};

Listener::Listener(Dispatcher& dispatcher, int fd, AcceptCallback cb)
    : dispatcher_(dispatcher), fd_(fd), cb_(std::move(cb)) {
  // Off when a configured socket option turned it off (or a socket came from elsewhere).
  int on = 0;
  socklen_t len = sizeof(on);
  nodelay_inherited_ = getsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, &len) == 0 && on != 0;
  event_ = std::make_unique<AcceptEvent>(dispatcher_, fd_, this);
}

Listener::~Listener() {
  event_.reset();
  // Taken by accept batching and not handed out (the event was dropped from its batch): these
  // are reset, as the connections still queued are by the close below.
  for (size_t i = 0; i < ahead_offered_; ++i) {
    if (ahead_result_[i] >= 0) close(ahead_result_[i]);
  }
  close(fd_);
}

void Listener::Pause(bool paused) { event_->SetInterest(paused ? 0 : FileEvent::kRead); }

SocketAddress Listener::LocalAddress() const {
  SocketAddress a;
  a.len = sizeof(a.storage);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&a.storage), &a.len);
  return a;
}

void Listener::TakeQueued(const AcceptCallback& cb) {
  size_t accepted = 0;
  TakeAccepted(cb, &accepted);
  Accept(cb, SIZE_MAX);  // even after an empty queue there: connections may have come since
}

void Listener::OnReadable() {
  size_t accepted = 0;
  if (TakeAccepted(cb_, &accepted)) accepted += Accept(cb_, kAcceptBatch - accepted);
  ahead_next_ = std::clamp<size_t>(accepted + 1, 1, kMaxAcceptAhead);
}

size_t Listener::AcceptAheadSlots(AcceptSlot** slots) {
  if (ahead_offered_ != 0) return 0;  // the last round's are not handed out yet
  for (size_t i = 0; i < ahead_next_; ++i) {
    ahead_[i].len = sizeof(ahead_[i].addr);
    ahead_result_[i] = -ECANCELED;
  }
  ahead_offered_ = ahead_next_;
  *slots = ahead_;
  return ahead_offered_;
}

void Listener::OnAcceptAhead(size_t slot, int result) {
  if (slot < ahead_offered_) ahead_result_[slot] = result;
}

namespace {
// Whether accepting may go on after error `err` (an errno): a connection that failed before we
// took it is gone, the next one may be fine; the rest end the round.
bool AcceptMayContinue(int err) {
  if (err == EINTR || err == ECONNABORTED) return true;
  if (err == EAGAIN) return false;
  if (err == EMFILE || err == ENFILE) {
    RPX_LOG(kWarn, "accept: %s (out of file descriptors)", strerror(err));
  } else {
    RPX_LOG(kWarn, "accept: %s", strerror(err));
  }
  return false;
}
}  // namespace

bool Listener::TakeAccepted(const AcceptCallback& cb, size_t* accepted) {
  size_t offered = ahead_offered_;
  ahead_offered_ = 0;
  bool more = true;
  for (size_t i = 0; i < offered; ++i) {
    int r = ahead_result_[i];
    if (r >= 0) {
      Deliver(cb, r, ahead_[i].addr, ahead_[i].len);
      ++*accepted;
    } else if (r != -ECANCELED && !AcceptMayContinue(-r)) {
      more = false;  // later slots may still hold a connection that came meanwhile
    }
  }
  return more;
}

size_t Listener::Accept(const AcceptCallback& cb, size_t max) {
  size_t accepted = 0;
  for (size_t i = 0; i < max; ++i) {
    sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (AcceptMayContinue(errno)) continue;
      break;
    }
    Deliver(cb, fd, ss, len);
    ++accepted;
  }
  return accepted;
}

void Listener::Deliver(const AcceptCallback& cb, int fd, const sockaddr_storage& ss,
                       socklen_t len) {
  if (!nodelay_inherited_) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  cb(fd, SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&ss), len));
}

}  // namespace rpx
