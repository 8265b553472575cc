#include "source/http/conn_manager.h"

#include "gtest/gtest.h"

namespace rpx {
namespace {

// An access-log filter that only watches: it records what each Log call saw and logs nothing.
class Watch : public AccessLogFilter {
 public:
  explicit Watch(std::vector<FormatContext>* seen) : seen_(seen) {}
  bool Matches(const FormatContext& ctx) const override {
    seen_->push_back(ctx);
    return false;
  }

 private:
  std::vector<FormatContext>* seen_;
};

std::shared_ptr<const AccessLog> WatchingLog(std::vector<FormatContext>* seen) {
  auto log = std::make_shared<AccessLog>();
  log->filter = std::make_unique<Watch>(seen);
  return log;
}

class ConnManagerTest : public ::testing::Test {
 protected:
  HttpConfig config_;
  HttpStats stats_;
  Dispatcher dispatcher_{"test"};
  StreamInfo info_;
  std::vector<FormatContext> logged_;
};

TEST_F(ConnManagerTest, StartAndEndCountTheStreamAndLogItOnce) {
  config_.record_durations = true;
  config_.record_start_time = true;
  config_.access_logs.push_back(WatchingLog(&logged_));
  uint64_t start = conn_manager::StreamStarted(config_, stats_, dispatcher_, info_, true);
  EXPECT_EQ(start, dispatcher_.NowMs());
  EXPECT_EQ(stats_.downstream_rq_total.Value(), 1u);
  EXPECT_EQ(stats_.downstream_rq_active.Value(), 1);
  EXPECT_NE(info_.start_ns, 0u);
  EXPECT_EQ(info_.request_end_ns, info_.start_ns);  // the head ended the request
  EXPECT_NE(info_.start_unix_ns, 0);
  EXPECT_TRUE(logged_.empty());

  info_.response_headers = std::make_unique<HeaderMap>();
  RequestHead request;
  conn_manager::StreamEnded(config_, stats_, dispatcher_, info_, start,
                            conn_manager::Context(config_, &request, nullptr));
  EXPECT_EQ(stats_.downstream_rq_active.Value(), 0);
  EXPECT_EQ(stats_.downstream_rq_total.Value(), 1u);
  ASSERT_EQ(logged_.size(), 1u);
  EXPECT_EQ(logged_[0].info, &info_);
  EXPECT_EQ(logged_[0].request, &request);
  EXPECT_EQ(logged_[0].response_headers, info_.response_headers.get());
  EXPECT_GE(info_.end_ns, info_.start_ns);
}

TEST_F(ConnManagerTest, StartWithABodyToComeLeavesTheRequestOpen) {
  config_.record_durations = true;
  conn_manager::StreamStarted(config_, stats_, dispatcher_, info_, false);
  EXPECT_NE(info_.start_ns, 0u);
  EXPECT_EQ(info_.request_end_ns, 0u);
  EXPECT_EQ(info_.start_unix_ns, 0);  // not asked for
}

TEST_F(ConnManagerTest, ContextCarriesTheSchemeToOverwrite) {
  EXPECT_EQ(conn_manager::Context(config_, nullptr, nullptr).scheme, nullptr);
  config_.scheme_to_overwrite = "https";
  const std::string* scheme = conn_manager::Context(config_, nullptr, nullptr).scheme;
  ASSERT_NE(scheme, nullptr);
  EXPECT_EQ(*scheme, "https");
}

TEST_F(ConnManagerTest, EachTimeoutCountsItsStatAndFlag) {
  conn_manager::TimeoutReply idle =
      conn_manager::StreamTimedOut(conn_manager::StreamTimeout::kIdle, stats_, info_);
  EXPECT_EQ(stats_.downstream_rq_idle_timeout.Value(), 1u);
  EXPECT_TRUE(info_.response_flags & kStreamIdleTimeout);
  EXPECT_EQ(idle.status, 408);
  EXPECT_STREQ(idle.details, "stream_idle_timeout");
  EXPECT_EQ(idle.grpc_status, -1);

  StreamInfo second;
  conn_manager::TimeoutReply request =
      conn_manager::StreamTimedOut(conn_manager::StreamTimeout::kRequest, stats_, second);
  EXPECT_EQ(stats_.downstream_rq_timeout.Value(), 1u);
  EXPECT_TRUE(second.response_flags & kDurationTimeout);
  EXPECT_FALSE(second.response_flags & kStreamIdleTimeout);
  EXPECT_STREQ(request.details, "request_overall_timeout");

  StreamInfo third;
  conn_manager::TimeoutReply duration =
      conn_manager::StreamTimedOut(conn_manager::StreamTimeout::kMaxDuration, stats_, third);
  EXPECT_EQ(stats_.downstream_rq_max_duration_reached.Value(), 1u);
  EXPECT_TRUE(third.response_flags & kDurationTimeout);
  EXPECT_STREQ(duration.details, "max_duration_timeout");
  EXPECT_EQ(duration.grpc_status, 4);  // DEADLINE_EXCEEDED
  EXPECT_EQ(stats_.downstream_rq_idle_timeout.Value(), 1u);
  EXPECT_EQ(stats_.downstream_rq_timeout.Value(), 1u);
}

TEST_F(ConnManagerTest, LocalReplyWithoutConfigKeepsItsPartsButNeverAnInterimStatus) {
  HeaderMap extra;
  extra.Add("x-a", "1");
  conn_manager::LocalReplyParts reply{101, "body", "text/plain", &extra};
  conn_manager::PrepareLocalReply(config_, FormatContext(), info_, reply);
  EXPECT_EQ(reply.status, 500);
  EXPECT_EQ(reply.body, "body");
  EXPECT_EQ(reply.headers, &extra);

  conn_manager::LocalReplyParts no_content{204, "direct body", "text/plain", nullptr};
  conn_manager::PrepareLocalReply(config_, FormatContext(), info_, no_content);
  EXPECT_EQ(no_content.status, 204);
  EXPECT_TRUE(no_content.body.empty());
}

TEST_F(ConnManagerTest, LocalReplyConfigRewritesStatusBodyTypeAndHeaders) {
  auto local = std::make_shared<LocalReply>();
  LocalReplyMapper m;
  m.filter = std::make_unique<ComparisonLogFilter>(ComparisonLogFilter::Field::kStatusCode,
                                                   ComparisonLogFilter::Op::kEq, 503);
  m.status = 204;  // a rewrite to a no-body status drops the body too
  m.has_body = true;
  m.body = "unavailable";
  HeaderToAdd h;
  h.key = "x-rewritten";
  h.formatter = *Formatter::Text("yes", {});
  h.action = HeaderToAdd::Action::kOverwriteOrAdd;
  m.headers.add.push_back(h);
  local->mappers.push_back(std::move(m));
  local->body_format = *Formatter::Text("<%LOCAL_REPLY_BODY%>", {});
  local->content_type = "text/html";
  config_.local_reply = local;

  HeaderMap extra;
  extra.Add("x-a", "1");
  conn_manager::LocalReplyParts reply{404, "no route", "text/plain", &extra};
  conn_manager::PrepareLocalReply(config_, FormatContext(), info_, reply);
  EXPECT_EQ(reply.status, 404);
  EXPECT_EQ(reply.body, "<no route>");
  EXPECT_EQ(reply.content_type, "text/html");
  ASSERT_NE(reply.headers, nullptr);
  EXPECT_EQ(*reply.headers->Get("x-a"), "1");
  EXPECT_FALSE(reply.headers->Get("x-rewritten"));
  EXPECT_EQ(info_.response_code, 404);

  conn_manager::LocalReplyParts matched{503, "down", "text/plain", nullptr};
  conn_manager::PrepareLocalReply(config_, FormatContext(), info_, matched);
  EXPECT_EQ(matched.status, 204);
  EXPECT_TRUE(matched.body.empty());
  EXPECT_EQ(*matched.headers->Get("x-rewritten"), "yes");
  EXPECT_EQ(info_.response_code, 204);
}

}  // namespace
}  // namespace rpx
