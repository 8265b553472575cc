#include "source/upstream/conn_pool.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "source/common/logger.h"

namespace rpx {
namespace {
// How soon a pool starved by the cluster-wide connection limit looks again for a free slot.
constexpr uint64_t kStarvedRetryMs = 5;
// An abandoned request's response is read and discarded to keep the connection if it ends
// within this time and this many bytes; bigger or later ones are not worth waiting for.
constexpr uint64_t kDiscardMs = 1000;
constexpr uint64_t kDiscardMaxBytes = 256 * 1024;
}  // namespace

UpstreamClient::UpstreamClient(ConnPool& pool, std::unique_ptr<Connection> conn)
    : pool_(pool),
      conn_(std::move(conn)),
      parser_(Http1Parser::Type::kResponse, *this,
              Http1Parser::Limits{80 * 1024, pool.cluster().max_response_headers_count}) {
  conn_->SetCallbacks(this);
  created_ms_ = pool_.dispatcher().NowMs();
  timer_ = pool_.dispatcher().CreateTimer([this] {
    if (state_ == State::kConnecting) {
      conn_->Close(Connection::CloseType::kNoFlush, false);
      state_ = State::kClosed;
      pool_.OnConnectFailed(this, PoolFailure::kConnectTimeout, "upstream connect timeout");
    } else if (state_ == State::kIdle) {
      pool_.stats().upstream_cx_idle_timeout.Inc();
      conn_->Close(Connection::CloseType::kNoFlush, false);
      state_ = State::kClosed;
      pool_.OnClientClosed(this);
    } else if (state_ == State::kBusy && discarding_) {
      // Bytes Reset found already read (parsing leaves none behind otherwise): parse them now.
      if (!conn_->read_buffer().empty()) {
        timer_->Enable(kDiscardMs);
        OnData(conn_->read_buffer());
        return;
      }
      CloseBusy();
    }
  });
}

UpstreamClient::~UpstreamClient() {
  splicer_.reset();  // it points at conn_
  Connection::Release(std::move(conn_));
}

const Host& UpstreamClient::host() const { return pool_.host(); }

void UpstreamClient::StartRequest(ResponseDecoder* decoder, const RequestHead& head) {
  decoder_ = decoder;
  request_complete_ = false;
  response_complete_ = false;
  response_headers_sent_ = false;
  upgrade_requested_ = !head.upgrade.empty();
  tunnel_ = false;
  unexpected_101_ = false;
  request_chunked_ = head.chunked;
  discarding_ = false;
  discarded_bytes_ = 0;
  parser_.set_expect_no_body(head.method == std::string_view("HEAD"));
  ++requests_;
  Buffer& out = conn_->write_buffer();
  out.Append(head.method);
  out.Append(" ", 1);
  out.Append(head.path);
  out.Append(" HTTP/1.1\r\n", 11);
  AppendHeaders(out, head.headers);
  if (head.chunked) {
    out.Append("transfer-encoding: chunked\r\n");
  } else if (head.has_content_length) {
    out.Append("content-length: ", 16);
    out.AppendDecimal(head.content_length);
    out.Append("\r\n", 2);
  }
  out.Append("\r\n", 2);
  conn_->ScheduleWrite();
  if (!head.has_body()) request_complete_ = true;
}

void UpstreamClient::SendData(const char* data, size_t len, bool end_stream) {
  if (state_ != State::kBusy) return;
  if (tunnel_ && end_stream) {
    if (len) conn_->Write(std::string_view(data, len));
    decoder_ = nullptr;
    conn_->Close(Connection::CloseType::kFlushWrite, false);
    state_ = State::kClosed;
    pool_.OnRequestDone(this, false);
    return;
  }
  Buffer& out = conn_->write_buffer();
  if (request_chunked_) {
    if (len > 0) {
      out.AppendHex(len);
      out.Append("\r\n", 2);
      out.Append(data, len);
      out.Append("\r\n", 2);
    }
    if (end_stream) out.Append("0\r\n\r\n", 5);
  } else if (!end_stream) {
    conn_->WriteThrough(data, len);
    return;
  } else {
    out.Append(data, len);
  }
  conn_->ScheduleWrite();
  if (end_stream) {
    request_complete_ = true;
  }
}

void UpstreamClient::Reset() {
  if (state_ != State::kBusy || discarding_) return;
  decoder_ = nullptr;
  pool_.stats().upstream_rq_reset.Inc();
  if (request_complete_ && !splicer_ && !upgrade_requested_ && !tunnel_) {
    discarding_ = true;
    conn_->ReadDisable(false);  // the client's backpressure no longer applies
    // Bytes already read (taken by the loop's read batching ahead of this reset, or held back
    // by that backpressure) are parsed on the next pass, not here in the caller's cleanup, where
    // a finished response would hand the connection to a waiting request. (Closing instead
    // cost 54 of 1,373 connections reset by three `wrk -c 1000` runs ending.)
    timer_->Enable(conn_->read_buffer().empty() ? kDiscardMs : 0);
    return;
  }
  splicer_.reset();
  CloseBusy();
}

void UpstreamClient::CloseBusy() {
  discarding_ = false;
  timer_->Disable();
  conn_->Close(Connection::CloseType::kNoFlush, false);
  state_ = State::kClosed;
  pool_.OnRequestDone(this, false);
}

void UpstreamClient::OnData(Buffer& in) {
  if (state_ == State::kIdle) {
    // Bytes on an idle keep-alive connection: the upstream is confused; do not reuse it.
    conn_->Close(Connection::CloseType::kNoFlush, false);
    state_ = State::kClosed;
    pool_.OnClientClosed(this);
    return;
  }
  if (discarding_) {
    discarded_bytes_ += in.size();
    if (discarded_bytes_ > kDiscardMaxBytes) {
      CloseBusy();
      return;
    }
    ParseResponse();
    return;
  }
  if (state_ != State::kBusy || decoder_ == nullptr) return;
  if (tunnel_) {
    size_t n = in.size();
    decoder_->OnResponseData(in.data(), n, false);
    if (state_ == State::kBusy) in.Drain(n);
    return;
  }
  ParseResponse();
}

void UpstreamClient::ParseResponse() {
  Buffer& in = conn_->read_buffer();
  size_t consumed = 0;
  Http1Parser::Result r = parser_.Execute(in.data(), in.size(), &consumed);
  if (state_ != State::kBusy) return;  // a callback reset us
  if (unexpected_101_) {
    Fail(UpstreamResetReason::kProtocolError,
         "upstream switched protocols (101) to a request that did not ask for an upgrade");
    return;
  }
  if (tunnel_) {
    // The head is forwarded; what follows it is the new protocol's first bytes.
    in.Drain(consumed);
    if (!in.empty() && decoder_) {
      size_t n = in.size();
      decoder_->OnResponseData(in.data(), n, false);
      if (state_ == State::kBusy) in.Drain(n);
    }
    return;
  }
  if (r == Http1Parser::Result::kError) {
    Fail(UpstreamResetReason::kProtocolError,
         absl::StrCat("upstream sent a malformed response (", parser_.error_reason(), ")"));
    return;
  }
  in.Drain(consumed);
  if (r == Http1Parser::Result::kPaused) {
    parser_.Resume();
    // The response is complete. Bytes after it mean a confused upstream: do not reuse.
    bool stray = !in.empty();
    in.Clear();
    ReleaseAfterResponse(stray);
    return;
  }
  MaybeSplice();
}

// Bodies at least this large go through splice(2): below it the pipe's syscalls cost more than
// the copy they save.
constexpr uint64_t kSpliceMinBytes = 64 * 1024;

void UpstreamClient::MaybeSplice() {
  if (splicer_ || decoder_ == nullptr || tunnel_) return;
  uint64_t remaining = parser_.remaining_body_length();
  if (remaining < kSpliceMinBytes || !conn_->read_buffer().empty()) return;
  Connection* sink = decoder_->SpliceTarget();
  if (sink == nullptr) return;
  splicer_ = Splicer::Create(*conn_, *sink, remaining, *this);
  if (!splicer_) return;
  pool_.stats().upstream_rq_body_spliced.Inc();
  splicer_->Start();
}

void UpstreamClient::OnSpliceProgress(uint64_t bytes) {
  if (decoder_) decoder_->OnResponseDataSpliced(bytes);
}

void UpstreamClient::OnSpliceDone() {
  splicer_.reset();
  parser_.SkipRemainingBody();
  OnMessageComplete();
  // Anything already waiting after the body is a confused upstream (ReleaseAfterResponse).
  ReleaseAfterResponse(false);
}

void UpstreamClient::OnSpliceFailed(const std::string& detail) {
  splicer_.reset();
  if (state_ == State::kBusy) Fail(UpstreamResetReason::kConnectionClosed, detail);
}

void UpstreamClient::OnEvent(ConnectionEvent event) {
  switch (event) {
    case ConnectionEvent::kConnected:
      timer_->Disable();
      if (!conn_->plaintext()) pool_.OnTlsConnected(static_cast<TlsTransport&>(conn_->transport()));
      pool_.OnConnected(this);
      return;
    case ConnectionEvent::kConnectFailed: {
      state_ = State::kClosed;
      timer_->Disable();
      std::string tls_failure = conn_->plaintext() ? "" : conn_->transport().FailureReason();
      if (tls_failure.empty()) {
        pool_.OnConnectFailed(this, PoolFailure::kConnectFailure,
                              "connection refused or unreachable");
        return;
      }
      bool verify = tls_failure.find("certificate verify failed") != std::string::npos;
      (verify ? pool_.stats().ssl_fail_verify : pool_.stats().ssl_connection_error).Inc();
      RPX_LOG(kWarn, "cluster '%s': TLS handshake with %s failed: %s", pool_.cluster().name,
              pool_.host().address.ToString(), tls_failure);
      pool_.OnConnectFailed(
          this, PoolFailure::kConnectFailure,
          absl::StrCat(verify ? "TLS verification failed: " : "TLS error: ", tls_failure));
      return;
    }
    case ConnectionEvent::kRemoteClose:
    case ConnectionEvent::kLocalClose:
      if (state_ == State::kConnecting) {
        state_ = State::kClosed;
        timer_->Disable();
        pool_.OnConnectFailed(this, PoolFailure::kConnectFailure, "connection closed");
        return;
      }
      if (state_ == State::kBusy && decoder_ != nullptr && tunnel_) {
        // The upstream ended the tunnel: that ends the response.
        state_ = State::kClosed;
        ResponseDecoder* d = decoder_;
        decoder_ = nullptr;
        pool_.OnRequestDone(this, false);
        d->OnResponseData(nullptr, 0, true);
        return;
      }
      if (state_ == State::kBusy && decoder_ != nullptr) {
        if (parser_.in_message() && parser_.message_needs_eof()) {
          // A close-delimited body ends here.
          if (parser_.Finish() == Http1Parser::Result::kOk && state_ == State::kBusy) {
            response_keep_alive_ = false;
            if (!response_complete_) OnMessageComplete();
            ReleaseAfterResponse(true);
            return;
          }
        }
        if (state_ == State::kBusy) {
          state_ = State::kClosed;
          ResponseDecoder* d = decoder_;
          decoder_ = nullptr;
          pool_.stats().upstream_cx_destroy_remote.Inc();
          pool_.OnRequestDone(this, false);
          d->OnUpstreamReset(UpstreamResetReason::kConnectionClosed,
                             response_headers_sent_
                                 ? "upstream closed the connection mid-response"
                                 : "upstream closed the connection before responding");
        }
        return;
      }
      if (state_ != State::kClosed) {
        if (state_ == State::kIdle) pool_.stats().upstream_cx_destroy_remote.Inc();
        bool busy = state_ == State::kBusy;
        state_ = State::kClosed;
        if (busy) {
          pool_.OnRequestDone(this, false);
        } else {
          pool_.OnClientClosed(this);
        }
      }
      return;
  }
}

void UpstreamClient::OnAboveWriteHighWatermark() {
  if (decoder_) decoder_->OnUpstreamWriteWatermark(true);
}

void UpstreamClient::OnBelowWriteLowWatermark() {
  if (decoder_) decoder_->OnUpstreamWriteWatermark(false);
}

void UpstreamClient::OnHead() {
  ResponseHead& head = parser_.response();
  if (head.status == 101) {
    if (!upgrade_requested_) {
      unexpected_101_ = true;  // failed once the parser returns
      return;
    }
    tunnel_ = true;
    response_keep_alive_ = false;
    response_headers_sent_ = true;
    if (decoder_) decoder_->OnResponseHeaders(head, false);
    return;
  }
  if (head.status < 200) return;  // interim responses are not forwarded (we answered Expect)
  response_keep_alive_ = head.keep_alive;
  response_headers_sent_ = true;
  if (decoder_) decoder_->OnResponseHeaders(head, false);
}

void UpstreamClient::OnBody(const char* data, size_t len) {
  if (decoder_) decoder_->OnResponseData(data, len, false);
}

void UpstreamClient::OnMessageComplete() {
  // The pool gets the connection back in ReleaseAfterResponse, once the parser has returned and
  // we know whether stray bytes followed the response.
  if (tunnel_ || unexpected_101_) return;  // a 101 head is not the end of anything
  response_complete_ = true;
  ResponseDecoder* d = decoder_;
  decoder_ = nullptr;
  if (d) d->OnResponseData(nullptr, 0, true);
}

void UpstreamClient::ReleaseAfterResponse(bool stray_bytes) {
  if (state_ != State::kBusy) return;
  bool was_discarding = discarding_;
  if (discarding_) {
    discarding_ = false;
    timer_->Disable();
  }
  if (request_complete_) {
    bool reusable = response_keep_alive_ && !stray_bytes;
    if (was_discarding && reusable) pool_.stats().upstream_cx_kept_after_reset.Inc();
    pool_.OnRequestDone(this, reusable);
    return;
  }
  // The upstream answered before the request body was sent (e.g. 413): the connection cannot
  // carry another request, and the rest of the body is not sent.
  conn_->Close(Connection::CloseType::kFlushWrite, false);
  state_ = State::kClosed;
  pool_.OnRequestDone(this, false);
}

void UpstreamClient::Fail(UpstreamResetReason reason, const std::string& detail) {
  ResponseDecoder* d = decoder_;
  decoder_ = nullptr;
  conn_->Close(Connection::CloseType::kNoFlush, false);
  state_ = State::kClosed;
  pool_.OnRequestDone(this, false);
  if (d) d->OnUpstreamReset(reason, detail);
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
  for (auto* list : {&idle_, &busy_, &connecting_}) {
    for (UpstreamClient* c : *list) {
      c->state_ = UpstreamClient::State::kClosed;
      c->conn_->Close(Connection::CloseType::kNoFlush, false);
      cluster_->resources->ReleaseConnection();
      CxClosed(c);
      dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(c));
    }
    list->clear();
  }
  for (size_t i = 0; i < pending_.size(); ++i) {
    cluster_->resources->ReleasePending();
    stats_.upstream_rq_pending_active.Dec();
  }
}

ConnPool::Pending* ConnPool::NewStream(PoolCallbacks& callbacks) {
  if (!idle_.empty()) {
    UpstreamClient* c = idle_.front();
    c->timer_->Disable();
    busy_.splice(busy_.begin(), idle_, c->pos_);  // list nodes move: no allocation per request
    c->state_ = UpstreamClient::State::kBusy;
    RqStarted();
    callbacks.OnPoolReady(*c);
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
  if (connecting_.size() < pending_.size()) TryCreateConnection();
  return p;
}

void ConnPool::Cancel(Pending* p) {
  cluster_->resources->ReleasePending();
  stats_.upstream_rq_pending_active.Dec();
  pending_.erase(p->pos);
}

bool ConnPool::TryCreateConnection() {
  if (draining_) return false;
  if (!cluster_->resources->TryAcquireConnection(starved_)) {
    bool got = reclaim_ && reclaim_(this) && cluster_->resources->TryAcquireConnection(starved_);
    if (!got) {
      stats_.upstream_cx_overflow.Inc();  // counted each time a connection could not be opened
      if (busy_.empty() && connecting_.empty()) {
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
  ConnectOptions bind;
  if (cluster_->source_address) bind.source = &*cluster_->source_address;
  if (!cluster_->socket_options.empty()) bind.options = &cluster_->socket_options;
  auto conn =
      Connection::Connect(dispatcher_, host_->address, cluster_->buffer_limit, &err, bind, &detail);
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
  if (transport_.tls) {
    // The pool's connect timeout covers the TLS handshake too.
    conn->SetTransport(
        std::make_unique<TlsTransport>(transport_.tls, sni_, &tls_session_, verify_name_), 0);
  }
  auto* c = new UpstreamClient(*this, std::move(conn));
  connecting_.push_back(c);
  c->pos_ = std::prev(connecting_.end());
  c->timer_->Enable(cluster_->connect_timeout_ms);
  stats_.upstream_cx_total.Inc();
  stats_.upstream_cx_active.Inc();
  host_stats_->cx_total.Inc();
  host_stats_->cx_active.Inc();
  return true;
}

void ConnPool::SetStarved(bool starved) {
  if (starved == starved_) return;
  starved_ = starved;
  cluster_->resources->starved_workers.fetch_add(starved ? 1 : -1, std::memory_order_relaxed);
}

void ConnPool::CxClosed(UpstreamClient* c) {
  stats_.upstream_cx_active.Dec();
  host_stats_->cx_active.Dec();
  stats_.upstream_cx_length_ms.Record(dispatcher_.NowMs() - c->created_ms_);
}

void ConnPool::OnConnected(UpstreamClient* c) {
  stats_.upstream_cx_connect_ms.Record(dispatcher_.NowMs() - c->created_ms_);
  if (!pending_.empty()) {
    Attach(c, connecting_);
    return;
  }
  c->state_ = UpstreamClient::State::kIdle;
  idle_.splice(idle_.begin(), connecting_, c->pos_);
  if (cluster_->idle_timeout_ms) c->timer_->Enable(cluster_->idle_timeout_ms);
}

void ConnPool::Attach(UpstreamClient* c, std::list<UpstreamClient*>& from) {
  auto p = std::move(pending_.front());
  pending_.pop_front();
  cluster_->resources->ReleasePending();
  stats_.upstream_rq_pending_active.Dec();
  c->timer_->Disable();
  c->state_ = UpstreamClient::State::kBusy;
  busy_.splice(busy_.begin(), from, c->pos_);
  RqStarted();
  p->callbacks.OnPoolReady(*c);
}

void ConnPool::OnTlsConnected(TlsTransport& tls) {
  stats_.ssl_handshake.Inc();
  if (tls.session_reused()) stats_.ssl_session_reused.Inc();
}

void ConnPool::OnConnectFailed(UpstreamClient* c, PoolFailure reason, const std::string& detail) {
  connecting_.erase(c->pos_);
  cluster_->resources->ReleaseConnection();
  CxClosed(c);
  if (reason == PoolFailure::kConnectTimeout) {
    stats_.upstream_cx_connect_timeout.Inc();
  }
  CxConnectFailed();
  dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(c));
  // Fail the requests that no remaining connection will serve.
  size_t keep = busy_.empty() ? connecting_.size() : pending_.size();
  while (pending_.size() > keep) {
    auto p = std::move(pending_.front());
    pending_.pop_front();
    cluster_->resources->ReleasePending();
    stats_.upstream_rq_pending_active.Dec();
    p->callbacks.OnPoolFailure(reason, detail);
  }
}

void ConnPool::OnRequestDone(UpstreamClient* c, bool reusable) {
  stats_.upstream_rq_active.Dec();
  host_stats_->rq_active.Dec();
  uint32_t max_requests = cluster_->max_requests_per_connection;
  if (reusable && max_requests && c->requests_ >= max_requests) {
    stats_.upstream_cx_max_requests.Inc();
    reusable = false;
  }
  if (reusable && !draining_ && c->conn_->read_buffer().empty()) {
    if (!pending_.empty()) {
      Attach(c, busy_);
      return;
    }
    if (starved_ || !cluster_->resources->SlotWanted()) {
      c->state_ = UpstreamClient::State::kIdle;
      idle_.splice(idle_.begin(), busy_, c->pos_);
      if (cluster_->idle_timeout_ms) c->timer_->Enable(cluster_->idle_timeout_ms);
      return;
    }
    // Another worker is starved for slots and none is free: give this one back, don't park it.
  }
  if (c->state_ != UpstreamClient::State::kClosed) {
    c->state_ = UpstreamClient::State::kClosed;
    c->conn_->Close(Connection::CloseType::kFlushWrite, false);
  }
  busy_.erase(c->pos_);
  cluster_->resources->ReleaseConnection();
  CxClosed(c);
  dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(c));
  ServePending();
}

void ConnPool::OnClientClosed(UpstreamClient* c) {
  // Only idle clients close on their own (busy ones go through OnRequestDone).
  idle_.erase(c->pos_);
  cluster_->resources->ReleaseConnection();
  CxClosed(c);
  dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(c));
}

void ConnPool::ServePending() {
  while (!pending_.empty() && !idle_.empty()) {
    UpstreamClient* c = idle_.front();
    Attach(c, idle_);
  }
  while (connecting_.size() < pending_.size()) {
    if (!TryCreateConnection()) break;
  }
}

bool ConnPool::CloseOneIdle() {
  if (idle_.empty()) return false;
  UpstreamClient* c = idle_.back();  // least recently used
  c->timer_->Disable();
  c->state_ = UpstreamClient::State::kClosed;
  c->conn_->Close(Connection::CloseType::kNoFlush, false);
  OnClientClosed(c);
  return true;
}

void ConnPool::Drain() {
  draining_ = true;
  SetStarved(false);  // a draining pool opens no connection, so it must not hold a slot reserved
  while (CloseOneIdle()) {
  }
}

}  // namespace rpx
