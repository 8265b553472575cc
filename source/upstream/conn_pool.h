// ConnPool: the connections to one upstream host on one worker, whatever protocol they speak.
// Bounded: it opens a connection only when the cluster-wide max_connections allows
// (ClusterResources), puts new streams on the connections it has while they have room (most
// recently used first), queues at most max_pending_requests waiters and refuses the rest at once
// (overflow). Idle connections close after idle_timeout; a connection takes no new stream after
// max_requests_per_connection streams.
//
// A connection is a PoolClient: Http1Client (source/upstream/http1_client.h, one request at a
// time) or Http2Client (http2_client.h, many streams at once, as many as the peer's
// SETTINGS_MAX_CONCURRENT_STREAMS and the cluster's max_concurrent_streams allow). The pool knows
// only how many streams each carries and may carry; every change of a client's state goes through
// one function (ConnPool::SetState), which keeps each client in the list of its state.
//
// Threading: everything here runs on the owning worker's dispatcher. Ownership: the pool owns its
// clients; a caller owns its PoolCallbacks object and must Cancel() a pending request it
// abandons, and Reset() a stream it abandons.
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
#include "source/network/connection.h"
#include "source/tls/tls_transport.h"
#include "source/upstream/cluster.h"

namespace rpx {

class ConnPool;
class PoolClient;

enum class PoolFailure { kOverflow, kConnectFailure, kConnectTimeout, kDraining };
// kRefusedStream: the upstream refused the stream before processing it (HTTP/2 REFUSED_STREAM, or
// above a GOAWAY's last stream id): safe to send again.
enum class UpstreamResetReason { kConnectionClosed, kProtocolError, kLocalReset, kRefusedStream };

// Receives the response of one request sent through an UpstreamStream.
class ResponseDecoder {
 public:
  virtual ~ResponseDecoder() = default;
  virtual void OnResponseHeaders(ResponseHead& head, bool end_stream) = 0;
  virtual void OnResponseData(const char* data, size_t len, bool end_stream) = 0;
  // The response ends with trailers (HTTP/2 upstreams; gRPC's grpc-status lives here).
  virtual void OnResponseTrailers(HeaderMap& trailers) { OnResponseData(nullptr, 0, true); }
  // The response broke off or was malformed. `detail` says what happened, for the local reply.
  virtual void OnUpstreamReset(UpstreamResetReason reason, const std::string& detail) = 0;
  // The upstream connection's write buffer (HTTP/1) or the stream's unsent body (HTTP/2) crossed
  // the high (true) / low (false) watermark.
  virtual void OnUpstreamWriteWatermark(bool above) = 0;
  // Zero-copy: the downstream connection the rest of a Content-Length body may be spliced into
  // (after the head it already holds), or nullptr to receive the body through OnResponseData.
  virtual Connection* SpliceTarget() { return nullptr; }
  // `bytes` of the body went straight to SpliceTarget(); the end still comes as OnResponseData.
  virtual void OnResponseDataSpliced(uint64_t bytes) {}
};

// One request on an upstream connection, as the router sees it: the HTTP/1 connection itself, or
// one stream of an HTTP/2 one. Valid from OnPoolReady until the response ends (the decoder's
// end_stream or OnUpstreamReset) or Reset().
class UpstreamStream {
 public:
  // Starts the request; `decoder` receives the response and must outlive it (or call Reset()).
  virtual void StartRequest(ResponseDecoder* decoder, const RequestHead& head) = 0;
  virtual void SendData(const char* data, size_t len, bool end_stream) = 0;
  // Ends the request body with trailers (after SendData calls without end_stream). HTTP/1.1 has
  // no place for them here: its client ends the body and drops them (as Envoy does by default).
  virtual void SendTrailers(const HeaderMap& trailers) { SendData(nullptr, 0, true); }
  // Abandons the request: the decoder gets no more calls.
  virtual void Reset() = 0;
  // Stops (true) or resumes (false) reading the response: downstream backpressure.
  virtual void ReadDisable(bool disable) = 0;
  virtual PoolClient& client() = 0;
  const Host& host();
  HostStats& host_stats();
  int fd();

 protected:
  ~UpstreamStream() = default;
};

class PoolCallbacks {
 public:
  virtual ~PoolCallbacks() = default;
  virtual void OnPoolReady(UpstreamStream& stream) = 0;
  virtual void OnPoolFailure(PoolFailure reason, const std::string& detail) = 0;
};

// One upstream connection in a pool. The pool decides its state; the protocol client tells the
// pool what happened (connected, a stream ended, the connection closed, no more streams).
class PoolClient : public ConnectionCallbacks, public DeferredDeletable {
 public:
  // kIdle: no stream, may take one. kActive: some streams, room for more. kBusy: as many streams
  // as it may carry. kDraining: streams left, takes no new one (GOAWAY, max_requests, the pool is
  // draining, the response said Connection: close). kClosed: gone (deleted deferred).
  enum class State : uint8_t { kConnecting, kIdle, kActive, kBusy, kDraining, kClosed };

  PoolClient(ConnPool& pool, std::unique_ptr<Connection> conn, uint32_t stream_limit);
  ~PoolClient() override;

  State state() const { return state_; }
  uint32_t active_streams() const { return active_; }
  const Host& host() const;
  HostStats& host_stats();
  int fd() const { return conn_->fd(); }

 protected:
  friend class ConnPool;
  // A new stream for the pool's next waiter (the pool has counted it in active_).
  virtual UpstreamStream& NewStream() = 0;
  // The connection's timer fired in a state the pool does not handle (connecting, idle).
  virtual void OnTimer() {}
  // The pool closes this connection (idle timeout, drain, shutdown); no stream is open.
  virtual void CloseIdle() { conn_->Close(Connection::CloseType::kNoFlush, false); }
  // The connect (or its TLS handshake) failed: counts why and tells the pool.
  void ConnectFailed();

  ConnPool& pool_;
  std::unique_ptr<Connection> conn_;
  // Connect timeout while connecting, idle timeout while idle; the protocol's own use otherwise.
  std::unique_ptr<Timer> timer_;
  uint64_t created_ms_ = 0;  // the dispatcher's clock at connect(2), for the cx histograms
  uint32_t limit_;           // streams it may carry at once
  uint32_t active_ = 0;      // streams in flight (counted by the pool)
  uint32_t streams_ = 0;     // streams it ever carried (max_requests_per_connection)
  bool closing_ = false;     // takes no new stream; closes after the last one
  bool closed_ = false;      // the socket is closed (the client ended its streams first)

 private:
  State state_ = State::kConnecting;
  std::list<PoolClient*>::iterator pos_;
};

inline const Host& UpstreamStream::host() { return client().host(); }
inline HostStats& UpstreamStream::host_stats() { return client().host_stats(); }
inline int UpstreamStream::fd() { return client().fd(); }

class ConnPool {
 public:
  class Pending;
  using State = PoolClient::State;
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
  // Stops using this pool: idle connections close now, the others after their last stream.
  void Drain();
  bool idle() const {
    return active_.empty() && busy_.empty() && draining_.empty() && connecting_.empty() &&
           pending_.empty() && tcp_connections_ == 0;
  }
  // A TCP proxy's connection to the host: not pooled (its owner carries one downstream
  // connection's bytes over it, then closes it), but counted against the cluster's
  // max_connections and in the cluster's and host's connection stats until TcpClosed, and it
  // keeps the pool alive (not idle) meanwhile. The connection is connecting (kConnected or
  // kConnectFailed follow; a TLS cluster's handshake runs first). nullptr when the circuit
  // breaker is full (*overflow) or connect(2) failed at once (*detail says why).
  std::unique_ptr<Connection> ConnectTcp(bool* overflow, std::string* detail);
  // Counts the outcome of a ConnectTcp connection: connected (with the time it took), or not.
  void TcpConnectDone(uint64_t started_ms, bool connected, bool timed_out);
  // A ConnectTcp connection is closed; `started_ms` is when it was made.
  void TcpClosed(uint64_t started_ms);
  size_t active_requests() const { return streams_active_ + pending_.size(); }
  size_t connection_count() const {
    return idle_.size() + active_.size() + busy_.size() + draining_.size() + connecting_.size();
  }
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

  // From the clients (their protocol events).
  // The connection (and its TLS handshake) is up. An auto_config client whose ALPN picked h2
  // hands its connection to an Http2Client first (see SwitchToHttp2).
  void OnConnected(PoolClient* c);
  void OnTlsConnected(TlsTransport& tls);
  void OnConnectFailed(PoolClient* c, PoolFailure reason, const std::string& detail);
  // One of c's streams ended. `reusable` false: the connection takes no more streams (it closes
  // after its last one; now, for HTTP/1).
  void OnStreamDone(PoolClient* c, bool reusable);
  // c's socket closed (its streams, if any, were ended first).
  void OnClientClosed(PoolClient* c);
  // c takes no new stream (GOAWAY from the upstream), or may carry a different number at once
  // (the peer's SETTINGS).
  void OnClientChanged(PoolClient* c) { Settle(c); }
  // A connection closed with streams open, each reset before it (Http2Client).
  void CountRemoteDestroy() { stats_.upstream_cx_destroy_remote.Inc(); }

 private:
  // The one place a client changes state: moves it to the list of `to`. kClosed releases its
  // cluster slot and deletes it (deferred); the idle timer runs only in kIdle.
  void SetState(PoolClient* c, State to);
  // Puts c where its facts say (streams, limit, closing, closed): closes a closing client with
  // no stream left, gives waiters the room it has, and otherwise parks it.
  void Settle(PoolClient* c);
  std::list<PoolClient*>& ListOf(State s);
  bool TryCreateConnection();
  // c (connecting, HTTP/1 with auto_config) negotiated h2: an Http2Client takes its socket.
  PoolClient* SwitchToHttp2(PoolClient* c);
  // A connection to the host (a client's, or ConnectTcp's) is opened / gone: the totals, the
  // active gauges and the lifetime histogram, the cluster's and the host's together.
  void CxOpened();
  void CxClosed(uint64_t created_ms);
  // connect(2) to the host with the cluster's upstream_bind_config, over its TLS transport if it
  // has one; nullptr with errno in *err (and *detail when a bind step failed).
  std::unique_ptr<Connection> OpenConnection(int* err, std::string* detail);
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
  // Starts a stream on c (which has room) for `callbacks`.
  void Attach(PoolClient* c, PoolCallbacks& callbacks);
  // Gives waiters the room the connections have, then opens connections for the rest.
  void ServePending();
  void SetStarved(bool starved);
  // Streams the connections still connecting will take.
  size_t connecting_capacity() const { return connecting_streams_; }

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
  // Owned (deleted via the dispatcher), one list per state, most recently used first.
  std::list<PoolClient*> connecting_, idle_, active_, busy_, draining_;
  size_t connecting_streams_ = 0;  // sum of the connecting clients' limits
  size_t tcp_connections_ = 0;     // ConnectTcp connections not closed yet
  size_t streams_active_ = 0;      // streams in flight on all clients
  std::list<std::unique_ptr<Pending>> pending_;
  std::unique_ptr<Timer> retry_timer_;
  std::function<bool(ConnPool*)> reclaim_;
  std::function<void()> starved_cb_;
  bool starved_ = false;
  bool draining_pool_ = false;
  bool serving_ = false;             // inside ServePending
  int deferred_connect_errors_ = 0;  // connect() failed at once; failed from the retry timer
  std::string deferred_error_;       // why, when not the socket's fault
  bool bind_error_logged_ = false;   // a refused upstream_bind_config was logged
  // The last TLS session with this host (its connections store each new one here), offered for
  // resumption on the next connection.
  SSL_SESSION* tls_session_ = nullptr;
};

inline HostStats& PoolClient::host_stats() { return pool_.host_stats(); }
inline const Host& PoolClient::host() const { return pool_.host(); }

class ConnPool::Pending {
 public:
  explicit Pending(PoolCallbacks& cb) : callbacks(cb) {}
  PoolCallbacks& callbacks;
  std::list<std::unique_ptr<Pending>>::iterator pos;
};

}  // namespace rpx
