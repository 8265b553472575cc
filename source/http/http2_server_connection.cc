#include "source/http/http2_server_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/escaping.h"
#include "source/common/assert.h"
#include "source/common/logger.h"
#include "source/http/conn_manager.h"
#include "source/http/nghttp2_fields.h"
#include "source/tls/tls_transport.h"

namespace rpx {

namespace {

using conn_manager::StatusHasNoBody;

// A Sec-WebSocket-Key: 16 random bytes, base64 (RFC 6455 4.1).
std::string RandomWebSocketKey() {
  unsigned char nonce[16];
  // Up to 256 bytes come whole once the kernel's pool is initialized (it is long before a proxy
  // takes traffic).
  ssize_t n = getrandom(nonce, sizeof(nonce), 0);
  RPX_ASSERT(n == static_cast<ssize_t>(sizeof(nonce)));
  (void)n;
  std::string key;
  absl::Base64Escape(absl::string_view(reinterpret_cast<const char*>(nonce), sizeof(nonce)), &key);
  return key;
}

}  // namespace

// One request/response exchange. Created when the client's HEADERS open the stream; deleted
// (deferred) when nghttp2 closes it.
class Http2ServerConnection::Stream : public ResponseEncoder, public DeferredDeletable {
 public:
  Stream(Http2ServerConnection& parent, int32_t id)
      : parent_(parent), id_(id), idle_timer_(parent.conn_->dispatcher(), this) {}

  // Request side, from nghttp2's callbacks.
  void OnHeader(std::string_view name, std::string_view value);
  void OnHeadersComplete(bool end_stream);
  void OnTrailer(std::string_view name, std::string_view value);
  void OnRequestData(const char* data, size_t len);
  void OnRequestEnd();
  // nghttp2 closed the stream (both sides ended, or a reset either way).
  void OnClose(uint32_t error_code);
  // Response side, for nghttp2's data source.
  ssize_t ReadResponse(size_t max, uint32_t* flags);
  void WriteResponse(Buffer& out, const uint8_t* framehd, size_t length);

  // ResponseEncoder
  void EncodeHeaders(ResponseHead& head, bool end_stream) override;
  void EncodeData(const char* data, size_t len, bool end_stream) override;
  void EncodeTrailers(const HeaderMap& trailers) override;
  void Encode100Continue() override;
  void SendLocalReply(int status, std::string_view body, const HeaderMap* extra_headers,
                      std::string_view content_type) override;
  void ResetStream() override;
  void ReadDisable(bool disable) override;
  void SetStreamIdleTimeout(uint64_t ms) override;
  void SetMaxStreamDuration(uint64_t ms) override;
  bool response_started() const override { return response_started_; }
  std::string remote_ip() const override;
  bool is_tls() const override { return !parent_.conn_->plaintext(); }
  bool PeerCertificate(PeerCertificateInfo* out) const override;
  bool peer_certificate_presented() const override;
  bool peer_certificate_validated() const override;
  std::string remote_address() const override { return parent_.peer_.ToString(); }
  std::string local_address() const override;
  SocketAddress original_destination() const override;
  std::string requested_server_name() const override;
  std::string tls_version() const override;
  std::string tls_cipher() const override;
  StreamInfo& stream_info() override { return info_; }
  const RequestHead* request_head() const override { return &head_; }

  void TellBelowLowWatermark() {
    if (above_watermark_ && active()) {
      above_watermark_ = false;
      active()->OnDownstreamWatermark(false);
    }
  }

  Stream* prev = nullptr;
  Stream* next = nullptr;
  int32_t id() const { return id_; }
  bool request_complete() const { return request_complete_; }

 private:
  const TlsTransport* tls() const {
    return parent_.conn_->plaintext()
               ? nullptr
               : static_cast<const TlsTransport*>(&parent_.conn_->transport());
  }
  // Hands buffered request body (held while read-disabled) to the handler.
  void DeliverRequestData();
  // Tells the handler the request ended (with its trailers, if it had some).
  void DeliverRequestEnd();
  void OnIdleTimeout();
  void OnRequestTimeout();
  void OnMaxStreamDuration();
  // Ends the stream on a timer: 408 before the response started (a gRPC status for gRPC), a
  // reset after.
  void TimeOut(conn_manager::StreamTimeout timeout);
  FormatContext Context() const;
  // Ends the handler's part: it gets no more calls (it is deleted when the stream closes).
  void ReleaseHandler();
  void CountResponseStart(int status);
  bool IsGrpc() const;

  Http2ServerConnection& parent_;
  int32_t id_;
  RequestHead head_;
  StreamInfo info_;
  // Kept until the stream closes (the access log reads what it points to), but called only
  // while active(): not after it ended the response or gave the stream up.
  std::unique_ptr<StreamHandler> handler_;
  bool handler_done_ = false;
  StreamHandler* active() const { return handler_done_ ? nullptr : handler_.get(); }
  std::string cookies_;   // cookie fields joined ("; ") for HTTP/1 upstreams (RFC 9113 8.2.3)
  std::string protocol_;  // :protocol (extended CONNECT)
  Buffer response_;       // response body not yet framed
  Buffer held_;           // request body received while the handler asked not to read
  std::unique_ptr<HeaderMap> trailers_;          // sent after the last of response_ (gRPC's status)
  std::unique_ptr<HeaderMap> request_trailers_;  // the client's, kept until the stream closes
  MemberTimer<Stream, &Stream::OnIdleTimeout> idle_timer_;
  std::unique_ptr<Timer> request_timer_;
  std::unique_ptr<Timer> duration_timer_;  // max_stream_duration
  std::unique_ptr<Timer> deliver_timer_;   // a tunnel's held DATA, after the switch
  uint64_t start_ms_ = 0;
  uint64_t idle_ms_ = 0;
  size_t header_bytes_ = 0;
  bool dispatched_ = false;        // the handler has the request head
  bool request_complete_ = false;  // the client's END_STREAM arrived
  bool request_end_held_ = false;  // ... and is held back with held_
  bool response_started_ = false;
  bool response_end_ = false;  // the response's last byte is in response_
  bool response_no_body_ = false;
  bool read_disabled_ = false;
  bool above_watermark_ = false;
  bool header_overflow_ = false;
  bool trailer_overflow_ = false;  // the request's trailers went over the header limits
  bool underscore_ = false;        // a header name with '_' under REJECT_REQUEST
  bool delivering_ = false;
  bool closed_ = false;
  bool counted_active_ = false;
  // Extended CONNECT (RFC 8441): the request went to the handler as an HTTP/1.1 upgrade; its
  // DATA is held until the handler's 101 (sent as 200) makes the stream a tunnel.
  bool extended_connect_ = false;
  bool tunnel_ = false;
  // Request DATA waits in held_: the handler cannot read, or an extended CONNECT is not switched.
  bool Holding() const { return read_disabled_ || (extended_connect_ && !tunnel_); }
  int8_t grpc_status_ = -1;  // a local reply's grpc-status when not derived from its HTTP status
};

// nghttp2's callbacks, with the connection as user data.
struct Http2ServerConnection::Callbacks {
  static Stream* StreamOf(nghttp2_session* session, int32_t id) {
    return static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, id));
  }

  static ssize_t Send(nghttp2_session*, const uint8_t* data, size_t length, int, void* user) {
    auto* c = static_cast<Http2ServerConnection*>(user);
    // A client that does not read gets no more frames generated for it: what waits is bounded
    // by the write buffer's watermark (nghttp2 holds back its own control frames up to
    // max_outbound_control_frames, then fails the session).
    if (c->conn_->above_high_watermark()) return NGHTTP2_ERR_WOULDBLOCK;
    c->conn_->write_buffer().Append(reinterpret_cast<const char*>(data), length);
    c->conn_->ScheduleWrite();  // also notes a crossed watermark, which stops the next frame
    return static_cast<ssize_t>(length);
  }

  static int SendData(nghttp2_session*, nghttp2_frame* frame, const uint8_t* framehd, size_t length,
                      nghttp2_data_source* source, void* user) {
    auto* c = static_cast<Http2ServerConnection*>(user);
    if (c->conn_->above_high_watermark()) return NGHTTP2_ERR_WOULDBLOCK;
    RPX_ASSERT(frame->data.padlen == 0);
    static_cast<Stream*>(source->ptr)->WriteResponse(c->conn_->write_buffer(), framehd, length);
    c->conn_->ScheduleWrite();
    return 0;
  }

  static int OnFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    auto* c = static_cast<Http2ServerConnection*>(user);
    ++c->frames_since_drained_;
    if (frame->hd.type == NGHTTP2_DATA) ++c->outbound_data_frames_;
    if (frame->hd.type == NGHTTP2_RST_STREAM) c->stats_.http2_tx_reset.Inc();
    if (frame->hd.type == NGHTTP2_GOAWAY) c->stats_.http2_goaway_sent.Inc();
    if ((frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
      // The response is complete but the client is still sending: it need not (RFC 9113 8.1).
      Stream* s = StreamOf(session, frame->hd.stream_id);
      if (s && !s->request_complete()) {
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_NO_ERROR);
      }
    }
    return 0;
  }

  // HEADERS on a stream id at or below the highest one the client has opened, for a stream that
  // is no longer open (closed, or implicitly closed by a higher id), is a connection error (RFC
  // 9113 5.1.1). nghttp2 keeps no closed streams here (see the options), so it would only ignore
  // it. (DATA on such a stream never reaches a callback: nghttp2 drops it unread.)
  static int OnBeginFrame(nghttp2_session* session, const nghttp2_frame_hd* hd, void* user) {
    auto* c = static_cast<Http2ServerConnection*>(user);
    if (hd->type != NGHTTP2_HEADERS || hd->stream_id <= 0) return 0;
    if (hd->stream_id > c->highest_stream_id_) {
      c->highest_stream_id_ = hd->stream_id;
      return 0;
    }
    nghttp2_stream* st = nghttp2_session_find_stream(session, hd->stream_id);
    if (!st || nghttp2_stream_get_state(st) == NGHTTP2_STREAM_STATE_CLOSED) {
      c->ConnectionError(NGHTTP2_PROTOCOL_ERROR, nullptr);
    }
    return 0;
  }

  static int OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    auto* c = static_cast<Http2ServerConnection*>(user);
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    if (c->closed_) return NGHTTP2_ERR_CALLBACK_FAILURE;
    auto* s = new Stream(*c, frame->hd.stream_id);
    s->next = c->streams_;
    if (c->streams_) c->streams_->prev = s;
    c->streams_ = s;
    ++c->active_streams_;
    ++c->inbound_streams_;
    c->idle_timer_.Disable();
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, s);
    return 0;
  }

  static int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void*) {
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    Stream* s = StreamOf(session, frame->hd.stream_id);
    if (!s) return 0;
    std::string_view n(reinterpret_cast<const char*>(name), namelen);
    std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      s->OnHeader(n, v);
    } else if (frame->headers.cat == NGHTTP2_HCAT_HEADERS) {
      s->OnTrailer(n, v);  // nghttp2 has checked them (no pseudo-headers, END_STREAM)
    }
    return 0;
  }

  // Envoy's inbound flood limits, counted per frame.
  static bool CheckInboundFloods(Http2ServerConnection* c, const nghttp2_frame* frame) {
    const Http2Options& o = c->config_->http2;
    bool empty = frame->hd.length == 0 && !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
                 (frame->hd.type == NGHTTP2_DATA || (frame->hd.type == NGHTTP2_HEADERS &&
                                                     frame->headers.cat == NGHTTP2_HCAT_HEADERS));
    if (frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS ||
        frame->hd.type == NGHTTP2_CONTINUATION) {
      c->consecutive_empty_frames_ = empty ? c->consecutive_empty_frames_ + 1 : 0;
      if (c->consecutive_empty_frames_ > o.max_consecutive_inbound_frames_with_empty_payload) {
        c->ConnectionError(NGHTTP2_ENHANCE_YOUR_CALM, &c->stats_.http2_inbound_empty_frames_flood);
        return false;
      }
    }
    if (frame->hd.type == NGHTTP2_PRIORITY) {
      ++c->inbound_priority_frames_;
      if (c->inbound_priority_frames_ >
          static_cast<uint64_t>(o.max_inbound_priority_frames_per_stream) *
              (1 + c->inbound_streams_)) {
        c->ConnectionError(NGHTTP2_ENHANCE_YOUR_CALM,
                           &c->stats_.http2_inbound_priority_frames_flood);
        return false;
      }
    }
    if (frame->hd.type == NGHTTP2_WINDOW_UPDATE) {
      ++c->inbound_window_update_frames_;
      if (c->inbound_window_update_frames_ >
          5 + 2 * (c->inbound_streams_ +
                   static_cast<uint64_t>(o.max_inbound_window_update_frames_per_data_frame_sent) *
                       c->outbound_data_frames_)) {
        c->ConnectionError(NGHTTP2_ENHANCE_YOUR_CALM,
                           &c->stats_.http2_inbound_window_update_frames_flood);
        return false;
      }
    }
    return true;
  }

  static int OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    auto* c = static_cast<Http2ServerConnection*>(user);
    if (!CheckInboundFloods(c, frame)) return 0;
    if (frame->hd.type == NGHTTP2_RST_STREAM) c->stats_.http2_rx_reset.Inc();
    Stream* s = frame->hd.stream_id ? StreamOf(session, frame->hd.stream_id) : nullptr;
    if (!s) return 0;
    bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      s->OnHeadersComplete(end);
    } else if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) && end) {
      s->OnRequestEnd();
    }
    return 0;
  }

  static int OnDataChunk(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                         size_t len, void*) {
    Stream* s = StreamOf(session, id);
    if (s) {
      s->OnRequestData(reinterpret_cast<const char*>(data), len);
    } else {
      nghttp2_session_consume(session, id, len);
    }
    return 0;
  }

  static int OnInvalidFrame(nghttp2_session*, const nghttp2_frame*, int lib_error, void* user) {
    auto* c = static_cast<Http2ServerConnection*>(user);
    if (lib_error == NGHTTP2_ERR_HTTP_HEADER || lib_error == NGHTTP2_ERR_HTTP_MESSAGING) {
      c->stats_.http2_rx_messaging_error.Inc();
      // Envoy's default: a malformed request ends the connection; with
      // override_stream_error_on_invalid_http_message only its stream (nghttp2 resets it).
      if (!c->config_->http2.stream_error_on_invalid_http_message) {
        c->ConnectionError(NGHTTP2_PROTOCOL_ERROR, nullptr);
      }
    }
    return 0;
  }

  static int OnStreamClose(nghttp2_session* session, int32_t id, uint32_t error_code, void* user) {
    Stream* s = StreamOf(session, id);
    if (!s) return 0;
    nghttp2_session_set_stream_user_data(session, id, nullptr);
    s->OnClose(error_code);
    static_cast<Http2ServerConnection*>(user)->StreamClosed(s);
    return 0;
  }

  static ssize_t ReadResponse(nghttp2_session*, int32_t, uint8_t*, size_t length,
                              uint32_t* data_flags, nghttp2_data_source* source, void*) {
    return static_cast<Stream*>(source->ptr)->ReadResponse(length, data_flags);
  }

  static nghttp2_session_callbacks* Get() {
    static nghttp2_session_callbacks* cb = [] {
      nghttp2_session_callbacks* c;
      nghttp2_session_callbacks_new(&c);
      nghttp2_session_callbacks_set_send_callback(c, Send);
      nghttp2_session_callbacks_set_send_data_callback(c, SendData);
      nghttp2_session_callbacks_set_on_frame_send_callback(c, OnFrameSend);
      nghttp2_session_callbacks_set_on_begin_frame_callback(c, OnBeginFrame);
      nghttp2_session_callbacks_set_on_begin_headers_callback(c, OnBeginHeaders);
      nghttp2_session_callbacks_set_on_header_callback(c, OnHeader);
      nghttp2_session_callbacks_set_on_frame_recv_callback(c, OnFrameRecv);
      nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c, OnDataChunk);
      nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(c, OnInvalidFrame);
      nghttp2_session_callbacks_set_on_stream_close_callback(c, OnStreamClose);
      return c;
    }();
    return cb;
  }
};

Http2ServerConnection::Http2ServerConnection(std::unique_ptr<Connection> conn,
                                             std::shared_ptr<const HttpConfig> config,
                                             HttpStats& stats, StreamHandlerFactory& factory,
                                             const SocketAddress& peer, bool counted)
    : conn_(std::move(conn)),
      config_(std::move(config)),
      stats_(stats),
      factory_(factory),
      peer_(peer),
      idle_timer_(conn_->dispatcher(), this) {
  conn_->SetCallbacks(this);
  if (!counted) stats_.downstream_cx_total.Inc();
  stats_.downstream_cx_active.Inc();
  stats_.downstream_cx_http2_total.Inc();
  stats_.downstream_cx_http2_active.Inc();

  const Http2Options& o = config_->http2;
  nghttp2_option* opt;
  nghttp2_option_new(&opt);
  // The window opens as the handler takes the data (Stream::OnRequestData), not as it arrives.
  nghttp2_option_set_no_auto_window_update(opt, 1);
  // Closed streams are not kept for RFC 7540's priority tree (deprecated by RFC 9113): with
  // them, a long-lived connection's memory grew with every request it had served.
  nghttp2_option_set_no_closed_streams(opt, 1);
  nghttp2_option_set_max_outbound_ack(opt, o.max_outbound_control_frames);
  nghttp2_option_set_max_deflate_dynamic_table_size(opt, o.hpack_table_size);
  nghttp2_session_server_new2(&session_, Callbacks::Get(), this, opt);
  nghttp2_option_del(opt);

  uint32_t header_list = config_->max_request_headers_kb * 1024;
  nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, o.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, o.initial_stream_window_size},
      {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, o.hpack_table_size},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, header_list},
      {NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1},  // last: sent only with allow_connect
  };
  size_t n_settings = sizeof(settings) / sizeof(settings[0]) - (o.allow_connect ? 0 : 1);
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, n_settings);
  // The connection window starts at 65535 whatever SETTINGS say; raise it to the configured one.
  if (o.initial_connection_window_size > NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE) {
    nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                          static_cast<int32_t>(o.initial_connection_window_size));
  }
  UpdateIdleTimer();
  if (config_->max_connection_duration_ms) {
    duration_timer_ = conn_->dispatcher().CreateTimer([this] {
      stats_.downstream_cx_max_duration_reached.Inc();
      CloseWhenIdle();
    });
    duration_timer_->Enable(config_->max_connection_duration_ms);
  }
}

void Http2ServerConnection::Start() {
  // The client's preface (and whatever followed it) may be waiting already: a connection handed
  // over by the HTTP/1 codec.
  if (!conn_->read_buffer().empty()) {
    OnData(conn_->read_buffer());
  } else {
    SendPending();
  }
}

Http2ServerConnection::~Http2ServerConnection() {
  if (!closed_) {
    closed_ = true;
    stats_.downstream_cx_active.Dec();
    stats_.downstream_cx_http2_active.Dec();
  }
  // Streams still listed were never closed by nghttp2 (the connection went first): they end
  // with it.
  while (streams_) {
    Stream* s = streams_;
    streams_ = s->next;
    delete s;
  }
  nghttp2_session_del(session_);
  Connection::Release(std::move(conn_));
}

void Http2ServerConnection::UpdateIdleTimer() {
  if (active_streams_ == 0 && config_->idle_timeout_ms && !closed_) {
    idle_timer_.Enable(config_->idle_timeout_ms);
  }
}

void Http2ServerConnection::SendGoaway() {
  if (goaway_sent_) return;
  goaway_sent_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  SendPending();
}

void Http2ServerConnection::OnIdleTimeout() {
  if (active_streams_ != 0 || closed_) return;
  stats_.downstream_cx_idle_timeout.Inc();
  SendGoaway();
  Close(true);
}

void Http2ServerConnection::CloseWhenIdle() {
  if (drain_ || closed_) return;
  drain_ = true;
  SendGoaway();
  if (!closed_ && active_streams_ == 0) Close(true);
}

void Http2ServerConnection::ConnectionError(uint32_t error, Counter* stat) {
  if (error_ || closed_) return;
  error_ = true;
  if (stat) stat->Inc();
  stats_.downstream_cx_protocol_error.Inc();
  goaway_sent_ = true;
  nghttp2_session_terminate_session(session_, error);
  SendPending();
}

void Http2ServerConnection::OnData(Buffer& in) {
  if (closed_) return;
  in_recv_ = true;
  ssize_t rv =
      nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(in.data()), in.size());
  in_recv_ = false;
  if (closed_) return;
  in.Clear();
  in.ReleaseIfEmpty();  // its block goes back to the pool: an idle h2 connection holds none
  if (rv < 0) {
    RPX_LOG(kDebug, "downstream %s: HTTP/2 connection error: %s", peer_.ToString(),
            nghttp2_strerror(static_cast<int>(rv)));
    if (rv == NGHTTP2_ERR_FLOODED) {
      stats_.http2_outbound_control_flood.Inc();
      stats_.downstream_cx_protocol_error.Inc();
      Close(false);  // the client does not read what it asks for: nothing more to tell it
      return;
    }
    if (!error_) {
      error_ = true;
      stats_.downstream_cx_protocol_error.Inc();
      goaway_sent_ = true;
      nghttp2_session_terminate_session(session_, NGHTTP2_PROTOCOL_ERROR);
    }
  }
  // A client that keeps sending while never reading what it is sent (frames pile up unwritten).
  if (!error_ && frames_since_drained_ > config_->http2.max_outbound_frames &&
      !conn_->write_buffer().empty()) {
    stats_.http2_outbound_flood.Inc();
    stats_.downstream_cx_protocol_error.Inc();
    Close(false);
    return;
  }
  SendPending();
}

void Http2ServerConnection::SendPending() {
  if (closed_) return;
  if (in_recv_ || sending_) {
    send_wanted_ = true;
    return;
  }
  if (conn_->write_buffer().empty()) frames_since_drained_ = 0;
  sending_ = true;
  int rv = 0;
  do {
    send_wanted_ = false;
    rv = nghttp2_session_send(session_);
  } while (rv == 0 && send_wanted_ && !closed_);
  sending_ = false;
  if (closed_) return;
  conn_->ScheduleWrite();
  if (rv != 0) {
    RPX_LOG(kDebug, "downstream %s: HTTP/2 send failed: %s", peer_.ToString(),
            nghttp2_strerror(rv));
    Close(false);
    return;
  }
  // Streams whose buffered response drained may read their upstream again.
  while (!below_low_.empty()) {
    int32_t id = below_low_.back();
    below_low_.pop_back();
    if (auto* s = Callbacks::StreamOf(session_, id)) s->TellBelowLowWatermark();
    if (closed_) return;
  }
  if (error_ && !nghttp2_session_want_write(session_)) {
    Close(true);
    return;
  }
  if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) {
    Close(true);  // GOAWAY went both ways (or was sent) and no stream is left
  }
}

void Http2ServerConnection::OnBelowWriteLowWatermark() { SendPending(); }

void Http2ServerConnection::OnEvent(ConnectionEvent event) {
  if (event == ConnectionEvent::kConnected) {
    OnTransportConnected();
    return;
  }
  if (event == ConnectionEvent::kRemoteClose || event == ConnectionEvent::kLocalClose) {
    Close(false);
  }
}

void Http2ServerConnection::StreamClosed(Stream* s) {
  if (s->prev) {
    s->prev->next = s->next;
  } else {
    streams_ = s->next;
  }
  if (s->next) s->next->prev = s->prev;
  s->prev = s->next = nullptr;
  RPX_ASSERT(active_streams_ > 0);
  --active_streams_;
  conn_->dispatcher().DeferredDelete(std::unique_ptr<DeferredDeletable>(s));
  UpdateIdleTimer();
  if (drain_ && active_streams_ == 0 && !sending_ && !in_recv_) SendPending();
}

void Http2ServerConnection::Close(bool flush) {
  if (closed_) return;
  closed_ = true;
  stats_.downstream_cx_active.Dec();
  stats_.downstream_cx_http2_active.Dec();
  idle_timer_.Disable();
  if (duration_timer_) duration_timer_->Disable();
  // Every stream still open ends here; its handler hears the downstream went away.
  while (streams_) {
    Stream* s = streams_;
    nghttp2_session_set_stream_user_data(session_, s->id(), nullptr);
    s->OnClose(NGHTTP2_CANCEL);
    StreamClosed(s);
  }
  conn_->Close(flush ? Connection::CloseType::kFlushWrite : Connection::CloseType::kNoFlush, false);
  OnClosed();
}

// ---- Stream ----

void Http2ServerConnection::Stream::OnHeader(std::string_view name, std::string_view value) {
  if (header_overflow_) return;
  const HttpConfig& config = *parent_.config_;
  // HPACK's accounting (RFC 7541 4.1): what the client could make rpx hold.
  header_bytes_ += name.size() + value.size() + 32;
  if (header_bytes_ > config.max_request_headers_kb * 1024 ||
      head_.headers.size() >= config.max_headers_count) {
    header_overflow_ = true;  // what follows is dropped; the request gets a 431
    return;
  }
  if (!name.empty() && name[0] == ':') {
    if (name == ":method") {
      head_.method.assign(value);
    } else if (name == ":path") {
      head_.path.assign(value);
    } else if (name == ":authority") {
      head_.host.assign(value);
    } else if (name == ":protocol") {
      // nghttp2 lets it through only when rpx sent SETTINGS_ENABLE_CONNECT_PROTOCOL.
      protocol_.assign(value);
    }
    return;  // :scheme: rpx states the scheme itself (x-forwarded-proto)
  }
  if (config.headers_with_underscores != HttpConfig::Underscores::kAllow &&
      name.find('_') != std::string_view::npos) {
    if (config.headers_with_underscores == HttpConfig::Underscores::kDrop) {
      parent_.stats_.dropped_headers_with_underscores.Inc();
    } else {
      underscore_ = true;
    }
    return;
  }
  if (name == "cookie") {
    if (!cookies_.empty()) cookies_.append("; ");
    cookies_.append(value);
    return;
  }
  if (name == "host") {
    if (head_.host.empty()) head_.host.assign(value);
    return;  // :authority wins (RFC 9113 8.3.1); set below
  }
  if (name == "content-length") {
    uint64_t n = 0;
    bool ok = !value.empty() && value.size() <= 19;
    for (char ch : value) {
      if (ch < '0' || ch > '9') ok = false;
      n = n * 10 + static_cast<uint64_t>(ch - '0');
    }
    if (ok) {
      head_.has_content_length = true;
      head_.content_length = n;
    }
    return;  // the upstream request's framing is rpx's own
  }
  if (name == "expect") {
    if (EqualsIgnoreCase(value, "100-continue")) head_.expect_continue = true;
    return;
  }
  head_.headers.Add(name, value);
}

void Http2ServerConnection::Stream::CountResponseStart(int status) {
  response_started_ = true;
  parent_.stats_.CountStatus(status);
  info_.response_code = status;
}

void Http2ServerConnection::Stream::OnHeadersComplete(bool end_stream) {
  Http2ServerConnection& c = parent_;
  const HttpConfig& config = *c.config_;
  HttpStats& stats = c.stats_;
  request_complete_ = end_stream;
  head_.version_major = 2;
  head_.version_minor = 0;
  head_.keep_alive = true;
  if (!end_stream && !head_.has_content_length) head_.chunked = true;  // length known at its end
  if (end_stream) {
    head_.has_content_length = false;
    head_.content_length = 0;
  }
  if (!head_.host.empty()) head_.headers.Add("host", head_.host);
  if (!cookies_.empty()) {
    head_.headers.Add("cookie", cookies_);
    cookies_.clear();
  }
  response_no_body_ = head_.method == "HEAD";
  start_ms_ = conn_manager::StreamStarted(config, stats, c.conn_->dispatcher(), info_, end_stream);
  counted_active_ = true;
  idle_ms_ = config.stream_idle_timeout_ms;
  if (idle_ms_) idle_timer_.Enable(idle_ms_);
  if (header_overflow_) {
    stats.http2_header_overflow.Inc();
    info_.response_code_details = "header_overflow";
    SendLocalReply(431, "request header list too large\n", nullptr, "text/plain");
    return;
  }
  if (!protocol_.empty() && head_.method == "CONNECT") {
    // Extended CONNECT (RFC 8441; nghttp2 has checked :scheme and :path): handed to the router as
    // the HTTP/1.1 upgrade it stands for (RFC 8441 5), so routes and upgrade_configs decide
    // alike for both protocols, and an HTTP/1.1 upstream gets a request it can switch.
    extended_connect_ = true;
    head_.method = "GET";
    head_.upgrade = protocol_;
    head_.chunked = false;
    head_.has_content_length = false;
    head_.content_length = 0;
    if (EqualsIgnoreCase(protocol_, "websocket") && !head_.headers.Get("sec-websocket-key")) {
      // An HTTP/1.1 WebSocket server refuses a handshake without a key (RFC 6455 4.2.1), and
      // over HTTP/2 there is none (RFC 8441 5): rpx makes one; the upstream's accept value is
      // not passed back (it has no meaning over HTTP/2).
      head_.headers.Add("sec-websocket-key", RandomWebSocketKey());
    }
  }
  if (head_.path.empty() || (head_.method == "CONNECT" && !extended_connect_)) {
    // CONNECT (nghttp2 lets it through without :path): no TCP tunnels over h2.
    info_.response_code_details = "connect_not_supported";
    SendLocalReply(403, "CONNECT is not supported\n", nullptr, "text/plain");
    return;
  }
  if (underscore_) {
    // Envoy resets an h2 stream whose header names have underscores under REJECT_REQUEST.
    stats.requests_rejected_with_underscores_in_headers.Inc();
    info_.response_code_details = "http2.unexpected_underscore";
    ResetStream();
    return;
  }
  if (config.request_timeout_ms && !end_stream && !extended_connect_) {
    request_timer_ = c.conn_->dispatcher().CreateTimer([this] { OnRequestTimeout(); });
    request_timer_->Enable(config.request_timeout_ms);
  }
  if (config.max_stream_duration_ms) {
    duration_timer_ = c.conn_->dispatcher().CreateTimer([this] { OnMaxStreamDuration(); });
    duration_timer_->Enable(config.max_stream_duration_ms);
  }
  dispatched_ = true;
  handler_ = c.factory_.CreateStream(*this);
  // An upgrade request has no body (as on HTTP/1.1): what the client sends after its HEADERS is
  // the tunnel's, delivered once the handler switched protocols.
  handler_->OnRequestHeaders(head_, end_stream || extended_connect_);
}

void Http2ServerConnection::Stream::OnRequestData(const char* data, size_t len) {
  if (idle_ms_ && len) idle_timer_.Enable(idle_ms_);
  info_.bytes_received += len;
  if (!active() || closed_) {
    // Nobody reads it any more (answered already, or reset): keep the window open.
    nghttp2_session_consume(parent_.session_, id_, len);
    return;
  }
  if (Holding() || !held_.empty()) {
    held_.Append(data, len);
    return;
  }
  active()->OnRequestData(data, len, false);
  nghttp2_session_consume(parent_.session_, id_, len);
}

void Http2ServerConnection::Stream::OnTrailer(std::string_view name, std::string_view value) {
  if (trailer_overflow_) return;
  const HttpConfig& config = *parent_.config_;
  header_bytes_ += name.size() + value.size() + 32;  // counted with the head's, as Envoy does
  if (header_bytes_ > config.max_request_headers_kb * 1024 ||
      (request_trailers_ && request_trailers_->size() >= config.max_headers_count)) {
    trailer_overflow_ = true;
    request_trailers_.reset();
    return;
  }
  if (config.headers_with_underscores != HttpConfig::Underscores::kAllow &&
      name.find('_') != std::string_view::npos) {
    parent_.stats_.dropped_headers_with_underscores.Inc();
    return;
  }
  if (!request_trailers_) request_trailers_ = std::make_unique<HeaderMap>();
  request_trailers_->Add(name, value);
}

void Http2ServerConnection::Stream::OnRequestEnd() {
  if (request_complete_) return;
  request_complete_ = true;
  if (request_timer_) request_timer_->Disable();
  if (parent_.config_->record_durations) info_.request_end_ns = MonotonicNowNs();
  if (trailer_overflow_) {
    // Too large to pass on: the stream is reset (a response may have started already).
    parent_.stats_.http2_header_overflow.Inc();
    if (!response_started_) info_.response_code_details = "header_overflow";
    if (active()) active()->OnDownstreamReset();
    ResetStream();
    return;
  }
  if (!active()) return;
  if (Holding() || !held_.empty()) {
    request_end_held_ = true;
    return;
  }
  DeliverRequestEnd();
}

void Http2ServerConnection::Stream::DeliverRequestEnd() {
  if (tunnel_) {
    active()->OnRequestData(nullptr, 0, true);
    // As an HTTP/1.1 client's close ends its tunnel: the handler flushes what was sent to the
    // upstream, closes that side and says no more, so the stream ends with what is queued.
    if (!closed_ && !response_end_) {
      response_end_ = true;
      handler_done_ = true;
      nghttp2_session_resume_data(parent_.session_, id_);
      parent_.SendPending();
    }
    return;
  }
  if (request_trailers_) {
    active()->OnRequestTrailers(*request_trailers_);
  } else {
    active()->OnRequestData(nullptr, 0, true);
  }
}

void Http2ServerConnection::Stream::DeliverRequestData() {
  if (delivering_) return;
  delivering_ = true;
  while (active() && !Holding() && !held_.empty() && !closed_) {
    size_t n = held_.size();
    std::string chunk(held_.data(), n);  // the handler may re-enter and append to held_
    held_.Drain(n);
    held_.ReleaseIfEmpty();
    active()->OnRequestData(chunk.data(), n, false);
    if (!closed_) nghttp2_session_consume(parent_.session_, id_, n);
  }
  if (active() && !Holding() && held_.empty() && request_end_held_ && !closed_) {
    request_end_held_ = false;
    DeliverRequestEnd();
  }
  delivering_ = false;
  parent_.SendPending();  // WINDOW_UPDATEs
}

void Http2ServerConnection::Stream::ReadDisable(bool disable) {
  read_disabled_ = disable;
  if (!Holding() && (!held_.empty() || request_end_held_)) DeliverRequestData();
}

void Http2ServerConnection::Stream::SetStreamIdleTimeout(uint64_t ms) {
  idle_ms_ = ms;
  if (closed_) return;
  if (ms) {
    idle_timer_.Enable(ms);
  } else {
    idle_timer_.Disable();
  }
}

bool Http2ServerConnection::Stream::IsGrpc() const {
  auto ct = head_.headers.Get("content-type");
  return ct && ct->substr(0, 16) == "application/grpc";
}

void Http2ServerConnection::Stream::EncodeHeaders(ResponseHead& head, bool end_stream) {
  if (closed_ || response_started_) return;
  bool switched = head.status == 101 && extended_connect_;
  if (switched) {
    // The upgrade went through: over HTTP/2 that is a 200 to the extended CONNECT, and the
    // stream's DATA is the tunnel from now on (RFC 8441 5).
    head.status = 200;
    head.has_content_length = false;
    head.headers.Remove("sec-websocket-accept");
    tunnel_ = true;
    if (request_timer_) request_timer_->Disable();
    parent_.stats_.downstream_cx_upgrades_total.Inc();
    parent_.stats_.downstream_cx_upgrades_active.Inc();
  } else if (head.status < 200 || head.status == 101) {
    // A 101 without an extended CONNECT has nothing to switch on HTTP/2, and a 1xx is not an
    // answer.
    ResetStream();
    return;
  }
  Http2ServerConnection& c = parent_;
  const HttpConfig& config = *c.config_;
  CountResponseStart(head.status);
  if (config.record_response_headers)
    info_.response_headers = std::make_unique<HeaderMap>(head.headers);
  int code = head.status % 1000;  // >= 200 here
  char status[3] = {static_cast<char>('0' + code / 100), static_cast<char>('0' + code / 10 % 10),
                    static_cast<char>('0' + code % 10)};
  // nghttp2 copies the fields when the response is submitted: one array per thread serves every
  // response, so encoding one allocates nothing once it has grown.
  static thread_local std::vector<nghttp2_nv> nva;
  nva.clear();
  char length[24];
  nva.push_back(Nv(":status", std::string_view(status, 3)));
  bool write_server = config.server_header == HttpConfig::ServerHeader::kOverwrite;
  bool has_server = false;
  for (const auto& f : head.headers) {
    if (IsConnectionSpecific(f.name) || f.name == "content-length") continue;
    if (f.name == "server") {
      if (write_server) continue;
      has_server = true;
    }
    nva.push_back(Nv(f.name, f.value));
  }
  if (write_server ||
      (config.server_header == HttpConfig::ServerHeader::kAppendIfAbsent && !has_server)) {
    nva.push_back(Nv("server", config.server_name));
  }
  if (head.has_content_length && !(StatusHasNoBody(head.status) && head.status != 304)) {
    int n = snprintf(length, sizeof(length), "%llu",
                     static_cast<unsigned long long>(head.content_length));
    nva.push_back(Nv("content-length", std::string_view(length, n)));
  } else if (end_stream && !StatusHasNoBody(head.status) && !response_no_body_ &&
             !head.headers.Get("grpc-status")) {
    nva.push_back(Nv("content-length", "0"));
  }
  bool no_body = response_no_body_ || StatusHasNoBody(head.status);
  if (end_stream) handler_done_ = true;
  if (end_stream || no_body) {
    response_end_ = true;
    nghttp2_submit_response(c.session_, id_, nva.data(), nva.size(), nullptr);
  } else {
    nghttp2_data_provider provider;
    provider.source.ptr = this;
    provider.read_callback = Callbacks::ReadResponse;
    nghttp2_submit_response(c.session_, id_, nva.data(), nva.size(), &provider);
  }
  if (no_body && !end_stream) response_no_body_ = true;  // later body bytes are dropped
  c.SendPending();
  if (switched && (!held_.empty() || request_end_held_)) {
    // What the client sent after its CONNECT waited for the switch: delivered on the next loop
    // turn, outside the upstream's callbacks (as HTTP/1's ServerConnection::ResumeSoon does).
    deliver_timer_ = c.conn_->dispatcher().CreateTimer([this] { DeliverRequestData(); });
    deliver_timer_->Enable(0);
  }
}

void Http2ServerConnection::Stream::EncodeData(const char* data, size_t len, bool end_stream) {
  if (closed_ || response_end_) return;
  if (idle_ms_ && len) idle_timer_.Enable(idle_ms_);
  if (response_no_body_) {
    // HEAD, 204, 304: the response already ended with its headers.
    return;
  }
  info_.bytes_sent += len;
  response_.Append(data, len);
  if (end_stream) response_end_ = true;
  nghttp2_session_resume_data(parent_.session_, id_);
  if (end_stream) handler_done_ = true;  // the handler has said all it will
  if (!above_watermark_ && response_.size() > parent_.config_->buffer_limit && active()) {
    above_watermark_ = true;
    active()->OnDownstreamWatermark(true);
  }
  parent_.SendPending();
}

void Http2ServerConnection::Stream::EncodeTrailers(const HeaderMap& trailers) {
  if (closed_ || response_end_) return;
  if (response_no_body_) {
    // The response already ended with its headers: there is nowhere to put trailers.
    handler_done_ = true;
    return;
  }
  trailers_ = std::make_unique<HeaderMap>();
  for (const auto& f : trailers) {
    if (!IsConnectionSpecific(f.name) && !f.name.empty() && f.name[0] != ':') {
      trailers_->Add(f.name, f.value);
    }
  }
  if (trailers_->empty()) trailers_.reset();
  response_end_ = true;
  handler_done_ = true;
  nghttp2_session_resume_data(parent_.session_, id_);
  parent_.SendPending();
}

ssize_t Http2ServerConnection::Stream::ReadResponse(size_t max, uint32_t* flags) {
  size_t n = std::min(max, response_.size());
  if (n == 0 && !response_end_) return NGHTTP2_ERR_DEFERRED;
  if (n > 0) *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (response_end_ && n == response_.size()) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (trailers_) {
      EndWithTrailers(parent_.session_, id_, *trailers_, flags);
      trailers_.reset();
    }
  }
  return static_cast<ssize_t>(n);
}

void Http2ServerConnection::Stream::WriteResponse(Buffer& out, const uint8_t* framehd,
                                                  size_t length) {
  out.Append(reinterpret_cast<const char*>(framehd), 9);
  RPX_ASSERT(length <= response_.size());
  out.Append(response_.data(), length);
  response_.Drain(length);
  if (response_.empty()) response_.ReleaseIfEmpty();
  if (above_watermark_ && response_.size() < parent_.config_->buffer_limit / 2) {
    parent_.below_low_.push_back(id_);
  }
}

void Http2ServerConnection::Stream::Encode100Continue() {
  if (closed_ || response_started_) return;
  nghttp2_nv nv = Nv(":status", "100");
  nghttp2_submit_headers(parent_.session_, NGHTTP2_FLAG_NONE, id_, nullptr, &nv, 1, nullptr);
  parent_.SendPending();
}

namespace {
// Envoy's Grpc::Utility::httpToGrpcStatus.
int GrpcStatusFromHttp(int status) {
  switch (status) {
    case 400:
      return 13;  // INTERNAL
    case 401:
      return 16;  // UNAUTHENTICATED
    case 403:
      return 7;  // PERMISSION_DENIED
    case 404:
      return 12;  // UNIMPLEMENTED
    case 429:
    case 502:
    case 503:
    case 504:
      return 14;  // UNAVAILABLE
    default:
      return 2;  // UNKNOWN
  }
}

// grpc-message is percent-encoded (gRPC's PROTOCOL-HTTP2: printable ASCII but '%' as is).
std::string GrpcMessage(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::string out;
  static const char kHex[] = "0123456789ABCDEF";
  for (unsigned char ch : text) {
    if (ch >= 0x20 && ch <= 0x7e && ch != '%') {
      out.push_back(static_cast<char>(ch));
    } else {
      out.push_back('%');
      out.push_back(kHex[ch >> 4]);
      out.push_back(kHex[ch & 15]);
    }
  }
  return out;
}
}  // namespace

void Http2ServerConnection::Stream::SendLocalReply(int status, std::string_view body,
                                                   const HeaderMap* extra_headers,
                                                   std::string_view content_type) {
  if (closed_) return;
  if (response_started_) {
    ResetStream();
    return;
  }
  conn_manager::LocalReplyParts reply{status, body, content_type, extra_headers};
  conn_manager::PrepareLocalReply(*parent_.config_, Context(), info_, reply);
  status = reply.status;
  body = reply.body;
  content_type = reply.content_type;
  ResponseHead head;
  if (reply.headers) head.headers = *reply.headers;
  if (IsGrpc()) {
    // A gRPC client reads only grpc-status: a trailers-only response (HTTP 200) says what
    // happened (Envoy's sendLocalReply for gRPC requests).
    head.status = 200;
    head.headers.Set("content-type", "application/grpc");
    head.headers.Set("grpc-status",
                     std::to_string(grpc_status_ >= 0 ? grpc_status_ : GrpcStatusFromHttp(status)));
    std::string message = GrpcMessage(body);
    if (!message.empty()) head.headers.Set("grpc-message", message);
    EncodeHeaders(head, true);
    info_.response_code = status;  // logs show what rpx decided (as Envoy's do)
    return;
  }
  head.status = status;
  if (!body.empty()) head.headers.Add("content-type", content_type);
  head.has_content_length = true;
  head.content_length = body.size();
  EncodeHeaders(head, body.empty() || response_no_body_);
  if (!body.empty() && !response_no_body_ && !closed_) EncodeData(body.data(), body.size(), true);
}

void Http2ServerConnection::Stream::ReleaseHandler() { handler_done_ = true; }

void Http2ServerConnection::Stream::ResetStream() {
  if (closed_) return;
  ReleaseHandler();  // the handler gave up the stream: it hears nothing more of it
  response_end_ = true;
  nghttp2_submit_rst_stream(parent_.session_, NGHTTP2_FLAG_NONE, id_, NGHTTP2_INTERNAL_ERROR);
  parent_.SendPending();
}

void Http2ServerConnection::Stream::TimeOut(conn_manager::StreamTimeout timeout) {
  conn_manager::TimeoutReply reply = conn_manager::StreamTimedOut(timeout, parent_.stats_, info_);
  if (active()) active()->OnDownstreamReset();
  ReleaseHandler();
  if (!response_started_) {
    info_.response_code_details = reply.details;
    grpc_status_ = static_cast<int8_t>(reply.grpc_status);
    SendLocalReply(reply.status, reply.body, nullptr, "text/plain");
  } else {
    ResetStream();
  }
}

void Http2ServerConnection::Stream::OnIdleTimeout() {
  if (closed_) return;
  TimeOut(conn_manager::StreamTimeout::kIdle);
}

void Http2ServerConnection::Stream::OnRequestTimeout() {
  if (closed_ || request_complete_) return;
  TimeOut(conn_manager::StreamTimeout::kRequest);
}

void Http2ServerConnection::Stream::OnMaxStreamDuration() {
  if (closed_) return;
  TimeOut(conn_manager::StreamTimeout::kMaxDuration);
}

void Http2ServerConnection::Stream::SetMaxStreamDuration(uint64_t ms) {
  if (closed_) return;
  if (ms == 0) {
    if (duration_timer_) duration_timer_->Disable();
    return;
  }
  if (!duration_timer_) {
    duration_timer_ = parent_.conn_->dispatcher().CreateTimer([this] { OnMaxStreamDuration(); });
  }
  duration_timer_->Enable(ms);
}

void Http2ServerConnection::Stream::OnClose(uint32_t error_code) {
  if (closed_) return;
  closed_ = true;
  idle_timer_.Disable();
  if (request_timer_) request_timer_->Disable();
  if (duration_timer_) duration_timer_->Disable();
  if (deliver_timer_) deliver_timer_->Disable();
  HttpStats& stats = parent_.stats_;
  bool complete = response_end_ && response_.empty() && error_code == NGHTTP2_NO_ERROR;
  if (!complete && dispatched_) {
    if (active()) {
      stats.downstream_rq_rx_reset.Inc();
      info_.response_flags |= kDownstreamRemoteReset;
      if (!response_started_) info_.response_code_details = "downstream_remote_reset";
      active()->OnDownstreamReset();
    }
  }
  if (tunnel_) {
    tunnel_ = false;
    stats.downstream_cx_upgrades_active.Dec();
  }
  if (counted_active_) {
    conn_manager::StreamEnded(*parent_.config_, stats, parent_.conn_->dispatcher(), info_,
                              start_ms_, Context());
    counted_active_ = false;
  }
  if (handler_) parent_.conn_->dispatcher().DeferredDelete(std::move(handler_));
}

FormatContext Http2ServerConnection::Stream::Context() const {
  return conn_manager::Context(*parent_.config_, &head_, this);
}

std::string Http2ServerConnection::Stream::remote_ip() const { return parent_.peer_.Ip(); }

std::string Http2ServerConnection::Stream::local_address() const {
  SocketAddress a = parent_.conn_->LocalAddress();
  return a.len ? a.ToString() : "";
}

SocketAddress Http2ServerConnection::Stream::original_destination() const {
  return parent_.conn_->has_original_destination() ? parent_.conn_->LocalAddress()
                                                   : SocketAddress();
}

bool Http2ServerConnection::Stream::PeerCertificate(PeerCertificateInfo* out) const {
  return tls() && tls()->PeerCertificate(out);
}
bool Http2ServerConnection::Stream::peer_certificate_presented() const {
  return tls() && tls()->has_peer_certificate();
}
bool Http2ServerConnection::Stream::peer_certificate_validated() const {
  return tls() && tls()->peer_certificate_validated();
}
std::string Http2ServerConnection::Stream::requested_server_name() const {
  return tls() ? tls()->server_name() : "";
}
std::string Http2ServerConnection::Stream::tls_version() const {
  return tls() ? tls()->version() : "";
}
std::string Http2ServerConnection::Stream::tls_cipher() const {
  return tls() ? tls()->cipher() : "";
}

}  // namespace rpx
