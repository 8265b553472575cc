// Listener: a listening socket on one worker's dispatcher. Each worker opens its own socket on the
// same address with SO_REUSEPORT, so the kernel spreads new connections across workers and no
// accept lock is shared. Only the owning dispatcher's thread touches it.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "source/event/dispatcher.h"
#include "source/network/address.h"
#include "source/network/socket_option.h"

namespace rpx {

constexpr int kListenBacklog = 4096;

// Opens, binds and (with `listen_now`) listens, applying each of `options` in its state (before
// bind, after bind, after listen). Returns the fd or an error naming the address or the option.
absl::StatusOr<int> OpenListenSocket(const SocketAddress& addr, bool reuse_port, int backlog,
                                     const SocketOptions& options = {}, bool listen_now = true);

// listen(2) on a socket that OpenListenSocket left bound, then its STATE_LISTENING options.
// A socket already listening is left as it is.
absl::Status StartListening(int fd, const SocketAddress& addr, int backlog,
                            const SocketOptions& options);

// Opens one socket per worker for `addr` with SO_REUSEPORT (after checking that no other socket
// holds the port), or a single socket without it. With port 0 the first socket picks the port
// and the others share it.
//
// `replacing_own`: the port is held by the listener these sockets will replace (same address,
// new socket options). Then the check is skipped and the sockets are only bound, not listening:
// a bound socket takes no connections, so until StartListening the old sockets keep them all
// (otherwise the kernel would queue a share of new connections on sockets nobody accepts from
// yet). Their STATE_LISTENING options are tried on a scratch socket, so that StartListening
// fails only for reasons the kernel cannot tell in advance.
absl::StatusOr<std::vector<int>> OpenWorkerSockets(SocketAddress addr, bool reuse_port,
                                                   uint32_t workers,
                                                   const SocketOptions& options = {},
                                                   bool replacing_own = false);

class Listener {
 public:
  // `fd` is non-blocking, close-on-exec and has TCP_NODELAY set.
  using AcceptCallback = std::function<void(int fd, const SocketAddress& peer)>;
  // Takes ownership of `fd`.
  Listener(Dispatcher& dispatcher, int fd, AcceptCallback cb);
  ~Listener();
  // Stops accepting (the socket stays open until destruction).
  void Pause(bool paused);
  // Accepts every connection already queued on the socket and hands each to `cb` instead of the
  // listener's own callback: a listener replaced on the same port passes them to its successor
  // before it closes (closing would reset them).
  void TakeQueued(const AcceptCallback& cb);
  SocketAddress LocalAddress() const;

 private:
  void OnReadable();
  void Accept(const AcceptCallback& cb, size_t max);  // up to `max`, until the queue is empty
  Dispatcher& dispatcher_;
  int fd_;
  bool nodelay_inherited_;  // the listening socket has TCP_NODELAY, so accepted ones have it
  AcceptCallback cb_;
  std::unique_ptr<FileEvent> event_;
};

}  // namespace rpx
