// ServerConnection: one downstream HTTP/1.1 connection (the HTTP connection manager role). It
// parses requests one at a time (pipelined requests wait, in order, in the read buffer), hands
// each to a StreamHandler, and encodes the response with the framing the client can take
// (Content-Length, chunked, or close-delimited for HTTP/1.0).
// Owned by the worker's connection list; runs on the worker's thread; deleted deferred.
// An idle keep-alive connection is this object and its Connection, nothing else: the parser and
// stream exist only while a request is in flight, the timer is embedded, and the peer address is
// kept in binary form.
#pragma once

#include <memory>
#include <string>

#include "source/http/conn_manager.h"
#include "source/http/downstream_connection.h"
#include "source/http/headers.h"
#include "source/http/http1_parser.h"
#include "source/http/http_config.h"
#include "source/http/stream.h"
#include "source/network/connection.h"

namespace rpx {

class ServerConnection : public DownstreamConnection,
                         public Http1ParserCallbacks,
                         public ResponseEncoder {
 public:
  ServerConnection(std::unique_ptr<Connection> conn, std::shared_ptr<const HttpConfig> config,
                   HttpStats& stats, StreamHandlerFactory& factory, const SocketAddress& peer);
  ~ServerConnection() override;

  // Closes after the stream in flight, or when idle: a keep-alive connection between requests
  // with none waiting unread is closed after kDrainIdleGraceMs unless a request comes (which is
  // answered with Connection: close). Used for drain.
  void CloseWhenIdle() override;
  static constexpr uint64_t kDrainIdleGraceMs = 1000;
  bool draining() const override { return drain_; }
  void CloseNow() override { ResetStream(); }

  // ConnectionCallbacks
  void OnData(Buffer& in) override;
  void OnEvent(ConnectionEvent event) override;
  void OnAboveWriteHighWatermark() override;
  void OnBelowWriteLowWatermark() override;
  // Http1ParserCallbacks
  void OnHead() override;
  void OnBody(const char* data, size_t len) override;
  void OnMessageComplete() override;
  // ResponseEncoder
  void EncodeHeaders(ResponseHead& head, bool end_stream) override;
  void EncodeData(const char* data, size_t len, bool end_stream) override;
  void Encode100Continue() override;
  void SendLocalReply(int status, std::string_view body, const HeaderMap* extra_headers,
                      std::string_view content_type) override;
  void ResetStream() override;
  void ReadDisable(bool disable) override;
  void SetStreamIdleTimeout(uint64_t ms) override;
  void SetMaxStreamDuration(uint64_t ms) override;
  Connection* SpliceTarget() override;
  void OnDataSpliced(uint64_t bytes) override;
  bool response_started() const override { return response_started_; }
  std::string remote_ip() const override;
  bool is_tls() const override { return !conn_->plaintext(); }
  bool PeerCertificate(PeerCertificateInfo* out) const override;
  bool peer_certificate_presented() const override;
  bool peer_certificate_validated() const override;
  std::string remote_address() const override;
  std::string local_address() const override;
  SocketAddress original_destination() const override;
  std::string requested_server_name() const override;
  std::string tls_version() const override;
  std::string tls_cipher() const override;
  StreamInfo& stream_info() override { return info(); }
  const RequestHead* request_head() const override {
    return parser_ ? &parser_->request() : nullptr;
  }

 protected:
  Connection& connection() { return *conn_; }
  // The client speaks HTTP/2 (its first bytes are the connection preface, or ALPN chose h2) and
  // the connection manager allows it: the owner may replace this object with an HTTP/2 one,
  // taking the connection (TakeConnection; the preface stays in its read buffer), and returns
  // true; this object must not be touched after that. False: stay on HTTP/1 (the preface is then
  // a bad request).
  virtual bool SwitchToHttp2() { return false; }
  // Hands the connection (no stream has started on it) to a new owner, without closing it.
  std::unique_ptr<Connection> TakeConnection();
  // What an HTTP/2 successor needs to serve the same client the same way.
  const std::shared_ptr<const HttpConfig>& http_config() const { return config_; }
  HttpStats& stats() { return stats_; }
  StreamHandlerFactory& factory() { return factory_; }
  SocketAddress peer_address() const;

 private:
  void OnTimer();
  void ProcessInput();
  void EndResponse();
  void EndStream();
  void Close(bool flush);
  void OnStreamIdleTimeout();
  void UpdateReadDisable();
  void EndUpgrade();
  Http1Parser& parser();  // created when a request starts
  void ReleaseParserIfIdle();
  void OnRequestTimeout();
  void OnMaxStreamDuration();
  // headers_with_underscores_action: false when the request was refused (answered already).
  bool CheckUnderscores(RequestHead& head);
  void ResumeSoon();
  // A timeout ends the stream: 408 (and close) before the response started, a reset after.
  void TimeOut(conn_manager::StreamTimeout timeout);
  // What formatters read about this connection and its request (access logs, local replies).
  FormatContext Context() const;

  std::unique_ptr<Connection> conn_;
  std::shared_ptr<const HttpConfig> config_;
  HttpStats& stats_;
  StreamHandlerFactory& factory_;
  // Only while a request is being read or served (or bytes wait): an idle keep-alive connection
  // holds no parser (see ReleaseParserIfIdle).
  std::unique_ptr<Http1Parser> parser_;
  std::unique_ptr<StreamHandler> handler_;
  // Idle / request headers timeout without a stream; stream idle timeout with one.
  MemberTimer<ServerConnection, &ServerConnection::OnTimer> timer_;
  // Timers most connections never need, behind one pointer (an idle connection stays small):
  // ResumeSoon's, and max_connection_duration's. Created when first needed.
  struct RareTimers {
    std::unique_ptr<Timer> resume;
    std::unique_ptr<Timer> duration;
  };
  std::unique_ptr<RareTimers> rare_;
  RareTimers& rare() {
    if (!rare_) rare_ = std::make_unique<RareTimers>();
    return *rare_;
  }
  // This stream's idle timeout (the listener's, or the route's), in ms; 32 bits (49 days) keep
  // the connection object small.
  uint32_t stream_idle_ms_ = 0;
  uint32_t requests_ = 0;
  // What happened to the request in flight, and its request_timeout timer; like the parser, it
  // exists only while a request is being served (an idle connection stays small), and comes
  // from a per-thread free list.
  struct StreamState;
  std::unique_ptr<StreamState> state_;
  StreamState& state();
  StreamInfo& info();
  void DisableRequestTimer();
  void DisableDurationTimer();
  // The client's address without the port (in_addr or in6_addr by peer_family_); remote_ip()
  // formats it for each request's x-forwarded-for.
  uint8_t peer_family_ = 0;
  uint8_t peer_addr_[16] = {};
  uint16_t peer_port_ = 0;
  bool stream_active_ : 1;
  bool request_complete_ : 1;
  bool request_has_body_ : 1;
  bool response_started_ : 1;
  bool response_chunked_ : 1;
  bool response_no_body_ : 1;
  bool close_after_response_ : 1;
  bool processing_ : 1;
  bool closed_ : 1;
  bool upstream_backpressure_ : 1;
  bool drain_ : 1;
  bool stream_was_active_at_close_ : 1;
  bool upgraded_ : 1;         // a 101 went out: the connection is a byte tunnel now
  bool preface_checked_ : 1;  // the first bytes were checked for HTTP/2's preface
};

}  // namespace rpx
