// Worker: one thread running one Dispatcher. It owns its listening sockets (one per listener, the
// kernel balancing connections between workers via SO_REUSEPORT), the downstream connections
// accepted on them, a Router per listener and its own view of the clusters (connection pools).
// Nothing on the request path is shared with other workers except the cluster circuit-breaker
// counters (atomics). The main thread talks to a worker only through Post().
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "source/common/random.h"
#include "source/config/server_config.h"
#include "source/event/dispatcher.h"
#include "source/http/server_connection.h"
#include "source/network/listener.h"
#include "source/router/router.h"
#include "source/upstream/worker_cluster.h"

namespace rpx {

class Worker {
 public:
  explicit Worker(uint32_t index);
  ~Worker();

  // Starts the thread. `listen_fds[i]` is this worker's socket for `config->listeners[i]`.
  void Start(std::shared_ptr<const ServerConfig> config, std::vector<int> listen_fds);
  // Thread-safe: publishes a new cluster set (pools of hosts that stay are kept).
  void UpdateClusters(std::shared_ptr<const ClusterMap> clusters);
  // Thread-safe: stops accepting, closes connections and ends the thread; returns when joined.
  void Stop();
  uint32_t index() const { return index_; }

 private:
  struct ActiveListener {
    std::shared_ptr<const ListenerConfig> config;
    std::unique_ptr<Listener> listener;
    std::unique_ptr<Router> router;
    absl::flat_hash_map<ServerConnection*, std::unique_ptr<ServerConnection>> connections;
  };
  void OnAccept(ActiveListener& l, int fd, const SocketAddress& peer);

  uint32_t index_;
  Dispatcher dispatcher_;
  Random random_;
  WorkerClusterManager clusters_;
  std::vector<std::unique_ptr<ActiveListener>> listeners_;
  std::thread thread_;
};

}  // namespace rpx
