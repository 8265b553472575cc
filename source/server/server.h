// Server: the main thread. It loads and validates the bootstrap, opens every listening socket
// (so a bind failure stops startup with an error before anything serves), starts the workers,
// runs the admin listener; the ConfigManager resolves DNS clusters on its loop. SIGTERM/SIGINT
// drain it (stop accepting, /ready fails, connections close once idle, in-flight requests finish
// within the drain time) and then stop it, exit code 0; a second signal, or POST /quitquitquit,
// stops it at once.
#pragma once

#include <cstdint>
#include <string>

namespace rpx {

struct ServerOptions {
  std::string config_path;
  uint32_t concurrency = 0;  // 0: number of cores
  bool validate_only = false;
  std::string service_node;
  std::string service_cluster;
  std::string service_zone;  // node.locality.zone
  // How long connections may finish: a removed listener's, and everyone's on SIGTERM/SIGINT.
  uint64_t drain_time_ms = 5000;
  // On SIGTERM: ask connections to close spread over the drain time (Envoy's default), or all
  // at once.
  bool drain_gradual = true;
  // Hot restart (see hot_restart.h), on when --restart-epoch or --base-id is given: this
  // process's epoch; with N > 0 it takes the sockets of the running epoch N-1 and makes it drain
  // once this one serves. Off by default, so that rpx instances started without these flags
  // never take each other's sockets.
  bool hot_restart = false;
  uint32_t restart_epoch = 0;
  uint32_t base_id = 0;  // tells apart rpx instances on one host
  // The longest the parent may keep draining after the handover.
  uint64_t parent_shutdown_ms = 900 * 1000;
  uint32_t batch_wait_us = 20;  // workers' batching sleep (Dispatcher::SetBatchWait); 0: off
  bool read_batching = true;    // workers read each epoll batch in one io_uring_enter
  bool write_batching = true;   // and send each flush's writes in one io_uring_enter
};

// Runs until stopped; returns the process exit code. Errors go to stderr.
int RunServer(const ServerOptions& options);

}  // namespace rpx
