// http1_request_fuzz: arbitrary bytes on the downstream HTTP/1 request path. It proves that
//  1. Http1Parser (requests) keeps its contract on any input: consumed <= len, a pause after each
//     message and only then, errors answered with a status rpx sends (400, 414, 431, 501, 505),
//     header count and bytes within the limits, names lower case, values without CR, LF or NUL,
//     a body only when the head frames one and exactly as long as its Content-Length;
//  2. parsing does not depend on how the bytes are split into reads: one read and input-derived
//     split points (sometimes one byte per read) give the same messages, bodies and verdict; nor
//     on whether the parser's fast path or llhttp alone parsed them;
//  3. ServerConnection, fed the same reads over a socketpair with a trivial handler that answers
//     in several ways (local reply, after the body, chunked, from a timer, before the body,
//     100-continue, reset, backpressure), never crashes or leaks, answers every parsed request
//     on a connection it keeps open, and only writes well-formed HTTP/1.1: its output, parsed
//     by rpx's own strict response parser, has no error and no more responses than requests.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "source/event/dispatcher.h"
#include "source/http/http1_parser.h"
#include "source/http/server_connection.h"
#include "test/fuzz/event_loop.h"
#include "test/fuzz/fuzz_common.h"
#include "test/fuzz/http1_feed.h"

namespace rpx {
namespace fuzz {
namespace {

bool IsRequestErrorStatus(int s) {
  return s == 400 || s == 414 || s == 431 || s == 501 || s == 505;
}

struct Message {
  std::string head;  // canonical form of the parsed head
  std::string body;
  bool complete = false;
  bool operator==(const Message& o) const {
    return head == o.head && body == o.body && complete == o.complete;
  }
};

struct Transcript {
  std::vector<Message> messages;
  bool error = false;
  int error_status = 0;
  std::string error_reason;  // for the report only: the wording may differ with the split
};

std::string Describe(const RequestHead& r) {
  std::string s = r.method + " " + r.path + " host=" + r.host + " 1." +
                  std::to_string(r.version_minor) + (r.keep_alive ? " ka" : " close") +
                  (r.chunked ? " chunked" : "") + (r.expect_continue ? " expect" : "");
  if (r.has_content_length) s += " cl=" + std::to_string(r.content_length);
  for (const HeaderMap::Field f : r.headers) {
    s.append("\n").append(f.name).append(": ").append(f.value);
  }
  return s;
}

class RequestRecorder : public Http1ParserCallbacks {
 public:
  explicit RequestRecorder(const Http1Parser::Limits& limits) : limits_(limits) {}
  void set_parser(Http1Parser* p) { parser_ = p; }

  void OnHead() override {
    const RequestHead& r = parser_->request();
    FUZZ_CHECK(transcript.messages.empty() || transcript.messages.back().complete);
    FUZZ_CHECK(!r.method.empty() && r.method != "CONNECT");
    FUZZ_CHECK(!(r.chunked && r.has_content_length));
    FUZZ_CHECK(r.headers.size() <= limits_.max_headers);
    size_t bytes = r.path.size();
    for (const auto [name, value] : r.headers) {
      FUZZ_CHECK(!name.empty());
      for (char ch : name) FUZZ_CHECK(!(ch >= 'A' && ch <= 'Z'));
      FUZZ_CHECK(value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos);
      FUZZ_CHECK(value.empty() || (value.back() != ' ' && value.back() != '\t'));
      bytes += name.size() + value.size();
    }
    FUZZ_CHECK(bytes <= limits_.max_header_bytes);
    Message m;
    m.head = Describe(r);
    transcript.messages.push_back(std::move(m));
    chunked_ = r.chunked;
    has_content_length_ = r.has_content_length;
    content_length_ = r.content_length;
  }

  void OnBody(const char* data, size_t len) override {
    FUZZ_CHECK(!transcript.messages.empty() && !transcript.messages.back().complete);
    FUZZ_CHECK(len > 0 && data != nullptr);
    FUZZ_CHECK(chunked_ || has_content_length_);  // no framing, no body
    std::string& body = transcript.messages.back().body;
    body.append(data, len);
    if (has_content_length_) FUZZ_CHECK(body.size() <= content_length_);
  }

  void OnMessageComplete() override {
    FUZZ_CHECK(!transcript.messages.empty() && !transcript.messages.back().complete);
    Message& m = transcript.messages.back();
    if (has_content_length_) FUZZ_CHECK(m.body.size() == content_length_);
    m.complete = true;
    ++completions;
  }

  Transcript transcript;
  int completions = 0;

 private:
  Http1Parser::Limits limits_;
  Http1Parser* parser_ = nullptr;
  bool chunked_ = false;
  bool has_content_length_ = false;
  uint64_t content_length_ = 0;
};

// Parses `data` delivered in reads cut at `cuts`, the way ServerConnection feeds its parser: the
// unconsumed rest of a read stays buffered and is parsed again, with the next read appended, after
// Resume().
Transcript ParseRequests(const uint8_t* data, size_t size, const std::vector<size_t>& cuts,
                         const Http1Parser::Limits& limits) {
  RequestRecorder rec(limits);
  Http1Parser parser(Http1Parser::Type::kRequest, rec, limits);
  rec.set_parser(&parser);
  FeedInReads(parser, rec, data, size, cuts, IsRequestErrorStatus,
              [&] { FUZZ_CHECK(!parser.in_message()); });
  return std::move(rec.transcript);
}

void Dump(const char* what, const Transcript& t) {
  std::fprintf(stderr, "--- %s: %zu messages, error %d (%s)\n", what, t.messages.size(),
               t.error_status, t.error_reason.c_str());
  for (const Message& m : t.messages) {
    std::fprintf(stderr, "[%s]\nbody %zu bytes%s\n", m.head.c_str(), m.body.size(),
                 m.complete ? ", complete" : "");
  }
}

// The same messages and verdict however the input was split into reads.
bool IsLimitStatus(int s) { return s == 414 || s == 431; }

// The same messages and verdict however the input was split into reads. One exception: the size
// limits are checked when llhttp reports a span (at its end, or at the end of a read), so a span
// that is too long and also malformed further on may be refused for either reason (414/431 or
// 400) depending on where the read ended.
void CheckSameTranscript(const Transcript& a, const Transcript& b, const std::vector<size_t>& cuts,
                         const char* b_is = "split") {
  bool same_status =
      a.error_status == b.error_status ||
      (a.error && b.error && (IsLimitStatus(a.error_status) || IsLimitStatus(b.error_status)));
  bool same = a.error == b.error && same_status && a.messages.size() == b.messages.size();
  for (size_t i = 0; same && i < a.messages.size(); ++i) same = a.messages[i] == b.messages[i];
  if (same) return;
  Dump("one read", a);
  Dump(b_is, b);
  std::fprintf(stderr, "reads cut at:");
  for (size_t c : cuts) std::fprintf(stderr, " %zu", c);
  std::fprintf(stderr, "\n");
  FUZZ_CHECK(same);
}

// ---- ServerConnection over a socketpair ----

enum class Mode {
  kLocalReply,    // SendLocalReply at the head (direct response, redirect, error)
  kAfterBody,     // headers + data once the request ended (a proxied response)
  kChunked,       // no Content-Length: chunked (HTTP/1.1) or close-delimited (HTTP/1.0)
  kDeferred,      // like kAfterBody, from a zero-delay timer (the upstream answers later)
  kEarly,         // a response before the request body was read (e.g. 413 from the upstream)
  kContinue,      // 100 Continue when asked, then kAfterBody
  kReset,         // ResetStream at the head
  kBackpressure,  // ReadDisable(true) at the head, re-enabled from a timer, then kAfterBody
  kCount,
};

struct ConnDriver;

class FuzzHandler : public StreamHandler {
 public:
  FuzzHandler(ResponseEncoder& enc, ConnDriver& drv, Mode mode, int status, bool body);
  ~FuzzHandler() override;
  void OnRequestHeaders(RequestHead& head, bool end_stream) override;
  void OnRequestData(const char* data, size_t len, bool end_stream) override;
  void OnDownstreamReset() override { done_ = true; }
  void OnDownstreamWatermark(bool) override {}

 private:
  void OnRequestEnd();
  void Respond(bool chunked);
  void Arm(std::function<void()> fn);

  ResponseEncoder& enc_;
  ConnDriver& drv_;
  Mode mode_;
  int status_;
  bool body_;
  bool seen_headers_ = false;
  bool request_ended_ = false;
  bool done_ = false;  // response ended or stream reset: the encoder is off limits
  std::unique_ptr<Timer> timer_;
  bool armed_ = false;
};

struct ConnDriver : public StreamHandlerFactory {
  explicit ConnDriver(Choices& c) : choices(c) {}
  std::unique_ptr<StreamHandler> CreateStream(ResponseEncoder& encoder) override {
    // 1xx, 204 and 304 with a body: what a direct_response may be configured to send (the
    // router refuses 1xx since 98cc489, ServerConnection turns a 1xx local reply into a 500).
    static const int kStatuses[] = {200, 404, 503, 204, 304, 100, 101};
    Mode mode = static_cast<Mode>(choices.Below(static_cast<int>(Mode::kCount)));
    int status = kStatuses[choices.Below(7)];
    bool body = choices.Below(4) != 0;
    return std::make_unique<FuzzHandler>(encoder, *this, mode, status, body);
  }
  Choices& choices;
  std::vector<std::string> methods;  // of every request the handler saw, in order
  int pending_timers = 0;
  int continues = 0;  // Encode100Continue calls
};

FuzzHandler::FuzzHandler(ResponseEncoder& enc, ConnDriver& drv, Mode mode, int status, bool body)
    : enc_(enc), drv_(drv), mode_(mode), status_(status), body_(body) {}

FuzzHandler::~FuzzHandler() {
  if (armed_) --drv_.pending_timers;
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
  drv_.methods.push_back(head.method);
  switch (mode_) {
    case Mode::kLocalReply: {
      done_ = true;
      enc_.SendLocalReply(status_, body_ ? "local reply\n" : "", nullptr, "text/plain");
      return;
    }
    case Mode::kEarly:
      Respond(false);
      return;
    case Mode::kReset:
      done_ = true;
      enc_.ResetStream();
      return;
    case Mode::kContinue:
      if (head.expect_continue) {
        ++drv_.continues;
        enc_.Encode100Continue();
      }
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
  FUZZ_CHECK(seen_headers_ && !request_ended_);
  FUZZ_CHECK(len == 0 || data != nullptr);
  if (end_stream) OnRequestEnd();
}

void FuzzHandler::OnRequestEnd() {
  request_ended_ = true;
  if (done_) return;
  if (mode_ == Mode::kDeferred) {
    Arm([this] {
      if (!done_) Respond(false);
    });
  } else {
    Respond(mode_ == Mode::kChunked);
  }
}

// A proxied response: what the router sends for an upstream response. 204 and 304 come from
// the upstream parser without a body, whatever their headers said.
void FuzzHandler::Respond(bool chunked) {
  ResponseHead h;
  h.status = status_ < 200 ? 200 : status_;  // the router forwards no upstream 1xx head
  h.headers.Add("x-fuzz", "1");
  bool no_body = h.status == 204 || h.status == 304;
  if (!chunked || no_body) {
    h.has_content_length = true;
    h.content_length = no_body ? 0 : 2;
  }
  enc_.EncodeHeaders(h, false);
  if (done_) return;
  if (chunked && !no_body) {
    enc_.EncodeData("ab", 2, false);
    if (done_) return;
    done_ = true;
    enc_.EncodeData("cd", 2, true);
    return;
  }
  done_ = true;
  if (no_body) {
    enc_.EncodeData(nullptr, 0, true);
  } else {
    enc_.EncodeData("ok", 2, true);
  }
}

class OutputRecorder : public Http1ParserCallbacks {
 public:
  void OnHead() override {
    int s = parser->response().status;
    if (s >= 100 && s < 200) ++interim;
  }
  void OnBody(const char*, size_t) override {}
  void OnMessageComplete() override { ++responses; }
  int responses = 0;
  int interim = 0;
  Http1Parser* parser = nullptr;
};

// The bytes rpx wrote must parse as HTTP/1.1 responses, in request order (HEAD answers have no
// body), possibly cut short by a close. A parse-error reply may follow the handled requests.
void CheckOutput(const std::string& out, const std::vector<std::string>& methods, int continues) {
  OutputRecorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, Http1Parser::Limits{});
  rec.parser = &p;
  size_t off = 0;
  size_t index = 0;
  auto is_head = [&](size_t i) { return i < methods.size() && methods[i] == "HEAD"; };
  p.set_expect_no_body(is_head(0));
  while (off < out.size()) {
    size_t consumed = 0;
    Http1Parser::Result r = p.Execute(out.data() + off, out.size() - off, &consumed);
    if (r == Http1Parser::Result::kError) {
      std::fprintf(stderr, "rpx wrote a malformed response (%s) at byte %zu of:\n%s\n",
                   p.error_reason().c_str(), off, out.c_str());
      std::abort();
    }
    if (r == Http1Parser::Result::kOk) break;
    off += consumed;
    ++index;
    p.Resume();
    p.set_expect_no_body(is_head(index));
  }
  FUZZ_CHECK(static_cast<size_t>(rec.responses) <= methods.size() + 1);
  // A 1xx head on the wire is a 100 Continue the handler asked for; any other is read by the
  // client as interim, and the next response then answers the wrong request.
  if (rec.interim > continues) std::fprintf(stderr, "rpx wrote:\n%s\n", out.c_str());
  FUZZ_CHECK(rec.interim <= continues);
}

// Records the close (the hook a ServerConnection's owner overrides).
class ClosedFlagConnection : public ServerConnection {
 public:
  ClosedFlagConnection(std::unique_ptr<Connection> conn, std::shared_ptr<const HttpConfig> config,
                       HttpStats& stats, StreamHandlerFactory& factory, const SocketAddress& peer,
                       bool* closed)
      : ServerConnection(std::move(conn), std::move(config), stats, factory, peer),
        closed_(closed) {}

 private:
  void OnClosed() override { *closed_ = true; }
  bool* closed_;
};

void DriveServerConnection(const uint8_t* data, size_t size, const std::vector<size_t>& cuts,
                           uint32_t max_headers_kb, uint32_t max_headers, Choices& choices,
                           const Transcript& expected) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) return;
  auto config = std::make_shared<HttpConfig>();
  config->max_request_headers_kb = max_headers_kb;
  config->max_headers_count = max_headers;
  config->max_requests_per_connection = choices.Below(4) == 0 ? 2 : 0;
  config->server_header = static_cast<HttpConfig::ServerHeader>(choices.Below(3));
  HttpStats stats;
  ConnDriver driver(choices);
  auto peer = SocketAddress::FromIpPort("127.0.0.1", 40000);
  auto conn = std::make_unique<Connection>(Loop(), fds[0], false, config->buffer_limit);
  Connection* raw = conn.get();
  bool closed = false;
  auto* sc = new ClosedFlagConnection(std::move(conn), config, stats, driver, *peer, &closed);
  std::string out;
  size_t drain_at = choices.Below(8) == 0 ? choices.Below(cuts.size() + 1) : ~size_t{0};
  bool stuck = false;
  size_t start = 0;
  for (size_t i = 0; i <= cuts.size() && !closed; ++i) {
    if (i == drain_at) sc->CloseWhenIdle();
    // A socket is not read while reading is disabled; the loop may enable it again.
    for (int t = 0; t < 8 && !closed && raw->read_disabled(); ++t) {
      Turn();
      DrainPeer(fds[1], &out);
    }
    if (closed) break;
    if (raw->read_disabled()) {
      stuck = true;
      break;
    }
    size_t end = i < cuts.size() ? cuts[i] : size;
    raw->read_buffer().Append(reinterpret_cast<const char*>(data) + start, end - start);
    start = end;
    sc->OnData(raw->read_buffer());
    Turn();
    DrainPeer(fds[1], &out);
  }
  // Let deferred responses and buffered pipelined requests finish.
  size_t turns = 0;
  while (!closed && !stuck && turns++ < 4 * expected.messages.size() + 16) {
    size_t before = out.size();
    Turn();
    DrainPeer(fds[1], &out);
    if (raw->read_buffer().empty() && driver.pending_timers == 0 && out.size() == before) break;
  }
  if (!closed && !raw->read_buffer().empty()) stuck = true;
  CheckOutput(out, driver.methods, driver.continues);
  if (!closed && !stuck && start == size) {
    // Everything was read and the connection is still open: every request was parsed the same
    // way as by the parser alone, none was refused, and every complete one was answered.
    FUZZ_CHECK(!expected.error);
    FUZZ_CHECK(driver.methods.size() == expected.messages.size());
    FUZZ_CHECK(driver.pending_timers == 0);
  }
  // The client goes away; the connection closes and, as the worker does, is deleted after.
  close(fds[1]);
  for (int t = 0; t < 4 && !closed; ++t) Turn();
  FUZZ_CHECK(closed);
  Loop().DeferredDelete(std::unique_ptr<DeferredDeletable>(sc));
  for (int t = 0; t < 3; ++t) Turn();
  FUZZ_CHECK(stats.downstream_cx_active.Value() == 0);
  FUZZ_CHECK(stats.downstream_rq_active.Value() == 0);
  FUZZ_CHECK(driver.pending_timers == 0);
}

}  // namespace
}  // namespace fuzz
}  // namespace rpx

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rpx::fuzz;
  Choices choices(HashInput(data, size));
  // Small limits now and then, so that small inputs reach the 431 paths.
  uint32_t max_headers_kb = choices.Below(4) == 0 ? 1 : 60;
  uint32_t max_headers = choices.Below(4) == 0 ? 4 : 100;
  rpx::Http1Parser::Limits limits{max_headers_kb * 1024, max_headers};

  Transcript whole = ParseRequests(data, size, {}, limits);
  std::vector<size_t> cuts = SplitPoints(size, choices, 4);
  Transcript split = ParseRequests(data, size, cuts, limits);
  CheckSameTranscript(whole, split, cuts);
  // The parser's fast path gives what llhttp alone gives.
  rpx::Http1Parser::SetFastPathEnabled(false);
  Transcript llhttp_only = ParseRequests(data, size, {}, limits);
  rpx::Http1Parser::SetFastPathEnabled(true);
  CheckSameTranscript(whole, llhttp_only, {}, "llhttp only (no fast path)");

  DriveServerConnection(data, size, cuts, max_headers_kb, max_headers, choices, whole);
  return 0;
}
