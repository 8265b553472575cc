// http2_server_fuzz: arbitrary frames on the downstream HTTP/2 path. The input is what a client
// sends after the connection preface (the target sends the preface itself, so most inputs get
// past it). It proves that Http2ServerConnection, fed the input over a socketpair in
// input-derived reads, with a handler that answers in several ways (local reply, gRPC local
// reply, after the body, from a timer, before the body, 100-continue, reset, backpressure, a body
// larger than the stream's buffer limit) and a client that now and then stops reading:
//  1. never crashes, leaks or trips an assertion (ASan/UBSan in the sanitizer run), whatever the
//     frames (floods, bad HPACK, stream id reuse, frames on closed streams, window overflow);
//  2. gives every request it dispatched exactly one end: a response that ends, or a reset;
//  3. writes only well-framed HTTP/2: its output opens with a SETTINGS frame and is a sequence of
//     frames of known types whose lengths fit the largest frame size a client may allow;
//  4. ends with nothing counted as active once the client has gone and the connection is freed.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "source/event/dispatcher.h"
#include "source/http/http2_server_connection.h"
#include "test/fuzz/event_loop.h"
#include "test/fuzz/fuzz_common.h"

namespace rpx {
namespace fuzz {
namespace {

enum class Mode {
  kLocalReply,    // SendLocalReply at the head (a direct response, an error)
  kAfterBody,     // headers + data once the request ended (a proxied response)
  kDeferred,      // like kAfterBody, from a zero-delay timer (the upstream answers later)
  kEarly,         // a response before the request body was read
  kContinue,      // 100 Continue when asked, then kAfterBody
  kReset,         // ResetStream at the head
  kBackpressure,  // ReadDisable(true) at the head, re-enabled from a timer, then kAfterBody
  kLarge,         // a body over the stream's buffer limit, in pieces
  kCount,
};

struct Driver;

class FuzzHandler : public StreamHandler {
 public:
  FuzzHandler(ResponseEncoder& enc, Driver& drv, Mode mode, int status);
  ~FuzzHandler() override;
  void OnRequestHeaders(RequestHead& head, bool end_stream) override;
  void OnRequestData(const char* data, size_t len, bool end_stream) override;
  void OnDownstreamReset() override {
    FUZZ_CHECK(!ended_);  // no reset after the handler ended the response
    reset_ = true;
    done_ = true;
  }
  void OnDownstreamWatermark(bool above) override { above_ = above; }

 private:
  void OnRequestEnd();
  void Respond();
  void Arm(std::function<void()> fn);

  ResponseEncoder& enc_;
  Driver& drv_;
  Mode mode_;
  int status_;
  bool seen_headers_ = false;
  bool request_ended_ = false;
  bool done_ = false;   // response ended or stream reset: the encoder is off limits
  bool ended_ = false;  // the handler ended the response itself
  bool reset_ = false;
  bool above_ = false;
  std::unique_ptr<Timer> timer_;
  bool armed_ = false;
};

struct Driver : public StreamHandlerFactory {
  explicit Driver(Choices& c) : choices(c) {}
  std::unique_ptr<StreamHandler> CreateStream(ResponseEncoder& encoder) override {
    static const int kStatuses[] = {200, 404, 503, 204, 304, 100, 431};
    Mode mode = static_cast<Mode>(choices.Below(static_cast<int>(Mode::kCount)));
    int status = kStatuses[choices.Below(7)];
    ++created;
    return std::make_unique<FuzzHandler>(encoder, *this, mode, status);
  }
  Choices& choices;
  int created = 0;
  int destroyed = 0;
  int pending_timers = 0;
};

FuzzHandler::FuzzHandler(ResponseEncoder& enc, Driver& drv, Mode mode, int status)
    : enc_(enc), drv_(drv), mode_(mode), status_(status) {}

FuzzHandler::~FuzzHandler() {
  if (armed_) --drv_.pending_timers;
  ++drv_.destroyed;
}

void FuzzHandler::Arm(std::function<void()> fn) {
  timer_ = Loop().CreateTimer([this, fn] {
    armed_ = false;
    --drv_.pending_timers;
    fn();
  });
  if (!armed_) ++drv_.pending_timers;
  armed_ = true;
  timer_->Enable(0);
}

void FuzzHandler::OnRequestHeaders(RequestHead& head, bool end_stream) {
  FUZZ_CHECK(!seen_headers_);
  seen_headers_ = true;
  FUZZ_CHECK(head.version_major == 2);
  FUZZ_CHECK(!head.method.empty() && !head.path.empty());
  for (const HeaderMap::Field f : head.headers) {
    FUZZ_CHECK(!f.name.empty() && f.name[0] != ':');
    for (char c : f.name) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'));
  }
  switch (mode_) {
    case Mode::kLocalReply:
      done_ = ended_ = true;
      enc_.SendLocalReply(status_, "local reply\n", nullptr, "text/plain");
      return;
    case Mode::kEarly:
      Respond();
      return;
    case Mode::kReset:
      done_ = ended_ = true;
      enc_.ResetStream();
      return;
    case Mode::kContinue:
      if (head.expect_continue) enc_.Encode100Continue();
      break;
    case Mode::kBackpressure:
      enc_.ReadDisable(true);
      Arm([this] {
        if (!done_) enc_.ReadDisable(false);
      });
      break;
    default:
      break;
  }
  if (end_stream) OnRequestEnd();
}

void FuzzHandler::OnRequestData(const char* data, size_t len, bool end_stream) {
  FUZZ_CHECK(seen_headers_ && !request_ended_ && !ended_);
  FUZZ_CHECK(len == 0 || data != nullptr);
  if (end_stream) OnRequestEnd();
}

void FuzzHandler::OnRequestEnd() {
  request_ended_ = true;
  if (done_) return;
  if (mode_ == Mode::kDeferred) {
    Arm([this] {
      if (!done_) Respond();
    });
  } else {
    Respond();
  }
}

void FuzzHandler::Respond() {
  ResponseHead h;
  h.status = status_ < 200 ? 200 : status_;
  h.headers.Add("x-fuzz", "1");
  h.headers.Add("connection", "close");  // must never reach the wire on h2
  bool no_body = h.status == 204 || h.status == 304;
  size_t total = mode_ == Mode::kLarge ? 3 * 8192 : 2;
  if (!no_body) {
    h.has_content_length = true;
    h.content_length = total;
  }
  enc_.EncodeHeaders(h, no_body);
  if (done_ || no_body) {
    done_ = ended_ = true;
    return;
  }
  static const std::string kPiece(8192, 'x');
  if (mode_ == Mode::kLarge) {
    for (int i = 0; i < 3 && !done_; ++i) {
      if (i == 2) done_ = ended_ = true;
      enc_.EncodeData(kPiece.data(), kPiece.size(), i == 2);
    }
    done_ = ended_ = true;
    return;
  }
  done_ = ended_ = true;
  enc_.EncodeData("ok", 2, true);
}

// Records the close (the hook the worker overrides).
class ClosedFlagConnection : public Http2ServerConnection {
 public:
  ClosedFlagConnection(std::unique_ptr<Connection> conn, std::shared_ptr<const HttpConfig> config,
                       HttpStats& stats, StreamHandlerFactory& factory, const SocketAddress& peer,
                       bool* closed)
      : Http2ServerConnection(std::move(conn), std::move(config), stats, factory, peer, false),
        closed_(closed) {}

 private:
  void OnClosed() override { *closed_ = true; }
  bool* closed_;
};

// rpx's output: a SETTINGS frame first, then whole frames of known types (the last one may be
// cut short by a close).
void CheckFraming(const std::string& out) {
  if (out.empty()) return;
  FUZZ_CHECK(out.size() < 9 || static_cast<uint8_t>(out[3]) == NGHTTP2_SETTINGS);
  size_t off = 0;
  while (off + 9 <= out.size()) {
    const auto* p = reinterpret_cast<const uint8_t*>(out.data() + off);
    size_t len = (size_t{p[0]} << 16) | (size_t{p[1]} << 8) | p[2];
    uint8_t type = p[3];
    FUZZ_CHECK(type <= NGHTTP2_CONTINUATION);
    FUZZ_CHECK(len <= 16777215);
    off += 9 + len;
  }
}

void Drive(const uint8_t* data, size_t size, Choices& choices) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) return;
  auto config = std::make_shared<HttpConfig>();
  // Small limits now and then, so that small inputs reach the overflow and flood paths.
  if (choices.Below(3) == 0) {
    config->max_request_headers_kb = 1;
    config->max_headers_count = 4;
    config->buffer_limit = 4096;
    config->http2.max_concurrent_streams = 4;
    config->http2.initial_stream_window_size = 65535;
    config->http2.max_outbound_control_frames = 16;
    config->http2.max_outbound_frames = 32;
  }
  config->http2.stream_error_on_invalid_http_message = choices.Below(2) == 0;
  HttpStats stats;
  Driver driver(choices);
  auto peer = SocketAddress::FromIpPort("127.0.0.1", 40000);
  auto conn = std::make_unique<Connection>(Loop(), fds[0], false, config->buffer_limit);
  Connection* raw = conn.get();
  bool closed = false;
  auto* sc = new ClosedFlagConnection(std::move(conn), config, stats, driver, *peer, &closed);
  sc->Start();
  static const char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  std::string input(kPreface, sizeof(kPreface) - 1);
  input.append(reinterpret_cast<const char*>(data), size);
  std::vector<size_t> cuts = SplitPoints(input.size(), choices, 6);
  // A client that stops reading for a while (its socket buffer fills, rpx's write buffer grows).
  bool slow_reader = choices.Below(4) == 0;
  size_t drain_at = choices.Below(8) == 0 ? choices.Below(cuts.size() + 1) : ~size_t{0};
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i <= cuts.size() && !closed; ++i) {
    if (i == drain_at) sc->CloseWhenIdle();
    if (closed) break;
    size_t end = i < cuts.size() ? cuts[i] : input.size();
    raw->read_buffer().Append(input.data() + start, end - start);
    start = end;
    sc->OnData(raw->read_buffer());
    Turn();
    if (!slow_reader) DrainPeer(fds[1], &out);
  }
  for (int t = 0; t < 16 && !closed; ++t) {
    Turn();
    DrainPeer(fds[1], &out);
    if (driver.pending_timers == 0 && t > 2) break;
  }
  if (!slow_reader) CheckFraming(out);
  // The client goes away; the connection closes and, as the worker does, is deleted after.
  close(fds[1]);
  for (int t = 0; t < 4 && !closed; ++t) Turn();
  if (!closed) {
    // A connection rpx is still flushing to: the peer's close shows when it writes or reads.
    sc->CloseNow();
  }
  FUZZ_CHECK(closed);
  Loop().DeferredDelete(std::unique_ptr<DeferredDeletable>(sc));
  for (int t = 0; t < 3; ++t) Turn();
  FUZZ_CHECK(stats.downstream_cx_active.Value() == 0);
  FUZZ_CHECK(stats.downstream_cx_http2_active.Value() == 0);
  FUZZ_CHECK(stats.downstream_rq_active.Value() == 0);
  FUZZ_CHECK(driver.pending_timers == 0);
  FUZZ_CHECK(driver.created == driver.destroyed);
}

}  // namespace
}  // namespace fuzz
}  // namespace rpx

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rpx::fuzz;
  Choices choices(HashInput(data, size));
  Drive(data, size, choices);
  return 0;
}
