// Http2Client through its ConnPool against an in-process nghttp2 server (a thread per
// connection): multiplexing, the stream limit from the peer's SETTINGS and from
// max_concurrent_streams, GOAWAY, refused streams, trailers, resets both ways, and the pool's
// states (its SetState asserts run in debug and sanitizer builds).
#include "source/upstream/http2_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rpx {
namespace {

constexpr uint64_t kWaitMs = 10000;  // generous: only a hang reaches it

// A blocking h2c server. By :path: "/refuse" gets RST_STREAM REFUSED_STREAM, "/rst" a 200 head
// then RST_STREAM INTERNAL_ERROR, "/trailers" a body and trailers, "/goaway" a response then
// GOAWAY, "/hold" nothing until `release` is set; anything else 200 with body "ok".
class FakeH2Upstream {
 public:
  explicit FakeH2Upstream(uint32_t max_streams = 100) : max_streams_(max_streams) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(fd_, 64);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] {
      while (!stop_) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        connections_++;
        std::lock_guard<std::mutex> l(mu_);
        fds_.push_back(c);
        threads_.emplace_back([this, c] { Serve(c); });
      }
    });
  }
  ~FakeH2Upstream() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    acceptor_.join();
    std::lock_guard<std::mutex> l(mu_);
    for (int c : fds_) shutdown(c, SHUT_RDWR);
    for (auto& t : threads_) t.join();
    for (int c : fds_) close(c);
  }
  uint16_t port() const { return port_; }
  int connections() const { return connections_; }
  int max_open() const { return max_open_; }
  std::vector<std::string> request_trailers() {
    std::lock_guard<std::mutex> l(mu_);
    return request_trailers_;
  }
  std::atomic<bool> release{false};

 private:
  struct Conn {
    FakeH2Upstream* server;
    nghttp2_session* session = nullptr;
    std::map<int32_t, std::string> paths;
    std::vector<int32_t> held;
    int open = 0;
    bool goaway = false;
  };

  static nghttp2_nv Nv(const char* n, const char* v) {
    return nghttp2_nv{(uint8_t*)n, (uint8_t*)v, strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE};
  }

  static ssize_t ReadOk(nghttp2_session* session, int32_t id, uint8_t* buf, size_t len,
                        uint32_t* flags, nghttp2_data_source* src, void*) {
    memcpy(buf, "ok", 2);
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (src->ptr) {  // trailers follow (submitted here, nghttp2's rule)
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      nghttp2_nv trailers[] = {Nv("grpc-status", "0")};
      nghttp2_submit_trailer(session, id, trailers, 1);
    }
    return 2;
  }

  static void Respond(Conn* c, int32_t id) {
    const std::string& path = c->paths[id];
    nghttp2_nv head[] = {Nv(":status", "200")};
    nghttp2_data_provider body;
    body.source.ptr = nullptr;
    body.read_callback = ReadOk;
    if (path == "/refuse") {
      nghttp2_submit_rst_stream(c->session, 0, id, NGHTTP2_REFUSED_STREAM);
    } else if (path == "/rst") {
      nghttp2_submit_headers(c->session, 0, id, nullptr, head, 1, nullptr);
      nghttp2_submit_rst_stream(c->session, 0, id, NGHTTP2_INTERNAL_ERROR);
    } else if (path == "/trailers") {
      body.source.ptr = c;
      nghttp2_submit_response(c->session, id, head, 1, &body);
    } else {
      nghttp2_submit_response(c->session, id, head, 1, &body);
      if (path == "/goaway") c->goaway = true;
    }
  }

  void Serve(int fd) {
    Conn c{this};
    nghttp2_session_callbacks* cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(
        cb, [](nghttp2_session*, const nghttp2_frame* f, const uint8_t* n, size_t nl,
               const uint8_t* v, size_t vl, uint8_t, void* u) {
          auto* c = static_cast<Conn*>(u);
          std::string name((const char*)n, nl), value((const char*)v, vl);
          if (f->headers.cat == NGHTTP2_HCAT_HEADERS) {  // the request's trailers
            std::lock_guard<std::mutex> l(c->server->mu_);
            c->server->request_trailers_.push_back(name + ": " + value);
          } else if (name == ":path") {
            c->paths[f->hd.stream_id] = value;
          }
          return 0;
        });
    nghttp2_session_callbacks_set_on_begin_headers_callback(
        cb, [](nghttp2_session*, const nghttp2_frame*, void* u) {
          auto* c = static_cast<Conn*>(u);
          c->open++;
          int m = c->server->max_open_.load();
          while (c->open > m && !c->server->max_open_.compare_exchange_weak(m, c->open)) {
          }
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        cb, [](nghttp2_session*, int32_t, uint32_t, void* u) {
          static_cast<Conn*>(u)->open--;
          return 0;
        });
    nghttp2_session_callbacks_set_on_frame_recv_callback(
        cb, [](nghttp2_session*, const nghttp2_frame* f, void* u) {
          auto* c = static_cast<Conn*>(u);
          if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
              (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
            if (c->paths[f->hd.stream_id] == "/hold") {
              c->held.push_back(f->hd.stream_id);
            } else {
              Respond(c, f->hd.stream_id);
            }
          }
          return 0;
        });
    nghttp2_session_server_new(&c.session, cb, &c);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry s[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams_}};
    nghttp2_submit_settings(c.session, 0, s, 1);
    char buf[16384];
    for (;;) {
      if (release && !c.held.empty()) {
        for (int32_t id : c.held) Respond(&c, id);
        c.held.clear();
      }
      const uint8_t* out;
      ssize_t n;
      while ((n = nghttp2_session_mem_send(c.session, &out)) > 0) {
        if (send(fd, out, n, MSG_NOSIGNAL) != n) goto done;
      }
      if (c.goaway) {
        c.goaway = false;
        nghttp2_submit_goaway(c.session, 0, nghttp2_session_get_last_proc_stream_id(c.session),
                              NGHTTP2_NO_ERROR, nullptr, 0);
        continue;
      }
      timeval tv{0, 20000};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      ssize_t r = recv(fd, buf, sizeof(buf), 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
      if (r > 0 && nghttp2_session_mem_recv(c.session, (const uint8_t*)buf, r) < 0) break;
    }
  done:
    nghttp2_session_del(c.session);
  }

  uint32_t max_streams_;
  int fd_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::atomic<int> max_open_{0};
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::string> request_trailers_;  // "name: value", every stream's
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

std::shared_ptr<ClusterInfo> MakeCluster(uint32_t max_conn = 1024,
                                         uint32_t max_concurrent_streams = 2147483647) {
  auto info = std::make_shared<ClusterInfo>();
  info->name = "h2";
  info->protocol = ClusterInfo::Protocol::kHttp2;
  info->http2_options.max_concurrent_streams = max_concurrent_streams;
  info->resources = std::make_shared<ClusterResources>(max_conn, 1024, 1024);
  info->stats_slots = 1;
  info->stats.reset(new ClusterStats[1]);
  return info;
}

std::shared_ptr<const Host> MakeHost(uint16_t port) {
  auto h = std::make_shared<Host>();
  h->address = *SocketAddress::FromIpPort("127.0.0.1", port);
  return h;
}

class TestStream : public PoolCallbacks, public ResponseDecoder {
 public:
  explicit TestStream(std::string p) : path(std::move(p)) {}
  void OnPoolReady(UpstreamStream& s) override {
    stream = &s;
    RequestHead head;
    head.method = "GET";
    head.path = path;
    head.host = "example";
    if (!request_body.empty()) {
      head.method = "POST";
      head.chunked = true;
    }
    s.StartRequest(this, head);
    if (!request_body.empty()) {
      s.SendData(request_body.data(), request_body.size(), false);
      s.SendTrailers(request_trailers);
    }
  }
  void OnPoolFailure(PoolFailure, const std::string& d) override {
    failed = true;
    detail = d;
  }
  void OnResponseHeaders(ResponseHead& head, bool end_stream) override {
    status = head.status;
    if (end_stream) Done();
  }
  void OnResponseData(const char* data, size_t len, bool end_stream) override {
    body.append(data ? data : "", len);
    if (end_stream) Done();
  }
  void OnResponseTrailers(HeaderMap& t) override {
    auto v = t.Get("grpc-status");
    trailer = v ? std::string(*v) : "";
    Done();
  }
  void OnUpstreamReset(UpstreamResetReason r, const std::string& d) override {
    reset = true;
    reason = r;
    detail = d;
    stream = nullptr;
  }
  void OnUpstreamWriteWatermark(bool) override {}
  void Done() {
    complete = true;
    stream = nullptr;
  }

  std::string path;
  std::string request_body;  // POSTed, then request_trailers end it
  HeaderMap request_trailers;
  UpstreamStream* stream = nullptr;
  bool complete = false, reset = false, failed = false;
  UpstreamResetReason reason = UpstreamResetReason::kLocalReset;
  int status = 0;
  std::string body, detail, trailer;
};

class Http2ClientTest : public ::testing::Test {
 protected:
  bool RunUntilAll(std::vector<std::unique_ptr<TestStream>>& v) {
    return dispatcher_.RunUntil(
        [&] {
          for (auto& s : v) {
            if (!s->complete && !s->reset && !s->failed) return false;
          }
          return true;
        },
        kWaitMs);
  }
  Dispatcher dispatcher_{"test"};
};

TEST_F(Http2ClientTest, StreamsShareOneConnection) {
  FakeH2Upstream up;
  auto info = MakeCluster();
  ConnPool pool(dispatcher_, info, MakeHost(up.port()), info->stats[0]);
  std::vector<std::unique_ptr<TestStream>> v;
  for (int i = 0; i < 8; ++i) {
    v.push_back(std::make_unique<TestStream>("/"));
    pool.NewStream(*v.back());
  }
  EXPECT_EQ(pool.connection_count(), 1u);  // one connection promises room for all eight
  ASSERT_TRUE(RunUntilAll(v));
  for (auto& s : v) {
    EXPECT_TRUE(s->complete);
    EXPECT_EQ(s->status, 200);
    EXPECT_EQ(s->body, "ok");
  }
  EXPECT_EQ(up.connections(), 1);
  EXPECT_EQ(info->stats[0].upstream_cx_http2_total.Value(), 1u);
  EXPECT_EQ(info->stats[0].upstream_rq_total.Value(), 8u);
  EXPECT_EQ(pool.active_requests(), 0u);
  // The connection stays for the next stream.
  v.clear();
  v.push_back(std::make_unique<TestStream>("/"));
  pool.NewStream(*v.back());
  ASSERT_TRUE(RunUntilAll(v));
  EXPECT_EQ(up.connections(), 1);
}

TEST_F(Http2ClientTest, RequestTrailersEndTheRequest) {
  FakeH2Upstream up;
  auto info = MakeCluster();
  ConnPool pool(dispatcher_, info, MakeHost(up.port()), info->stats[0]);
  std::vector<std::unique_ptr<TestStream>> v;
  v.push_back(std::make_unique<TestStream>("/"));
  v.back()->request_body = "hello";
  v.back()->request_trailers.Add("x-checksum", "abc");
  v.back()->request_trailers.Add("connection", "close");  // connection-specific: not sent
  pool.NewStream(*v.back());
  ASSERT_TRUE(RunUntilAll(v));
  EXPECT_EQ(v[0]->status, 200);  // the server answers at END_STREAM, which the trailers carry
  EXPECT_EQ(up.request_trailers(), std::vector<std::string>{"x-checksum: abc"});
}

TEST_F(Http2ClientTest, MaxConcurrentStreamsOpensMoreConnections) {
  FakeH2Upstream up;
  auto info = MakeCluster(1024, 2);
  ConnPool pool(dispatcher_, info, MakeHost(up.port()), info->stats[0]);
  std::vector<std::unique_ptr<TestStream>> v;
  for (int i = 0; i < 6; ++i) {
    v.push_back(std::make_unique<TestStream>("/"));
    pool.NewStream(*v.back());
  }
  EXPECT_EQ(pool.connection_count(), 3u);
  ASSERT_TRUE(RunUntilAll(v));
  for (auto& s : v) EXPECT_EQ(s->status, 200);
  EXPECT_LE(up.max_open(), 2);
}

TEST_F(Http2ClientTest, CircuitBreakerKeepsStreamsWaiting) {
  FakeH2Upstream up;
  auto info = MakeCluster(1, 2);
  ConnPool pool(dispatcher_, info, MakeHost(up.port()), info->stats[0]);
  std::vector<std::unique_ptr<TestStream>> v;
  for (int i = 0; i < 6; ++i) {
    v.push_back(std::make_unique<TestStream>("/"));
    pool.NewStream(*v.back());
  }
  EXPECT_EQ(pool.connection_count(), 1u);
  ASSERT_TRUE(RunUntilAll(v));
  for (auto& s : v) EXPECT_EQ(s->status, 200);
  EXPECT_EQ(up.connections(), 1);
  EXPECT_LE(up.max_open(), 2);
}

TEST_F(Http2ClientTest, PeerSettingsBoundTheStreams) {
  FakeH2Upstream up(/*max_streams=*/1);
  // One connection at most: the waiting streams cannot go to a second one (whose first streams,
  // sent before its SETTINGS, the server would refuse).
  auto info = MakeCluster(1);
  ConnPool pool(dispatcher_, info, MakeHost(up.port()), info->stats[0]);
  std::vector<std::unique_ptr<TestStream>> v;
  v.push_back(std::make_unique<TestStream>("/"));
  pool.NewStream(*v.back());
  ASSERT_TRUE(RunUntilAll(v));  // the server's SETTINGS (1 stream) are in
  v.clear();
  for (int i = 0; i < 4; ++i) {
    v.push_back(std::make_unique<TestStream>("/"));
    pool.NewStream(*v.back());
  }
  ASSERT_TRUE(RunUntilAll(v));
  for (auto& s : v) EXPECT_EQ(s->status, 200);
  EXPECT_LE(up.max_open(), 1);
  EXPECT_EQ(up.connections(), 1);
}

TEST_F(Http2ClientTest, GoawayDrainsAndTheNextStreamUsesANewConnection) {
  FakeH2Upstream up;
  auto info = MakeCluster();
  ConnPool pool(dispatcher_, info, MakeHost(up.port()), info->stats[0]);
  std::vector<std::unique_ptr<TestStream>> v;
  v.push_back(std::make_unique<TestStream>("/goaway"));
  pool.NewStream(*v.back());
  ASSERT_TRUE(RunUntilAll(v));
  ASSERT_TRUE(dispatcher_.RunUntil(
      [&] { return info->stats[0].upstream_cx_close_notify.Value() == 1; }, kWaitMs));
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return pool.connection_count() == 0; }, kWaitMs));
  v.clear();
  v.push_back(std::make_unique<TestStream>("/"));
  pool.NewStream(*v.back());
  ASSERT_TRUE(RunUntilAll(v));
  EXPECT_EQ(v[0]->status, 200);
  EXPECT_EQ(up.connections(), 2);
}

TEST_F(Http2ClientTest, RefusedAndResetStreamsTellTheirDecoderOnly) {
  FakeH2Upstream up;
  auto info = MakeCluster();
  ConnPool pool(dispatcher_, info, MakeHost(up.port()), info->stats[0]);
  std::vector<std::unique_ptr<TestStream>> v;
  v.push_back(std::make_unique<TestStream>("/refuse"));
  v.push_back(std::make_unique<TestStream>("/rst"));
  v.push_back(std::make_unique<TestStream>("/trailers"));
  v.push_back(std::make_unique<TestStream>("/"));
  for (auto& s : v) pool.NewStream(*s);
  ASSERT_TRUE(RunUntilAll(v));
  EXPECT_TRUE(v[0]->reset);
  EXPECT_EQ(v[0]->reason, UpstreamResetReason::kRefusedStream);
  EXPECT_TRUE(v[1]->reset);
  EXPECT_NE(v[1]->reason, UpstreamResetReason::kRefusedStream);
  EXPECT_TRUE(v[2]->complete);
  EXPECT_EQ(v[2]->body, "ok");
  EXPECT_EQ(v[2]->trailer, "0");
  EXPECT_TRUE(v[3]->complete);
  EXPECT_EQ(up.connections(), 1);
  EXPECT_EQ(pool.active_requests(), 0u);
}

TEST_F(Http2ClientTest, ResetByTheCallerFreesItsSlot) {
  FakeH2Upstream up;
  auto info = MakeCluster(1024, 1);
  ConnPool pool(dispatcher_, info, MakeHost(up.port()), info->stats[0]);
  TestStream held("/hold");
  pool.NewStream(held);
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return held.stream != nullptr; }, kWaitMs));
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return up.max_open() == 1; }, kWaitMs));
  held.stream->Reset();
  held.stream = nullptr;
  // The one stream the connection may carry is free again.
  std::vector<std::unique_ptr<TestStream>> v;
  v.push_back(std::make_unique<TestStream>("/"));
  pool.NewStream(*v.back());
  ASSERT_TRUE(RunUntilAll(v));
  EXPECT_EQ(v[0]->status, 200);
  EXPECT_EQ(up.connections(), 1);
  EXPECT_FALSE(held.reset);  // a stream the caller gave up hears nothing more
}

TEST_F(Http2ClientTest, ConnectionLossResetsEveryStream) {
  auto up = std::make_unique<FakeH2Upstream>();
  auto info = MakeCluster();
  ConnPool pool(dispatcher_, info, MakeHost(up->port()), info->stats[0]);
  std::vector<std::unique_ptr<TestStream>> v;
  for (int i = 0; i < 3; ++i) {
    v.push_back(std::make_unique<TestStream>("/hold"));
    pool.NewStream(*v.back());
  }
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return up->max_open() == 3; }, kWaitMs));
  up.reset();  // closes its sockets
  ASSERT_TRUE(RunUntilAll(v));
  for (auto& s : v) {
    EXPECT_TRUE(s->reset);
    EXPECT_EQ(s->reason, UpstreamResetReason::kConnectionClosed);
  }
  EXPECT_EQ(pool.connection_count(), 0u);
  EXPECT_EQ(pool.active_requests(), 0u);
}

}  // namespace
}  // namespace rpx
