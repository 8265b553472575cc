#include "source/http/server_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "source/common/assert.h"
#include "source/common/free_blocks.h"
#include "source/common/logger.h"

namespace rpx {

struct ServerConnection::StreamState : StreamInfo {
  std::unique_ptr<Timer> request_timer;   // request_timeout; created when first needed
  std::unique_ptr<Timer> duration_timer;  // max_stream_duration; created when first needed
  uint64_t start_ms = 0;                  // the dispatcher's clock at the request head
  static void* operator new(size_t) { return FreeBlocks<sizeof(StreamState), 256>::Take(); }
  static void operator delete(void* p) { FreeBlocks<sizeof(StreamState), 256>::Give(p); }
};

ServerConnection::StreamState& ServerConnection::state() {
  if (!state_) state_.reset(new StreamState());
  return *state_;
}

StreamInfo& ServerConnection::info() { return state(); }

void ServerConnection::DisableRequestTimer() {
  if (state_ && state_->request_timer) state_->request_timer->Disable();
}

void ServerConnection::DisableDurationTimer() {
  if (state_ && state_->duration_timer) state_->duration_timer->Disable();
}

namespace {
// Unparsed bytes buffered while a request is in flight (pipelined requests) before we stop reading.
constexpr size_t kMaxPipelinedBytes = 64 * 1024;

void AppendStatusLine(Buffer& out, int status, const std::string& reason) {
  out.Append("HTTP/1.1 ", 9);
  out.AppendDecimal(static_cast<uint64_t>(status));
  out.Append(" ", 1);
  if (reason.empty()) {
    out.Append(ReasonPhrase(status));
  } else {
    out.Append(reason);
  }
  out.Append("\r\n", 2);
}

using conn_manager::StatusHasNoBody;
}  // namespace

ServerConnection::ServerConnection(std::unique_ptr<Connection> conn,
                                   std::shared_ptr<const HttpConfig> config, HttpStats& stats,
                                   StreamHandlerFactory& factory, const SocketAddress& peer)
    : conn_(std::move(conn)),
      config_(std::move(config)),
      stats_(stats),
      factory_(factory),
      timer_(conn_->dispatcher(), this),
      stream_active_(false),
      request_complete_(false),
      request_has_body_(false),
      response_started_(false),
      response_chunked_(false),
      response_no_body_(false),
      close_after_response_(false),
      processing_(false),
      closed_(false),
      upstream_backpressure_(false),
      drain_(false),
      stream_was_active_at_close_(false),
      upgraded_(false),
      preface_checked_(config_->codec == HttpConfig::Codec::kHttp1) {
  if (peer.family() == AF_INET) {
    peer_family_ = AF_INET;
    memcpy(peer_addr_, &reinterpret_cast<const sockaddr_in*>(&peer.storage)->sin_addr, 4);
    peer_port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&peer.storage)->sin_port);
  } else if (peer.family() == AF_INET6) {
    peer_family_ = AF_INET6;
    memcpy(peer_addr_, &reinterpret_cast<const sockaddr_in6*>(&peer.storage)->sin6_addr, 16);
    peer_port_ = ntohs(reinterpret_cast<const sockaddr_in6*>(&peer.storage)->sin6_port);
  }
  conn_->SetCallbacks(this);
  if (config_->idle_timeout_ms) timer_.Enable(config_->idle_timeout_ms);
  if (config_->max_connection_duration_ms) {
    rare().duration = conn_->dispatcher().CreateTimer([this] {
      stats_.downstream_cx_max_duration_reached.Inc();
      CloseWhenIdle();
    });
    rare_->duration->Enable(config_->max_connection_duration_ms);
  }
  stats_.downstream_cx_total.Inc();
  stats_.downstream_cx_active.Inc();
}

std::string ServerConnection::remote_ip() const {
  if (peer_family_ == AF_INET) return FormatIpv4(peer_addr_);
  char buf[INET6_ADDRSTRLEN] = {0};
  if (peer_family_ != 0) inet_ntop(peer_family_, peer_addr_, buf, sizeof(buf));
  return buf;
}

SocketAddress ServerConnection::peer_address() const {
  SocketAddress a;
  if (peer_family_ == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&a.storage);
    sin->sin_family = AF_INET;
    memcpy(&sin->sin_addr, peer_addr_, 4);
    sin->sin_port = htons(peer_port_);
    a.len = sizeof(sockaddr_in);
  } else if (peer_family_ == AF_INET6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    sin6->sin6_family = AF_INET6;
    memcpy(&sin6->sin6_addr, peer_addr_, 16);
    sin6->sin6_port = htons(peer_port_);
    a.len = sizeof(sockaddr_in6);
  }
  return a;
}

std::string ServerConnection::remote_address() const {
  if (peer_family_ == AF_INET6) return "[" + remote_ip() + "]:" + std::to_string(peer_port_);
  if (peer_family_ == 0) return "";
  return remote_ip() + ":" + std::to_string(peer_port_);
}

std::string ServerConnection::local_address() const {
  // Asked only by formats that print it; not kept, so an idle connection does not carry it.
  SocketAddress a = conn_->LocalAddress();
  return a.len ? a.ToString() : "";
}

SocketAddress ServerConnection::original_destination() const {
  return conn_->has_original_destination() ? conn_->LocalAddress() : SocketAddress();
}

std::string ServerConnection::requested_server_name() const {
  if (conn_->plaintext()) return "";
  return static_cast<const TlsTransport&>(conn_->transport()).server_name();
}

std::string ServerConnection::tls_version() const {
  if (conn_->plaintext()) return "";
  return static_cast<const TlsTransport&>(conn_->transport()).version();
}

std::string ServerConnection::tls_cipher() const {
  if (conn_->plaintext()) return "";
  return static_cast<const TlsTransport&>(conn_->transport()).cipher();
}

FormatContext ServerConnection::Context() const {
  return conn_manager::Context(*config_, parser_ ? &parser_->request() : nullptr, this);
}

void ServerConnection::OnTimer() {
  // One timer serves two phases: without a stream it is the idle (or request headers) timeout,
  // with one the stream idle timeout.
  if (stream_active_) {
    OnStreamIdleTimeout();
    return;
  }
  if (parser_ && parser_->in_message()) {
    stats_.downstream_cx_headers_timeout.Inc();
    info().Reset();
    info().response_code_details = "request_header_timeout";
    SendLocalReply(408, "request headers timeout\n", nullptr, "text/plain");
  } else if (!drain_) {
    stats_.downstream_cx_idle_timeout.Inc();
  }
  Close(true);
}

Http1Parser& ServerConnection::parser() {
  if (!parser_) {
    parser_ = Http1Parser::Acquire(
        Http1Parser::Type::kRequest, *this,
        Http1Parser::Limits{config_->max_request_headers_kb * 1024, config_->max_headers_count});
  }
  return *parser_;
}

void ServerConnection::ReleaseParserIfIdle() {
  // Between requests a keep-alive connection needs no parser: freeing it keeps idle connections
  // small. Never from inside the parser (processing_), and only with nothing left to parse.
  if (parser_ && !processing_ && !stream_active_ && !parser_->in_message() &&
      conn_->read_buffer().empty()) {
    Http1Parser::Release(std::move(parser_));
  }
  if (state_ && !processing_ && !stream_active_) state_.reset();
}

void ServerConnection::OnMaxStreamDuration() {
  if (!stream_active_) return;
  TimeOut(conn_manager::StreamTimeout::kMaxDuration);
}

void ServerConnection::TimeOut(conn_manager::StreamTimeout timeout) {
  conn_manager::TimeoutReply reply = conn_manager::StreamTimedOut(timeout, stats_, info());
  if (handler_) handler_->OnDownstreamReset();
  if (!response_started_) {
    info().response_code_details = reply.details;
    close_after_response_ = true;
    auto h = std::move(handler_);
    if (h) conn_->dispatcher().DeferredDelete(std::move(h));
    SendLocalReply(reply.status, reply.body, nullptr, "text/plain");
    if (stream_active_) EndResponse();
  } else {
    ResetStream();
  }
}

void ServerConnection::SetMaxStreamDuration(uint64_t ms) {
  if (!stream_active_) return;
  StreamState& st = state();
  if (ms == 0) {
    if (st.duration_timer) st.duration_timer->Disable();
    return;
  }
  if (!st.duration_timer) {
    st.duration_timer = conn_->dispatcher().CreateTimer([this] { OnMaxStreamDuration(); });
  }
  st.duration_timer->Enable(ms);
}

bool ServerConnection::CheckUnderscores(RequestHead& head) {
  auto has_underscore = [](const HeaderMap::Field& f) {
    return f.name.find('_') != std::string_view::npos;
  };
  if (config_->headers_with_underscores == HttpConfig::Underscores::kDrop) {
    int n = head.headers.RemoveIf(has_underscore);
    for (int i = 0; i < n; ++i) stats_.dropped_headers_with_underscores.Inc();
    return true;
  }
  for (const HeaderMap::Field f : head.headers) {
    if (!has_underscore(f)) continue;
    stats_.requests_rejected_with_underscores_in_headers.Inc();
    info().response_code_details = "http1.unexpected_underscore";
    close_after_response_ = true;
    SendLocalReply(400, "header names with underscores are not allowed\n", nullptr, "text/plain");
    if (stream_active_) EndResponse();
    return false;
  }
  return true;
}

void ServerConnection::OnRequestTimeout() {
  if (!stream_active_ || request_complete_) return;
  TimeOut(conn_manager::StreamTimeout::kRequest);
}

ServerConnection::~ServerConnection() {
  if (!closed_) {
    closed_ = true;
    stats_.downstream_cx_active.Dec();
  }
  Http1Parser::Release(std::move(parser_));
  // A response still being flushed (or a linger) completes after we are gone.
  Connection::Release(std::move(conn_));
}

std::unique_ptr<Connection> ServerConnection::TakeConnection() {
  RPX_ASSERT(!stream_active_ && requests_ == 0 && !closed_);
  closed_ = true;
  stats_.downstream_cx_active.Dec();
  timer_.Disable();
  if (rare_ && rare_->duration) rare_->duration->Disable();
  conn_->SetCallbacks(nullptr);
  return std::move(conn_);
}

namespace {
constexpr std::string_view kHttp2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
}  // namespace

void ServerConnection::OnData(Buffer& in) {
  if (!preface_checked_) {
    // Only a connection's first bytes can open HTTP/2 (prior knowledge, RFC 9113 3.3).
    size_t n = std::min(in.size(), kHttp2Preface.size());
    if (std::string_view(in.data(), n) != kHttp2Preface.substr(0, n)) {
      preface_checked_ = true;
    } else if (n < kHttp2Preface.size()) {
      return;  // maybe the preface: wait for the rest
    } else {
      preface_checked_ = true;
      if (SwitchToHttp2()) return;
    }
  }
  if (!stream_active_ && config_->request_headers_timeout_ms &&
      !(parser_ && parser_->in_message())) {
    timer_.Enable(config_->request_headers_timeout_ms);
  } else if (!stream_active_ && config_->idle_timeout_ms && !config_->request_headers_timeout_ms) {
    timer_.Enable(config_->idle_timeout_ms);
  }
  if (stream_active_ && stream_idle_ms_) timer_.Enable(stream_idle_ms_);
  ProcessInput();
}

void ServerConnection::ProcessInput() {
  if (processing_ || closed_) return;
  processing_ = true;
  Buffer& in = conn_->read_buffer();
  while (!closed_ && !in.empty()) {
    if (upgraded_) {
      // Tunnel: the bytes belong to the upgraded protocol, not to HTTP.
      size_t n = in.size();
      if (handler_) handler_->OnRequestData(in.data(), n, false);
      if (!closed_) in.Drain(n);
      break;
    }
    if (stream_active_ && request_complete_) break;  // next request waits for this response
    size_t consumed = 0;
    Http1Parser& parser = this->parser();
    Http1Parser::Result r = parser.Execute(in.data(), in.size(), &consumed);
    if (closed_) break;
    if (r == Http1Parser::Result::kError) {
      stats_.downstream_cx_protocol_error.Inc();
      RPX_LOG(kDebug, "downstream %s: bad request: %s", remote_ip(), parser.error_reason());
      in.Clear();
      if (!stream_active_) info().Reset();
      info().response_flags |= kDownstreamProtocolError;
      info().response_code_details = "http1.codec_error";
      if (stream_active_ && response_started_) {
        // A response is already on its way; it cannot be completed.
        if (handler_) handler_->OnDownstreamReset();
        EndStream();
        Close(false);
      } else if (stream_active_) {
        // The body turned out malformed after the head was routed: abandon the upstream request
        // (it never completes there) and answer the client.
        if (handler_) handler_->OnDownstreamReset();
        auto h = std::move(handler_);
        if (h) conn_->dispatcher().DeferredDelete(std::move(h));
        close_after_response_ = true;
        SendLocalReply(parser.error_status(), parser.error_reason() + "\n", nullptr, "text/plain");
        if (stream_active_) EndStream();
        Close(true);
      } else {
        close_after_response_ = true;
        SendLocalReply(parser.error_status(), parser.error_reason() + "\n", nullptr, "text/plain");
        Close(true);
      }
      break;
    }
    in.Drain(consumed);
    if (r == Http1Parser::Result::kPaused) {
      // A request ended. If its response is already done (local reply), go on to the next.
      if (!stream_active_) {
        parser.Resume();
        continue;
      }
      break;
    }
  }
  processing_ = false;
  ReleaseParserIfIdle();
  UpdateReadDisable();
}

void ServerConnection::UpdateReadDisable() {
  if (closed_) return;
  bool disable = upstream_backpressure_ || (stream_active_ && request_complete_ &&
                                            conn_->read_buffer().size() >= kMaxPipelinedBytes);
  conn_->ReadDisable(disable);
}

void ServerConnection::OnHead() {
  RequestHead& head = parser_->request();
  stream_active_ = true;
  request_complete_ = false;
  response_started_ = false;
  response_chunked_ = false;
  request_has_body_ = head.has_body();
  response_no_body_ = head.method == std::string_view("HEAD");
  ++requests_;
  // After an upgrade request that was not switched, the parser's state is not worth trusting.
  close_after_response_ =
      !head.keep_alive || drain_ || !head.upgrade.empty() ||
      (config_->max_requests_per_connection && requests_ >= config_->max_requests_per_connection);
  StreamState& si = state();
  si.Reset();
  si.start_ms =
      conn_manager::StreamStarted(*config_, stats_, conn_->dispatcher(), si, !request_has_body_);
  stream_idle_ms_ =
      static_cast<uint32_t>(std::min<uint64_t>(config_->stream_idle_timeout_ms, UINT32_MAX));
  if (stream_idle_ms_) {
    timer_.Enable(stream_idle_ms_);
  } else {
    timer_.Disable();
  }
  if (config_->request_timeout_ms && request_has_body_) {
    StreamState& st = state();
    if (!st.request_timer) {
      st.request_timer = conn_->dispatcher().CreateTimer([this] { OnRequestTimeout(); });
    }
    st.request_timer->Enable(config_->request_timeout_ms);
  }
  if (config_->max_stream_duration_ms) {
    StreamState& st = state();
    if (!st.duration_timer) {
      st.duration_timer = conn_->dispatcher().CreateTimer([this] { OnMaxStreamDuration(); });
    }
    st.duration_timer->Enable(config_->max_stream_duration_ms);
  }
  if (config_->headers_with_underscores != HttpConfig::Underscores::kAllow &&
      !CheckUnderscores(head)) {
    return;
  }
  handler_ = factory_.CreateStream(*this);
  handler_->OnRequestHeaders(head, !request_has_body_);
}

void ServerConnection::OnBody(const char* data, size_t len) {
  info().bytes_received += len;
  if (handler_) handler_->OnRequestData(data, len, false);
}

void ServerConnection::OnMessageComplete() {
  request_complete_ = true;
  DisableRequestTimer();
  if (config_->record_durations && request_has_body_) info().request_end_ns = MonotonicNowNs();
  if (handler_ && request_has_body_) handler_->OnRequestData(nullptr, 0, true);
}

void ServerConnection::EncodeHeaders(ResponseHead& head, bool end_stream) {
  if (closed_ || response_started_) return;
  const RequestHead& req = parser_->request();
  if (head.status == 101) {
    if (!stream_active_ || req.upgrade.empty()) {
      // Only an upgrade request can be switched; anything else is a broken upstream exchange.
      ResetStream();
      return;
    }
    response_started_ = true;
    stats_.CountStatus(101);
    info().response_code = 101;
    upgraded_ = true;
    stats_.downstream_cx_upgrades_total.Inc();
    stats_.downstream_cx_upgrades_active.Inc();
    DisableRequestTimer();
    Buffer& out = conn_->write_buffer();
    AppendStatusLine(out, 101, head.reason);
    AppendHeaders(out, head.headers);  // the handler supplies Connection and Upgrade
    out.Append("\r\n", 2);
    conn_->ScheduleWrite();
    // Bytes the client sent after its request (the new protocol's first frames) are waiting.
    if (!conn_->read_buffer().empty()) ResumeSoon();
    if (end_stream) EndResponse();
    return;
  }
  response_started_ = true;
  stats_.CountStatus(head.status);
  info().response_code = head.status;
  if (config_->record_response_headers) {
    info().response_headers = std::make_unique<HeaderMap>(head.headers);
  }
  bool no_body = response_no_body_ || StatusHasNoBody(head.status);
  bool http10 = req.version_minor == 0;
  if (!no_body && !head.has_content_length && !end_stream) {
    if (http10) {
      close_after_response_ = true;  // HTTP/1.0 has no chunked: the close ends the body
    } else {
      response_chunked_ = true;
    }
  }
  // A response that ends before its request body was read leaves the connection unusable.
  if (!request_complete_ && request_has_body_) close_after_response_ = true;
  Buffer& out = conn_->write_buffer();
  AppendStatusLine(out, head.status, head.reason);
  switch (config_->server_header) {
    case HttpConfig::ServerHeader::kOverwrite:
      // Written here, last, instead of the upstream's (what a Set would give, without the copy).
      AppendHeaders(out, head.headers, "server");
      out.Append("server: ", 8);
      out.Append(config_->server_name);
      out.Append("\r\n", 2);
      break;
    case HttpConfig::ServerHeader::kAppendIfAbsent:
      if (!head.headers.Get("server")) head.headers.Add("server", config_->server_name);
      AppendHeaders(out, head.headers);
      break;
    case HttpConfig::ServerHeader::kPassThrough:
      AppendHeaders(out, head.headers);
      break;
  }
  if (head.has_content_length && !(StatusHasNoBody(head.status) && head.status != 304)) {
    out.Append("content-length: ", 16);
    out.AppendDecimal(head.content_length);
    out.Append("\r\n", 2);
  } else if (response_chunked_ && !response_no_body_) {
    out.Append("transfer-encoding: chunked\r\n");
  } else if (!no_body && end_stream) {
    out.Append("content-length: 0\r\n");
  }
  if (close_after_response_) {
    out.Append("connection: close\r\n");
  } else if (http10) {
    out.Append("connection: keep-alive\r\n");
  }
  out.Append("\r\n", 2);
  conn_->ScheduleWrite();
  if (end_stream) EndResponse();
}

void ServerConnection::EncodeData(const char* data, size_t len, bool end_stream) {
  if (closed_) return;
  if (stream_idle_ms_ && len) timer_.Enable(stream_idle_ms_);
  if (!response_no_body_) info().bytes_sent += len;
  if (!response_no_body_ && len > 0 && !response_chunked_ && !end_stream) {
    conn_->WriteThrough(data, len);  // large bodies stream through without piling up here
    return;
  }
  if (!response_no_body_ && len > 0) {
    Buffer& out = conn_->write_buffer();
    if (response_chunked_) {
      out.AppendHex(len);
      out.Append("\r\n", 2);
      out.Append(data, len);
      out.Append("\r\n", 2);
    } else {
      out.Append(data, len);
    }
  }
  if (end_stream) {
    if (response_chunked_ && !response_no_body_) conn_->write_buffer().Append("0\r\n\r\n", 5);
    conn_->ScheduleWrite();
    EndResponse();
    return;
  }
  conn_->ScheduleWrite();
}

void ServerConnection::Encode100Continue() {
  if (closed_ || response_started_) return;
  conn_->Write("HTTP/1.1 100 Continue\r\n\r\n");
}

void ServerConnection::SendLocalReply(int status, std::string_view body,
                                      const HeaderMap* extra_headers,
                                      std::string_view content_type) {
  if (closed_) return;
  if (response_started_) {
    ResetStream();
    return;
  }
  conn_manager::LocalReplyParts reply{status, body, content_type, extra_headers};
  conn_manager::PrepareLocalReply(*config_, Context(), info(), reply);
  status = reply.status;
  body = reply.body;
  content_type = reply.content_type;
  extra_headers = reply.headers;
  bool had_stream = stream_active_;
  if (!had_stream) {
    // A reply outside any stream (a parse error): answer and count it as a request.
    stats_.downstream_rq_total.Inc();
    response_no_body_ = false;
  }
  ResponseHead head;
  head.status = status;
  if (extra_headers) head.headers = *extra_headers;
  if (!body.empty()) head.headers.Add("content-type", content_type);
  head.has_content_length = true;
  head.content_length = response_no_body_ ? 0 : body.size();
  if (response_no_body_) head.content_length = body.size();  // HEAD: the length a GET would get
  if (!had_stream) {
    response_started_ = true;
    stats_.CountStatus(status);
    Buffer& out = conn_->write_buffer();
    AppendStatusLine(out, status, "");
    AppendHeaders(out, head.headers);
    out.Append("server: ");
    out.Append(config_->server_name);
    out.Append("\r\ncontent-length: ");
    out.AppendDecimal(body.size());
    out.Append("\r\nconnection: close\r\n\r\n");
    out.Append(body);
    conn_->ScheduleWrite();
    response_started_ = false;
    info().response_code = status;
    info().bytes_sent = body.size();
    conn_manager::LogStream(*config_, conn_->dispatcher().worker_index(), info(), Context());
    return;
  }
  EncodeHeaders(head, body.empty() || response_no_body_);
  if (!body.empty() && !response_no_body_ && !closed_) EncodeData(body.data(), body.size(), true);
}

void ServerConnection::ResumeSoon() {
  // Outside the upstream's callbacks, so the upstream connection that just finished is back in
  // its pool before the next request looks for one.
  RareTimers& t = rare();
  if (!t.resume) t.resume = conn_->dispatcher().CreateTimer([this] { ProcessInput(); });
  t.resume->Enable(0);
}

void ServerConnection::EndUpgrade() {
  if (!upgraded_) return;
  upgraded_ = false;
  stats_.downstream_cx_upgrades_active.Dec();
}

void ServerConnection::EndStream() {
  if (!stream_active_) return;
  StreamState& st = state();
  conn_manager::StreamEnded(*config_, stats_, conn_->dispatcher(), st, st.start_ms, Context());
  stream_active_ = false;
  EndUpgrade();
  DisableRequestTimer();
  DisableDurationTimer();
  if (handler_) conn_->dispatcher().DeferredDelete(std::move(handler_));
  upstream_backpressure_ = false;
}

void ServerConnection::EndResponse() {
  // A request without a body is complete at its head, even while the parser is still inside it.
  bool request_done = request_complete_ || !request_has_body_;
  EndStream();
  if (close_after_response_ || !request_done) {
    Close(true);
    return;
  }
  parser_->Resume();
  request_complete_ = false;
  response_started_ = false;
  if (config_->idle_timeout_ms) {
    timer_.Enable(config_->idle_timeout_ms);
  } else {
    timer_.Disable();
  }
  UpdateReadDisable();
  // Pipelined requests may already be buffered.
  if (!conn_->read_buffer().empty() && !processing_) ResumeSoon();
  ReleaseParserIfIdle();
}

void ServerConnection::ResetStream() {
  if (closed_) return;
  if (stream_active_) {
    stats_.downstream_rq_rx_reset.Inc();
    EndStream();
  }
  // Deliver what was already produced, then close: the client sees a truncated response (its
  // framing says so) rather than an empty reply it might silently retry.
  Close(true);
}

void ServerConnection::ReadDisable(bool disable) {
  upstream_backpressure_ = disable;
  UpdateReadDisable();
  // Resuming: bytes may be waiting in the buffer.
  if (!disable && !processing_ && !conn_->read_buffer().empty()) ProcessInput();
}

Connection* ServerConnection::SpliceTarget() {
  if (closed_ || !stream_active_ || !response_started_ || response_chunked_ || response_no_body_ ||
      upgraded_ || !conn_->open()) {
    return nullptr;
  }
  return conn_.get();
}

void ServerConnection::OnDataSpliced(uint64_t bytes) {
  info().bytes_sent += bytes;
  if (stream_idle_ms_ && bytes) timer_.Enable(stream_idle_ms_);
}

void ServerConnection::SetStreamIdleTimeout(uint64_t ms) {
  stream_idle_ms_ = static_cast<uint32_t>(std::min<uint64_t>(ms, UINT32_MAX));
  if (!stream_active_) return;
  if (ms) {
    timer_.Enable(ms);
  } else {
    timer_.Disable();
  }
}

void ServerConnection::OnStreamIdleTimeout() {
  if (!stream_active_) return;
  TimeOut(conn_manager::StreamTimeout::kIdle);
}

void ServerConnection::CloseWhenIdle() {
  drain_ = true;
  if (stream_active_) {
    // Closed after this response (which says Connection: close if it has not started).
    close_after_response_ = true;
    return;
  }
  // A request may be on its way already: on a connection that has not had one yet (accepted
  // just before the drain), or in bytes not read yet. Closing now would leave it unanswered; it
  // is served instead, with Connection: close. The listener's drain time bounds the wait.
  if (requests_ == 0 || !conn_->read_buffer().empty()) return;
  char c;
  if (::recv(conn_->fd(), &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0) return;
  // Idle between requests. A client that just read its last response may be sending the next
  // request right now (a load generator always is); closing at once would fail that request.
  // It gets a short grace instead: a request that comes is answered with Connection: close, and
  // a connection still idle at the end is closed (OnTimer).
  timer_.Enable(kDrainIdleGraceMs);
}

void ServerConnection::Close(bool flush) {
  if (closed_) return;
  closed_ = true;
  stream_was_active_at_close_ = stream_active_ || request_has_body_;
  stats_.downstream_cx_active.Dec();
  timer_.Disable();
  DisableRequestTimer();
  DisableDurationTimer();
  if (rare_ && rare_->resume) rare_->resume->Disable();
  if (rare_ && rare_->duration) rare_->duration->Disable();
  if (stream_active_) {
    StreamState& st = state();
    conn_manager::StreamEnded(*config_, stats_, conn_->dispatcher(), st, st.start_ms, Context());
    stream_active_ = false;
    EndUpgrade();
    if (handler_) {
      handler_->OnDownstreamReset();
      conn_->dispatcher().DeferredDelete(std::move(handler_));
    }
  }
  // If the client may still be sending (a request body we did not read), linger so that our
  // response is not destroyed by a RST.
  Connection::CloseType type = Connection::CloseType::kNoFlush;
  if (flush) {
    bool unread_input =
        (stream_was_active_at_close_ && !request_complete_) || !conn_->read_buffer().empty();
    type = unread_input ? Connection::CloseType::kFlushWriteThenLinger
                        : Connection::CloseType::kFlushWrite;
  }
  conn_->Close(type, false);
  OnClosed();
}

bool ServerConnection::PeerCertificate(PeerCertificateInfo* out) const {
  // Only TLS connections have a transport other than the raw one, and it is a TlsTransport.
  if (conn_->plaintext()) return false;
  return static_cast<const TlsTransport&>(conn_->transport()).PeerCertificate(out);
}

bool ServerConnection::peer_certificate_presented() const {
  if (conn_->plaintext()) return false;
  return static_cast<const TlsTransport&>(conn_->transport()).has_peer_certificate();
}

bool ServerConnection::peer_certificate_validated() const {
  if (conn_->plaintext()) return false;
  return static_cast<const TlsTransport&>(conn_->transport()).peer_certificate_validated();
}

void ServerConnection::OnEvent(ConnectionEvent event) {
  if (event == ConnectionEvent::kConnected) {
    OnTransportConnected();
    // HTTP2 is spoken whatever ALPN said (as Envoy does); AUTO follows ALPN.
    if (!conn_->plaintext() &&
        (config_->codec == HttpConfig::Codec::kHttp2 ||
         (config_->codec == HttpConfig::Codec::kAuto &&
          static_cast<const TlsTransport&>(conn_->transport()).alpn() == "h2"))) {
      preface_checked_ = true;
      SwitchToHttp2();
    }
    return;
  }
  if (event == ConnectionEvent::kRemoteClose || event == ConnectionEvent::kLocalClose) {
    if (upgraded_ && stream_active_ && event == ConnectionEvent::kRemoteClose) {
      // The client ended the tunnel: what it sent is flushed upstream, then both sides close.
      if (handler_) handler_->OnRequestData(nullptr, 0, true);
      EndStream();
      Close(false);
      return;
    }
    if (stream_active_) {
      stats_.downstream_rq_rx_reset.Inc();
      if (event == ConnectionEvent::kRemoteClose) {
        info().response_flags |= kDownstreamConnectionTermination;
        if (!response_started_) info().response_code_details = "downstream_remote_disconnect";
      }
    }
    Close(false);
  }
}

void ServerConnection::OnAboveWriteHighWatermark() {
  if (handler_) handler_->OnDownstreamWatermark(true);
}

void ServerConnection::OnBelowWriteLowWatermark() {
  if (handler_) handler_->OnDownstreamWatermark(false);
}

}  // namespace rpx
