// Outlier detection (Envoy's Cluster.outlier_detection): hosts that answer badly are ejected
// from load balancing for a while, growing with each ejection.
//
// Workers report each request's outcome with ReportOutcome: the failure streaks (5xx, gateway
// failures, local-origin failures such as refused connections, resets and timeouts) are counted
// in the Host's atomics, shared by every worker, and when a streak reaches its threshold the
// worker tells the main thread through the cluster's OutlierSink. OutlierDetector, on the main
// thread, decides: it ejects (within max_ejection_percent and the enforcing_* chances), brings
// hosts back when their time is up (base_ejection_time x the ejections in a row, at most
// max_ejection_time, checked every interval), and every interval also judges success rates and
// failure percentages from the hosts' request counters. Ejections reach the load balancers
// through Host::ejected and ClusterHealth, as health-check verdicts do.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>

#include "source/event/dispatcher.h"
#include "source/upstream/cluster.h"
#include "source/upstream/worker_cluster.h"

namespace rpx {

// Worker thread: what a request sent to `host` came to, an HTTP status, or 0 for a failure of
// local origin (the connection could not be made, was reset, or timed out). Nothing unless the
// cluster has outlier detection (checked inline: no call on the path of clusters without it).
void CountOutcome(const ClusterInfo& cluster, const Host& host, int status);
inline void ReportOutcome(const ClusterInfo& cluster, const Host& host, int status) {
  if (cluster.outlier) CountOutcome(cluster, host, status);
}

class OutlierDetector {
 public:
  OutlierDetector(Dispatcher& main, const ClusterEntry& entry);
  ~OutlierDetector();
  // A new form of the cluster: hosts that stay keep their ejection state.
  void Update(const ClusterEntry& entry);
  // A passing active health check brings an ejected host back
  // (successful_active_health_check_uneject_host).
  void OnHealthCheckPassed(const std::string& address);
  // How long the host at `address` ("ip:port") was last ejected for (ms), 0 if never; for tests.
  uint64_t EjectedForMs(const std::string& address) const;

 private:
  struct State {
    std::shared_ptr<const Host> host;
    uint64_t ejected_at_ms = 0;
    uint64_t ejected_for_ms = 0;
    uint32_t ejections = 0;  // in a row: one less for each interval spent back in service
    uint64_t successes = 0, errors = 0;  // the host's request counters at the last interval
  };
  void OnStreak(const std::string& address, OutlierReason reason);
  void OnInterval();
  // Ejects `s` if the cluster may lose another host and the reason's enforcing chance says so.
  void Eject(State& s, OutlierReason reason);
  void Uneject(State& s);
  uint32_t Ejected() const;

  Dispatcher& main_;
  std::shared_ptr<const ClusterInfo> info_;
  std::shared_ptr<const HostSet> hosts_;
  std::map<std::string, State> states_;  // by address
  std::unique_ptr<Timer> interval_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for posts from workers
};

}  // namespace rpx
