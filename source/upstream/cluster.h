// Cluster configuration and shared limits. ClusterInfo and HostSet are immutable and built on the
// main thread; workers share them read-only. ClusterResources holds the circuit-breaker counters,
// the only cluster state written by several workers (lock-free atomics, touched once per upstream
// connection or queued request, not per byte). Stats are one block per worker, summed when read.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "source/common/histogram.h"
#include "source/common/stats.h"
#include "source/network/address.h"
#include "source/network/socket_option.h"
#include "source/tls/tls_context.h"

namespace rpx {

// One worker's counters for one host (Envoy's per-host stats in /clusters). Each worker writes
// only its own block (no lock, no shared cache line); the admin sums them.
struct alignas(64) HostStats {
  Counter cx_total, cx_connect_fail, rq_total, rq_success, rq_error, rq_timeout;
  Gauge cx_active, rq_active;
};

struct Host {
  SocketAddress address;
  std::string hostname;  // what auto_host_rewrite sends as Host (the DNS name, or empty)
  uint32_t weight = 1;
  // The endpoint's metadata under "envoy.transport_socket_match": key -> the value's
  // serialized google.protobuf.Value (compared as bytes).
  std::map<std::string, std::string> transport_socket_match;
  // One block per worker (AllocateStats), so an immutable, shared Host still counts. Shared with
  // the host's previous form when an update keeps the endpoint (CarryHostStats): a pool that
  // stays keeps counting where /clusters reads. Main thread sets it before the set is published.
  mutable std::shared_ptr<HostStats[]> stats;
  mutable uint32_t stats_slots = 0;
  // Active health checking's verdict (Cluster.health_checks): written by the main thread's
  // checker before the set is published and on every change, read by the workers' load
  // balancers. Always false in clusters without health checks.
  mutable std::atomic<bool> failed_active_hc{false};

  void AllocateStats(uint32_t slots) {
    stats.reset(new HostStats[slots]);
    stats_slots = slots;
  }
  // Worker `worker`'s block, or null for a host built without stats (tests).
  HostStats* StatsFor(uint32_t worker) const {
    return worker < stats_slots ? &stats[worker] : nullptr;
  }
};
using HostSet = std::vector<std::shared_ptr<const Host>>;

// Endpoints of `next` that `prev` had too (same address and transport metadata, as a worker's
// pool is kept) go on counting in the same stats blocks. Main thread, before `next` is published.
inline void CarryHostStats(const HostSet* prev, const HostSet& next) {
  if (!prev) return;
  for (const auto& h : next) {
    for (const auto& p : *prev) {
      if (p->address == h->address && p->transport_socket_match == h->transport_socket_match &&
          p->stats && p->stats_slots == h->stats_slots) {
        h->stats = p->stats;
        break;
      }
    }
  }
}

// Envoy's circuit breakers (default priority), counted across all workers.
class ClusterResources {
 public:
  ClusterResources(uint32_t max_connections, uint32_t max_pending, uint32_t max_requests,
                   uint32_t max_retries = 3)
      : max_connections_(max_connections),
        max_pending_(max_pending),
        max_requests_(max_requests),
        max_retries_(max_retries) {}
  // A retry_budget replaces max_retries: retries may be `percent` of the requests active and
  // pending, and never fewer than `min_concurrency`.
  void SetRetryBudget(double percent, uint32_t min_concurrency) {
    budget_percent_ = percent;
    budget_min_ = min_concurrency;
  }
  // A pool starved for slots (see starved_workers) may take any free slot. Other pools leave one
  // free slot per starved pool: a slot given back for a starved pool must reach it, not be taken
  // again by the pool that gave it back when its next request comes in first (slots then
  // ping-ponged between workers, each move a new upstream connection).
  bool TryAcquireConnection(bool starved) {
    int64_t reserved = starved ? 0 : starved_workers.load(std::memory_order_relaxed);
    return TryAcquire(connections_, static_cast<int64_t>(max_connections_) - reserved);
  }
  void ReleaseConnection() { connections_.fetch_sub(1, std::memory_order_relaxed); }
  bool TryAcquirePending() { return TryAcquire(pending_, max_pending_); }
  void ReleasePending() { pending_.fetch_sub(1, std::memory_order_relaxed); }
  bool TryAcquireRequest() { return TryAcquire(requests_, max_requests_); }
  void ReleaseRequest() { requests_.fetch_sub(1, std::memory_order_relaxed); }
  // Retries in flight (from the decision to retry to the end of that attempt), across workers.
  bool TryAcquireRetry() {
    int64_t limit = max_retries_;
    if (budget_percent_ >= 0) {
      int64_t active =
          requests_.load(std::memory_order_relaxed) + pending_.load(std::memory_order_relaxed);
      limit = std::max<int64_t>(budget_min_, static_cast<int64_t>(active * budget_percent_ / 100));
    }
    return TryAcquire(retries_, limit);
  }
  void ReleaseRetry() { retries_.fetch_sub(1, std::memory_order_relaxed); }
  int64_t retries() const { return retries_.load(std::memory_order_relaxed); }
  int64_t connections() const { return connections_.load(std::memory_order_relaxed); }
  int64_t pending() const { return pending_.load(std::memory_order_relaxed); }
  uint32_t max_connections() const { return max_connections_; }
  uint32_t max_pending() const { return max_pending_; }
  uint32_t max_requests() const { return max_requests_; }
  // Workers with requests queued only because the cluster is at max_connections. Another worker
  // that would park a connection idle closes it instead, so the slot moves where it is needed.
  std::atomic<int32_t> starved_workers{0};
  // True while more workers are starved than there are free slots: only then should a worker give
  // a connection back. Checking this (not just "someone is starved") frees one slot per starved
  // worker, instead of one per retry or per finished request until the starved worker's next
  // look, which made slots ping-pong between workers (each move a new upstream connection).
  bool SlotWanted() const {
    return starved_workers.load(std::memory_order_relaxed) >
           static_cast<int64_t>(max_connections_) - connections_.load(std::memory_order_relaxed);
  }

  // Each worker registers how to ask it (from any thread) to close one idle connection of this
  // cluster. A starved worker calls RequestReclaim, which asks all the others. Only used when the
  // cluster is at its connection limit, so the mutex is off the normal request path.
  void SetReclaimer(uint32_t worker, std::function<void()> fn) {
    std::lock_guard<std::mutex> l(mu_);
    if (fn) {
      reclaimers_[worker] = std::move(fn);
    } else {
      reclaimers_.erase(worker);
    }
  }
  void RequestReclaim(uint32_t from_worker) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [w, fn] : reclaimers_) {
      if (w != from_worker) fn();
    }
  }

 private:
  static bool TryAcquire(std::atomic<int64_t>& v, int64_t max) {
    int64_t cur = v.load(std::memory_order_relaxed);
    while (cur < max) {
      if (v.compare_exchange_weak(cur, cur + 1, std::memory_order_relaxed)) return true;
    }
    return false;
  }
  const uint32_t max_connections_, max_pending_, max_requests_, max_retries_;
  double budget_percent_ = -1;  // < 0: no retry budget (max_retries applies)
  uint32_t budget_min_ = 3;
  std::atomic<int64_t> connections_{0}, pending_{0}, requests_{0}, retries_{0};
  std::mutex mu_;
  std::map<uint32_t, std::function<void()>> reclaimers_;
};

struct alignas(64) ClusterStats {
  Counter upstream_cx_total;
  Gauge upstream_cx_active;
  Counter upstream_cx_connect_fail;
  Counter upstream_cx_connect_timeout;
  Counter upstream_cx_idle_timeout;
  Counter upstream_cx_max_requests;
  Counter upstream_cx_destroy_remote;
  Counter upstream_cx_overflow;
  Counter upstream_rq_total;
  Gauge upstream_rq_active;
  Counter upstream_rq_pending_total;
  Gauge upstream_rq_pending_active;
  Counter upstream_rq_pending_overflow;
  Counter upstream_rq_retry;                 // retries made
  Counter upstream_rq_retry_success;         // retried requests that ended with a response
  Counter upstream_rq_retry_overflow;        // retries not made: max_retries or the budget
  Counter upstream_rq_retry_limit_exceeded;  // a retriable failure with no retry left
  Counter upstream_rq_per_try_timeout;
  Counter upstream_rq_timeout;
  Counter upstream_rq_reset;
  Counter upstream_cx_kept_after_reset;  // abandoned responses read to the end, connection reused
  Counter upstream_rq_body_spliced;      // response bodies moved with splice(2), never copied
  Counter upstream_rq_2xx, upstream_rq_3xx, upstream_rq_4xx, upstream_rq_5xx;
  // Upstream TLS (Envoy's cluster.<name>.ssl.*).
  Counter ssl_handshake;
  Counter ssl_session_reused;
  Counter ssl_connection_error;  // failed handshakes other than verification
  Counter ssl_fail_verify;       // the upstream's certificate did not verify (CA, SAN, expiry)
  // Envoy's cluster histograms (ms): request start to response end, connect(2) to connected
  // (with the TLS handshake), and connection lifetimes.
  Histogram upstream_rq_time;
  Histogram upstream_cx_connect_ms;
  Histogram upstream_cx_length_ms;
};

enum class LbPolicy { kRoundRobin, kLeastRequest, kRandom };

// Cluster.health_checks[0], as the checker (source/upstream/health_checker.h) runs it.
struct HealthCheckConfig {
  enum class Kind { kHttp, kTcp };
  Kind kind = Kind::kHttp;
  uint64_t timeout_ms = 1000;
  uint64_t interval_ms = 10000;
  uint64_t initial_jitter_ms = 0;
  uint64_t interval_jitter_ms = 0;
  uint32_t interval_jitter_percent = 0;
  uint32_t unhealthy_threshold = 1;
  uint32_t healthy_threshold = 1;
  uint64_t no_traffic_interval_ms = 60000;
  uint64_t no_traffic_healthy_interval_ms = 60000;
  uint64_t unhealthy_interval_ms = 0;       // 0: interval
  uint64_t unhealthy_edge_interval_ms = 0;  // 0: unhealthy_interval
  uint64_t healthy_edge_interval_ms = 0;    // 0: interval
  uint32_t alt_port = 0;                    // 0: the host's own port
  bool always_log_failures = false;
  // HTTP: the request, and the statuses that pass (half-open ranges [first, second)).
  std::string host, path, method = "GET";
  std::vector<std::pair<std::string, std::string>> headers_to_add;
  bool send_user_agent = true;
  std::vector<std::pair<int64_t, int64_t>> expected_statuses{{200, 201}};
  std::vector<std::pair<int64_t, int64_t>> retriable_statuses;
  // TCP (and HTTP's optional body check): bytes sent, and pieces the answer must hold in order.
  std::string send;
  std::vector<std::string> receive;
};

// What the checker publishes about a cluster's hosts, read by every worker (atomics, no lock).
struct ClusterHealth {
  std::atomic<uint32_t> hosts{0};       // hosts the checker watches
  std::atomic<uint32_t> unhealthy{0};   // of those, failed_active_hc
  std::atomic<uint64_t> generation{0};  // bumped on every change of a host's verdict
  // health_check.* stats.
  std::atomic<uint64_t> attempt{0}, success{0}, failure{0}, network_failure{0};
};

struct ClusterInfo {
  std::string name;
  bool eds = false;              // hosts come from EDS
  std::string eds_service_name;  // the ClusterLoadAssignment name to ask for
  bool http2 = false;            // configured for HTTP/2 (only the xDS cluster may be)
  LbPolicy lb_policy = LbPolicy::kRoundRobin;
  // Active health checking (null: none) and what it publishes.
  std::shared_ptr<const HealthCheckConfig> health_check;
  std::shared_ptr<ClusterHealth> health;
  // common_lb_config.healthy_panic_threshold: below this share of healthy hosts (percent), the
  // load balancer ignores health and uses every host. 0 disables panic mode.
  double panic_threshold = 50;
  uint64_t connect_timeout_ms = 5000;
  uint64_t idle_timeout_ms = 3600 * 1000;    // 0: never
  uint32_t max_requests_per_connection = 0;  // 0: unlimited
  uint32_t max_response_headers_count = 100;
  uint32_t buffer_limit = 1024 * 1024;
  // upstream_bind_config: applied to every upstream socket before connect(2).
  std::optional<SocketAddress> source_address;
  SocketOptions socket_options;
  // transport_socket envoy.transport_sockets.tls (UpstreamTlsContext). With tls_required and no
  // tls, the context waits for SDS secrets: connections fail, never in cleartext.
  struct Transport {
    std::string name;  // transport_socket_matches[].name (empty: the cluster's transport_socket)
    std::map<std::string, std::string> match;  // as Host::transport_socket_match; empty: any
    bool tls_required = false;
    std::shared_ptr<const TlsContext> tls;
    std::string sni;        // UpstreamTlsContext.sni; empty: no server name sent
    bool verifies = false;  // the context checks the peer against a trusted CA
    bool pending() const { return tls_required && !tls; }
  };
  Transport transport;                       // transport_socket
  std::vector<Transport> transport_matches;  // transport_socket_matches, first match wins
  std::vector<std::string> sds_secrets;      // SDS names every transport here uses
  uint64_t sds_fetch_timeout_ms = 0;         // their sds_configs' initial_fetch_timeout (0: none)
  // upstream_http_protocol_options: the SNI of a TLS connection is the request's host (or the
  // value of override_auto_sni_header), so connections are pooled per host and SNI; with
  // auto_san_validation the upstream's certificate must be valid for that name.
  bool auto_sni = false;
  bool auto_san_validation = false;
  std::string override_auto_sni_header;
  // The transport for `host`: the first of transport_matches whose every key is in the host's
  // metadata with the same value, else `transport`.
  const Transport& TransportFor(const Host& host) const {
    for (const auto& t : transport_matches) {
      bool all = true;
      for (const auto& [k, v] : t.match) {
        auto it = host.transport_socket_match.find(k);
        all &= it != host.transport_socket_match.end() && it->second == v;
      }
      if (all) return t;
    }
    return transport;
  }
  bool tls_pending() const {
    if (transport.pending()) return true;
    for (const auto& t : transport_matches) {
      if (t.pending()) return true;
    }
    return false;
  }
  std::shared_ptr<ClusterResources> resources;
  // One stats block per worker, indexed by worker index (plus one for the main thread).
  std::unique_ptr<ClusterStats[]> stats;
  uint32_t stats_slots = 0;
};

}  // namespace rpx
