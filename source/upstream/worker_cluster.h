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
  // Picks a host and returns its pool, or nullptr when no host may take the request. As Envoy:
  // a priority level is chosen by the levels' loads (a level whose healthy share, times the
  // overprovisioning factor, falls short of 100% passes the rest to the next levels), then,
  // with locality_weighted_lb_config, a locality by its weight and health, then a host by the
  // policy, passing over hosts that are out (failed health checks, ejected, EDS unhealthy)
  // unless the level is in panic (fewer healthy than the panic threshold: every host).
  // `hash` (from the route's hash_policy) places the request on a RING_HASH or MAGLEV cluster:
  // the same hash, the same host, on every worker and across restarts; without one those
  // policies pick at random.
  ConnPool* ChoosePool(uint64_t random, const uint64_t* hash = nullptr);
  // Slow start's weight factor for a host `elapsed_ms` into its window (Envoy's formula).
  static double SlowStartFactor(const ClusterInfo::SlowStart& s, uint64_t elapsed_ms);
  // The weight the load balancer gives `host`'s pool now (tests).
  uint32_t lb_weight(const Host& host) const;
  // The share of requests (percent) priority level `index` (0 the highest present) takes, and
  // whether it is in panic, as of the last health change. For tests and the admin.
  uint32_t level_load(size_t index) const { return levels_[index].load; }
  bool level_panic(size_t index) const { return levels_[index].panic; }
  size_t level_count() const { return levels_.size(); }
  // auto_sni: the pool of `host_pool`'s host for connections with this SNI (created when
  // needed; at most kMaxSniPools per host, idle ones evicted first), or nullptr if the host
  // has too many busy ones.
  ConnPool* PoolForSni(ConnPool* host_pool, std::string_view sni);
  static constexpr size_t kMaxSniPools = 256;
  // ORIGINAL_DST clusters: the pool for destination `dst` (made when first asked for; with the
  // cluster's port_override applied). Pools of destinations nobody used for a whole
  // cleanup_interval are dropped once idle. nullptr for other clusters.
  ConnPool* PoolForOriginalDst(const SocketAddress& dst);
  size_t original_dst_pool_count() const { return dst_pools_.size(); }
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
    // The weight the schedules use: the host's, or during slow start a ramp towards it (in
    // thousandths then, so that the ramp is smooth).
    uint32_t lb_weight = 1;
    uint64_t slow_start_ms = 0;  // when its slow start began (monotonic); 0: not in one
    bool was_available = true;
  };
  // Hosts drawn from together: a priority level, or one locality of a level.
  struct Group {
    std::vector<uint32_t> members;   // indexes into pools_
    std::vector<uint32_t> schedule;  // smooth weighted round robin over members (pools_ indexes)
    size_t rr_next = 0;
    uint64_t total = 0, healthy = 0;  // hosts (or their weights), and of those the available
  };
  struct Locality : Group {
    uint32_t weight = 0;   // LocalityLbEndpoints.load_balancing_weight (0: takes no traffic)
    double effective = 0;  // weight scaled by health (Envoy's effective locality weight)
  };
  struct Level : Group {
    uint32_t priority = 0;
    std::vector<std::pair<uint64_t, uint32_t>> ring;  // RING_HASH: (hash, pools_ index), sorted
    std::vector<uint32_t> maglev;                     // MAGLEV: table of pools_ indexes
    std::vector<Locality> localities;                 // with locality_weighted only
    double locality_total = 0;                        // sum of the localities' effective weights
    uint32_t load = 0;                                // percent of requests; 100 over all levels
    bool panic = false;
  };
  void SetReclaim(ConnPool* pool);
  // The policy's pick among `g`'s hosts, health aside.
  ConnPool* ChooseIn(Group& g, uint64_t random);
  // The same among the available hosts of `g` (nullptr if none is).
  ConnPool* ChooseAvailable(Group& g, uint64_t random);
  ConnPool* ChooseSlow(uint64_t random, const uint64_t* hash);
  ConnPool* ChooseByHash(Level& level, uint64_t hash, bool health);
  void BuildGroup(Group* g);
  void BuildHashTables(Level* level);
  // Counts the available hosts of every level and locality and derives the levels' loads and
  // panic (Envoy's priority load and per-priority panic); on every host set and health change.
  void RecomputeLoads();
  // A host's verdict changed: idle connections to hosts that failed are closed.
  void OnHealthChanged();
  void BuildLevels();
  // Slow start: sets every pool's lb_weight for `now_ms`; true while a host is still ramping.
  bool UpdateWeights(uint64_t now_ms);
  // Rebuilds the schedules with new weights, and keeps the ramp timer going while needed.
  void OnSlowStartTick();
  bool ReclaimIdle(ConnPool* requester);
  void CleanupOriginalDst();

  Dispatcher& dispatcher_;
  uint32_t worker_index_;
  std::shared_ptr<const ClusterInfo> info_;
  std::shared_ptr<const HostSet> hosts_;
  ClusterStats* stats_;
  std::vector<HostPool> pools_;
  std::vector<std::unique_ptr<ConnPool>> draining_;
  std::vector<Level> levels_;  // by priority, highest (lowest number) first
  // One level, no locality weighting and every host available: the policy's plain pick.
  bool simple_ = true;
  std::unique_ptr<Timer> slow_start_timer_;  // while a host's weight ramps up
  bool updated_ = false;                     // a host set was applied (the first one is in)
  uint32_t retries_waiting_ = 0;
  uint64_t health_generation_ = 0;  // the ClusterHealth generation last seen
  // ORIGINAL_DST: pools by destination ("ip:port"), and whether each was used since the last
  // cleanup.
  struct DstPool {
    std::unique_ptr<ConnPool> pool;
    bool used = true;
  };
  absl::flat_hash_map<std::string, DstPool> dst_pools_;
  std::unique_ptr<Timer> dst_cleanup_timer_;
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
