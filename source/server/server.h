// Server: the main thread. It loads and validates the bootstrap, opens every listening socket
// (so a bind failure stops startup with an error before anything serves), starts the workers,
// runs the admin listener and the DNS refresh timers. SIGTERM/SIGINT drain it (stop accepting,
// /ready fails, connections close once idle, in-flight requests finish within the drain time)
// and then stop it, exit code 0; a second signal, or POST /quitquitquit, stops it at once.
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
  // How long connections may finish: a removed listener's, and everyone's on SIGTERM/SIGINT.
  uint64_t drain_time_ms = 5000;
  // On SIGTERM: ask connections to close spread over the drain time (Envoy's default), or all
  // at once.
  bool drain_gradual = true;
  uint32_t batch_wait_us = 20;  // workers' batching sleep (Dispatcher::SetBatchWait); 0: off
  bool read_batching = true;    // workers read each epoll batch in one io_uring_enter
  bool write_batching = true;   // and send each flush's writes in one io_uring_enter
};

// Runs until stopped; returns the process exit code. Errors go to stderr.
int RunServer(const ServerOptions& options);

}  // namespace rpx
