#include "source/upstream/outlier_detector.h"

#include <vector>

#include "gtest/gtest.h"

namespace rpx {
namespace {

constexpr uint64_t kWaitMs = 10000;  // generous: only a hang reaches it

std::shared_ptr<Host> MakeHost(uint16_t port) {
  auto h = std::make_shared<Host>();
  h->address = *SocketAddress::FromIpPort("127.0.0.1", port);
  h->AllocateStats(1);
  return h;
}

std::shared_ptr<ClusterInfo> MakeInfo(OutlierConfig c) {
  auto info = std::make_shared<ClusterInfo>();
  info->name = "svc";
  info->outlier = std::make_shared<OutlierConfig>(c);
  info->outlier_sink = std::make_shared<OutlierSink>();
  info->health = std::make_shared<ClusterHealth>();
  return info;
}

TEST(OutlierDetectorTest, StreaksAreReportedOnceWhenTheyReachTheirThreshold) {
  OutlierConfig c;
  c.consecutive_5xx = 3;
  c.consecutive_gateway_failure = 2;
  auto info = MakeInfo(c);
  std::vector<OutlierReason> heard;
  info->outlier_sink->Set([&](const SocketAddress&, OutlierReason r) { heard.push_back(r); });
  auto h = MakeHost(1000);
  ReportOutcome(*info, *h, 500);
  ReportOutcome(*info, *h, 500);
  EXPECT_TRUE(heard.empty());
  ReportOutcome(*info, *h, 500);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0], OutlierReason::kConsecutive5xx);
  ReportOutcome(*info, *h, 500);  // the same streak: not again
  EXPECT_EQ(heard.size(), 1u);
  ReportOutcome(*info, *h, 404);  // an answer below 500 ends every streak
  EXPECT_EQ(h->consecutive_5xx.load(), 0u);
  // Gateway failures (502-504) count in both streaks; a refused connection counts as a 503.
  ReportOutcome(*info, *h, 502);
  ReportOutcome(*info, *h, 0);
  ASSERT_EQ(heard.size(), 2u);
  EXPECT_EQ(heard[1], OutlierReason::kConsecutiveGatewayFailure);
  ReportOutcome(*info, *h, 500);
  ASSERT_EQ(heard.size(), 3u);
  EXPECT_EQ(heard[2], OutlierReason::kConsecutive5xx);
}

TEST(OutlierDetectorTest, SplitLocalOriginFailuresHaveTheirOwnStreak) {
  OutlierConfig c;
  c.split_external_local_origin_errors = true;
  c.consecutive_local_origin_failure = 2;
  c.consecutive_5xx = 2;
  auto info = MakeInfo(c);
  std::vector<OutlierReason> heard;
  info->outlier_sink->Set([&](const SocketAddress&, OutlierReason r) { heard.push_back(r); });
  auto h = MakeHost(1000);
  ReportOutcome(*info, *h, 0);
  ReportOutcome(*info, *h, 503);  // it answered: the local streak ends
  ReportOutcome(*info, *h, 0);
  EXPECT_TRUE(heard.empty());
  ReportOutcome(*info, *h, 0);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0], OutlierReason::kConsecutiveLocalOriginFailure);
  EXPECT_EQ(h->consecutive_5xx.load(), 1u);  // the 503 alone
}

TEST(OutlierDetectorTest, EjectsWithinMaxEjectionPercentAndBringsHostsBack) {
  Dispatcher d("test");
  OutlierConfig c;
  c.interval_ms = 10;
  c.base_ejection_time_ms = 50;
  c.max_ejection_percent = 50;
  auto info = MakeInfo(c);
  auto set = std::make_shared<HostSet>();
  std::vector<std::shared_ptr<Host>> hosts;
  for (uint16_t p = 1000; p < 1004; ++p) {
    hosts.push_back(MakeHost(p));
    set->push_back(hosts.back());
  }
  OutlierDetector detector(d, ClusterEntry{info, set});
  ClusterHealth& health = *info->health;
  EXPECT_EQ(health.hosts.load(), 4u);
  for (int i = 0; i < 3; ++i)
    info->outlier_sink->Notify(hosts[i]->address, OutlierReason::kConsecutive5xx);
  ASSERT_TRUE(d.RunUntil([&] { return health.ejections_overflow.load() == 1; }, kWaitMs));
  EXPECT_TRUE(hosts[0]->ejected.load());
  EXPECT_TRUE(hosts[1]->ejected.load());
  EXPECT_FALSE(hosts[2]->ejected.load());  // a third would be 75%
  EXPECT_EQ(health.unhealthy.load(), 2u);
  EXPECT_EQ(health.ejections_enforced_total.load(), 2u);
  // Back after base_ejection_time.
  ASSERT_TRUE(d.RunUntil([&] { return health.ejections_active.load() == 0; }, kWaitMs));
  EXPECT_FALSE(hosts[0]->ejected.load());
  EXPECT_EQ(health.unhealthy.load(), 0u);
  // A host kept across an update keeps its ejection.
  info->outlier_sink->Notify(hosts[3]->address, OutlierReason::kConsecutive5xx);
  ASSERT_TRUE(d.RunUntil([&] { return hosts[3]->ejected.load(); }, kWaitMs));
  auto same = MakeHost(1003);
  auto next = std::make_shared<HostSet>(HostSet{same});
  detector.Update(ClusterEntry{info, next});
  EXPECT_TRUE(same->ejected.load());
  EXPECT_EQ(health.hosts.load(), 1u);
  EXPECT_EQ(health.ejections_active.load(), 1u);
  detector.Update(ClusterEntry{info, std::make_shared<HostSet>(HostSet{MakeHost(1009)})});
  EXPECT_EQ(health.ejections_active.load(), 0u);  // the ejected host left
}

TEST(OutlierDetectorTest, EjectionsInARowLastLonger) {
  Dispatcher d("test");
  OutlierConfig c;
  c.interval_ms = 200;
  c.base_ejection_time_ms = 50;
  c.max_ejection_time_ms = 120;
  c.max_ejection_percent = 100;
  auto info = MakeInfo(c);
  auto host = MakeHost(1000);
  OutlierDetector detector(d, ClusterEntry{info, std::make_shared<HostSet>(HostSet{host})});
  ClusterHealth& health = *info->health;
  std::vector<uint64_t> ejected_for;
  for (int i = 0; i < 3; ++i) {
    // Ejected again as soon as it is back: well within the 200 ms interval that would forgive
    // one ejection in a row.
    info->outlier_sink->Notify(host->address, OutlierReason::kConsecutive5xx);
    ASSERT_TRUE(d.RunUntil(
        [&] { return health.ejections_enforced_total.load() == static_cast<uint64_t>(i + 1); },
        kWaitMs));
    ejected_for.push_back(detector.EjectedForMs(host->address.ToString()));
    ASSERT_TRUE(d.RunUntil([&] { return !host->ejected.load(); }, kWaitMs));
  }
  // base x 1, base x 2, then capped at max_ejection_time.
  EXPECT_EQ(ejected_for, (std::vector<uint64_t>{50, 100, 120}));
}

TEST(OutlierDetectorTest, SuccessRateEjectsTheHostFarBelowTheOthers) {
  Dispatcher d("test");
  OutlierConfig c;
  c.interval_ms = 10;
  c.max_ejection_percent = 50;
  c.success_rate_minimum_hosts = 5;
  c.success_rate_request_volume = 100;
  c.success_rate_stdev_factor = 1000;  // one standard deviation below the mean
  auto info = MakeInfo(c);
  auto set = std::make_shared<HostSet>();
  std::vector<std::shared_ptr<Host>> hosts;
  for (uint16_t p = 1000; p < 1005; ++p) {
    hosts.push_back(MakeHost(p));
    set->push_back(hosts.back());
  }
  // Four hosts answer all 200 requests well; one half of its 200 (success rates 100 x 4 and 50:
  // mean 90, standard deviation 20, threshold 70).
  for (int i = 0; i < 4; ++i) hosts[i]->StatsFor(0)->rq_success.Inc(200);
  hosts[4]->StatsFor(0)->rq_success.Inc(100);
  hosts[4]->StatsFor(0)->rq_error.Inc(100);
  OutlierDetector detector(d, ClusterEntry{info, set});
  // (The counters already hold these when the detector starts: its first interval reads them.)
  ClusterHealth& health = *info->health;
  ASSERT_TRUE(
      d.RunUntil([&] { return health.ejections_enforced_success_rate.load() == 1; }, kWaitMs));
  EXPECT_TRUE(hosts[4]->ejected.load());
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(hosts[i]->ejected.load()) << i;
  EXPECT_EQ(health.ejections_detected_success_rate.load(), 1u);
}

}  // namespace
}  // namespace rpx
