#include "source/upstream/conn_pool.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "source/common/logger.h"
#include "source/upstream/http1_client.h"
#include "source/upstream/http2_client.h"

namespace rpx {
namespace {
// How soon a pool starved by the cluster-wide connection limit looks again for a free slot.
constexpr uint64_t kStarvedRetryMs = 5;
}  // namespace

PoolClient::PoolClient(ConnPool& pool, std::unique_ptr<Connection> conn, uint32_t stream_limit)
    : pool_(pool), conn_(std::move(conn)), limit_(stream_limit) {
  RPX_ASSERT(limit_ > 0);
  created_ms_ = pool_.dispatcher().NowMs();
  timer_ = pool_.dispatcher().CreateTimer([this] {
    if (state_ == State::kConnecting) {
      conn_->Close(Connection::CloseType::kNoFlush, false);
      closed_ = true;
      pool_.OnConnectFailed(this, PoolFailure::kConnectTimeout, "upstream connect timeout");
    } else if (state_ == State::kIdle) {
      pool_.stats().upstream_cx_idle_timeout.Inc();
      CloseIdle();
      closed_ = true;
      pool_.OnClientClosed(this);
    } else {
      OnTimer();
    }
  });
}

void PoolClient::ConnectFailed() {
  closed_ = true;
  timer_->Disable();
  std::string tls_failure = conn_->plaintext() ? "" : conn_->transport().FailureReason();
  if (tls_failure.empty()) {
    pool_.OnConnectFailed(this, PoolFailure::kConnectFailure, "connection refused or unreachable");
    return;
  }
  bool verify = tls_failure.find("certificate verify failed") != std::string::npos;
  (verify ? pool_.stats().ssl_fail_verify : pool_.stats().ssl_connection_error).Inc();
  RPX_LOG(kWarn, "cluster '%s': TLS handshake with %s failed: %s", pool_.cluster().name,
          pool_.host().address.ToString(), tls_failure);
  pool_.OnConnectFailed(
      this, PoolFailure::kConnectFailure,
      absl::StrCat(verify ? "TLS verification failed: " : "TLS error: ", tls_failure));
}

PoolClient::~PoolClient() {
  if (conn_) Connection::Release(std::move(conn_));
}

ConnPool::ConnPool(Dispatcher& dispatcher, std::shared_ptr<const ClusterInfo> cluster,
                   std::shared_ptr<const Host> host, ClusterStats& stats,
                   std::optional<std::string> auto_sni)
    : dispatcher_(dispatcher),
      cluster_(std::move(cluster)),
      host_(std::move(host)),
      stats_(stats),
      transport_(cluster_->TransportFor(*host_)),
      sni_(transport_.sni) {
  host_stats_ = host_->StatsFor(dispatcher_.worker_index());
  if (!host_stats_) host_stats_ = &own_host_stats_;
  if (auto_sni) {
    // An IP address is never sent as SNI (RFC 6066), but the certificate may still be checked
    // against it.
    if (!SocketAddress::FromIpPort(*auto_sni, 1).ok()) sni_ = *auto_sni;
    if (cluster_->auto_san_validation) verify_name_ = *auto_sni;
  }
  retry_timer_ = dispatcher_.CreateTimer([this] {
    // A starved pool stays starved (keeping its claim on the next free slot) until it gets a
    // connection or has nothing left to wait for.
    if (pending_.empty()) SetStarved(false);
    while (deferred_connect_errors_ > 0 && !pending_.empty()) {
      --deferred_connect_errors_;
      auto p = std::move(pending_.front());
      pending_.pop_front();
      cluster_->resources->ReleasePending();
      stats_.upstream_rq_pending_active.Dec();
      CxConnectFailed();
      p->callbacks.OnPoolFailure(PoolFailure::kConnectFailure, deferred_error_.empty()
                                                                   ? "cannot open a socket"
                                                                   : deferred_error_);
    }
    deferred_connect_errors_ = 0;
    deferred_error_.clear();
    ServePending();
  });
}

ConnPool::~ConnPool() {
  SetStarved(false);
  if (tls_session_) SSL_SESSION_free(tls_session_);
  for (auto* list : {&connecting_, &idle_, &active_, &busy_, &draining_}) {
    for (PoolClient* c : *list) {
      c->state_ = State::kClosed;
      c->closed_ = true;
      c->conn_->Close(Connection::CloseType::kNoFlush, false);
      cluster_->resources->ReleaseConnection();
      CxClosed(c->created_ms_);
      dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(c));
    }
    list->clear();
  }
  for (size_t i = 0; i < pending_.size(); ++i) {
    cluster_->resources->ReleasePending();
    stats_.upstream_rq_pending_active.Dec();
  }
}

std::list<PoolClient*>& ConnPool::ListOf(State s) {
  switch (s) {
    case State::kConnecting:
      return connecting_;
    case State::kIdle:
      return idle_;
    case State::kActive:
      return active_;
    case State::kBusy:
      return busy_;
    case State::kDraining:
    case State::kClosed:
      break;
  }
  return draining_;
}

void ConnPool::SetState(PoolClient* c, State to) {
  State from = c->state_;
  RPX_ASSERT(from != State::kClosed);
  RPX_ASSERT(*c->pos_ == c);
  // Each state's facts.
  RPX_ASSERT(to != State::kIdle || (c->active_ == 0 && !c->closing_ && !c->closed_));
  RPX_ASSERT(to != State::kActive || (c->active_ > 0 && c->active_ < c->limit_ && !c->closing_));
  RPX_ASSERT(to != State::kBusy || (c->active_ >= c->limit_ && !c->closing_));
  RPX_ASSERT(to != State::kDraining || (c->active_ > 0 && c->closing_));
  RPX_ASSERT(to != State::kClosed || c->active_ == 0);
  if (from == State::kConnecting) connecting_streams_ -= c->limit_;
  if (from == State::kIdle) c->timer_->Disable();
  std::list<PoolClient*>& old_list = ListOf(from);
  if (to == State::kClosed) {
    old_list.erase(c->pos_);
    c->state_ = State::kClosed;
    if (!c->closed_) {
      c->closed_ = true;
      c->conn_->Close(Connection::CloseType::kFlushWrite, false);
    }
    cluster_->resources->ReleaseConnection();
    CxClosed(c->created_ms_);
    dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(c));
    return;
  }
  std::list<PoolClient*>& new_list = ListOf(to);
  if (&old_list != &new_list) {
    new_list.splice(new_list.begin(), old_list, c->pos_);  // list nodes move: no allocation
  }
  c->state_ = to;
  if (to == State::kConnecting) connecting_streams_ += c->limit_;
  if (to == State::kIdle && cluster_->idle_timeout_ms) c->timer_->Enable(cluster_->idle_timeout_ms);
}

void ConnPool::Settle(PoolClient* c) {
  if (c->state_ == State::kClosed || c->state_ == State::kConnecting) return;
  uint32_t max_requests = cluster_->max_requests_per_connection;
  if (!c->closing_ && max_requests && c->streams_ >= max_requests) {
    stats_.upstream_cx_max_requests.Inc();
    c->closing_ = true;
  }
  if (draining_pool_) c->closing_ = true;
  if (c->closed_ || c->closing_) {
    if (c->active_ > 0) {
      if (c->state_ != State::kDraining) SetState(c, State::kDraining);
      return;
    }
    SetState(c, State::kClosed);
    ServePending();
    return;
  }
  if (c->active_ == 0 && pending_.empty() && !starved_ && cluster_->resources->SlotWanted()) {
    // Another worker is starved for slots and none is free: give this one back, don't park it.
    SetState(c, State::kClosed);
    return;
  }
  if (c->active_ == 0) {
    if (c->state_ != State::kIdle) SetState(c, State::kIdle);
  } else {
    State to = c->active_ < c->limit_ ? State::kActive : State::kBusy;
    if (c->state_ != to) SetState(c, to);
  }
  ServePending();
}

ConnPool::Pending* ConnPool::NewStream(PoolCallbacks& callbacks) {
  // Streams go where there is room, fullest connection first (h2: fewer connections in use).
  if (!active_.empty()) {
    Attach(active_.front(), callbacks);
    return nullptr;
  }
  if (!idle_.empty()) {
    Attach(idle_.front(), callbacks);
    return nullptr;
  }
  if (!cluster_->resources->TryAcquirePending()) {
    stats_.upstream_rq_pending_overflow.Inc();
    callbacks.OnPoolFailure(PoolFailure::kOverflow,
                            "upstream overflow: too many requests waiting for a connection");
    return nullptr;
  }
  stats_.upstream_rq_pending_total.Inc();
  stats_.upstream_rq_pending_active.Inc();
  pending_.push_back(std::make_unique<Pending>(callbacks));
  Pending* p = pending_.back().get();
  p->pos = std::prev(pending_.end());
  if (connecting_capacity() < pending_.size()) TryCreateConnection();
  return p;
}

void ConnPool::Attach(PoolClient* c, PoolCallbacks& callbacks) {
  RPX_ASSERT(c->state_ == State::kIdle || c->state_ == State::kActive);
  RPX_ASSERT(c->active_ < c->limit_ && !c->closing_ && !c->closed_);
  ++c->active_;
  ++c->streams_;
  ++streams_active_;
  SetState(c, c->active_ < c->limit_ ? State::kActive : State::kBusy);
  RqStarted();
  callbacks.OnPoolReady(c->NewStream());
}

void ConnPool::Cancel(Pending* p) {
  cluster_->resources->ReleasePending();
  stats_.upstream_rq_pending_active.Dec();
  pending_.erase(p->pos);
}

bool ConnPool::TryCreateConnection() {
  if (draining_pool_) return false;
  if (!cluster_->resources->TryAcquireConnection(starved_)) {
    bool got = reclaim_ && reclaim_(this) && cluster_->resources->TryAcquireConnection(starved_);
    if (!got) {
      stats_.upstream_cx_overflow.Inc();  // counted each time a connection could not be opened
      if (connecting_.empty() && active_.empty() && busy_.empty() && draining_.empty()) {
        // Nothing here will free up: ask the other workers to give an idle slot back, and look
        // again soon.
        SetStarved(true);
        if (starved_cb_) starved_cb_();
        retry_timer_->Enable(kStarvedRetryMs);
      }
      return false;
    }
  }
  SetStarved(false);
  if (transport_.pending()) {
    // The TLS context waits for SDS secrets: fail rather than connect in cleartext.
    cluster_->resources->ReleaseConnection();
    deferred_error_ = "TLS secrets for this cluster have not arrived (SDS)";
    ++deferred_connect_errors_;
    retry_timer_->Enable(0);
    return false;
  }
  int err = 0;
  std::string detail;
  auto conn = OpenConnection(&err, &detail);
  if (!conn) {
    cluster_->resources->ReleaseConnection();
    if (!detail.empty() && !bind_error_logged_) {
      // The kernel refuses the cluster's upstream_bind_config here (it passed the check at load
      // time): say so once per pool, not on every request that fails for it.
      bind_error_logged_ = true;
      RPX_LOG(kWarn, "cluster '%s': connect to %s: %s", cluster_->name, host_->address.ToString(),
              detail);
    } else {
      RPX_LOG(kDebug, "connect to %s failed at once: %s", host_->address.ToString(), strerror(err));
    }
    ++deferred_connect_errors_;
    retry_timer_->Enable(0);
    return false;
  }
  PoolClient* c;
  if (cluster_->protocol == ClusterInfo::Protocol::kHttp2) {
    c = new Http2Client(*this, std::move(conn));
    stats_.upstream_cx_http2_total.Inc();
  } else {
    c = new Http1Client(*this, std::move(conn));
    if (cluster_->protocol == ClusterInfo::Protocol::kHttp1) stats_.upstream_cx_http1_total.Inc();
  }
  connecting_.push_front(c);
  c->pos_ = connecting_.begin();
  connecting_streams_ += c->limit_;
  c->timer_->Enable(cluster_->connect_timeout_ms);
  CxOpened();
  return true;
}

std::unique_ptr<Connection> ConnPool::OpenConnection(int* err, std::string* detail) {
  ConnectOptions bind;
  if (cluster_->source_address) bind.source = &*cluster_->source_address;
  if (!cluster_->socket_options.empty()) bind.options = &cluster_->socket_options;
  auto conn =
      Connection::Connect(dispatcher_, host_->address, cluster_->buffer_limit, err, bind, detail);
  if (conn && transport_.tls) {
    // The connect timeout covers the TLS handshake too.
    conn->SetTransport(
        std::make_unique<TlsTransport>(transport_.tls, sni_, &tls_session_, verify_name_), 0);
  }
  return conn;
}

std::unique_ptr<Connection> ConnPool::ConnectTcp(bool* overflow, std::string* detail) {
  *overflow = false;
  if (!cluster_->resources->TryAcquireConnection(false)) {
    bool got = reclaim_ && reclaim_(this) && cluster_->resources->TryAcquireConnection(false);
    if (!got) {
      stats_.upstream_cx_overflow.Inc();
      *overflow = true;
      return nullptr;
    }
  }
  if (transport_.pending()) {
    cluster_->resources->ReleaseConnection();
    *detail = "TLS secrets for this cluster have not arrived (SDS)";
    return nullptr;
  }
  int err = 0;
  auto conn = OpenConnection(&err, detail);
  if (!conn) {
    cluster_->resources->ReleaseConnection();
    if (detail->empty()) *detail = absl::StrCat("connect: ", strerror(err));
    CxConnectFailed();
    return nullptr;
  }
  ++tcp_connections_;
  CxOpened();
  return conn;
}

void ConnPool::TcpConnectDone(uint64_t started_ms, bool connected, bool timed_out) {
  if (connected) {
    stats_.upstream_cx_connect_ms.Record(dispatcher_.NowMs() - started_ms);
    return;
  }
  if (timed_out) stats_.upstream_cx_connect_timeout.Inc();
  CxConnectFailed();
}

void ConnPool::TcpClosed(uint64_t started_ms) {
  RPX_ASSERT(tcp_connections_ > 0);
  --tcp_connections_;
  cluster_->resources->ReleaseConnection();
  CxClosed(started_ms);
}

void ConnPool::SetStarved(bool starved) {
  if (starved == starved_) return;
  starved_ = starved;
  cluster_->resources->starved_workers.fetch_add(starved ? 1 : -1, std::memory_order_relaxed);
}

void ConnPool::CxOpened() {
  stats_.upstream_cx_total.Inc();
  stats_.upstream_cx_active.Inc();
  host_stats_->cx_total.Inc();
  host_stats_->cx_active.Inc();
}

void ConnPool::CxClosed(uint64_t created_ms) {
  stats_.upstream_cx_active.Dec();
  host_stats_->cx_active.Dec();
  stats_.upstream_cx_length_ms.Record(dispatcher_.NowMs() - created_ms);
}

void ConnPool::OnConnected(PoolClient* c) {
  RPX_ASSERT(c->state_ == State::kConnecting);
  stats_.upstream_cx_connect_ms.Record(dispatcher_.NowMs() - c->created_ms_);
  if (cluster_->protocol == ClusterInfo::Protocol::kAuto) {
    if (!c->conn_->plaintext() &&
        static_cast<TlsTransport&>(c->conn_->transport()).alpn() == "h2") {
      c = SwitchToHttp2(c);
      stats_.upstream_cx_http2_total.Inc();
    } else {
      stats_.upstream_cx_http1_total.Inc();
    }
  }
  SetState(c, State::kIdle);
  Settle(c);
}

PoolClient* ConnPool::SwitchToHttp2(PoolClient* c) {
  auto* h1 = static_cast<Http1Client*>(c);
  auto* h2 = new Http2Client(*this, h1->TakeConnection());
  h2->created_ms_ = c->created_ms_;
  // The new client takes the old one's place (and slot) in the connecting list.
  connecting_streams_ += h2->limit_;
  connecting_streams_ -= c->limit_;
  *c->pos_ = h2;
  h2->pos_ = c->pos_;
  h2->state_ = State::kConnecting;
  c->state_ = State::kClosed;
  dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(c));
  h2->Start();  // the connection is up: the preface goes now
  return h2;
}

void ConnPool::OnTlsConnected(TlsTransport& tls) {
  stats_.ssl_handshake.Inc();
  if (tls.session_reused()) stats_.ssl_session_reused.Inc();
}

void ConnPool::OnConnectFailed(PoolClient* c, PoolFailure reason, const std::string& detail) {
  RPX_ASSERT(c->state_ == State::kConnecting && c->closed_);
  if (reason == PoolFailure::kConnectTimeout) {
    stats_.upstream_cx_connect_timeout.Inc();
  }
  CxConnectFailed();
  SetState(c, State::kClosed);
  // Fail the requests that no remaining connection will serve.
  size_t keep = (active_.empty() && busy_.empty() && draining_.empty()) ? connecting_capacity()
                                                                        : pending_.size();
  while (pending_.size() > keep) {
    auto p = std::move(pending_.front());
    pending_.pop_front();
    cluster_->resources->ReleasePending();
    stats_.upstream_rq_pending_active.Dec();
    p->callbacks.OnPoolFailure(reason, detail);
  }
}

void ConnPool::OnStreamDone(PoolClient* c, bool reusable) {
  RPX_ASSERT(c->active_ > 0 && streams_active_ > 0);
  --c->active_;
  --streams_active_;
  stats_.upstream_rq_active.Dec();
  host_stats_->rq_active.Dec();
  if (!reusable) c->closing_ = true;
  Settle(c);
}

void ConnPool::OnClientClosed(PoolClient* c) {
  RPX_ASSERT(c->closed_ && c->active_ == 0);
  Settle(c);
}

void ConnPool::ServePending() {
  if (serving_) return;  // a stream attached below ended at once: the outer loop goes on
  serving_ = true;
  while (!pending_.empty()) {
    PoolClient* c = !active_.empty() ? active_.front() : !idle_.empty() ? idle_.front() : nullptr;
    if (!c) break;
    auto p = std::move(pending_.front());
    pending_.pop_front();
    cluster_->resources->ReleasePending();
    stats_.upstream_rq_pending_active.Dec();
    Attach(c, p->callbacks);
  }
  while (connecting_capacity() < pending_.size()) {
    if (!TryCreateConnection()) break;
  }
  serving_ = false;
}

bool ConnPool::CloseOneIdle() {
  if (idle_.empty()) return false;
  PoolClient* c = idle_.back();  // least recently used
  c->CloseIdle();
  c->closed_ = true;
  SetState(c, State::kClosed);
  return true;
}

void ConnPool::Drain() {
  draining_pool_ = true;
  SetStarved(false);  // a draining pool opens no connection, so it must not hold a slot reserved
  while (CloseOneIdle()) {
  }
  for (auto* list : {&active_, &busy_}) {
    for (auto it = list->begin(); it != list->end();) {
      PoolClient* c = *it++;
      c->closing_ = true;
      SetState(c, State::kDraining);
    }
  }
}

}  // namespace rpx
