#include "source/http/http1_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

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
  auto r = Feed(p, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok");
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

}  // namespace
}  // namespace rpx
