#include "source/http/http1_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "test/common/allocation_counter.h"

namespace rpx {
namespace {

class Recorder : public Http1ParserCallbacks {
 public:
  void OnHead() override { ++heads; }
  void OnBody(const char* data, size_t len) override { body.append(data, len); }
  void OnMessageComplete() override { ++completes; }
  int heads = 0;
  int completes = 0;
  std::string body;
};

struct Parsed {
  Http1Parser::Result result;
  size_t consumed;
};

Parsed Feed(Http1Parser& p, const std::string& data) {
  size_t consumed = 0;
  auto r = p.Execute(data.data(), data.size(), &consumed);
  return {r, consumed};
}

// Parsers released after a batch of hundreds of requests are all kept and handed out again:
// parsing the next batch allocates nothing (the pool holds a worker's requests in flight, up to
// kPoolSize; at 64 it freed the rest and allocated them anew). Counted with the global operator new
// (//test/common:allocation_counter), since a freed parser's address is often handed out again by
// malloc.
TEST(Http1ParserTest, PoolHandsBackTheParsersOfALargeBatch) {
  if (!AllocationsCounted()) GTEST_SKIP() << "operator new is not counted in this build (ASan)";
  constexpr size_t kBatch = 500;
  Recorder rec;
  std::vector<std::unique_ptr<Http1Parser>> held;
  held.reserve(kBatch);
  for (size_t i = 0; i < kBatch; ++i) {
    held.push_back(Http1Parser::Acquire(Http1Parser::Type::kRequest, rec, {}));
    ASSERT_EQ(Feed(*held.back(), "GET / HTTP/1.1\r\nHost: a\r\n\r\n").result,
              Http1Parser::Result::kPaused);
  }
  for (auto& p : held) Http1Parser::Release(std::move(p));
  held.clear();
  const std::string next = "GET /x HTTP/1.1\r\nHost: b\r\n\r\n";
  uint64_t before = AllocationCount();
  for (size_t i = 0; i < kBatch; ++i) {
    held.push_back(Http1Parser::Acquire(Http1Parser::Type::kRequest, rec, {}));
    // A pooled parser starts clean.
    ASSERT_EQ(Feed(*held.back(), next).result, Http1Parser::Result::kPaused);
  }
  EXPECT_EQ(AllocationCount() - before, 0u);
  for (auto& p : held) Http1Parser::Release(std::move(p));
}

TEST(Http1ParserTest, ParsesRequestHead) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kRequest, rec, {});
  auto r = Feed(p, "GET /a?b=c HTTP/1.1\r\nHost: Example.com\r\nX-Thing:  v  \r\n\r\n");
  EXPECT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_EQ(rec.heads, 1);
  EXPECT_EQ(rec.completes, 1);
  const RequestHead& h = p.request();
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.path, "/a?b=c");
  EXPECT_EQ(h.host, "Example.com");
  EXPECT_EQ(*h.headers.Get("x-thing"), "v");  // names lower-cased, value trimmed
  EXPECT_TRUE(h.keep_alive);
  EXPECT_FALSE(h.has_body());
}

TEST(Http1ParserTest, PausesBetweenPipelinedRequests) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kRequest, rec, {});
  std::string two = "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n";
  auto r = Feed(p, two);
  ASSERT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_EQ(p.request().path, "/1");
  EXPECT_EQ(r.consumed, two.size() / 2);
  p.Resume();
  auto r2 = Feed(p, two.substr(r.consumed));
  EXPECT_EQ(r2.result, Http1Parser::Result::kPaused);
  EXPECT_EQ(p.request().path, "/2");
  EXPECT_EQ(rec.completes, 2);
}

TEST(Http1ParserTest, ChunkedBodyIsDechunked) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kRequest, rec, {});
  auto r = Feed(p,
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  EXPECT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_TRUE(p.request().chunked);
  EXPECT_EQ(rec.body, "hello world");
}

// After a chunk's data come CR LF and nothing else. llhttp 8.1 built without its strict mode skips
// any two bytes there, so "3\r\nabcdef" read "def" as the next chunk's size (0xdef) and the bytes
// after it as data: a framing a strict parser in front of or behind rpx would not share.
TEST(Http1ParserTest, ChunkDataMustEndWithCrlf) {
  for (const char* after : {"def\r\n0\r\n\r\n", "\n\n0\r\n\r\n", "XY0\r\n\r\n"}) {
    Recorder rec;
    Http1Parser p(Http1Parser::Type::kRequest, rec, {});
    std::string req = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc";
    EXPECT_EQ(Feed(p, req + after).result, Http1Parser::Result::kError) << after;
    EXPECT_EQ(p.error_status(), 400) << after;
    EXPECT_EQ(rec.completes, 0) << after;

    Recorder rrec;
    Http1Parser r(Http1Parser::Type::kResponse, rrec, {});
    std::string resp = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc";
    EXPECT_EQ(Feed(r, resp + after).result, Http1Parser::Result::kError) << after;
    EXPECT_EQ(r.error_status(), 502) << after;
    EXPECT_EQ(rrec.completes, 0) << after;
  }
}

TEST(Http1ParserTest, ContentLengthBodyAcrossReads) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kRequest, rec, {});
  auto r = Feed(p, "PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n01234");
  EXPECT_EQ(r.result, Http1Parser::Result::kOk);
  EXPECT_EQ(p.request().content_length, 10u);
  r = Feed(p, "56789");
  EXPECT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_EQ(rec.body, "0123456789");
}

TEST(Http1ParserTest, Http10DefaultsToClose) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kRequest, rec, {});
  Feed(p, "GET / HTTP/1.0\r\n\r\n");
  EXPECT_FALSE(p.request().keep_alive);
  EXPECT_EQ(p.request().version_minor, 0);
}

TEST(Http1ParserTest, MissingHostOn11Is400) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kRequest, rec, {});
  EXPECT_EQ(Feed(p, "GET / HTTP/1.1\r\n\r\n").result, Http1Parser::Result::kError);
  EXPECT_EQ(p.error_status(), 400);
}

TEST(Http1ParserTest, ContentLengthWithTransferEncodingIsRejected) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kRequest, rec, {});
  auto r = Feed(p,
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n"
                "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(r.result, Http1Parser::Result::kError);
  EXPECT_EQ(p.error_status(), 400);
  EXPECT_EQ(rec.heads, 0);
}

TEST(Http1ParserTest, ObsFoldIsRejectedEvenAcrossReads) {
  for (size_t split : {0, 30, 31, 32, 33}) {
    Recorder rec;
    Http1Parser p(Http1Parser::Type::kRequest, rec, {});
    std::string req = "GET / HTTP/1.1\r\nHost: h\r\nX-Folded: a\r\n b\r\n\r\n";
    Http1Parser::Result r;
    size_t consumed = 0;
    if (split == 0) {
      r = p.Execute(req.data(), req.size(), &consumed);
    } else {
      r = p.Execute(req.data(), split, &consumed);
      if (r == Http1Parser::Result::kOk) {
        r = p.Execute(req.data() + split, req.size() - split, &consumed);
      }
    }
    EXPECT_EQ(r, Http1Parser::Result::kError) << "split at " << split;
    EXPECT_EQ(p.error_status(), 400);
    EXPECT_EQ(rec.heads, 0);
  }
}

TEST(Http1ParserTest, HeaderValueSplitAcrossReadsIsNotAFold) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kRequest, rec, {});
  std::string req = "GET / HTTP/1.1\r\nHost: h\r\nX-Long: abc def\r\n\r\n";
  size_t consumed;
  size_t split = req.find("def");
  ASSERT_EQ(p.Execute(req.data(), split, &consumed), Http1Parser::Result::kOk);
  EXPECT_EQ(p.Execute(req.data() + split, req.size() - split, &consumed),
            Http1Parser::Result::kPaused);
  EXPECT_EQ(*p.request().headers.Get("x-long"), "abc def");
}

TEST(Http1ParserTest, HeaderLimits) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kRequest, rec, {1024, 100});
  std::string big = "GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n";
  EXPECT_EQ(Feed(p, big).result, Http1Parser::Result::kError);
  EXPECT_EQ(p.error_status(), 431);

  Recorder rec2;
  Http1Parser q(Http1Parser::Type::kRequest, rec2, {60 * 1024, 5});
  std::string many = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (int i = 0; i < 10; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  many += "\r\n";
  EXPECT_EQ(Feed(q, many).result, Http1Parser::Result::kError);
  EXPECT_EQ(q.error_status(), 431);
}

TEST(Http1ParserTest, AbsoluteFormTargetSetsHost) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kRequest, rec, {});
  Feed(p, "GET http://up.example:81/x?y HTTP/1.1\r\nHost: other\r\n\r\n");
  EXPECT_EQ(p.request().host, "up.example:81");
  EXPECT_EQ(p.request().path, "/x?y");
}

TEST(Http1ParserTest, ResponseToHeadHasNoBody) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, {});
  p.set_expect_no_body(true);
  auto r = Feed(p, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n");
  EXPECT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_EQ(p.response().content_length, 100u);
  EXPECT_TRUE(rec.body.empty());
}

TEST(Http1ParserTest, InterimResponsesAreSkippedToTheFinalOne) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, {});
  auto r =
      Feed(p, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok");
  EXPECT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_EQ(p.response().status, 201);
  EXPECT_EQ(rec.body, "ok");
  EXPECT_EQ(rec.completes, 1);
}

TEST(Http1ParserTest, CloseDelimitedResponseEndsAtFinish) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, {});
  auto r = Feed(p, "HTTP/1.0 200 OK\r\n\r\nsome body");
  EXPECT_EQ(r.result, Http1Parser::Result::kOk);
  EXPECT_TRUE(p.message_needs_eof());
  EXPECT_EQ(p.Finish(), Http1Parser::Result::kOk);
  EXPECT_EQ(rec.body, "some body");
  EXPECT_EQ(rec.completes, 1);
}

TEST(Http1ParserTest, MalformedResponseIs502) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, {});
  EXPECT_EQ(Feed(p, "garbage\r\n\r\n").result, Http1Parser::Result::kError);
  EXPECT_EQ(p.error_status(), 502);
}

// Runs a test with the parser's fast path on (true) and off (false): the results must not differ.
class FastPathOnAndOffTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { Http1Parser::SetFastPathEnabled(GetParam()); }
  void TearDown() override { Http1Parser::SetFastPathEnabled(true); }
};

// Responses the fast path takes (and a few it hands to llhttp).
class ResponsePathTest : public FastPathOnAndOffTest {};

INSTANTIATE_TEST_SUITE_P(FastPathOnAndOff, ResponsePathTest, ::testing::Bool());

TEST_P(ResponsePathTest, TypicalResponseWithItsBodyInLaterReads) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, {});
  std::string head =
      "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n"
      "Connection: keep-alive\r\nETag: \"a-b\"\r\nX-Empty:\r\nX-Pad: v \t\r\n\r\n";
  auto r = Feed(p, head + "0123");
  EXPECT_EQ(r.result, Http1Parser::Result::kOk);
  EXPECT_EQ(r.consumed, head.size() + 4);
  EXPECT_EQ(rec.heads, 1);
  const ResponseHead& h = p.response();
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.reason, "OK");
  EXPECT_EQ(h.version_minor, 1);
  EXPECT_TRUE(h.keep_alive);
  EXPECT_TRUE(h.has_content_length);
  EXPECT_EQ(h.content_length, 10u);
  ASSERT_EQ(h.headers.size(), 7u);
  EXPECT_EQ(h.headers[0].name, "server");
  EXPECT_EQ(*h.headers.Get("etag"), "\"a-b\"");
  EXPECT_EQ(*h.headers.Get("x-empty"), "");
  EXPECT_EQ(*h.headers.Get("x-pad"), "v");
  EXPECT_TRUE(p.in_message());
  EXPECT_FALSE(p.message_needs_eof());
  EXPECT_EQ(p.remaining_body_length(), 6u);
  r = Feed(p, "456");
  EXPECT_EQ(r.result, Http1Parser::Result::kOk);
  EXPECT_EQ(p.remaining_body_length(), 3u);
  r = Feed(p, "789HTTP/1.1 204 No Content\r\n\r\n");
  EXPECT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_EQ(r.consumed, 3u);
  EXPECT_EQ(rec.body, "0123456789");
  EXPECT_EQ(rec.completes, 1);
  EXPECT_FALSE(p.in_message());
  p.Resume();
  r = Feed(p, "HTTP/1.1 204 No Content\r\n\r\n");  // (not the fast path's: no body)
  EXPECT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_EQ(p.response().status, 204);
  EXPECT_EQ(rec.completes, 2);
}

TEST_P(ResponsePathTest, EofInsideTheBodyIsAnError) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, {});
  EXPECT_EQ(Feed(p, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab").result,
            Http1Parser::Result::kOk);
  EXPECT_EQ(p.Finish(), Http1Parser::Result::kError);
  EXPECT_EQ(p.error_status(), 502);
  EXPECT_EQ(rec.completes, 0);
}

TEST_P(ResponsePathTest, SplicedBodyThenTheNextResponse) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, {});
  Feed(p, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
  EXPECT_EQ(p.remaining_body_length(), 100000u);
  p.SkipRemainingBody();  // the body went past the parser
  EXPECT_FALSE(p.in_message());
  EXPECT_EQ(p.remaining_body_length(), 0u);
  auto r = Feed(p, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
  EXPECT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_EQ(rec.body, "hi");
}

TEST_P(ResponsePathTest, Http10KeepsAliveOnlyWhenItSaysSo) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, {});
  EXPECT_EQ(
      Feed(p, "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n").result,
      Http1Parser::Result::kPaused);
  EXPECT_TRUE(p.response().keep_alive);
  EXPECT_EQ(p.response().version_minor, 0);
  p.Resume();
  EXPECT_EQ(Feed(p, "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").result,
            Http1Parser::Result::kPaused);
  EXPECT_FALSE(p.response().keep_alive);
}

// After a response that closes the connection nothing more is parsed (llhttp drops what follows),
// not even a response the fast path would take.
TEST_P(ResponsePathTest, NothingIsParsedAfterConnectionClose) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, {});
  auto r = Feed(p, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx");
  EXPECT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_FALSE(p.response().keep_alive);
  p.Resume();
  EXPECT_NE(Feed(p, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").result,
            Http1Parser::Result::kPaused);
  EXPECT_EQ(rec.heads, 1);
  EXPECT_EQ(rec.completes, 1);
}

// What llhttp refuses stays refused where the fast path looks first.
TEST_P(ResponsePathTest, MalformedHeadsAreRefusedEitherWay) {
  for (const char* bad : {
           "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx",
           "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\nx",
           "HTTP/1.1 200 OK\r\nBad\x01Name: v\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent Length: 5\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
           "HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
       }) {
    Recorder rec;
    Http1Parser p(Http1Parser::Type::kResponse, rec, {});
    EXPECT_EQ(Feed(p, bad).result, Http1Parser::Result::kError) << bad;
    EXPECT_EQ(p.error_status(), 502) << bad;
    EXPECT_EQ(rec.heads, 0) << bad;
  }
}

TEST_P(ResponsePathTest, HeaderCountLimitHolds) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, Http1Parser::Limits{80 * 1024, 3});
  EXPECT_EQ(Feed(p, "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nContent-Length: 0\r\n\r\n").result,
            Http1Parser::Result::kPaused);
  p.Resume();
  EXPECT_EQ(Feed(p, "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nContent-Length: 0\r\n\r\n").result,
            Http1Parser::Result::kError);
}

struct Outcome {
  Http1Parser::Result result;
  size_t consumed;
  int error_status;
  std::string head;
  std::string body;
  bool operator==(const Outcome& o) const {
    return result == o.result && consumed == o.consumed && error_status == o.error_status &&
           head == o.head && body == o.body;
  }
};

Outcome ParseResponseOnce(const std::string& data, bool fast) {
  Http1Parser::SetFastPathEnabled(fast);
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kResponse, rec, {});
  Outcome o;
  o.result = p.Execute(data.data(), data.size(), &o.consumed);
  Http1Parser::SetFastPathEnabled(true);
  o.error_status = p.error_status();
  if (rec.heads) {
    o.head = std::to_string(p.response().status) + " " + p.response().reason;
    for (const HeaderMap::Field f : p.response().headers) {
      o.head.append("|").append(f.name).append("=").append(f.value);
    }
  }
  o.body = rec.body;
  return o;
}

// Values are scanned 16 bytes at a time: a tab, a DEL, a control byte or a byte >= 0x80 at every
// position of a long value gives what llhttp alone gives.
TEST(Http1ParserTest, FastPathScansLongValuesAsLlhttpDoes) {
  for (char odd : {'\t', '\x7f', '\x01', '\x80', '\xff', '\0'}) {
    for (size_t at = 0; at < 40; ++at) {
      std::string value(40, 'v');
      value[at] = odd;
      std::string response =
          "HTTP/1.1 200 OK\r\nX-Long: " + value + "\r\nContent-Length: 2\r\n\r\nok";
      Outcome fast = ParseResponseOnce(response, true);
      Outcome llhttp = ParseResponseOnce(response, false);
      EXPECT_TRUE(fast == llhttp) << "byte " << int(static_cast<unsigned char>(odd)) << " at " << at
                                  << ": " << fast.head << " vs " << llhttp.head;
      if (odd == '\t') EXPECT_EQ(fast.result, Http1Parser::Result::kPaused) << at;
    }
  }
}

// Requests the fast path takes (and some it hands to llhttp).
class RequestPathTest : public FastPathOnAndOffTest {};

INSTANTIATE_TEST_SUITE_P(FastPathOnAndOff, RequestPathTest, ::testing::Bool());

TEST_P(RequestPathTest, PlainRequestsBackToBack) {
  Recorder rec;
  Http1Parser p(Http1Parser::Type::kRequest, rec, {});
  std::string get =
      "GET /a/b?c=%41&d=e HTTP/1.1\r\nHost: Example.com:8080\r\nUser-Agent: t\r\n\r\n";
  std::string post =
      "POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-Continue\r\n\r\n";
  auto r = Feed(p, get + post + "he");
  ASSERT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_EQ(r.consumed, get.size());
  const RequestHead& h = p.request();
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.path, "/a/b?c=%41&d=e");
  EXPECT_EQ(h.host, "Example.com:8080");
  EXPECT_EQ(h.version_minor, 1);
  EXPECT_TRUE(h.keep_alive);
  EXPECT_FALSE(h.has_body());
  EXPECT_FALSE(h.expect_continue);
  EXPECT_EQ(*h.headers.Get("user-agent"), "t");
  p.Resume();
  r = Feed(p, post + "he");
  EXPECT_EQ(r.result, Http1Parser::Result::kOk);
  EXPECT_EQ(p.request().method, "POST");
  EXPECT_TRUE(p.request().has_content_length);
  EXPECT_EQ(p.request().content_length, 5u);
  EXPECT_TRUE(p.request().expect_continue);
  EXPECT_EQ(p.remaining_body_length(), 3u);
  r = Feed(p, "llo");
  EXPECT_EQ(r.result, Http1Parser::Result::kPaused);
  EXPECT_EQ(rec.body, "hello");
  EXPECT_EQ(rec.completes, 2);
}

TEST_P(RequestPathTest, KeepAliveFollowsVersionAndConnection) {
  struct Case {
    const char* request;
    bool keep_alive;
  };
  for (const Case& c : {
           Case{"GET / HTTP/1.1\r\nHost: h\r\n\r\n", true},
           Case{"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", false},
           Case{"GET / HTTP/1.0\r\n\r\n", false},
           Case{"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
       }) {
    Recorder rec;
    Http1Parser p(Http1Parser::Type::kRequest, rec, {});
    EXPECT_EQ(Feed(p, c.request).result, Http1Parser::Result::kPaused) << c.request;
    EXPECT_EQ(p.request().keep_alive, c.keep_alive) << c.request;
  }
}

TEST_P(RequestPathTest, BadRequestsAreRefusedEitherWay) {
  struct Case {
    const char* request;
    int status;
  };
  for (const Case& c : {
           Case{"GET / HTTP/1.1\r\n\r\n", 400},                        // no Host
           Case{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},  // two
           Case{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
           Case{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
           Case{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
           Case{"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
           Case{"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", 400},     // raw bytes in a target
           Case{"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", 400},  // obs-fold
           Case{"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
           Case{"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
           Case{"GET / HTTP/1.1\r\nHost: a\r\nTransfer Encoding: chunked\r\n\r\n", 400},
           // Hosts that are not an authority (a path, userinfo, whitespace, a quote, non-ASCII).
           Case{"GET / HTTP/1.1\r\nHost: app/evil\r\n\r\n", 400},
           Case{"GET / HTTP/1.1\r\nHost: user@app\r\n\r\n", 400},
           Case{"GET / HTTP/1.1\r\nHost: app evil\r\n\r\n", 400},
           Case{"GET / HTTP/1.1\r\nHost: app\"\r\n\r\n", 400},
           Case{"GET / HTTP/1.1\r\nHost: app\\x\r\n\r\n", 400},
           Case{"GET / HTTP/1.1\r\nHost: \xc3\xa9.example\r\n\r\n", 400},
           Case{"GET http://user@app/ HTTP/1.1\r\nHost: app\r\n\r\n", 400},
           Case{"GET http://a{b}/ HTTP/1.1\r\nHost: app\r\n\r\n", 400},
       }) {
    Recorder rec;
    Http1Parser p(Http1Parser::Type::kRequest, rec, {});
    EXPECT_EQ(Feed(p, c.request).result, Http1Parser::Result::kError) << c.request;
    EXPECT_EQ(p.error_status(), c.status) << c.request;
    EXPECT_EQ(rec.heads, 0) << c.request;
  }
}

TEST_P(RequestPathTest, ValidAuthoritiesAreTakenEitherWay) {
  for (const char* host : {"app", "app.example:8080", "127.0.0.1:80", "[::1]:8443",
                           "xn--e1a.example", "a-b_c~d!$&'()*+,;=%41", ""}) {
    Recorder rec;
    Http1Parser p(Http1Parser::Type::kRequest, rec, {});
    std::string req = std::string("GET / HTTP/1.1\r\nHost: ") + host + "\r\n\r\n";
    EXPECT_NE(Feed(p, req).result, Http1Parser::Result::kError) << host;
    EXPECT_EQ(rec.heads, 1) << host;
    EXPECT_EQ(p.request().host, host);
  }
}

}  // namespace
}  // namespace rpx
