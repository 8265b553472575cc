// Active health checking (Envoy's Cluster.health_checks) on the main thread.
//
// HealthCheckers keeps one HealthChecker per cluster that configures checks; each probes every
// host of its cluster on its own schedule: HTTP (a request whose status must fall in
// expected_statuses; a connection per probe, closed after the answer) or TCP (a connect, then
// optionally a payload sent and pieces expected back in order). A host turns unhealthy after
// unhealthy_threshold failed probes in a row, at once for an HTTP status outside
// expected_statuses (and retriable_statuses), and healthy again after healthy_threshold passing
// ones; a new host starts unhealthy and one passing probe makes it healthy (Envoy's startup rule).
//
// The verdicts reach the workers without a lock: each Host's failed_active_hc flag and the
// cluster's ClusterHealth counters are atomics, written here and read by WorkerCluster's load
// balancer. Sync() runs before every publication of the cluster map, so a host object that a
// worker sees already carries its verdict (a host kept across an update keeps its state).
//
// Main thread only; the checkers own their sockets and timers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "source/event/dispatcher.h"
#include "source/upstream/cluster.h"
#include "source/upstream/outlier_detector.h"
#include "source/upstream/worker_cluster.h"

namespace rpx {

class HealthChecker {
 public:
  // `on_pass` hears of every passing probe (the address), for outlier detection.
  HealthChecker(Dispatcher& main, const ClusterEntry& entry,
                std::function<void(const std::string&)> on_pass = nullptr);
  ~HealthChecker();
  // A new form of the cluster: sessions of hosts that stay (same address) go on, new hosts start
  // unhealthy and are probed at once, removed ones stop.
  void Update(const ClusterEntry& entry);

 private:
  struct Session;
  void Schedule(Session& s, uint64_t delay_ms);
  void Probe(Session& s);
  void OnSocket(Session& s, uint32_t events);
  void Finish(Session& s, bool passed, bool network, bool immediate, const std::string& why);
  uint64_t NextInterval(const Session& s, bool edge);
  void Publish();

  Dispatcher& main_;
  std::function<void(const std::string&)> on_pass_;
  std::shared_ptr<const ClusterInfo> info_;
  std::shared_ptr<const HostSet> hosts_;
  std::map<std::string, std::unique_ptr<Session>> sessions_;  // by address
  std::mt19937_64 rng_{std::random_device{}()};
};

// The main thread's judges of host health for every published cluster: a HealthChecker where
// the cluster has health_checks, an OutlierDetector where it has outlier_detection.
class HealthCheckers {
 public:
  explicit HealthCheckers(Dispatcher& main);
  ~HealthCheckers();
  // The clusters about to be published: checkers and detectors start, follow or stop to match.
  void Sync(const ClusterMap& clusters);

 private:
  Dispatcher& main_;
  std::map<std::string, std::unique_ptr<HealthChecker>> checkers_;
  std::map<std::string, std::unique_ptr<OutlierDetector>> detectors_;
};

}  // namespace rpx
