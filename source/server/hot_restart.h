// HotRestart: a new rpx takes the listening sockets of the running one and the old one drains
// and exits, so a binary or configuration upgrade refuses no connection. Envoy's flags
// (--restart-epoch, --base-id, --parent-shutdown-time-s), without its shared memory: the process
// of epoch N listens on the abstract Unix socket "@rpx_hot_restart_<base_id>_<N>"; the one started
// with epoch N+1 connects to it and
//   1. asks for the sockets: every listening TCP socket the parent holds (listeners and admin)
//      comes over with SCM_RIGHTS, tagged with the address it is bound to. Both processes now
//      accept from the same sockets, so a connection queued on one is never reset;
//   2. once its own configuration is serving (initialized: /ready would say so), asks the parent
//      to drain: the parent stops accepting, drains as on SIGTERM (Connection: close, in-flight
//      requests finish) and exits 0. The child closes the sockets it did not need.
// A child that fails before step 2 leaves the parent serving as before. Stats are not carried
// over: the new process counts from zero.
// Main thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "source/event/dispatcher.h"
#include "source/network/listener.h"

namespace rpx {

class HotRestart {
 public:
  HotRestart(uint32_t base_id, uint32_t epoch);
  ~HotRestart();

  static std::string SocketName(uint32_t base_id, uint32_t epoch);

  // Epoch > 0: connects to the parent (epoch - 1) and receives its listening sockets into
  // inherited(). False with `*error` when there is no parent or it does not answer.
  bool TakeParentSockets(std::string* error);
  InheritedSockets& inherited() { return inherited_; }
  // Milliseconds since the epoch when epoch 0 started (for uptime_all_epochs).
  int64_t first_start_unix_ms() const { return first_start_unix_ms_; }

  // Asks the parent to drain (exiting within `parent_shutdown_ms`) and closes the inherited
  // sockets no listener took. No-op without a parent.
  void ReleaseParent(uint64_t parent_shutdown_ms);

  // Listens for the next epoch. `on_drain(max_ms)` runs when the successor asks this process to
  // drain. False with `*error` if another rpx holds this epoch's socket.
  bool Listen(Dispatcher& main, std::function<void(uint64_t max_ms)> on_drain, std::string* error);
  // Stops listening for a successor (draining: there is no second handover).
  void StopListening();

 private:
  void OnSuccessor();
  void OnSuccessorMessage();

  const uint32_t base_id_;
  const uint32_t epoch_;
  int parent_fd_ = -1;  // the connection to the parent, until ReleaseParent
  int listen_fd_ = -1;
  std::unique_ptr<FileEvent> listen_event_;
  int successor_fd_ = -1;  // the next epoch's connection, while it starts
  std::unique_ptr<FileEvent> successor_event_;
  Dispatcher* dispatcher_ = nullptr;
  std::function<void(uint64_t)> on_drain_;
  InheritedSockets inherited_;
  int64_t first_start_unix_ms_ = 0;
};

}  // namespace rpx
