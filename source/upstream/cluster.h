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
#include "source/http/http_config.h"
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
  // LocalityLbEndpoints: the priority level (0 is the highest), the locality ("region/zone/
  // sub_zone") and its load_balancing_weight (0: none given).
  uint32_t priority = 0;
  std::string locality;
  uint32_t locality_weight = 0;
  // EDS health_status UNHEALTHY, DRAINING or TIMEOUT: counted in its priority's size (so the
  // level fails over as Envoy's does) but picked only in panic.
  bool eds_unhealthy = false;
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
  // Outlier detection: ejected hosts take no traffic until the main thread's detector brings them
  // back; the workers count failures in a row here (across workers) and tell the detector when
  // a streak reaches its threshold.
  mutable std::atomic<bool> ejected{false};
  mutable std::atomic<uint32_t> consecutive_5xx{0}, consecutive_gateway_failure{0},
      consecutive_local_origin_failure{0};
  // Whether the load balancer may pick it (health aside in panic mode).
  bool available() const {
    return !eds_unhealthy && !failed_active_hc.load(std::memory_order_relaxed) &&
           !ejected.load(std::memory_order_relaxed);
  }

  void AllocateStats(uint32_t slots) {
    stats.reset(new HostStats[slots]);
    stats_slots = slots;
  }
  // Worker `worker`'s block, or null for a host built without stats (tests).
  HostStats* StatsFor(uint32_t worker) const {
    return worker < stats_slots ? &stats[worker] : nullptr;
  }
};
// A cluster's endpoints, every priority level together, with the assignment's policy.
struct HostSet : std::vector<std::shared_ptr<const Host>> {
  using vector::vector;
  // ClusterLoadAssignment.policy: a level counts as whole (takes all its share of the load) while
  // its healthy hosts times overprovisioning_factor / 100 cover it; with weighted_priority_health
  // hosts count by their load_balancing_weight instead of one each.
  uint32_t overprovisioning_factor = 140;
  bool weighted_priority_health = false;
};

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
  Counter upstream_cx_http1_total;
  Counter upstream_cx_http2_total;
  Counter upstream_cx_close_notify;    // HTTP/2 GOAWAY received (Connection: close, for HTTP/1)
  Counter upstream_cx_protocol_error;  // the upstream broke HTTP/2 (the connection closed)
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
  Counter lb_healthy_panic;  // picks made in panic (health ignored: too few healthy hosts)
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

enum class LbPolicy { kRoundRobin, kLeastRequest, kRandom, kRingHash, kMaglev };

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

// Cluster.outlier_detection, with Envoy's defaults.
struct OutlierConfig {
  uint64_t interval_ms = 10000;
  uint64_t base_ejection_time_ms = 30000;
  uint64_t max_ejection_time_ms = 300000;
  uint64_t max_ejection_time_jitter_ms = 0;
  uint32_t max_ejection_percent = 10;
  bool always_eject_one_host = false;
  bool split_external_local_origin_errors = false;
  uint32_t consecutive_5xx = 5, enforcing_consecutive_5xx = 100;
  uint32_t consecutive_gateway_failure = 5, enforcing_consecutive_gateway_failure = 0;
  uint32_t consecutive_local_origin_failure = 5, enforcing_consecutive_local_origin_failure = 100;
  uint32_t success_rate_minimum_hosts = 5, success_rate_request_volume = 100;
  uint32_t success_rate_stdev_factor = 1900, enforcing_success_rate = 100;
  uint32_t failure_percentage_threshold = 85, enforcing_failure_percentage = 0;
  uint32_t failure_percentage_minimum_hosts = 5, failure_percentage_request_volume = 50;
  bool successful_active_health_check_uneject_host = true;
};

// Why a host is ejected.
enum class OutlierReason {
  kConsecutive5xx,
  kConsecutiveGatewayFailure,
  kConsecutiveLocalOriginFailure,
  kSuccessRate,
  kFailurePercentage,
};

// Workers tell the main thread's detector that a host's failure streak reached its threshold
// (rare: once per streak). Set by the detector; any thread may call Notify.
class OutlierSink {
 public:
  void Set(std::function<void(const SocketAddress&, OutlierReason)> fn) {
    std::lock_guard<std::mutex> l(mu_);
    fn_ = std::move(fn);
  }
  void Notify(const SocketAddress& host, OutlierReason reason) {
    std::lock_guard<std::mutex> l(mu_);
    if (fn_) fn_(host, reason);
  }

 private:
  std::mutex mu_;
  std::function<void(const SocketAddress&, OutlierReason)> fn_;
};

// What the main thread publishes about a cluster's hosts (active health checks and outlier
// ejections), read by every worker (atomics, no lock).
struct ClusterHealth {
  std::atomic<uint32_t> hosts{0};       // hosts in the published set
  std::atomic<uint32_t> unhealthy{0};   // of those, failed a health check or ejected
  std::atomic<uint64_t> generation{0};  // bumped on every change of a host's verdict
  // health_check.* stats.
  std::atomic<uint64_t> attempt{0}, success{0}, failure{0}, network_failure{0};
  // outlier_detection.* stats.
  std::atomic<uint64_t> ejections_active{0}, ejections_enforced_total{0}, ejections_overflow{0};
  std::atomic<uint64_t> ejections_enforced_consecutive_5xx{0},
      ejections_detected_consecutive_5xx{0}, ejections_enforced_consecutive_gateway_failure{0},
      ejections_detected_consecutive_gateway_failure{0},
      ejections_enforced_consecutive_local_origin_failure{0},
      ejections_detected_consecutive_local_origin_failure{0}, ejections_enforced_success_rate{0},
      ejections_detected_success_rate{0}, ejections_enforced_failure_percentage{0},
      ejections_detected_failure_percentage{0};
};

// Recounts `unhealthy` over `hosts` and tells the workers (main thread).
inline void PublishHealth(ClusterHealth& h, const HostSet& hosts) {
  uint32_t unhealthy = 0;
  for (const auto& host : hosts) unhealthy += host->available() ? 0 : 1;
  h.hosts.store(static_cast<uint32_t>(hosts.size()), std::memory_order_relaxed);
  h.unhealthy.store(unhealthy, std::memory_order_relaxed);
  h.generation.fetch_add(1, std::memory_order_release);
}

struct ClusterInfo {
  std::string name;
  bool eds = false;              // hosts come from EDS
  std::string eds_service_name;  // the ClusterLoadAssignment name to ask for
  // What its connections speak: explicit_http_config (http_protocol_options or
  // http2_protocol_options), or auto_config (h2 when TLS ALPN picks it, else HTTP/1.1).
  enum class Protocol { kHttp1, kHttp2, kAuto };
  Protocol protocol = Protocol::kHttp1;
  bool http2() const { return protocol != Protocol::kHttp1; }
  Http2Options http2_options;  // for h2 connections (max_concurrent_streams, windows, HPACK)
  LbPolicy lb_policy = LbPolicy::kRoundRobin;
  // type ORIGINAL_DST (lb_policy CLUSTER_PROVIDED): no configured hosts; each connection goes to
  // the downstream connection's original destination (its local address as restored by the
  // original_dst listener filter), or with use_http_header to the address in that request
  // header. Each worker makes a pool per destination when first used and drops the ones idle
  // for a whole cleanup_interval.
  struct OriginalDst {
    bool use_http_header = false;
    std::string http_header_name = "x-envoy-original-dst-host";  // lower case
    uint32_t port_override = 0;                                  // 0: the destination's port
    uint64_t cleanup_interval_ms = 5000;
  };
  std::optional<OriginalDst> original_dst;
  // RING_HASH: ring_hash_lb_config's sizes; MAGLEV: maglev_lb_config.table_size (a prime).
  uint64_t ring_min_size = 1024, ring_max_size = 8 * 1024 * 1024;
  uint64_t maglev_table_size = 65537;
  // Active health checking (null: none) and what it publishes.
  std::shared_ptr<const HealthCheckConfig> health_check;
  std::shared_ptr<const OutlierConfig> outlier;
  std::shared_ptr<OutlierSink> outlier_sink;  // with `outlier`
  std::shared_ptr<ClusterHealth> health;      // with either
  // round_robin_lb_config / least_request_lb_config .slow_start_config: a host's weight ramps up
  // over `window_ms` after it joins or comes back from failing its health checks, as
  // weight x max(min_weight, time_factor ^ (1 / aggression)), time_factor = max(seconds in the
  // window, 1) / window in seconds (Envoy's formula).
  struct SlowStart {
    uint64_t window_ms = 0;
    double aggression = 1.0;
    double min_weight = 0.1;
  };
  std::optional<SlowStart> slow_start;
  // least_request_lb_config.choice_count: hosts drawn per pick (the least loaded wins).
  uint32_t choice_count = 2;
  // common_lb_config.locality_weighted_lb_config: within a priority, a locality is picked by its
  // load_balancing_weight (scaled by its health), then a host within it.
  bool locality_weighted = false;
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
