#include "source/tcp_proxy/tcp_proxy.h"

#include "source/common/assert.h"
#include "source/common/logger.h"
#include "source/tls/tls_transport.h"

namespace rpx {

const std::string& TcpProxyConfig::PickCluster(uint64_t random) const {
  RPX_ASSERT(!clusters.empty());
  if (clusters.size() == 1 || total_weight == 0) return clusters[0].cluster;
  uint64_t at = random % total_weight;
  for (const Target& t : clusters) {
    if (at < t.weight) return t.cluster;
    at -= t.weight;
  }
  return clusters.back().cluster;
}

std::string TcpProxySession::DownstreamFacts::requested_server_name() const {
  if (s_.downstream_->plaintext()) return "";
  return static_cast<const TlsTransport&>(s_.downstream_->transport()).server_name();
}

TcpProxySession::TcpProxySession(std::unique_ptr<Connection> downstream,
                                 std::shared_ptr<const TcpProxyConfig> config,
                                 WorkerClusterManager& clusters, Random& random,
                                 const SocketAddress& peer, uint32_t worker)
    : downstream_(std::move(downstream)),
      config_(std::move(config)),
      stats_(config_->StatsFor(worker)),
      clusters_(clusters),
      random_(random),
      peer_(peer),
      worker_(worker) {}

TcpProxySession::~TcpProxySession() {
  to_upstream_.reset();
  to_downstream_.reset();
  ReleaseUpstream();
  Connection::Release(std::move(upstream_));
  Connection::Release(std::move(downstream_));
}

void TcpProxySession::Start() {
  stats_.downstream_cx_total.Inc();
  info_.start_ns = MonotonicNowNs();
  info_.start_unix_ns = UnixNowNs();
  // Kept for the logs only, which may be written once the socket is closed (no getsockname
  // per connection otherwise).
  if (!config_->access_logs.empty()) local_ = downstream_->LocalAddress();
  downstream_->SetCallbacks(this);
  downstream_->EnableHalfClose();
  // Nothing is read until the upstream connection is up: the client's bytes wait in its socket
  // (backpressure from the start) instead of in rpx.
  downstream_->ReadDisable(true);
  Dispatcher& d = downstream_->dispatcher();
  d.UpdateTime();
  last_activity_ms_ = d.NowMs();
  if (config_->max_downstream_connection_duration_ms > 0) {
    duration_timer_ = d.CreateTimer([this] { OnDurationTimer(); });
    duration_timer_->Enable(config_->max_downstream_connection_duration_ms);
  }
  cluster_name_ = &config_->PickCluster(random_.Next());
  info_.cluster_name = cluster_name_;
  Connect();
}

bool TcpProxySession::Connect() {
  WorkerCluster* cluster = clusters_.Get(*cluster_name_);
  if (!cluster) {
    stats_.downstream_cx_no_route.Inc();
    RPX_LOG(kDebug, "tcp_proxy %s: cluster '%s' not found", config_->stat_prefix, *cluster_name_);
    Finish(kNoClusterFound, false);
    return false;
  }
  if (cluster->info().original_dst) {
    // Only a restored destination: a connection made to rpx's own address (not redirected) would
    // otherwise be sent back to rpx, over and over (Envoy's rule too).
    if (downstream_->has_original_destination()) {
      pool_ = cluster->PoolForOriginalDst(downstream_->LocalAddress());
    }
  } else {
    pool_ = cluster->ChoosePool(random_.Next());
  }
  if (!pool_) {
    stats_.downstream_cx_no_route.Inc();
    Finish(kNoHealthyUpstream, false);
    return false;
  }
  ++attempts_;
  info_.upstream_address = &pool_->host().address;
  bool overflow = false;
  std::string detail;
  Dispatcher& d = downstream_->dispatcher();
  d.UpdateTime();
  upstream_started_ms_ = d.NowMs();
  upstream_ = pool_->ConnectTcp(&overflow, &detail);
  if (!upstream_) {
    pool_ = nullptr;
    if (overflow) {
      Finish(kUpstreamOverflow, false);
      return false;
    }
    info_.upstream_transport_failure_reason = detail;
    OnConnectFailed(false, detail);
    return !finished_;
  }
  upstream_->SetCallbacks(&upstream_callbacks_);
  upstream_->EnableHalfClose();
  if (!connect_timer_) {
    connect_timer_ = d.CreateTimer([this] { OnConnectFailed(true, "connect timeout"); });
  }
  connect_timer_->Enable(pool_->cluster().connect_timeout_ms);
  return true;
}

void TcpProxySession::OnConnectFailed(bool timed_out, const std::string& detail) {
  if (connect_timer_) connect_timer_->Disable();
  if (pool_) {
    pool_->TcpConnectDone(upstream_started_ms_, false, timed_out);
    ReleaseUpstream();
  }
  if (upstream_) {
    // Called from the connection's own callback: it is freed after the callback returns.
    upstream_->Close(Connection::CloseType::kNoFlush, false);
    downstream_->dispatcher().DeferredDelete(std::move(upstream_));
  }
  RPX_LOG(kDebug, "tcp_proxy %s: connecting to cluster '%s' failed (attempt %u of %u): %s",
          config_->stat_prefix, *cluster_name_, attempts_, config_->max_connect_attempts, detail);
  if (attempts_ < config_->max_connect_attempts && !finished_) {
    Connect();
    return;
  }
  info_.upstream_transport_failure_reason = detail;
  Finish(kUpstreamConnectionFailure, false);
}

void TcpProxySession::ReleaseUpstream() {
  if (!pool_) return;
  pool_->TcpClosed(upstream_started_ms_);
  pool_ = nullptr;
}

void TcpProxySession::OnUpstreamEvent(ConnectionEvent event) {
  if (finished_) return;
  switch (event) {
    case ConnectionEvent::kConnected: {
      connect_timer_->Disable();
      connected_ = true;
      pool_->TcpConnectDone(upstream_started_ms_, true, false);
      if (!config_->access_logs.empty()) {
        info_.upstream_local_address = upstream_->LocalAddress().ToString();
        if (config_->flush_access_log_on_connected) Log();
      }
      Dispatcher& d = downstream_->dispatcher();
      last_activity_ms_ = d.NowMs();
      if (config_->idle_timeout_ms > 0) {
        idle_timer_ = d.CreateTimer([this] { OnIdleTimer(); });
        idle_timer_->Enable(config_->idle_timeout_ms);
      }
      if (!StartSplicing() && !finished_ && !downstream_paused_) Resume(*downstream_, true);
      return;
    }
    case ConnectionEvent::kConnectFailed:
      OnConnectFailed(false, "connection refused or reset while connecting");
      return;
    case ConnectionEvent::kRemoteClose:
    case ConnectionEvent::kLocalClose:
      if (!connected_) {
        OnConnectFailed(false, "connection closed while connecting");
        return;
      }
      // Reset by the upstream (or both sides ended and the socket reported the hang-up).
      Finish(downstream_ended_ && upstream_ended_ ? 0 : kUpstreamConnectionTermination, true);
      return;
  }
}

bool TcpProxySession::StartSplicing() {
  if (!downstream_->plaintext() || !upstream_->plaintext()) return false;
  to_upstream_ =
      Splicer::Create(*downstream_, *upstream_, Splicer::kUntilEnd, to_upstream_callbacks_);
  if (!to_upstream_) return false;
  to_downstream_ =
      Splicer::Create(*upstream_, *downstream_, Splicer::kUntilEnd, to_downstream_callbacks_);
  if (!to_downstream_) {
    to_upstream_.reset();
    return false;
  }
  // Either may end the session at once (a side already gone).
  to_upstream_->Start();
  if (!finished_ && to_downstream_) to_downstream_->Start();
  return true;
}

void TcpProxySession::OnSpliced(bool to_upstream, uint64_t bytes) {
  if (to_upstream) {
    stats_.downstream_cx_rx_bytes_total.Inc(bytes);
    info_.bytes_received += bytes;
  } else {
    stats_.downstream_cx_tx_bytes_total.Inc(bytes);
    info_.bytes_sent += bytes;
  }
  last_activity_ms_ = downstream_->dispatcher().NowMs();
}

void TcpProxySession::OnSpliceEnded(bool to_upstream) {
  // The source ended and everything it sent is in the sink's socket: end the sink's side.
  if (to_upstream) {
    OnReadEnd();
  } else {
    OnUpstreamReadEnd();
  }
}

void TcpProxySession::OnSpliceFailed(bool to_upstream, const std::string& detail) {
  if (finished_) return;
  RPX_LOG(kDebug, "tcp_proxy %s: %s", config_->stat_prefix, detail);
  bool client_gone = downstream_->closed() || (to_upstream && !upstream_->closed());
  Finish(client_gone ? kDownstreamConnectionTermination : kUpstreamConnectionTermination, true);
}

void TcpProxySession::OnData(Buffer& in) {
  // Reads start once the upstream is connected and stop when the session finishes.
  RPX_ASSERT(!finished_ && upstream_ && connected_);
  size_t n = in.size();
  stats_.downstream_cx_rx_bytes_total.Inc(n);
  info_.bytes_received += n;
  last_activity_ms_ = downstream_->dispatcher().NowMs();
  upstream_->WriteThrough(in.data(), n);
  in.Drain(n);
}

void TcpProxySession::OnUpstreamData(Buffer& in) {
  RPX_ASSERT(!finished_);
  size_t n = in.size();
  stats_.downstream_cx_tx_bytes_total.Inc(n);
  info_.bytes_sent += n;
  last_activity_ms_ = downstream_->dispatcher().NowMs();
  downstream_->WriteThrough(in.data(), n);
  in.Drain(n);
}

void TcpProxySession::OnReadEnd() {
  if (finished_ || downstream_ended_) return;
  downstream_ended_ = true;
  if (upstream_ && connected_) {
    upstream_->ShutdownWrite();
  }
  if (upstream_ended_) Finish(0, true);
}

void TcpProxySession::OnUpstreamReadEnd() {
  if (finished_ || upstream_ended_) return;
  upstream_ended_ = true;
  downstream_->ShutdownWrite();
  if (downstream_ended_) Finish(0, true);
}

void TcpProxySession::OnEvent(ConnectionEvent event) {
  if (finished_) return;
  switch (event) {
    case ConnectionEvent::kConnected:
      OnTransportConnected();  // the downstream TLS handshake is done
      return;
    case ConnectionEvent::kRemoteClose:
    case ConnectionEvent::kLocalClose:
    case ConnectionEvent::kConnectFailed:
      // The client reset (or both sides ended and the socket reported the hang-up).
      Finish(downstream_ended_ && upstream_ended_ ? 0 : kDownstreamConnectionTermination, true);
      return;
  }
}

void TcpProxySession::OnAboveWriteHighWatermark() {
  // The client does not take the upstream's bytes fast enough: stop reading the upstream.
  if (upstream_) upstream_->ReadDisable(true);
}

void TcpProxySession::OnBelowWriteLowWatermark() {
  if (upstream_ && !finished_) Resume(*upstream_, false);
}

void TcpProxySession::PauseDownstream(bool pause) {
  if (finished_ || pause == downstream_paused_) return;
  downstream_paused_ = pause;
  if (pause) {
    stats_.downstream_flow_control_paused_reading_total.Inc();
    downstream_->ReadDisable(true);
  } else {
    stats_.downstream_flow_control_resumed_reading_total.Inc();
    if (connected_) Resume(*downstream_, true);
  }
}

void TcpProxySession::Resume(Connection& c, bool downstream) {
  c.ReadDisable(false);
  // Bytes read before reading was turned off (read batching) wait in the buffer: pass them on.
  if (!c.read_buffer().empty()) {
    if (downstream) {
      OnData(c.read_buffer());
    } else {
      OnUpstreamData(c.read_buffer());
    }
  }
}

void TcpProxySession::OnIdleTimer() {
  if (finished_) return;
  uint64_t now = downstream_->dispatcher().NowMs();
  uint64_t quiet = now - last_activity_ms_;
  if (quiet < config_->idle_timeout_ms) {
    idle_timer_->Enable(config_->idle_timeout_ms - quiet);
    return;
  }
  stats_.idle_timeout.Inc();
  Finish(kStreamIdleTimeout, true);
}

void TcpProxySession::OnDurationTimer() {
  if (finished_) return;
  stats_.max_downstream_connection_duration.Inc();
  Finish(kDurationTimeout, true);
}

void TcpProxySession::CloseNow() {
  if (finished_) return;
  Finish(kDownstreamConnectionTermination, false);
}

void TcpProxySession::Log() {
  if (config_->access_logs.empty()) return;
  FormatContext ctx;
  ctx.info = &info_;
  ctx.downstream = &facts_;
  for (const auto& log : config_->access_logs) log->Log(ctx, worker_);
}

void TcpProxySession::Finish(uint32_t response_flags, bool flush) {
  if (finished_) return;
  finished_ = true;
  info_.response_flags |= response_flags;
  info_.end_ns = MonotonicNowNs();
  if (connect_timer_) connect_timer_->Disable();
  if (idle_timer_) idle_timer_->Disable();
  if (duration_timer_) duration_timer_->Disable();
  Log();
  // Splicers stop touching the sockets (and give back their socket options) before they close.
  // (A splicer may be destroyed from inside its own callback.)
  to_upstream_.reset();
  to_downstream_.reset();
  auto type = flush ? Connection::CloseType::kFlushWrite : Connection::CloseType::kNoFlush;
  if (upstream_) {
    if (!upstream_->write_buffer().empty()) stats_.upstream_flush_total.Inc();
    upstream_->Close(type, false);
  }
  // The upstream's slot in the circuit breaker is given back now; a connection still flushing
  // finishes on its own (Connection::Release in the destructor).
  ReleaseUpstream();
  downstream_->Close(type, false);
  OnClosed();  // the owner defer-deletes this session
}

}  // namespace rpx
