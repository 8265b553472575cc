// ConnPool: the HTTP/1.1 connection pool for one upstream host on one worker. Bounded: it opens a
// connection only when the cluster-wide max_connections allows (ClusterResources), reuses idle
// keep-alive connections (most recently used first), queues at most max_pending_requests waiters
// and refuses the rest at once (overflow). Idle connections close after idle_timeout; a connection
// closes after max_requests_per_connection requests.
//
// Threading: everything here runs on the owning worker's dispatcher. Ownership: the pool owns its
// UpstreamClients; a caller owns its PoolCallbacks object and must Cancel() a pending request it
// abandons.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "source/common/assert.h"
#include "source/common/buffer.h"
#include "source/event/dispatcher.h"
#include "source/http/headers.h"
#include "source/http/http1_parser.h"
#include "source/network/connection.h"
#include "source/network/splice.h"
#include "source/tls/tls_transport.h"
#include "source/upstream/cluster.h"

namespace rpx {

class ConnPool;
class UpstreamClient;

enum class PoolFailure { kOverflow, kConnectFailure, kConnectTimeout, kDraining };
enum class UpstreamResetReason { kConnectionClosed, kProtocolError, kLocalReset };

// Receives the response of one request sent through an UpstreamClient.
class ResponseDecoder {
 public:
  virtual ~ResponseDecoder() = default;
  virtual void OnResponseHeaders(ResponseHead& head, bool end_stream) = 0;
  virtual void OnResponseData(const char* data, size_t len, bool end_stream) = 0;
  // The response broke off or was malformed. `detail` says what happened, for the local reply.
  virtual void OnUpstreamReset(UpstreamResetReason reason, const std::string& detail) = 0;
  // The upstream connection's write buffer crossed the high (true) / low (false) watermark.
  virtual void OnUpstreamWriteWatermark(bool above) = 0;
  // Zero-copy: the downstream connection the rest of a Content-Length body may be spliced into
  // (after the head it already holds), or nullptr to receive the body through OnResponseData.
  virtual Connection* SpliceTarget() { return nullptr; }
  // `bytes` of the body went straight to SpliceTarget(); the end still comes as OnResponseData.
  virtual void OnResponseDataSpliced(uint64_t bytes) {}
};

class PoolCallbacks {
 public:
  virtual ~PoolCallbacks() = default;
  virtual void OnPoolReady(UpstreamClient& client) = 0;
  virtual void OnPoolFailure(PoolFailure reason, const std::string& detail) = 0;
};

// One keep-alive HTTP/1.1 connection to an upstream host, carrying one request at a time. After a
// 101 to an upgrade request it becomes a tunnel: bytes pass as they are in both directions, the
// upstream's EOF ends the response, SendData(end_stream) closes it, and it is never reused.
class UpstreamClient : public ConnectionCallbacks,
                       public Http1ParserCallbacks,
                       public SplicerCallbacks,
                       public DeferredDeletable {
 public:
  UpstreamClient(ConnPool& pool, std::unique_ptr<Connection> conn);
  ~UpstreamClient() override;

  // Starts a request; `decoder` receives the response and must outlive it (or call Reset()).
  void StartRequest(ResponseDecoder* decoder, const RequestHead& head);
  void SendData(const char* data, size_t len, bool end_stream);
  // Abandons the request in flight. If the request was sent whole and nothing is being spliced,
  // the connection stays open for a short while to read and discard the response, and goes back
  // to the pool if that response ends in time (HAProxy does the same: without it, a thousand
  // clients hanging up mean a thousand new upstream connections at once). Otherwise, or if the
  // response is too large or late, it is closed.
  void Reset();
  void ReadDisable(bool disable) { conn_->ReadDisable(disable); }
  const Host& host() const;
  int fd() const { return conn_->fd(); }
  HostStats& host_stats();

  // ConnectionCallbacks
  void OnData(Buffer& in) override;
  void OnEvent(ConnectionEvent event) override;
  void OnAboveWriteHighWatermark() override;
  void OnBelowWriteLowWatermark() override;
  // Http1ParserCallbacks
  void OnHead() override;
  void OnBody(const char* data, size_t len) override;
  void OnMessageComplete() override;
  // SplicerCallbacks
  void OnSpliceProgress(uint64_t bytes) override;
  void OnSpliceDone() override;
  void OnSpliceFailed(const std::string& detail) override;

 private:
  friend class ConnPool;
  void MaybeSplice();
  enum class State { kConnecting, kIdle, kBusy, kClosed };
  void ParseResponse();
  void ReleaseAfterResponse(bool stray_bytes);
  void Fail(UpstreamResetReason reason, const std::string& detail);
  // Closes the connection of the request in flight (ending any discard) and hands it back.
  void CloseBusy();

  ConnPool& pool_;
  std::unique_ptr<Connection> conn_;
  Http1Parser parser_;
  State state_ = State::kConnecting;
  ResponseDecoder* decoder_ = nullptr;
  bool request_chunked_ = false;
  bool request_complete_ = false;
  bool response_complete_ = false;
  bool response_keep_alive_ = true;
  bool response_headers_sent_ = false;
  bool upgrade_requested_ = false;  // the request asked to switch protocols
  bool tunnel_ = false;             // ... and the upstream agreed (101): raw bytes both ways
  bool unexpected_101_ = false;
  bool discarding_ = false;  // reading an abandoned request's response (see Reset)
  uint64_t discarded_bytes_ = 0;
  uint32_t requests_ = 0;
  uint64_t created_ms_ = 0;  // the dispatcher's clock at connect(2), for the cx histograms
  // Connect timeout while connecting, idle timeout while idle, discard deadline while discarding.
  std::unique_ptr<Timer> timer_;
  std::unique_ptr<Splicer> splicer_;  // moving the rest of a large body (see MaybeSplice)
  std::list<UpstreamClient*>::iterator pos_;
};

class ConnPool {
 public:
  class Pending;
  // `auto_sni`: this pool's TLS connections send it as their SNI (a cluster with auto_sni has a
  // pool per host and SNI; see WorkerCluster::PoolForSni).
  ConnPool(Dispatcher& dispatcher, std::shared_ptr<const ClusterInfo> cluster,
           std::shared_ptr<const Host> host, ClusterStats& stats,
           std::optional<std::string> auto_sni = std::nullopt);
  ~ConnPool();

  // Either calls callbacks.OnPoolReady/OnPoolFailure before returning (and returns nullptr), or
  // queues the request and returns a handle to Cancel() it with.
  Pending* NewStream(PoolCallbacks& callbacks);
  void Cancel(Pending* pending);
  // Stops using this pool: idle connections close now, busy ones after their request.
  void Drain();
  bool idle() const { return busy_.empty() && connecting_.empty() && pending_.empty(); }
  size_t active_requests() const { return busy_.size() + pending_.size(); }
  size_t connection_count() const { return idle_.size() + busy_.size() + connecting_.size(); }
  // Closes one idle connection to free a cluster slot; returns false if there was none.
  bool CloseOneIdle();
  const Host& host() const { return *host_; }
  // An update kept this pool for `host`, the new form of the same endpoint: its verdicts
  // (health checks, ejection, EDS status) and priority are the ones to read from now on. The
  // counters stay in the block they were counted in.
  void UpdateHost(std::shared_ptr<const Host> host) {
    RPX_ASSERT(host->address == host_->address);
    if (host->stats != host_->stats) stats_keepalive_.push_back(host_->stats);
    host_ = std::move(host);
  }
  const ClusterInfo& cluster() const { return *cluster_; }
  ClusterStats& stats() { return stats_; }
  // This worker's counters for the host (Envoy's per-host stats in /clusters).
  HostStats& host_stats() { return *host_stats_; }
  Dispatcher& dispatcher() { return dispatcher_; }
  // Set by the worker's cluster so a pool short of slots can take an idle one from a sibling
  // (`reclaim`) and, failing that, ask the other workers to give one back (`starved`).
  void set_reclaim(std::function<bool(ConnPool*)> reclaim, std::function<void()> starved) {
    reclaim_ = std::move(reclaim);
    starved_cb_ = std::move(starved);
  }

 private:
  friend class UpstreamClient;
  bool TryCreateConnection();
  void OnConnected(UpstreamClient* c);
  // A TLS connection's handshake is done: counts it.
  void OnTlsConnected(TlsTransport& tls);
  void OnConnectFailed(UpstreamClient* c, PoolFailure reason, const std::string& detail);
  void OnRequestDone(UpstreamClient* c, bool reusable);
  void OnClientClosed(UpstreamClient* c);
  // A client's connection is gone: the active gauges and the lifetime histogram.
  void CxClosed(UpstreamClient* c);
  // The cluster's counters and the host's move together.
  void RqStarted() {
    stats_.upstream_rq_total.Inc();
    stats_.upstream_rq_active.Inc();
    host_stats_->rq_total.Inc();
    host_stats_->rq_active.Inc();
  }
  void CxConnectFailed() {
    stats_.upstream_cx_connect_fail.Inc();
    host_stats_->cx_connect_fail.Inc();
  }
  // Gives the first pending request client `c`, moving it from list `from` (its current one) to
  // busy_.
  void Attach(UpstreamClient* c, std::list<UpstreamClient*>& from);
  void ServePending();
  void SetStarved(bool starved);

  Dispatcher& dispatcher_;
  std::shared_ptr<const ClusterInfo> cluster_;
  std::shared_ptr<const Host> host_;
  ClusterStats& stats_;
  HostStats* host_stats_;  // the host's block for this worker, or own_host_stats_
  // Blocks host_stats_ may point into after UpdateHost replaced the Host that owned them.
  std::vector<std::shared_ptr<HostStats[]>> stats_keepalive_;
  HostStats own_host_stats_;  // for a host built without stats (tests)
  // How this host is spoken to (the cluster's transport_socket, or a transport_socket_matches
  // entry chosen by the host's metadata).
  const ClusterInfo::Transport& transport_;
  std::string sni_;          // sent on TLS connections (transport_.sni, or the auto_sni one)
  std::string verify_name_;  // auto_san_validation: the name the certificate must be valid for
  std::list<UpstreamClient*> idle_, busy_, connecting_;  // owned (deleted via the dispatcher)
  std::list<std::unique_ptr<Pending>> pending_;
  std::unique_ptr<Timer> retry_timer_;
  std::function<bool(ConnPool*)> reclaim_;
  std::function<void()> starved_cb_;
  bool starved_ = false;
  bool draining_ = false;
  int deferred_connect_errors_ = 0;  // connect() failed at once; failed from the retry timer
  std::string deferred_error_;       // why, when not the socket's fault
  bool bind_error_logged_ = false;   // a refused upstream_bind_config was logged
  // The last TLS session with this host (its connections store each new one here), offered for
  // resumption on the next connection.
  SSL_SESSION* tls_session_ = nullptr;
};

inline HostStats& UpstreamClient::host_stats() { return pool_.host_stats(); }

class ConnPool::Pending {
 public:
  explicit Pending(PoolCallbacks& cb) : callbacks(cb) {}
  PoolCallbacks& callbacks;
  std::list<std::unique_ptr<Pending>>::iterator pos;
};

}  // namespace rpx
