#include "source/upstream/worker_cluster.h"

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace rpx {
namespace {

// Builds a cluster of hosts on 127.0.0.1 ports (nothing connects: pools are made, not used).
class WorkerClusterTest : public ::testing::Test {
 protected:
  struct Spec {
    uint16_t port;
    uint32_t priority = 0;
    std::string locality = "r/z/";
    uint32_t locality_weight = 0;
    uint32_t weight = 1;
    bool eds_unhealthy = false;
  };

  void Build(const std::vector<Spec>& specs, LbPolicy policy = LbPolicy::kRoundRobin,
             bool health = true) {
    auto info = std::make_shared<ClusterInfo>();
    info->name = "c";
    info->lb_policy = policy;
    info->locality_weighted = locality_weighted_;
    info->panic_threshold = panic_threshold_;
    info->slow_start = slow_start_;
    info->resources = std::make_shared<ClusterResources>(1024, 1024, 1024);
    info->stats_slots = 1;
    info->stats.reset(new ClusterStats[1]);
    if (health) info->health = std::make_shared<ClusterHealth>();
    auto hosts = std::make_shared<HostSet>();
    hosts->overprovisioning_factor = overprovisioning_factor_;
    hosts->weighted_priority_health = weighted_priority_health_;
    for (const auto& s : specs) {
      auto h = std::make_shared<Host>();
      h->address = *SocketAddress::FromIpPort("127.0.0.1", s.port);
      h->priority = s.priority;
      h->locality = s.locality;
      h->locality_weight = s.locality_weight;
      h->weight = s.weight;
      h->eds_unhealthy = s.eds_unhealthy;
      hosts->push_back(h);
    }
    info_ = info;
    hosts_ = hosts;
    cluster_ = std::make_unique<WorkerCluster>(dispatcher_, 0, ClusterEntry{info, hosts});
  }

  // Marks the host on `port` as failing its health check (or passing again), as the main
  // thread's checker does, and tells the workers.
  void SetFailed(uint16_t port, bool failed) {
    for (const auto& h : *hosts_) {
      if (h->address.port() == port) h->failed_active_hc.store(failed);
    }
    PublishHealth(*info_->health, *hosts_);
  }

  // Who takes `n` requests whose random values sweep the range evenly: port -> count.
  // `low`: the random values are 0..n-1 instead (for picks that use the low bits).
  std::map<uint16_t, int> Sweep(int n, bool low = false) {
    std::map<uint16_t, int> seen;
    for (int i = 0; i < n; ++i) {
      uint64_t random = low ? static_cast<uint64_t>(i)
                            : static_cast<uint64_t>((static_cast<__uint128_t>(i) << 64) / n);
      ConnPool* p = cluster_->ChoosePool(random);
      if (p) ++seen[p->host().address.port()];
    }
    return seen;
  }

  // Requests taken by each priority level over a sweep of the level-picking bits.
  std::map<uint32_t, int> LevelSweep() {
    std::map<uint32_t, int> seen;
    for (uint64_t x = 0; x < 100; ++x) {
      ConnPool* p = cluster_->ChoosePool(x << 24);
      if (p) ++seen[p->host().priority];
    }
    return seen;
  }

  // The levels' loads, after one pick (a worker looks at health changes when it picks).
  std::vector<uint32_t> Loads() {
    cluster_->ChoosePool(0);
    std::vector<uint32_t> out;
    for (size_t i = 0; i < cluster_->level_count(); ++i) out.push_back(cluster_->level_load(i));
    return out;
  }

  Dispatcher dispatcher_{"test"};
  bool locality_weighted_ = false;
  double panic_threshold_ = 50;
  uint32_t overprovisioning_factor_ = 140;
  bool weighted_priority_health_ = false;
  std::optional<ClusterInfo::SlowStart> slow_start_;
  std::shared_ptr<ClusterInfo> info_;
  std::shared_ptr<HostSet> hosts_;
  std::unique_ptr<WorkerCluster> cluster_;
};

TEST_F(WorkerClusterTest, PriorityLevelsFailOverByTheOverprovisioningFactor) {
  Build({{1001, 0}, {1002, 0}, {1003, 0}, {1011, 1}, {1012, 1}});
  EXPECT_EQ(Loads(), (std::vector<uint32_t>{100, 0}));
  EXPECT_EQ(LevelSweep(), (std::map<uint32_t, int>{{0, 100}}));
  // One of three down: 1.4 x 2/3 = 93% stays on P0, 7% goes to P1.
  SetFailed(1001, true);
  EXPECT_EQ(Loads(), (std::vector<uint32_t>{93, 7}));
  EXPECT_EQ(LevelSweep(), (std::map<uint32_t, int>{{0, 93}, {1, 7}}));
  auto seen = Sweep(300);
  EXPECT_EQ(seen.count(1001), 0u);  // the failed host takes nothing
  // Two down: 46 / 54, and P0 (a third healthy) is not in panic because the levels together
  // are whole.
  SetFailed(1002, true);
  EXPECT_EQ(Loads(), (std::vector<uint32_t>{46, 54}));
  EXPECT_FALSE(cluster_->level_panic(0));
  seen = Sweep(300);
  EXPECT_EQ(seen.count(1001) + seen.count(1002), 0u);
  EXPECT_GT(seen[1003], 0);
  // All of P0 down: P1 takes everything; back: P0 again.
  SetFailed(1003, true);
  EXPECT_EQ(Loads(), (std::vector<uint32_t>{0, 100}));
  EXPECT_EQ(LevelSweep(), (std::map<uint32_t, int>{{1, 100}}));
  SetFailed(1001, false);
  SetFailed(1002, false);
  SetFailed(1003, false);
  EXPECT_EQ(Loads(), (std::vector<uint32_t>{100, 0}));
}

TEST_F(WorkerClusterTest, PanicPerLevelAndInTotal) {
  Build({{1001, 0}, {1002, 0}, {1003, 0}, {1011, 1}, {1012, 1}});
  // P0 all down, P1 half: 0 + 70 = 70 < 100. P1 at 50% is not below the threshold, so only its
  // healthy host serves.
  for (uint16_t p : {1001, 1002, 1003, 1011}) SetFailed(p, true);
  EXPECT_EQ(Loads(), (std::vector<uint32_t>{0, 100}));
  EXPECT_TRUE(cluster_->level_panic(0));
  EXPECT_FALSE(cluster_->level_panic(1));
  EXPECT_EQ(Sweep(100), (std::map<uint16_t, int>{{1012, 100}}));
  // Everything down: total panic, the load follows the number of hosts (3:2) and every host
  // takes traffic; the panic is counted.
  SetFailed(1012, true);
  EXPECT_EQ(Loads(), (std::vector<uint32_t>{60, 40}));
  EXPECT_EQ(LevelSweep(), (std::map<uint32_t, int>{{0, 60}, {1, 40}}));
  EXPECT_EQ(Sweep(500).size(), 5u);
  EXPECT_GT(info_->stats[0].lb_healthy_panic.Value(), 0);
}

TEST_F(WorkerClusterTest, PanicThresholdZeroPicksNoFailedHost) {
  panic_threshold_ = 0;
  Build({{1001, 0}, {1002, 0}});
  SetFailed(1001, true);
  EXPECT_EQ(Sweep(50), (std::map<uint16_t, int>{{1002, 50}}));
  SetFailed(1002, true);
  EXPECT_EQ(cluster_->ChoosePool(7), nullptr);  // Envoy: no healthy upstream
}

TEST_F(WorkerClusterTest, OverprovisioningFactorAndWeightedPriorityHealth) {
  overprovisioning_factor_ = 100;
  Build({{1001, 0}, {1002, 0}, {1011, 1}});
  SetFailed(1001, true);
  EXPECT_EQ(Loads(), (std::vector<uint32_t>{50, 50}));
  // Counted by weight: the failed host carries 3 of 4 units of P0's weight.
  overprovisioning_factor_ = 140;
  weighted_priority_health_ = true;
  Build({{1001, 0, "r/z/", 0, 3}, {1002, 0, "r/z/", 0, 1}, {1011, 1}});
  SetFailed(1001, true);
  EXPECT_EQ(Loads(), (std::vector<uint32_t>{35, 65}));
}

TEST_F(WorkerClusterTest, EdsUnhealthyHostsCountInTheirLevelButTakeNoTraffic) {
  // No health checks at all: the EDS verdict alone moves 30% to P1.
  Build({{1001, 0}, {1002, 0, "r/z/", 0, 1, true}, {1011, 1}}, LbPolicy::kRoundRobin,
        /*health=*/false);
  EXPECT_EQ(Loads(), (std::vector<uint32_t>{70, 30}));
  auto seen = Sweep(200);
  EXPECT_EQ(seen.count(1002), 0u);
  EXPECT_GT(seen[1001], 0);
  EXPECT_GT(seen[1011], 0);
}

TEST_F(WorkerClusterTest, AKeptPoolReadsTheNewFormOfItsHost) {
  Build({{1001, 0}, {1002, 0}}, LbPolicy::kRoundRobin, /*health=*/false);
  ConnPool* kept = nullptr;
  for (int i = 0; i < 2; ++i) {
    ConnPool* p = cluster_->ChoosePool(i);
    if (p->host().address.port() == 1002) kept = p;
  }
  ASSERT_NE(kept, nullptr);
  // The same endpoints again, 1002 now marked unhealthy by EDS: the pool stays, and takes
  // nothing.
  auto next = std::make_shared<HostSet>();
  for (const auto& h : *hosts_) {
    auto copy = std::make_shared<Host>();
    copy->address = h->address;
    copy->eds_unhealthy = h->address.port() == 1002;
    next->push_back(copy);
  }
  cluster_->Update(ClusterEntry{info_, next});
  EXPECT_TRUE(kept->host().eds_unhealthy);
  auto seen = Sweep(20);
  EXPECT_EQ(seen, (std::map<uint16_t, int>{{1001, 20}}));
}

TEST_F(WorkerClusterTest, LocalityWeightsSplitALevel) {
  locality_weighted_ = true;
  Build({{1001, 0, "r/a/", 1}, {1002, 0, "r/b/", 3}, {1003, 0, "r/b/", 3}, {1004, 0, "r/c/", 0}});
  auto seen = Sweep(1000);
  EXPECT_EQ(seen[1001], 250);
  EXPECT_EQ(seen[1002] + seen[1003], 750);
  EXPECT_EQ(seen.count(1004), 0u);  // a locality without a weight takes no traffic
  // Half of b down: b's effective weight is 3 x min(1, 1.4 x 1/2) = 2.1, a keeps 1.
  SetFailed(1002, true);
  seen = Sweep(1000);
  EXPECT_EQ(seen.count(1002), 0u);
  EXPECT_NEAR(seen[1001], 1000 / 3.1, 2);
  EXPECT_NEAR(seen[1003], 1000 * 2.1 / 3.1, 2);
}

TEST_F(WorkerClusterTest, EndpointWeightsHoldForEveryPolicy) {
  for (LbPolicy policy : {LbPolicy::kRoundRobin, LbPolicy::kRandom, LbPolicy::kLeastRequest}) {
    Build({{1001, 0, "r/z/", 0, 1}, {1002, 0, "r/z/", 0, 3}}, policy);
    auto seen = Sweep(400, /*low=*/true);
    EXPECT_EQ(seen[1001], 100) << static_cast<int>(policy);
    EXPECT_EQ(seen[1002], 300) << static_cast<int>(policy);
  }
}

TEST_F(WorkerClusterTest, HashPicksTheSameHostWithinLevels) {
  Build({{1001, 0}, {1002, 0}, {1011, 1}}, LbPolicy::kRingHash);
  std::map<uint64_t, uint16_t> first;
  for (uint64_t key = 0; key < 200; ++key) {
    uint64_t hash = key * 0x9E3779B97F4A7C15ULL;
    ConnPool* p = cluster_->ChoosePool(key, &hash);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->host().priority, 0u);
    first[key] = p->host().address.port();
  }
  // P0 loses a host: keys on the other P0 host stay, and keys placed on P1 are on P1's host.
  SetFailed(1001, true);
  for (uint64_t key = 0; key < 200; ++key) {
    uint64_t hash = key * 0x9E3779B97F4A7C15ULL;
    uint16_t port = cluster_->ChoosePool(key + 1, &hash)->host().address.port();
    EXPECT_NE(port, 1001);
    if (first[key] == 1002) EXPECT_TRUE(port == 1002 || port == 1011) << key;
    uint16_t again = cluster_->ChoosePool(key + 2, &hash)->host().address.port();
    EXPECT_EQ(port, again) << key;
  }
}

TEST(SlowStartTest, EnvoysRampFormula) {
  ClusterInfo::SlowStart s{10000, 1.0, 0.1};
  EXPECT_DOUBLE_EQ(WorkerCluster::SlowStartFactor(s, 0), 0.1);  // max(0 s, 1 s) / 10 s
  EXPECT_DOUBLE_EQ(WorkerCluster::SlowStartFactor(s, 5000), 0.5);
  s.aggression = 2.0;  // faster: the square root of the time factor
  EXPECT_DOUBLE_EQ(WorkerCluster::SlowStartFactor(s, 2500), 0.5);
  s = {10000, 1.0, 0.3};  // min_weight_percent 30
  EXPECT_DOUBLE_EQ(WorkerCluster::SlowStartFactor(s, 0), 0.3);
  EXPECT_DOUBLE_EQ(WorkerCluster::SlowStartFactor(s, 9999), 0.9999);
}

TEST_F(WorkerClusterTest, AJoiningHostRampsUpAndSoDoesOneBackFromFailing) {
  slow_start_ = ClusterInfo::SlowStart{60000, 1.0, 0.1};  // a minute: no test gets near its end
  Build({{1001, 0}, {1002, 0}});
  // The first host set does not ramp (its hosts would ramp in step).
  EXPECT_EQ(cluster_->lb_weight(*(*hosts_)[0]), 1000u);
  // c joins: about a tenth of a weight for its first seconds (max(t, 1 s) / 60 s, at least 10%).
  auto next = std::make_shared<HostSet>(*hosts_);
  auto c = std::make_shared<Host>();
  c->address = *SocketAddress::FromIpPort("127.0.0.1", 1003);
  next->push_back(c);
  hosts_ = next;
  cluster_->Update(ClusterEntry{info_, next});
  uint32_t w = cluster_->lb_weight(*c);
  EXPECT_GE(w, 100u);
  EXPECT_LT(w, 500u);
  auto seen = Sweep(2000);
  EXPECT_GT(seen[1003], 0);
  EXPECT_LT(seen[1003], seen[1001] / 2);
  EXPECT_EQ(cluster_->lb_weight(*(*hosts_)[0]), 1000u);  // members keep their weight
  // a fails its health check and comes back: it ramps again.
  SetFailed(1001, true);
  cluster_->ChoosePool(0);
  SetFailed(1001, false);
  cluster_->ChoosePool(0);
  EXPECT_LT(cluster_->lb_weight(*(*hosts_)[0]), 500u);
  EXPECT_EQ(cluster_->lb_weight(*(*hosts_)[1]), 1000u);
}

TEST_F(WorkerClusterTest, WithoutSlowStartWeightsAreTheHostsOwn) {
  Build({{1001, 0, "r/z/", 0, 3}, {1002, 0}});
  EXPECT_EQ(cluster_->lb_weight(*(*hosts_)[0]), 3u);
  EXPECT_EQ(cluster_->lb_weight(*(*hosts_)[1]), 1u);
}

}  // namespace
}  // namespace rpx

namespace rpx {
namespace {

// ORIGINAL_DST: a pool per destination, made on first use, the same one for the same address
// (with port_override applied), none for other clusters, and dropped once idle through a whole
// cleanup interval.
std::shared_ptr<ClusterInfo> OriginalDstInfo(std::optional<ClusterInfo::OriginalDst> od) {
  auto info = std::make_shared<ClusterInfo>();
  info->name = "od";
  info->original_dst = od;
  info->resources = std::make_shared<ClusterResources>(1024, 1024, 1024);
  info->stats_slots = 1;
  info->stats.reset(new ClusterStats[1]);
  return info;
}

TEST(WorkerClusterOriginalDstTest, PoolsByDestinationAndTheirCleanup) {
  Dispatcher d("t");
  ClusterInfo::OriginalDst od;
  od.cleanup_interval_ms = 20;
  WorkerCluster c(d, 0, ClusterEntry{OriginalDstInfo(od), std::make_shared<HostSet>()});
  EXPECT_EQ(c.ChoosePool(1), nullptr);  // no configured hosts
  auto a = *SocketAddress::FromIpPort("10.0.0.1", 80);
  auto b = *SocketAddress::FromIpPort("10.0.0.2", 80);
  ConnPool* pa = c.PoolForOriginalDst(a);
  ASSERT_NE(pa, nullptr);
  EXPECT_EQ(pa->host().address.ToString(), "10.0.0.1:80");
  EXPECT_EQ(c.PoolForOriginalDst(a), pa);
  EXPECT_NE(c.PoolForOriginalDst(b), pa);
  EXPECT_EQ(c.original_dst_pool_count(), 2u);
  EXPECT_EQ(c.PoolForOriginalDst(SocketAddress()), nullptr);
  // Unused and idle for a whole interval (two sweeps): gone.
  ASSERT_TRUE(d.RunUntil([&] { return c.original_dst_pool_count() == 0; }, 5000));
  EXPECT_TRUE(c.idle());

  WorkerCluster plain(d, 0,
                      ClusterEntry{OriginalDstInfo(std::nullopt), std::make_shared<HostSet>()});
  EXPECT_EQ(plain.PoolForOriginalDst(a), nullptr);

  od.port_override = 8080;
  WorkerCluster over(d, 0, ClusterEntry{OriginalDstInfo(od), std::make_shared<HostSet>()});
  EXPECT_EQ(over.PoolForOriginalDst(a)->host().address.ToString(), "10.0.0.1:8080");
}

}  // namespace
}  // namespace rpx
