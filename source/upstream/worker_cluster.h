// The clusters as one worker sees them: for each cluster, its hosts, a connection pool per host
// and the load balancer's state. Owned by the worker and used only on its thread. The main thread
// publishes cluster changes as immutable ClusterEntry values (Apply), which keep the pools of hosts
// that stay.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "source/event/dispatcher.h"
#include "source/upstream/cluster.h"
#include "source/upstream/conn_pool.h"

namespace rpx {

struct ClusterEntry {
  std::shared_ptr<const ClusterInfo> info;
  std::shared_ptr<const HostSet> hosts;
};
using ClusterMap = absl::flat_hash_map<std::string, ClusterEntry>;

class WorkerCluster {
 public:
  WorkerCluster(Dispatcher& dispatcher, uint32_t worker_index, const ClusterEntry& entry);
  ~WorkerCluster();
  // Picks a host and returns its pool, or nullptr when the cluster has no hosts. With active
  // health checks, hosts that failed them are passed over, unless fewer than the panic
  // threshold's share are healthy (then every host takes traffic, as Envoy's panic mode).
  // `hash` (from the route's hash_policy) places the request on a RING_HASH or MAGLEV cluster:
  // the same hash, the same host, on every worker and across restarts; without one those
  // policies pick at random.
  ConnPool* ChoosePool(uint64_t random, const uint64_t* hash = nullptr);
  // auto_sni: the pool of `host_pool`'s host for connections with this SNI (created when
  // needed; at most kMaxSniPools per host, idle ones evicted first), or nullptr if the host
  // has too many busy ones.
  ConnPool* PoolForSni(ConnPool* host_pool, std::string_view sni);
  static constexpr size_t kMaxSniPools = 256;
  ClusterStats& stats() { return *stats_; }
  const ClusterInfo& info() const { return *info_; }
  // Replaces the host set (and, if it changed, the cluster settings), keeping pools of hosts that
  // stay when the settings are unchanged.
  void Update(const ClusterEntry& entry);
  // Pools and in-flight requests still in use (a removed cluster waits for zero to be freed).
  bool idle() const;
  // A request waiting out a retry backoff holds no pool but still uses this cluster: while any
  // does, a removed cluster is not freed.
  void RetryWaitStarted() { ++retries_waiting_; }
  void RetryWaitEnded() { --retries_waiting_; }
  void Drain();

 private:
  struct HostPool {
    std::shared_ptr<const Host> host;
    std::unique_ptr<ConnPool> pool;
    // auto_sni: one pool per SNI the requests asked for.
    absl::flat_hash_map<std::string, std::unique_ptr<ConnPool>> by_sni;
  };
  void SetReclaim(ConnPool* pool);
  // The load balancer's pick among every host, health aside.
  ConnPool* ChooseAny(uint64_t random);
  // True when health (checks, ejections) is to be looked at: some host is out and the healthy
  // share is above the panic threshold. Also closes idle connections to hosts that went out.
  bool HealthApplies();
  ConnPool* ChooseByHash(uint64_t hash, bool health);
  void BuildHashTables();
  // A host's verdict changed: idle connections to hosts that failed are closed.
  void OnHealthChanged();
  void BuildSchedule();
  bool ReclaimIdle(ConnPool* requester);

  Dispatcher& dispatcher_;
  uint32_t worker_index_;
  std::shared_ptr<const ClusterInfo> info_;
  std::shared_ptr<const HostSet> hosts_;
  ClusterStats* stats_;
  std::vector<HostPool> pools_;
  std::vector<std::unique_ptr<ConnPool>> draining_;
  std::vector<uint32_t> schedule_;  // weighted round-robin order (indexes into pools_)
  std::vector<std::pair<uint64_t, uint32_t>> ring_;  // RING_HASH: (hash, pools_ index), sorted
  std::vector<uint32_t> maglev_;                     // MAGLEV: table of pools_ indexes
  size_t rr_next_ = 0;
  uint32_t retries_waiting_ = 0;
  uint64_t health_generation_ = 0;  // the ClusterHealth generation last seen
  // Lets callbacks posted from other workers check that this object still exists.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

class WorkerClusterManager {
 public:
  WorkerClusterManager(Dispatcher& dispatcher, uint32_t worker_index)
      : dispatcher_(dispatcher), worker_index_(worker_index) {}
  WorkerCluster* Get(std::string_view name);
  void Apply(const ClusterMap& clusters);

 private:
  Dispatcher& dispatcher_;
  uint32_t worker_index_;
  absl::flat_hash_map<std::string, std::unique_ptr<WorkerCluster>> clusters_;
  std::vector<std::unique_ptr<WorkerCluster>> removed_;
};

}  // namespace rpx
