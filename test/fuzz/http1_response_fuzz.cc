// http1_response_fuzz: arbitrary bytes on the upstream response path: Http1Parser (responses)
// driven as Http1Client drives it, with set_expect_no_body for answers to HEAD and Finish() at
// EOF. It proves that on any input: consumed <= len; an error is always a 502; a pause follows
// each final response and only that (interim 1xx heads never pause); header count and bytes stay
// within the limits, names lower case, values without CR, LF or NUL; no body for HEAD, 1xx, 204
// or 304, and a body exactly as long as its Content-Length; Finish() at EOF ends a close-delimited
// body cleanly; and the result does not depend on how the bytes are split into reads, nor on
// whether the parser's fast path or llhttp parsed them. The bytes after a complete response
// (stray bytes, which make Http1Client drop the connection) are parsed as the next response,
// as on a reused keep-alive connection.
#include <cstring>
#include <string>
#include <vector>

#include "source/http/http1_parser.h"
#include "test/fuzz/fuzz_common.h"
#include "test/fuzz/http1_feed.h"

namespace rpx {
namespace fuzz {
namespace {

struct Message {
  std::string head;
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
  int finish = -1;           // Finish() at EOF: -1 not called, else the Result
};

std::string Describe(const ResponseHead& r) {
  std::string s = std::to_string(r.status) + " " + r.reason + " 1." +
                  std::to_string(r.version_minor) + (r.keep_alive ? " ka" : " close") +
                  (r.chunked ? " chunked" : "");
  if (r.has_content_length) s += " cl=" + std::to_string(r.content_length);
  for (const HeaderMap::Field f : r.headers) {
    s.append("\n").append(f.name).append(": ").append(f.value);
  }
  return s;
}

bool Interim(int status) { return status >= 100 && status < 200 && status != 101; }

class ResponseRecorder : public Http1ParserCallbacks {
 public:
  explicit ResponseRecorder(const Http1Parser::Limits& limits) : limits_(limits) {}
  void set_parser(Http1Parser* p) { parser_ = p; }
  void set_expect_no_body(bool v) { expect_no_body_ = v; }

  void OnHead() override {
    const ResponseHead& r = parser_->response();
    // A new head follows a complete response, or an interim one.
    FUZZ_CHECK(transcript.messages.empty() || transcript.messages.back().complete || interim_);
    FUZZ_CHECK(r.status >= 100 && r.status <= 599);
    FUZZ_CHECK(!(r.chunked && r.has_content_length));
    FUZZ_CHECK(r.headers.size() <= limits_.max_headers);
    size_t bytes = r.reason.size();
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
    interim_ = Interim(r.status);
    status_no_body_ = (r.status >= 100 && r.status < 200) || r.status == 204 || r.status == 304;
    no_body_ = status_no_body_ || expect_no_body_;
    has_content_length_ = r.has_content_length;
    chunked_ = r.chunked;
    content_length_ = r.content_length;
  }

  void OnBody(const char* data, size_t len) override {
    FUZZ_CHECK(!transcript.messages.empty() && !transcript.messages.back().complete);
    FUZZ_CHECK(len > 0 && data != nullptr);
    FUZZ_CHECK(!no_body_);
    std::string& body = transcript.messages.back().body;
    body.append(data, len);
    if (has_content_length_) FUZZ_CHECK(body.size() <= content_length_);
  }

  void OnMessageComplete() override {
    FUZZ_CHECK(!transcript.messages.empty() && !transcript.messages.back().complete);
    FUZZ_CHECK(!interim_);  // interim responses are not reported as complete
    Message& m = transcript.messages.back();
    if (has_content_length_ && !no_body_) FUZZ_CHECK(m.body.size() == content_length_);
    if (no_body_) FUZZ_CHECK(m.body.empty());
    m.complete = true;
    ++completions;
  }

  // The last head had neither Content-Length nor chunked.
  bool head_unframed() const { return !has_content_length_ && !chunked_; }
  // The last head was 1xx, 204 or 304: its message ends with the head.
  bool status_no_body() const { return status_no_body_; }
  // A final response's head was parsed and its message has not ended.
  bool in_final_head_body() const {
    return !transcript.messages.empty() && !transcript.messages.back().complete && !interim_;
  }

  Transcript transcript;
  int completions = 0;

 private:
  Http1Parser::Limits limits_;
  Http1Parser* parser_ = nullptr;
  bool expect_no_body_ = false;
  bool interim_ = false;
  bool status_no_body_ = false;
  bool no_body_ = false;
  bool has_content_length_ = false;
  bool chunked_ = false;
  uint64_t content_length_ = 0;
};

// `head_answers[i]`: whether response i answers a HEAD request.
Transcript ParseResponses(const uint8_t* data, size_t size, const std::vector<size_t>& cuts,
                          const Http1Parser::Limits& limits,
                          const std::vector<bool>& head_answers) {
  ResponseRecorder rec(limits);
  Http1Parser parser(Http1Parser::Type::kResponse, rec, limits);
  rec.set_parser(&parser);
  size_t index = 0;
  auto expect = [&] {
    bool v = index < head_answers.size() && head_answers[index];
    parser.set_expect_no_body(v);
    rec.set_expect_no_body(v);
  };
  expect();
  FeedInReads(
      parser, rec, data, size, cuts, [](int status) { return status == 502; },
      [&] {
        ++index;
        expect();
      });
  // A 1xx, 204 or 304 head ends its message (a 304 with Content-Length must not wait for a body).
  if (rec.in_final_head_body()) FUZZ_CHECK(!rec.status_no_body());
  if (!rec.transcript.error) {
    // EOF. Http1Client calls Finish() when the parser is in a message that needs EOF; it must
    // cleanly end a close-delimited body (a head without Content-Length or chunked). Elsewhere it
    // fails, as a 502: in the middle of a head, or in chunked trailers (where a Transfer-Encoding
    // trailer makes llhttp's message_needs_eof() true).
    bool close_delimited = parser.in_message() && parser.message_needs_eof() &&
                           rec.in_final_head_body() && rec.head_unframed();
    int before = rec.completions;
    Http1Parser::Result r = parser.Finish();
    rec.transcript.finish = static_cast<int>(r);
    if (close_delimited) {
      FUZZ_CHECK(r == Http1Parser::Result::kOk);
      FUZZ_CHECK(rec.completions == before + 1);
    } else if (r == Http1Parser::Result::kError) {
      FUZZ_CHECK(parser.error_status() == 502);
    }
  }
  return std::move(rec.transcript);
}

void Dump(const char* what, const Transcript& t) {
  std::fprintf(stderr, "--- %s: %zu messages, error %d (%s), Finish() %d\n", what,
               t.messages.size(), t.error_status, t.error_reason.c_str(), t.finish);
  for (const Message& m : t.messages) {
    std::fprintf(stderr, "[%s]\nbody %zu bytes%s\n", m.head.c_str(), m.body.size(),
                 m.complete ? ", complete" : "");
  }
}

// The same messages and verdict however the input was split into reads.
void CheckSameTranscript(const Transcript& a, const Transcript& b, const std::vector<size_t>& cuts,
                         const char* b_is = "split") {
  bool same = a.error == b.error && a.error_status == b.error_status && a.finish == b.finish &&
              a.messages.size() == b.messages.size();
  for (size_t i = 0; same && i < a.messages.size(); ++i) same = a.messages[i] == b.messages[i];
  if (same) return;
  Dump("one read", a);
  Dump(b_is, b);
  std::fprintf(stderr, "reads cut at:");
  for (size_t c : cuts) std::fprintf(stderr, " %zu", c);
  std::fprintf(stderr, "\n");
  FUZZ_CHECK(same);
}

}  // namespace
}  // namespace fuzz
}  // namespace rpx

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rpx::fuzz;
  Choices choices(HashInput(data, size));
  // Http1Client's limits (80 KiB, the cluster's header count), sometimes small ones.
  uint32_t max_header_bytes = choices.Below(4) == 0 ? 1024 : 80 * 1024;
  uint32_t max_headers = choices.Below(4) == 0 ? 4 : 100;
  rpx::Http1Parser::Limits limits{max_header_bytes, max_headers};
  std::vector<bool> head_answers;
  for (int i = 0; i < 8; ++i) head_answers.push_back(choices.Below(3) == 0);

  Transcript whole = ParseResponses(data, size, {}, limits, head_answers);
  std::vector<size_t> cuts = SplitPoints(size, choices, 4);
  Transcript split = ParseResponses(data, size, cuts, limits, head_answers);
  CheckSameTranscript(whole, split, cuts);
  // The fast path gives what llhttp alone gives.
  rpx::Http1Parser::SetFastPathEnabled(false);
  Transcript llhttp_only = ParseResponses(data, size, {}, limits, head_answers);
  rpx::Http1Parser::SetFastPathEnabled(true);
  CheckSameTranscript(whole, llhttp_only, {}, "llhttp only (no fast path)");
  return 0;
}
