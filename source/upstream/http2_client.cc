#include "source/upstream/http2_client.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "source/common/logger.h"
#include "source/http/nghttp2_fields.h"

namespace rpx {

namespace {

// Until the peer's SETTINGS say otherwise, nghttp2 lets a client open this many streams at once.
constexpr uint32_t kStreamsBeforeSettings = 100;

// Connection-specific fields (RFC 9113 8.2.2) never go out on HTTP/2; Host becomes :authority,
// and content-length is nghttp2's to state.
bool DroppedOnHttp2(std::string_view name) {
  return IsConnectionSpecific(name) || name == "host" || name == "content-length" ||
         (!name.empty() && name[0] == ':');
}

}  // namespace

class Http2Client::Stream : public UpstreamStream, public DeferredDeletable {
 public:
  explicit Stream(Http2Client& parent) : parent_(parent) {}

  // UpstreamStream
  void StartRequest(ResponseDecoder* decoder, const RequestHead& head) override;
  void SendData(const char* data, size_t len, bool end_stream) override;
  void SendTrailers(const HeaderMap& trailers) override;
  void Reset() override;
  void ReadDisable(bool disable) override;
  PoolClient& client() override { return parent_; }

  // From nghttp2's callbacks.
  void OnBeginHeaders(nghttp2_headers_category category);
  void OnHeader(std::string_view name, std::string_view value);
  void OnHeadersEnd(bool end_stream);
  void OnResponseData(const char* data, size_t len);
  void OnResponseEnd();
  void OnClose(uint32_t error_code);
  // The response ended: a request body still going out is not needed any more (RFC 9113 8.1).
  void StopSending();
  ssize_t ReadBody(uint8_t* buf, size_t max, uint32_t* flags);
  // The connection failed: the decoder hears it (once); the stream is not used again.
  void Fail(UpstreamResetReason reason, const std::string& detail);

  Stream* prev = nullptr;
  Stream* next = nullptr;
  int32_t id = -1;      // -1: not submitted (or submit failed)
  bool done = false;    // left the connection (StreamDone)
  std::string failure;  // why it could not start (FailLater)

 private:
  ResponseDecoder* TakeDecoder() {
    ResponseDecoder* d = decoder_;
    decoder_ = nullptr;
    return d;
  }

  Http2Client& parent_;
  ResponseDecoder* decoder_ = nullptr;
  ResponseHead head_;
  HeaderMap trailers_;
  std::unique_ptr<HeaderMap> request_trailers_;  // sent after the last of body_
  Buffer body_;                                  // request body not framed yet
  size_t unconsumed_ = 0;  // response bytes delivered while read-disabled: acknowledged later
  bool has_body_ = false;
  bool body_end_ = false;       // the router has given the last of the body
  bool request_sent_ = false;   // ... and it left in a frame with END_STREAM
  bool body_deferred_ = false;  // nghttp2 waits for body (resume it on SendData)
  bool headers_done_ = false;   // the final response head went to the decoder
  bool in_trailers_ = false;
  bool response_end_ = false;
  bool read_disabled_ = false;
  bool above_watermark_ = false;
};

struct Http2Client::Callbacks {
  static Stream* StreamOf(nghttp2_session* session, int32_t id) {
    return static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, id));
  }

  static ssize_t Send(nghttp2_session*, const uint8_t* data, size_t length, int, void* user) {
    auto* c = static_cast<Http2Client*>(user);
    if (c->closed_ || c->conn_->above_high_watermark()) return NGHTTP2_ERR_WOULDBLOCK;
    c->conn_->write_buffer().Append(reinterpret_cast<const char*>(data), length);
    c->conn_->ScheduleWrite();
    return static_cast<ssize_t>(length);
  }

  static ssize_t ReadBody(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                          nghttp2_data_source* source, void*) {
    return static_cast<Stream*>(source->ptr)->ReadBody(buf, length, flags);
  }

  static int OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void*) {
    if (Stream* s = StreamOf(session, frame->hd.stream_id)) s->OnBeginHeaders(frame->headers.cat);
    return 0;
  }

  static int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void*) {
    if (Stream* s = StreamOf(session, frame->hd.stream_id)) {
      s->OnHeader(std::string_view(reinterpret_cast<const char*>(name), namelen),
                  std::string_view(reinterpret_cast<const char*>(value), valuelen));
    }
    return 0;
  }

  static int OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    auto* c = static_cast<Http2Client*>(user);
    if (c->closed_) return 0;
    bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS:
        if (Stream* s = StreamOf(session, frame->hd.stream_id)) s->OnHeadersEnd(end);
        break;
      case NGHTTP2_DATA:
        if (end) {
          if (Stream* s = StreamOf(session, frame->hd.stream_id)) s->OnResponseEnd();
        }
        break;
      case NGHTTP2_SETTINGS:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK)) c->UpdateLimit();
        break;
      case NGHTTP2_GOAWAY:
        // Streams above its last id are refused by nghttp2 (they close with REFUSED_STREAM);
        // the ones below finish. No new stream goes here.
        c->pool_.stats().upstream_cx_close_notify.Inc();
        if (!c->closing_) {
          c->closing_ = true;
          c->pool_.OnClientChanged(c);
        }
        break;
      default:
        break;
    }
    return 0;
  }

  static int OnDataChunk(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                         size_t len, void* user) {
    auto* c = static_cast<Http2Client*>(user);
    Stream* s = StreamOf(session, id);
    if (s && !c->closed_) {
      s->OnResponseData(reinterpret_cast<const char*>(data), len);
    } else {
      nghttp2_session_consume(session, id, len);
    }
    return 0;
  }

  static int OnStreamClose(nghttp2_session* session, int32_t id, uint32_t error_code, void*) {
    if (Stream* s = StreamOf(session, id)) s->OnClose(error_code);
    return 0;
  }

  static nghttp2_session_callbacks* Get() {
    static nghttp2_session_callbacks* callbacks = [] {
      nghttp2_session_callbacks* cb;
      nghttp2_session_callbacks_new(&cb);
      nghttp2_session_callbacks_set_send_callback(cb, Send);
      nghttp2_session_callbacks_set_on_begin_headers_callback(cb, OnBeginHeaders);
      nghttp2_session_callbacks_set_on_header_callback(cb, OnHeader);
      nghttp2_session_callbacks_set_on_frame_recv_callback(cb, OnFrameRecv);
      nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, OnDataChunk);
      nghttp2_session_callbacks_set_on_stream_close_callback(cb, OnStreamClose);
      return cb;
    }();
    return callbacks;
  }
};

Http2Client::Http2Client(ConnPool& pool, std::unique_ptr<Connection> conn)
    : PoolClient(
          pool, std::move(conn),
          std::min(kStreamsBeforeSettings, pool.cluster().http2_options.max_concurrent_streams)) {
  conn_->SetCallbacks(this);
  const Http2Options& o = pool_.cluster().http2_options;
  nghttp2_option* opt;
  nghttp2_option_new(&opt);
  // Response DATA is acknowledged as the router takes it (Stream::OnResponseData).
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_peer_max_concurrent_streams(opt, limit_);
  nghttp2_option_set_max_outbound_ack(opt, o.max_outbound_control_frames);
  nghttp2_option_set_max_deflate_dynamic_table_size(opt, o.hpack_table_size);
  nghttp2_session_client_new2(&session_, Callbacks::Get(), this, opt);
  nghttp2_option_del(opt);
}

Http2Client::~Http2Client() {
  for (Stream* s = streams_; s;) {
    Stream* n = s->next;
    delete s;  // not handed to the dispatcher: only failed or pool-teardown streams remain
    s = n;
  }
  nghttp2_session_del(session_);
}

void Http2Client::Start() {
  if (started_) return;
  started_ = true;
  const Http2Options& o = pool_.cluster().http2_options;
  nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, o.initial_stream_window_size},
      {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, o.hpack_table_size},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings,
                          sizeof(settings) / sizeof(settings[0]));
  if (o.initial_connection_window_size > NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE) {
    nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                          static_cast<int32_t>(o.initial_connection_window_size));
  }
  SendPending();
}

UpstreamStream& Http2Client::NewStream() {
  auto* s = new Stream(*this);
  s->next = streams_;
  if (streams_) streams_->prev = s;
  streams_ = s;
  return *s;
}

void Http2Client::StreamDone(Stream* s) {
  RPX_ASSERT(!s->done);
  s->done = true;
  if (s->prev) {
    s->prev->next = s->next;
  } else {
    streams_ = s->next;
  }
  if (s->next) s->next->prev = s->prev;
  s->prev = s->next = nullptr;
  pool_.dispatcher().DeferredDelete(std::unique_ptr<DeferredDeletable>(s));
  pool_.OnStreamDone(this, true);
}

void Http2Client::FailLater(Stream* s) {
  failed_.push_back(s);
  timer_->Enable(0);
}

void Http2Client::OnTimer() {
  std::vector<Stream*> failed;
  failed.swap(failed_);
  for (Stream* s : failed) {
    s->Fail(UpstreamResetReason::kProtocolError, s->failure);
    if (!s->done) StreamDone(s);
  }
}

void Http2Client::UpdateLimit() {
  uint32_t peer =
      nghttp2_session_get_remote_settings(session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  uint32_t limit = std::min(peer, pool_.cluster().http2_options.max_concurrent_streams);
  if (limit == 0) {
    // The peer takes no stream at all now: treat it as a GOAWAY.
    closing_ = true;
  } else {
    limit_ = limit;
  }
  pool_.OnClientChanged(this);
}

void Http2Client::SendPending() {
  if (closed_ || !started_) return;
  if (in_recv_ || sending_) {
    send_wanted_ = true;
    return;
  }
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
    Terminate(UpstreamResetReason::kProtocolError,
              absl::StrCat("HTTP/2 to the upstream failed: ", nghttp2_strerror(rv)));
  }
}

void Http2Client::OnData(Buffer& in) {
  if (closed_) {
    in.Clear();
    return;
  }
  in_recv_ = true;
  ssize_t rv =
      nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(in.data()), in.size());
  in_recv_ = false;
  if (closed_) return;
  if (rv < 0) {
    in.Clear();
    pool_.stats().upstream_cx_protocol_error.Inc();
    Terminate(UpstreamResetReason::kProtocolError,
              absl::StrCat("upstream sent invalid HTTP/2 (", nghttp2_strerror(static_cast<int>(rv)),
                           ")"));
    return;
  }
  in.Drain(static_cast<size_t>(rv));
  SendPending();
  if (!closed_ && !nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) {
    // GOAWAY both ways and nothing left open.
    Terminate(UpstreamResetReason::kConnectionClosed, "upstream ended the HTTP/2 connection");
  }
}

void Http2Client::OnEvent(ConnectionEvent event) {
  switch (event) {
    case ConnectionEvent::kConnected:
      timer_->Disable();
      if (!conn_->plaintext()) pool_.OnTlsConnected(static_cast<TlsTransport&>(conn_->transport()));
      Start();
      pool_.OnConnected(this);
      return;
    case ConnectionEvent::kConnectFailed:
      ConnectFailed();
      return;
    case ConnectionEvent::kRemoteClose:
    case ConnectionEvent::kLocalClose:
      if (closed_) return;
      if (state() == State::kConnecting) {
        closed_ = true;
        timer_->Disable();
        pool_.OnConnectFailed(this, PoolFailure::kConnectFailure, "connection closed");
        return;
      }
      if (state() == State::kIdle) pool_.CountRemoteDestroy();
      Terminate(UpstreamResetReason::kConnectionClosed,
                "upstream closed the HTTP/2 connection with the stream open");
      return;
  }
}

void Http2Client::OnBelowWriteLowWatermark() { SendPending(); }

void Http2Client::Terminate(UpstreamResetReason reason, const std::string& detail) {
  if (closed_) return;
  if (streams_) pool_.CountRemoteDestroy();
  // No more streams here; the open ones end first (the pool counts them down), then the socket.
  closing_ = true;
  conn_->Close(Connection::CloseType::kNoFlush, false);
  while (streams_) {
    Stream* s = streams_;
    s->Fail(reason, detail);
    if (!s->done) StreamDone(s);
  }
  closed_ = true;
  failed_.clear();
  pool_.OnClientClosed(this);
}

void Http2Client::CloseIdle() {
  if (closed_) return;
  nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
  SendPending();
  conn_->Close(Connection::CloseType::kFlushWrite, false);
}

// --- Stream ---

void Http2Client::Stream::StartRequest(ResponseDecoder* decoder, const RequestHead& head) {
  decoder_ = decoder;
  if (!head.upgrade.empty()) {
    // An HTTP/1 upgrade has no HTTP/2 form (extended CONNECT is not offered).
    failure = "an upgrade (" + head.upgrade + ") cannot go to an HTTP/2 upstream";
    parent_.FailLater(this);
    return;
  }
  std::vector<nghttp2_nv> nva;
  nva.reserve(head.headers.size() + 5);
  nva.push_back(Nv(":method", head.method));
  nva.push_back(Nv(":scheme", parent_.conn_->plaintext() ? "http" : "https"));
  std::string_view authority = head.host;
  std::string address;
  if (authority.empty()) {
    address = parent_.host().address.ToString();
    authority = address;
  }
  nva.push_back(Nv(":authority", authority));
  nva.push_back(Nv(":path", head.path.empty() ? std::string_view("/") : head.path));
  char length[24];
  if (head.has_content_length) {
    auto r = std::to_chars(length, length + sizeof(length), head.content_length);
    nva.push_back(Nv("content-length", std::string_view(length, r.ptr - length)));
  }
  for (HeaderMap::Field f : head.headers) {
    if (DroppedOnHttp2(f.name)) continue;
    if (f.name == "te" && f.value != "trailers") continue;  // the only TE HTTP/2 allows
    nva.push_back(Nv(f.name, f.value));
  }
  has_body_ = head.has_body();
  nghttp2_data_provider provider;
  provider.source.ptr = this;
  provider.read_callback = Callbacks::ReadBody;
  int32_t rv = nghttp2_submit_request(parent_.session_, nullptr, nva.data(), nva.size(),
                                      has_body_ ? &provider : nullptr, this);
  if (rv < 0) {
    parent_.closing_ = true;  // e.g. stream ids used up: a fresh connection takes the next ones
    failure = std::string("the HTTP/2 connection cannot take the request: ") + nghttp2_strerror(rv);
    parent_.FailLater(this);
    return;
  }
  id = rv;
  request_sent_ = !has_body_;
  parent_.SendPending();
}

void Http2Client::Stream::SendData(const char* data, size_t len, bool end_stream) {
  if (decoder_ == nullptr || id < 0 || !has_body_ || body_end_) return;
  body_.Append(data, len);
  if (end_stream) body_end_ = true;
  if (body_deferred_) {
    body_deferred_ = false;
    nghttp2_session_resume_data(parent_.session_, id);
  }
  if (!above_watermark_ && body_.size() > parent_.pool_.cluster().buffer_limit) {
    above_watermark_ = true;
    decoder_->OnUpstreamWriteWatermark(true);
  }
  parent_.SendPending();
}

void Http2Client::Stream::SendTrailers(const HeaderMap& trailers) {
  if (decoder_ == nullptr || id < 0 || !has_body_ || body_end_) return;
  auto kept = std::make_unique<HeaderMap>();
  for (const auto& f : trailers) {
    if (!DroppedOnHttp2(f.name)) kept->Add(f.name, f.value);
  }
  if (!kept->empty()) request_trailers_ = std::move(kept);
  SendData(nullptr, 0, true);
}

ssize_t Http2Client::Stream::ReadBody(uint8_t* buf, size_t max, uint32_t* flags) {
  size_t n = std::min(max, body_.size());
  if (n == 0 && !body_end_) {
    body_deferred_ = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  if (n) {
    memcpy(buf, body_.data(), n);
    body_.Drain(n);
  }
  if (body_end_ && body_.empty()) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    request_sent_ = true;
    body_.ReleaseIfEmpty();
    if (request_trailers_) {
      EndWithTrailers(parent_.session_, id, *request_trailers_, flags);
      request_trailers_.reset();
    }
  }
  if (above_watermark_ && body_.size() < parent_.pool_.cluster().buffer_limit / 2) {
    above_watermark_ = false;
    if (decoder_) decoder_->OnUpstreamWriteWatermark(false);
  }
  return static_cast<ssize_t>(n);
}

void Http2Client::Stream::Reset() {
  if (decoder_ == nullptr) return;
  decoder_ = nullptr;
  parent_.pool_.stats().upstream_rq_reset.Inc();
  if (id < 0 || done) return;  // a failed stream: the timer ends it
  if (!parent_.closed_) {
    nghttp2_submit_rst_stream(parent_.session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    // What it had delivered but not acknowledged no longer waits for the router.
    if (unconsumed_) nghttp2_session_consume(parent_.session_, id, unconsumed_);
    unconsumed_ = 0;
    parent_.SendPending();
  }
}

void Http2Client::Stream::ReadDisable(bool disable) {
  read_disabled_ = disable;
  if (!disable && unconsumed_ && id > 0 && !done && !parent_.closed_) {
    nghttp2_session_consume(parent_.session_, id, unconsumed_);
    unconsumed_ = 0;
    parent_.SendPending();
  }
}

void Http2Client::Stream::OnBeginHeaders(nghttp2_headers_category category) {
  if (headers_done_) {
    in_trailers_ = true;
    trailers_.Clear();
  } else {
    head_.Clear();
  }
}

void Http2Client::Stream::OnHeader(std::string_view name, std::string_view value) {
  if (in_trailers_) {
    trailers_.Add(name, value);
    return;
  }
  if (name == ":status") {
    int status = 0;
    std::from_chars(value.data(), value.data() + value.size(), status);
    head_.status = status;
    return;
  }
  if (!name.empty() && name[0] == ':') return;
  if (name == "content-length") {
    uint64_t n = 0;
    std::from_chars(value.data(), value.data() + value.size(), n);
    head_.has_content_length = true;
    head_.content_length = n;
  }
  head_.headers.Add(name, value);
}

void Http2Client::Stream::OnHeadersEnd(bool end_stream) {
  if (in_trailers_) {
    response_end_ = true;
    StopSending();
    if (ResponseDecoder* d = TakeDecoder()) d->OnResponseTrailers(trailers_);
    return;
  }
  if (head_.status >= 100 && head_.status < 200) return;  // interim: the final head follows
  headers_done_ = true;
  // Without a Content-Length, an HTTP/1 client learns the end from chunked framing.
  head_.chunked = !end_stream && !head_.has_content_length;
  head_.keep_alive = true;
  if (end_stream) {
    response_end_ = true;
    StopSending();
  }
  if (decoder_) decoder_->OnResponseHeaders(head_, end_stream);
  if (end_stream) decoder_ = nullptr;
}

void Http2Client::Stream::OnResponseData(const char* data, size_t len) {
  if (decoder_ == nullptr) {
    nghttp2_session_consume(parent_.session_, id, len);
    return;
  }
  if (read_disabled_) {
    unconsumed_ += len;
  } else {
    nghttp2_session_consume(parent_.session_, id, len);
  }
  decoder_->OnResponseData(data, len, false);
}

void Http2Client::Stream::StopSending() {
  if (!request_sent_ && id > 0 && !parent_.closed_) {
    nghttp2_submit_rst_stream(parent_.session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    parent_.SendPending();
  }
}

void Http2Client::Stream::OnResponseEnd() {
  response_end_ = true;
  StopSending();
  if (ResponseDecoder* d = TakeDecoder()) d->OnResponseData(nullptr, 0, true);
}

void Http2Client::Stream::OnClose(uint32_t error_code) {
  if (done) return;
  if (response_end_ || decoder_ == nullptr) {
    parent_.StreamDone(this);
    return;
  }
  UpstreamResetReason reason = UpstreamResetReason::kConnectionClosed;
  std::string detail;
  if (error_code == NGHTTP2_REFUSED_STREAM) {
    reason = UpstreamResetReason::kRefusedStream;
    detail = "upstream refused the stream (REFUSED_STREAM)";
  } else {
    if (error_code == NGHTTP2_PROTOCOL_ERROR) reason = UpstreamResetReason::kProtocolError;
    detail = absl::StrCat("upstream reset the stream (", nghttp2_http2_strerror(error_code), ")");
  }
  ResponseDecoder* d = TakeDecoder();
  parent_.StreamDone(this);
  d->OnUpstreamReset(reason, detail);
}

void Http2Client::Stream::Fail(UpstreamResetReason reason, const std::string& detail) {
  if (ResponseDecoder* d = TakeDecoder()) {
    if (!done) parent_.StreamDone(this);
    d->OnUpstreamReset(reason, detail);
  }
}

}  // namespace rpx
