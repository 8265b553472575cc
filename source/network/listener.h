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

namespace rpx {

// Opens, binds and listens. Returns the fd or an error naming the address.
absl::StatusOr<int> OpenListenSocket(const SocketAddress& addr, bool reuse_port, int backlog);

// Opens one socket per worker for `addr` with SO_REUSEPORT (after checking that no other socket
// holds the port), or a single socket without it. With port 0 the first socket picks the port
// and the others share it.
absl::StatusOr<std::vector<int>> OpenWorkerSockets(SocketAddress addr, bool reuse_port,
                                                   uint32_t workers);

class Listener {
 public:
  using AcceptCallback = std::function<void(int fd, const SocketAddress& peer)>;
  // Takes ownership of `fd`.
  Listener(Dispatcher& dispatcher, int fd, AcceptCallback cb);
  ~Listener();
  // Stops accepting (the socket stays open until destruction).
  void Pause(bool paused);
  SocketAddress LocalAddress() const;

 private:
  void OnReadable();
  Dispatcher& dispatcher_;
  int fd_;
  AcceptCallback cb_;
  std::unique_ptr<FileEvent> event_;
};

}  // namespace rpx
