#include "source/http/local_reply.h"

#include "gtest/gtest.h"

namespace rpx {
namespace {

std::shared_ptr<const Formatter> Text(const std::string& f) { return *Formatter::Text(f, {}); }

TEST(LocalReplyTest, FirstMatchingMapperThenTheFormat) {
  LocalReply reply;
  LocalReplyMapper m1;
  m1.filter = std::make_unique<ComparisonLogFilter>(ComparisonLogFilter::Field::kStatusCode,
                                                    ComparisonLogFilter::Op::kEq, 404);
  m1.status = 410;
  m1.has_body = true;
  m1.body = "gone";
  HeaderToAdd code;
  code.key = "x-code";
  code.formatter = Text("%RESPONSE_CODE%");
  code.action = HeaderToAdd::Action::kOverwriteOrAdd;
  m1.headers.add.push_back(code);
  reply.mappers.push_back(std::move(m1));
  LocalReplyMapper m2;  // no filter: every reply; never reached for a 404
  m2.status = 599;
  reply.mappers.push_back(std::move(m2));
  reply.body_format = Text("[%RESPONSE_CODE%] %LOCAL_REPLY_BODY%");
  reply.content_type = "text/x-rpx";

  StreamInfo info;
  FormatContext ctx;
  int status = 404;
  std::string body = "no route", type = "text/plain";
  HeaderMap headers;
  reply.Rewrite(ctx, info, &status, &body, &headers, &type);
  EXPECT_EQ(status, 410);
  EXPECT_EQ(body, "[410] gone");
  EXPECT_EQ(type, "text/x-rpx");
  EXPECT_EQ(*headers.Get("x-code"), "410");

  status = 503;
  body = "down";
  headers = HeaderMap();
  reply.Rewrite(ctx, info, &status, &body, &headers, &type);
  EXPECT_EQ(status, 599);
  EXPECT_EQ(body, "[599] down");
  EXPECT_FALSE(headers.Get("x-code"));
}

TEST(LocalReplyTest, NoFormatKeepsTheBody) {
  LocalReply reply;
  StreamInfo info;
  FormatContext ctx;
  int status = 502;
  std::string body = "bad gateway", type = "text/plain";
  HeaderMap headers;
  reply.Rewrite(ctx, info, &status, &body, &headers, &type);
  EXPECT_EQ(status, 502);
  EXPECT_EQ(body, "bad gateway");
  EXPECT_EQ(type, "text/plain");
  EXPECT_EQ(info.response_code, 502);
}

}  // namespace
}  // namespace rpx
