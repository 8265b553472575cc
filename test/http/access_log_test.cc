#include "source/http/access_log.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace rpx {
namespace {

FormatContext Ctx(const StreamInfo& info, const RequestHead* req = nullptr) {
  FormatContext c;
  c.info = &info;
  c.request = req;
  return c;
}

TEST(AccessLogTest, ComparisonFilters) {
  StreamInfo info;
  info.response_code = 503;
  ComparisonLogFilter ge500(ComparisonLogFilter::Field::kStatusCode, ComparisonLogFilter::Op::kGe,
                            500);
  ComparisonLogFilter eq200(ComparisonLogFilter::Field::kStatusCode, ComparisonLogFilter::Op::kEq,
                            200);
  ComparisonLogFilter le399(ComparisonLogFilter::Field::kStatusCode, ComparisonLogFilter::Op::kLe,
                            399);
  EXPECT_TRUE(ge500.Matches(Ctx(info)));
  EXPECT_FALSE(eq200.Matches(Ctx(info)));
  EXPECT_FALSE(le399.Matches(Ctx(info)));
  info.response_code = 200;
  EXPECT_FALSE(ge500.Matches(Ctx(info)));
  EXPECT_TRUE(eq200.Matches(Ctx(info)));
  EXPECT_TRUE(le399.Matches(Ctx(info)));

  ComparisonLogFilter slow(ComparisonLogFilter::Field::kDuration, ComparisonLogFilter::Op::kGe,
                           1000);
  info.start_ns = 5000000000;
  info.end_ns = info.start_ns + 999999999;
  EXPECT_FALSE(slow.Matches(Ctx(info)));
  info.end_ns = info.start_ns + 1000000000;
  EXPECT_TRUE(slow.Matches(Ctx(info)));
}

TEST(AccessLogTest, AndOrAndFlags) {
  StreamInfo info;
  info.response_code = 503;
  info.response_flags = kNoHealthyUpstream;
  auto make = [](bool is_and, uint32_t flags, int status) {
    std::vector<std::unique_ptr<const AccessLogFilter>> v;
    v.push_back(std::make_unique<ResponseFlagLogFilter>(flags));
    v.push_back(std::make_unique<ComparisonLogFilter>(ComparisonLogFilter::Field::kStatusCode,
                                                      ComparisonLogFilter::Op::kEq, status));
    return AndOrLogFilter(is_and, std::move(v));
  };
  EXPECT_TRUE(make(true, kNoHealthyUpstream, 503).Matches(Ctx(info)));
  EXPECT_FALSE(make(true, kUpstreamOverflow, 503).Matches(Ctx(info)));
  EXPECT_TRUE(make(false, kUpstreamOverflow, 503).Matches(Ctx(info)));
  EXPECT_FALSE(make(false, kUpstreamOverflow, 200).Matches(Ctx(info)));
  // No flags listed: any flag at all.
  EXPECT_TRUE(ResponseFlagLogFilter(0).Matches(Ctx(info)));
  info.response_flags = 0;
  EXPECT_FALSE(ResponseFlagLogFilter(0).Matches(Ctx(info)));
}

TEST(AccessLogTest, SamplingFollowsTheRequestId) {
  StreamInfo info;
  SampleLogFilter none(0, 100, false), all(100, 100, false), half(50, 100, false);
  int picked = 0;
  for (int i = 0; i < 2000; ++i) {
    RequestHead req;
    req.headers.Add("x-request-id", "id-" + std::to_string(i));
    EXPECT_FALSE(none.Matches(Ctx(info, &req)));
    EXPECT_TRUE(all.Matches(Ctx(info, &req)));
    bool h = half.Matches(Ctx(info, &req));
    EXPECT_EQ(h, half.Matches(Ctx(info, &req))) << "the same id decides the same way";
    picked += h;
  }
  EXPECT_GT(picked, 800);
  EXPECT_LT(picked, 1200);
}

TEST(AccessLogTest, LogWritesFormattedLinesThatPassTheFilter) {
  char dir[] = "/tmp/rpx-access-log-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/a.log";
  auto file = std::make_shared<LogFile>(path, -1, 1);
  std::string error;
  ASSERT_TRUE(file->Start(&error)) << error;
  AccessLog log;
  log.formatter = *Formatter::Text("%RESPONSE_CODE% %REQ(:PATH)%\n", {});
  log.filter = std::make_unique<ComparisonLogFilter>(ComparisonLogFilter::Field::kStatusCode,
                                                     ComparisonLogFilter::Op::kGe, 400);
  log.file = file;
  StreamInfo info;
  RequestHead req;
  req.path = "/a";
  info.response_code = 200;
  log.Log(Ctx(info, &req), 0);
  info.response_code = 404;
  req.path = "/b";
  log.Log(Ctx(info, &req), 0);
  file->Stop();
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "404 /b\n");
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace rpx
