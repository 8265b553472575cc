// TCP proxy (Envoy's envoy.filters.network.tcp_proxy): a filter chain that carries a downstream
// connection's bytes, as they are, to a connection of its own to a host of a cluster, and the
// upstream's bytes back. Used for what rpx does not parse: a sidecar's passthrough of unknown
// protocols, TLS passed through by SNI, databases.
//
// - Each side's end of stream is passed on as a half-close (shutdown of the other side's sending
//   half); the session ends when both directions have ended, or when either side resets.
// - Backpressure: a side whose write buffer is above its high watermark stops the other side's
//   reads, so a slow reader never makes rpx buffer more than a connection's buffer limit.
// - Plaintext on both sides: the bytes move with splice(2) through a pipe per direction and never
//   enter userspace (the pipe is then the only buffer); with TLS on either side they are copied.
// - The upstream connection is not pooled, but it is counted against the cluster's
//   max_connections circuit breaker (ConnPool::ConnectTcp). Connect failures are tried again on a
//   newly chosen host up to max_connect_attempts times.
// - ORIGINAL_DST clusters send it to the downstream connection's original destination.
//
// TcpProxyConfig is built on the main thread and immutable afterwards. A TcpProxySession lives on
// the worker that accepted its connection and is owned by the worker's connection list (deleted
// deferred after OnClosed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "source/common/random.h"
#include "source/common/stats.h"
#include "source/event/dispatcher.h"
#include "source/http/access_log.h"
#include "source/http/downstream_connection.h"
#include "source/http/stream.h"
#include "source/network/connection.h"
#include "source/network/splice.h"
#include "source/upstream/worker_cluster.h"

namespace rpx {

// Envoy's tcp.<stat_prefix>.* counters; one block per worker, summed when read.
struct alignas(64) TcpProxyStats {
  Counter downstream_cx_total;
  Counter downstream_cx_no_route;  // the cluster does not exist, or has no host to take it
  Counter downstream_cx_rx_bytes_total;
  Counter downstream_cx_tx_bytes_total;
  Counter downstream_flow_control_paused_reading_total;
  Counter downstream_flow_control_resumed_reading_total;
  Counter idle_timeout;
  Counter max_downstream_connection_duration;
  Counter upstream_flush_total;  // sessions that ended with bytes still to send upstream
};

struct TcpProxyConfig {
  std::string stat_prefix;
  struct Target {
    std::string cluster;
    uint32_t weight = 1;
  };
  std::vector<Target> clusters;  // `cluster`, or weighted_clusters in order
  uint64_t total_weight = 0;
  uint64_t idle_timeout_ms = 3600 * 1000;  // Envoy's default, 1 hour; 0: none
  uint32_t max_connect_attempts = 1;
  uint64_t max_downstream_connection_duration_ms = 0;  // 0: none
  bool flush_access_log_on_connected = false;
  std::vector<std::shared_ptr<const AccessLog>> access_logs;
  uint32_t stats_slots = 1;
  std::shared_ptr<TcpProxyStats[]> stats;

  // The cluster for a new connection (by weight).
  const std::string& PickCluster(uint64_t random) const;
  TcpProxyStats& StatsFor(uint32_t worker) const { return stats[worker % stats_slots]; }
};

class TcpProxySession : public DownstreamConnection {
 public:
  // `downstream` is accepted (its TLS, if any, set); the session owns it from now on.
  TcpProxySession(std::unique_ptr<Connection> downstream,
                  std::shared_ptr<const TcpProxyConfig> config, WorkerClusterManager& clusters,
                  Random& random, const SocketAddress& peer, uint32_t worker);
  ~TcpProxySession() override;
  // Picks the cluster and host and starts connecting. Call once, after the owner has stored the
  // session (a failure ends it through OnClosed at once).
  void Start();

  // DownstreamConnection. A byte stream has no point where it is idle: a drain leaves it running
  // until the drain time ends and CloseNow() closes it (as Envoy's tcp_proxy does).
  void CloseWhenIdle() override { draining_ = true; }
  bool draining() const override { return draining_; }
  void CloseNow() override;

  // ConnectionCallbacks of the downstream connection.
  void OnData(Buffer& in) override;
  void OnEvent(ConnectionEvent event) override;
  void OnReadEnd() override;
  void OnAboveWriteHighWatermark() override;
  void OnBelowWriteLowWatermark() override;

 protected:
  Connection& connection() { return *downstream_; }

 private:
  // The upstream connection's callbacks.
  class Upstream : public ConnectionCallbacks {
   public:
    explicit Upstream(TcpProxySession& s) : s_(s) {}
    void OnData(Buffer& in) override { s_.OnUpstreamData(in); }
    void OnEvent(ConnectionEvent event) override { s_.OnUpstreamEvent(event); }
    void OnReadEnd() override { s_.OnUpstreamReadEnd(); }
    void OnAboveWriteHighWatermark() override { s_.PauseDownstream(true); }
    void OnBelowWriteLowWatermark() override { s_.PauseDownstream(false); }

   private:
    TcpProxySession& s_;
  };
  // The downstream facts an access log prints (addresses, TLS), for the formatter's
  // downstream operators.
  class DownstreamFacts : public DownstreamInfo {
   public:
    explicit DownstreamFacts(TcpProxySession& s) : s_(s) {}
    std::string remote_ip() const override { return s_.peer_.Ip(); }
    bool is_tls() const override { return !s_.downstream_->plaintext(); }
    std::string remote_address() const override { return s_.peer_.ToString(); }
    std::string local_address() const override { return s_.local_.ToString(); }
    std::string requested_server_name() const override;

   private:
    TcpProxySession& s_;
  };

  // One direction of a spliced session.
  class SpliceDirection : public SplicerCallbacks {
   public:
    SpliceDirection(TcpProxySession& s, bool upstream) : s_(s), upstream_(upstream) {}
    void OnSpliceProgress(uint64_t bytes) override { s_.OnSpliced(upstream_, bytes); }
    void OnSpliceDone() override { s_.OnSpliceEnded(upstream_); }
    void OnSpliceFailed(const std::string& detail) override {
      s_.OnSpliceFailed(upstream_, detail);
    }

   private:
    TcpProxySession& s_;
    bool upstream_;  // client -> upstream (true) or back
  };

  // Both sides plaintext (and splicing on): moves the bytes with splice(2); false to copy.
  bool StartSplicing();
  void OnSpliced(bool to_upstream, uint64_t bytes);
  void OnSpliceEnded(bool to_upstream);
  void OnSpliceFailed(bool to_upstream, const std::string& detail);
  // One connection attempt to a newly chosen host; false when none could be made (the session
  // has ended).
  bool Connect();
  void OnConnectFailed(bool timed_out, const std::string& detail);
  void OnUpstreamData(Buffer& in);
  void OnUpstreamEvent(ConnectionEvent event);
  void OnUpstreamReadEnd();
  void PauseDownstream(bool pause);
  // Turns reading back on and passes on what the connection read while it was off.
  void Resume(Connection& c, bool downstream);
  void OnIdleTimer();
  void OnDurationTimer();
  // Both directions have ended (or one side failed): closes both connections (flushing what they
  // hold), writes the access log and tells the owner.
  void Finish(uint32_t response_flags, bool flush);
  void ReleaseUpstream();
  void Log();

  std::unique_ptr<Connection> downstream_;
  std::unique_ptr<Connection> upstream_;
  SpliceDirection to_upstream_callbacks_{*this, true};
  SpliceDirection to_downstream_callbacks_{*this, false};
  std::unique_ptr<Splicer> to_upstream_;  // while splicing
  std::unique_ptr<Splicer> to_downstream_;
  Upstream upstream_callbacks_{*this};
  DownstreamFacts facts_{*this};
  std::shared_ptr<const TcpProxyConfig> config_;
  TcpProxyStats& stats_;
  WorkerClusterManager& clusters_;
  Random& random_;
  SocketAddress peer_;
  SocketAddress local_;  // with access logs: the downstream's local address (or original dest.)
  uint32_t worker_;
  const std::string* cluster_name_ = nullptr;
  ConnPool* pool_ = nullptr;  // the upstream connection's (counted there until TcpClosed)
  uint64_t upstream_started_ms_ = 0;
  uint32_t attempts_ = 0;
  uint64_t last_activity_ms_ = 0;
  std::unique_ptr<Timer> connect_timer_;
  std::unique_ptr<Timer> idle_timer_;
  std::unique_ptr<Timer> duration_timer_;
  StreamInfo info_;
  bool connected_ = false;
  bool downstream_ended_ = false;  // the client ended its side (its FIN was passed on)
  bool upstream_ended_ = false;
  bool downstream_paused_ = false;
  bool draining_ = false;
  bool finished_ = false;
};

}  // namespace rpx
