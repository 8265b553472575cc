// Http2ServerConnection against an nghttp2 client session in the same process, over a socketpair:
// what the flow-control and lifecycle contracts promise, step by step (the integration tests and
// test/regression/h2 drive the real binary with real clients; the fuzz target throws frames at it).
#include "source/http/http2_server_connection.h"

#include <nghttp2/nghttp2.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "source/event/dispatcher.h"

namespace rpx {
namespace {

// The handler side: records what it was told, answers as the test says.
class TestHandler : public StreamHandler {
 public:
  explicit TestHandler(ResponseEncoder& enc) : enc(enc) {}
  ~TestHandler() override {
    if (destroyed) *destroyed = true;
  }
  void OnRequestHeaders(RequestHead& head, bool end_stream) override {
    path = head.path;
    method = head.method;
    upgrade = head.upgrade;
    if (auto key = head.headers.Get("sec-websocket-key")) websocket_key = std::string(*key);
    request_ended = end_stream;
    if (on_headers) on_headers(*this);
  }
  void OnRequestData(const char*, size_t len, bool end_stream) override {
    EXPECT_FALSE(response_ended) << "request data after the handler ended the response";
    body_bytes += len;
    if (body_total) *body_total += len;
    if (end_stream) request_ended = true;
    if (end_stream && ended_count) ++*ended_count;
    if (end_stream && on_request_end) on_request_end(*this);
  }
  void OnRequestTrailers(HeaderMap& t) override {
    for (const auto& f : t) trailers += std::string(f.name) + ": " + std::string(f.value) + "\n";
    if (trailers_seen) *trailers_seen = trailers;
    OnRequestData(nullptr, 0, true);
  }
  void OnDownstreamReset() override {
    resets++;
    if (reset_count) ++*reset_count;
  }
  void OnDownstreamWatermark(bool above) override { (above ? above_calls : below_calls)++; }

  void Respond(size_t body, bool end = true) {
    ResponseHead h;
    h.status = 200;
    h.has_content_length = true;
    h.content_length = body;
    enc.EncodeHeaders(h, body == 0);
    if (body) {
      std::string data(body, 'r');
      response_ended = end;
      enc.EncodeData(data.data(), data.size(), end);
    }
  }

  ResponseEncoder& enc;
  std::string path, method, upgrade, websocket_key;
  size_t body_bytes = 0;
  bool request_ended = false;
  bool response_ended = false;
  int resets = 0, above_calls = 0, below_calls = 0;
  bool* destroyed = nullptr;
  int* reset_count = nullptr;
  size_t* body_total = nullptr;  // the factory's: readable after the handler is gone
  int* ended_count = nullptr;
  std::string trailers;                  // "name: value\n" each
  std::string* trailers_seen = nullptr;  // the factory's copy
  std::function<void(TestHandler&)> on_headers, on_request_end;
};

class Factory : public StreamHandlerFactory {
 public:
  std::unique_ptr<StreamHandler> CreateStream(ResponseEncoder& enc) override {
    auto h = std::make_unique<TestHandler>(enc);
    h->destroyed = &destroyed;
    h->reset_count = &resets;
    h->body_total = &body_bytes;
    h->ended_count = &requests_ended;
    h->trailers_seen = &trailers;
    h->on_headers = on_headers;
    h->on_request_end = on_request_end;
    last = h.get();
    ++created;
    return h;
  }
  TestHandler* last = nullptr;
  int created = 0;
  int resets = 0;          // OnDownstreamReset calls, over every handler
  size_t body_bytes = 0;   // request body bytes handed to any handler
  int requests_ended = 0;  // requests whose end reached their handler
  std::string trailers;    // the last request trailers a handler got
  bool destroyed = false;
  std::function<void(TestHandler&)> on_headers, on_request_end;
};

class ServerUnderTest : public Http2ServerConnection {
 public:
  using Http2ServerConnection::Http2ServerConnection;
  bool closed = false;

 private:
  void OnClosed() override { closed = true; }
};

// A client session on the other end of the socketpair, pumped by hand.
struct Client {
  nghttp2_session* session = nullptr;
  int fd = -1;
  bool read = true;  // false: leaves rpx's bytes in the socket
  struct Stream {
    int status = 0;
    size_t data = 0;
    bool ended = false;
    uint32_t reset = UINT32_MAX;
  };
  std::map<int32_t, Stream> streams;
  int32_t goaway_last = -1;
  uint32_t goaway_error = UINT32_MAX;
  std::string upload;  // request body still to send (one stream at a time)
  size_t upload_off = 0;
  std::string upload_trailer;  // non-empty: the upload ends with trailers x-trailer: this
  bool upload_open = false;    // the upload's last DATA does not end the stream

  static int OnHeader(nghttp2_session*, const nghttp2_frame* f, const uint8_t* n, size_t nl,
                      const uint8_t* v, size_t vl, uint8_t, void* u) {
    auto* c = static_cast<Client*>(u);
    if (std::string(reinterpret_cast<const char*>(n), nl) == ":status") {
      c->streams[f->hd.stream_id].status =
          std::stoi(std::string(reinterpret_cast<const char*>(v), vl));
    }
    return 0;
  }
  static int OnData(nghttp2_session*, uint8_t, int32_t id, const uint8_t*, size_t len, void* u) {
    static_cast<Client*>(u)->streams[id].data += len;
    return 0;
  }
  static int OnFrame(nghttp2_session*, const nghttp2_frame* f, void* u) {
    auto* c = static_cast<Client*>(u);
    if (f->hd.type == NGHTTP2_GOAWAY) {
      c->goaway_last = f->goaway.last_stream_id;
      c->goaway_error = f->goaway.error_code;
    }
    if ((f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
      c->streams[f->hd.stream_id].ended = true;
    }
    return 0;
  }
  static int OnClose(nghttp2_session*, int32_t id, uint32_t err, void* u) {
    if (err != NGHTTP2_NO_ERROR) static_cast<Client*>(u)->streams[id].reset = err;
    return 0;
  }
  static ssize_t ReadUpload(nghttp2_session* s, int32_t id, uint8_t* buf, size_t len,
                            uint32_t* flags, nghttp2_data_source*, void* u) {
    auto* c = static_cast<Client*>(u);
    size_t n = std::min(len, c->upload.size() - c->upload_off);
    memcpy(buf, c->upload.data() + c->upload_off, n);
    c->upload_off += n;
    if (c->upload_off == c->upload.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (c->upload_open) *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      if (!c->upload_trailer.empty()) {  // nghttp2's rule: submitted from here
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        nghttp2_nv t[] = {{(uint8_t*)"x-trailer", (uint8_t*)c->upload_trailer.data(), 9,
                           c->upload_trailer.size(), 0}};
        nghttp2_submit_trailer(s, id, t, 1);
      }
    }
    return static_cast<ssize_t>(n);
  }

  explicit Client(int fd, uint32_t window) : fd(fd) {
    nghttp2_session_callbacks* cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, OnHeader);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, OnData);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, OnFrame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, OnClose);
    nghttp2_option* opt;
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, 1);  // the test opens the windows
    nghttp2_session_client_new2(&session, cb, this, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry s[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window}};
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, s, 1);
  }
  ~Client() { nghttp2_session_del(session); }

  // RFC 8441's extended CONNECT for `protocol`, with `body` sent right after it (the stream stays
  // open).
  int32_t Connect(const std::string& path, const std::string& protocol, const std::string& body) {
    return Submit("CONNECT", path, &protocol, body, /*open=*/true);
  }
  int32_t Request(const std::string& path, const std::string& body = "") {
    return Submit(body.empty() ? "GET" : "POST", path, nullptr, body, /*open=*/false);
  }
  int32_t Submit(const std::string& method, const std::string& path, const std::string* protocol,
                 const std::string& body, bool open) {
    auto nv = [](const char* n, const std::string& v) {
      return nghttp2_nv{(uint8_t*)n, (uint8_t*)v.data(), strlen(n), v.size(), 0};
    };
    static const std::string http = "http", test = "test";
    std::vector<nghttp2_nv> nva = {nv(":method", method), nv(":path", path), nv(":scheme", http),
                                   nv(":authority", test)};
    if (protocol) nva.push_back(nv(":protocol", *protocol));
    nghttp2_data_provider p;
    p.read_callback = ReadUpload;
    upload = body;
    upload_off = 0;
    upload_open = open;
    return nghttp2_submit_request(session, nullptr, nva.data(), nva.size(),
                                  body.empty() && !open ? nullptr : &p, nullptr);
  }
  // Consumes what the client received so far (opens its windows by that much).
  void Consume() {
    for (auto& [id, s] : streams) {
      int32_t unconsumed = nghttp2_session_get_stream_effective_recv_data_length(session, id);
      if (unconsumed > 0) nghttp2_session_consume(session, id, unconsumed);
    }
  }
  void Pump() {
    const uint8_t* out;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(session, &out)) > 0) {
      ASSERT_EQ(write(fd, out, n), n);
    }
    if (!read) return;
    char buf[65536];
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) {
      ASSERT_GE(nghttp2_session_mem_recv(session, reinterpret_cast<uint8_t*>(buf), n), 0);
    }
    while ((n = nghttp2_session_mem_send(session, &out)) > 0) {
      ASSERT_EQ(write(fd, out, n), n);
    }
  }
};

class Http2ServerConnectionTest : public ::testing::Test {
 protected:
  void Start(std::function<void(HttpConfig&)> tune = nullptr, uint32_t client_window = 65535) {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds_), 0);
    auto config = std::make_shared<HttpConfig>();
    if (tune) tune(*config);
    auto conn = std::make_unique<Connection>(dispatcher_, fds_[0], false, config->buffer_limit);
    server_ = new ServerUnderTest(std::move(conn), config, stats_, factory_,
                                  *SocketAddress::FromIpPort("127.0.0.1", 40000), false);
    server_->Start();
    client_ = std::make_unique<Client>(fds_[1], client_window);  // sends the preface itself
    Turn(3);
  }
  void TearDown() override {
    client_.reset();
    if (fds_[1] >= 0) close(fds_[1]);
    if (server_) {
      for (int i = 0; i < 5 && !server_->closed; ++i) Turn();
      if (!server_->closed) server_->CloseNow();
      dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(server_));
      Turn();
    }
    EXPECT_EQ(stats_.downstream_cx_active.Value(), 0);
    EXPECT_EQ(stats_.downstream_rq_active.Value(), 0);
  }
  // Loop passes that never block, with the client pumped between them.
  void Turn(int n = 1) {
    for (int i = 0; i < n; ++i) {
      if (client_) client_->Pump();
      dispatcher_.Post([] {});
      bool ran = false;
      dispatcher_.RunUntil(
          [&ran] {
            bool r = ran;
            ran = true;
            return r;
          },
          100);
      if (client_) client_->Pump();
    }
  }

  Dispatcher dispatcher_{"test"};
  HttpStats stats_;
  Factory factory_;
  ServerUnderTest* server_ = nullptr;
  std::unique_ptr<Client> client_;
  int fds_[2] = {-1, -1};
};

TEST_F(Http2ServerConnectionTest, ARequestReachesTheHandlerAndItsResponseTheClient) {
  Start();
  factory_.on_headers = [](TestHandler& h) { h.Respond(5); };
  int32_t id = client_->Request("/hello");
  Turn(4);
  ASSERT_EQ(factory_.created, 1);
  EXPECT_EQ(client_->streams[id].status, 200);
  EXPECT_EQ(client_->streams[id].data, 5u);
  EXPECT_TRUE(client_->streams[id].ended);
  EXPECT_TRUE(factory_.destroyed);  // deleted once the stream closed
  EXPECT_EQ(stats_.downstream_rq_2xx.Value(), 1);
}

TEST_F(Http2ServerConnectionTest, RequestTrailersEndTheRequestAtTheHandler) {
  Start();
  factory_.on_request_end = [](TestHandler& h) { h.Respond(2); };
  client_->upload_trailer = "t1";
  int32_t id = client_->Request("/upload", "body");
  Turn(6);
  ASSERT_EQ(factory_.created, 1);
  EXPECT_EQ(factory_.body_bytes, 4u);
  EXPECT_EQ(factory_.requests_ended, 1);
  EXPECT_EQ(factory_.trailers, "x-trailer: t1\n");
  EXPECT_EQ(client_->streams[id].status, 200);
}

TEST_F(Http2ServerConnectionTest, ARequestBodyIsHeldWithItsWindowShutWhileTheHandlerCannotRead) {
  Start([](HttpConfig& c) { c.http2.initial_stream_window_size = 65535; });
  factory_.on_headers = [](TestHandler& h) { h.enc.ReadDisable(true); };
  factory_.on_request_end = [](TestHandler& h) { h.Respond(2); };
  int32_t id = client_->Request("/upload", std::string(200000, 'u'));
  Turn(10);
  ASSERT_NE(factory_.last, nullptr);
  // Nothing was handed over, and the client could not send past its window: rpx holds at most
  // one window of it.
  EXPECT_EQ(factory_.body_bytes, 0u);
  EXPECT_LE(client_->upload_off, 65535u);
  factory_.last->enc.ReadDisable(false);  // (the handler is deleted once its stream closes)
  Turn(20);
  EXPECT_EQ(factory_.body_bytes, 200000u);
  EXPECT_EQ(factory_.requests_ended, 1);
  EXPECT_EQ(client_->streams[id].status, 200);
  EXPECT_TRUE(client_->streams[id].ended);
}

TEST_F(Http2ServerConnectionTest, AResponseTheClientCannotTakeStopsTheHandlerThenResumesIt) {
  Start([](HttpConfig& c) { c.buffer_limit = 64 * 1024; }, /*client_window=*/65535);
  factory_.on_headers = [](TestHandler& h) { h.Respond(512 * 1024, /*end=*/false); };
  int32_t id = client_->Request("/big");
  Turn(10);
  TestHandler* h = factory_.last;
  ASSERT_NE(h, nullptr);
  // The client's window (64 KiB) let only part out; the rest waits on the stream, over the
  // buffer limit: the handler was told to stop reading its upstream.
  EXPECT_LE(client_->streams[id].data, 65535u);
  EXPECT_EQ(h->above_calls, 1);
  EXPECT_EQ(h->below_calls, 0);
  // The client reads on (opens its windows as it consumes): the stream drains, the handler may
  // read again.
  for (int i = 0; i < 40 && client_->streams[id].data < 512 * 1024; ++i) {
    client_->Consume();
    Turn();
  }
  EXPECT_EQ(client_->streams[id].data, 512u * 1024);
  EXPECT_EQ(h->below_calls, 1);
  std::string last(3, 'z');
  h->response_ended = true;
  h->enc.EncodeData(last.data(), 0, true);
  Turn(3);
  EXPECT_TRUE(client_->streams[id].ended);
}

TEST_F(Http2ServerConnectionTest, DrainSendsGoawayWithTheLastStreamAndLetsItFinish) {
  Start();
  int32_t id = client_->Request("/slow");
  Turn(3);
  ASSERT_NE(factory_.last, nullptr);
  server_->CloseWhenIdle();
  Turn(3);
  EXPECT_EQ(client_->goaway_error, static_cast<uint32_t>(NGHTTP2_NO_ERROR));
  EXPECT_EQ(client_->goaway_last, id);
  EXPECT_FALSE(server_->closed);  // the stream is still open
  factory_.last->Respond(3);
  Turn(3);
  EXPECT_EQ(client_->streams[id].status, 200);
  EXPECT_TRUE(client_->streams[id].ended);
  EXPECT_TRUE(server_->closed);  // nothing left in flight
}

TEST_F(Http2ServerConnectionTest, AClientResetReachesTheHandlerOnceAndItIsDeleted) {
  Start();
  int32_t id = client_->Request("/reset-me");
  Turn(3);
  ASSERT_NE(factory_.last, nullptr);
  EXPECT_EQ(factory_.resets, 0);
  nghttp2_submit_rst_stream(client_->session, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  Turn(3);
  EXPECT_EQ(factory_.resets, 1);
  EXPECT_TRUE(factory_.destroyed);
  EXPECT_EQ(stats_.http2_rx_reset.Value(), 1);
  EXPECT_EQ(stats_.downstream_rq_rx_reset.Value(), 1);
}

TEST_F(Http2ServerConnectionTest, AHandlerThatEndedItsResponseHearsNothingMore) {
  Start();
  // Answers at the head, before the request body: the rest of the body is not its business.
  factory_.on_headers = [](TestHandler& h) { h.Respond(2); };
  int32_t id = client_->Request("/early", std::string(1000, 'b'));
  Turn(6);
  ASSERT_NE(factory_.last, nullptr);
  EXPECT_EQ(client_->streams[id].status, 200);
  EXPECT_TRUE(factory_.destroyed);
  EXPECT_EQ(factory_.resets, 0);
}

TEST_F(Http2ServerConnectionTest, AnExtendedConnectIsAnUpgradeWhoseDataWaitsForTheSwitch) {
  Start([](HttpConfig& c) { c.http2.allow_connect = true; });
  int32_t id = client_->Connect("/ws", "websocket", "early");
  Turn(4);
  ASSERT_NE(factory_.last, nullptr);
  TestHandler& h = *factory_.last;
  // The router sees the HTTP/1.1 upgrade it knows, with no body, and a key for the upstream.
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.upgrade, "websocket");
  EXPECT_EQ(h.path, "/ws");
  EXPECT_TRUE(h.request_ended);
  EXPECT_EQ(h.websocket_key.size(), 24u);  // 16 bytes, base64
  EXPECT_EQ(h.body_bytes, 0u);             // the tunnel's first bytes wait for the switch
  ResponseHead head;
  head.status = 101;
  head.headers.Add("upgrade", "websocket");
  head.headers.Add("connection", "upgrade");
  head.headers.Add("sec-websocket-accept", "x");
  h.enc.EncodeHeaders(head, false);
  Turn(3);
  EXPECT_EQ(client_->streams[id].status, 200);
  EXPECT_FALSE(client_->streams[id].ended);
  EXPECT_EQ(h.body_bytes, 5u);
  EXPECT_EQ(stats_.downstream_cx_upgrades_total.Value(), 1);
  EXPECT_EQ(stats_.downstream_cx_upgrades_active.Value(), 1);
  h.enc.EncodeData("pong", 4, false);
  Turn(2);
  EXPECT_EQ(client_->streams[id].data, 4u);
  h.response_ended = true;
  h.enc.EncodeData(nullptr, 0, true);  // the upstream closed: the stream ends
  Turn(3);
  EXPECT_TRUE(client_->streams[id].ended);
  EXPECT_EQ(stats_.downstream_cx_upgrades_active.Value(), 0);
}

TEST_F(Http2ServerConnectionTest, WithoutAllowConnectAnExtendedConnectIsMalformed) {
  Start();
  client_->Connect("/ws", "websocket", "");
  Turn(4);
  EXPECT_EQ(factory_.created, 0);
  EXPECT_EQ(client_->goaway_error, static_cast<uint32_t>(NGHTTP2_PROTOCOL_ERROR));
}

}  // namespace
}  // namespace rpx
