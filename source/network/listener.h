// Listener: a listening socket on one worker's dispatcher. Each worker opens its own socket on the
// same address with SO_REUSEPORT, so the kernel spreads new connections across workers and no
// accept lock is shared. Only the owning dispatcher's thread touches it. With the dispatcher's
// accept batching the listener's accepts run in the batch's io_uring_enter (see FileEvent);
// otherwise it calls accept4(2) until the queue is empty.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
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

// Listening sockets handed over by the process this one replaces (hot restart), by the address
// they are bound to. Main thread only. Sockets nobody takes are the caller's to close (TakeRest).
class InheritedSockets {
 public:
  // Takes ownership of `fd`, a listening TCP socket bound to `address` (SocketAddress::ToString).
  void Add(const std::string& address, int fd) { fds_[address].push_back(fd); }
  // Up to `max` sockets bound to `addr`; ownership passes to the caller.
  std::vector<int> Take(const SocketAddress& addr, size_t max);
  // The ones no listener took.
  std::vector<int> TakeRest();
  size_t size() const;

 private:
  std::map<std::string, std::vector<int>> fds_;
};

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
//
// `inherited`: sockets the previous process handed over. Those bound to `addr` are used first
// (the same sockets, so no connection queued on them is lost); with SO_REUSEPORT, more sockets
// join their group when there are more workers than inherited sockets.
absl::StatusOr<std::vector<int>> OpenWorkerSockets(SocketAddress addr, bool reuse_port,
                                                   uint32_t workers,
                                                   const SocketOptions& options = {},
                                                   bool replacing_own = false,
                                                   InheritedSockets* inherited = nullptr);

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
  class AcceptEvent;  // the socket's FileEvent, which takes part in accept batching
  void OnReadable();
  size_t AcceptAheadSlots(AcceptSlot** slots);
  void OnAcceptAhead(size_t slot, int result);
  // Hands what accept batching took to `cb`, adding them to `*accepted`; false when one of them
  // found the queue empty (or an error that ends this round).
  bool TakeAccepted(const AcceptCallback& cb, size_t* accepted);
  // accept4(2) up to `max` times, until the queue is empty; returns how many it accepted.
  size_t Accept(const AcceptCallback& cb, size_t max);
  void Deliver(const AcceptCallback& cb, int fd, const sockaddr_storage& ss, socklen_t len);

  // One round takes at most this many, so one busy listener cannot starve established
  // connections.
  static constexpr size_t kAcceptBatch = 64;
  static constexpr size_t kMaxAcceptAhead = 16;

  Dispatcher& dispatcher_;
  int fd_;
  bool nodelay_inherited_;  // the listening socket has TCP_NODELAY, so accepted ones have it
  AcceptCallback cb_;
  std::unique_ptr<FileEvent> event_;
  // Accept batching's slots and their results (a descriptor or -errno; -ECANCELED until the
  // ring ran it, as for an accept the kernel did not take).
  AcceptSlot ahead_[kMaxAcceptAhead];
  int ahead_result_[kMaxAcceptAhead];
  size_t ahead_offered_ = 0;  // slots offered and not handed out yet
  // Slots to offer next: one more than the last round accepted, so that when arrivals keep
  // their pace the last one finds the queue empty inside the ring.
  size_t ahead_next_ = 1;
};

}  // namespace rpx
