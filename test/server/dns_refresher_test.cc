#include "source/server/dns_refresher.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rpx {
namespace {

// A resolver the test answers by hand: every Resolve() waits in `queries` until answered.
class FakeResolver : public DnsResolver {
 public:
  struct FakeQuery : Query {
    std::string name;
    Family family;
    Callback callback;
    bool cancelled = false;
    void Cancel() override { cancelled = true; }
  };
  Query* Resolve(const std::string& name, Family family, Callback callback) override {
    queries.push_back(std::make_unique<FakeQuery>());
    queries.back()->name = name;
    queries.back()->family = family;
    queries.back()->callback = std::move(callback);
    return queries.back().get();
  }
  // Answers the oldest open query for `name`.
  void Reply(const std::string& name, absl::Status status, std::vector<std::string> ips,
             uint32_t ttl_s = 0) {
    for (auto& q : queries) {
      if (q->name != name || q->cancelled || !q->callback) continue;
      std::vector<DnsResolver::Answer> answers;
      for (const auto& ip : ips) answers.push_back({*SocketAddress::FromIpPort(ip, 0), ttl_s});
      auto cb = std::move(q->callback);
      q->callback = nullptr;
      cb(status, std::move(answers));
      return;
    }
    ADD_FAILURE() << "no open query for " << name;
  }
  size_t open() const {
    size_t n = 0;
    for (const auto& q : queries) n += !q->cancelled && q->callback ? 1 : 0;
    return n;
  }
  std::vector<std::unique_ptr<FakeQuery>> queries;
};

class DnsRefresherTest : public ::testing::Test {
 protected:
  DnsCluster Cluster(std::vector<std::string> names, bool logical = false) {
    DnsCluster c;
    c.cluster = "c";
    c.logical = logical;
    for (const auto& n : names) c.targets.push_back({n, 8080, 2});
    c.targets[0].priority = 1;
    c.targets[0].locality = "r/z/";
    return c;
  }
  void Start(DnsCluster c) {
    refresher_ = std::make_unique<DnsRefresher>(
        dispatcher_, resolver_, std::move(c),
        [this](std::shared_ptr<const HostSet> hosts) { published_.push_back(hosts); },
        [this] { ++first_rounds_; });
    refresher_->Start();
  }
  std::vector<std::string> Addresses(const HostSet& hosts) {
    std::vector<std::string> out;
    for (const auto& h : hosts) out.push_back(h->address.ToString());
    return out;
  }

  Dispatcher dispatcher_{"test"};
  std::shared_ptr<FakeResolver> resolver_ = std::make_shared<FakeResolver>();
  std::unique_ptr<DnsRefresher> refresher_;
  std::vector<std::shared_ptr<const HostSet>> published_;
  int first_rounds_ = 0;
};

TEST_F(DnsRefresherTest, StrictDnsPublishesEveryAddressOfEveryNameOnceTheRoundEnds) {
  Start(Cluster({"a.example", "b.example"}));
  EXPECT_EQ(resolver_->open(), 2u);  // both names asked at once
  resolver_->Reply("a.example", absl::OkStatus(), {"10.0.0.1", "10.0.0.2"});
  EXPECT_TRUE(published_.empty());  // not before the last answer
  resolver_->Reply("b.example", absl::OkStatus(), {"10.0.0.3"});
  ASSERT_EQ(published_.size(), 1u);
  EXPECT_EQ(Addresses(*published_[0]),
            (std::vector<std::string>{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"}));
  const Host& first = *(*published_[0])[0];
  EXPECT_EQ(first.weight, 2u);
  EXPECT_EQ(first.priority, 1u);
  EXPECT_EQ(first.locality, "r/z/");
  EXPECT_EQ(first.hostname, "a.example");
  EXPECT_EQ(first_rounds_, 1);
  EXPECT_EQ(refresher_->stats().update_success, 1u);
  EXPECT_EQ(refresher_->next_delay_ms(), 5000u);  // dns_refresh_rate's default
}

TEST_F(DnsRefresherTest, AFailedNameKeepsItsLastAddressesAndAnUnchangedSetIsNotPublished) {
  DnsCluster c = Cluster({"a.example", "b.example"});
  c.refresh_ms = 100;
  Start(c);
  resolver_->Reply("a.example", absl::OkStatus(), {"10.0.0.1"});
  resolver_->Reply("b.example", absl::OkStatus(), {"10.0.0.3"});
  ASSERT_EQ(published_.size(), 1u);
  // Next round: b fails; a answers the same, in another order of rounds.
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return resolver_->open() == 2; }, 10000));
  resolver_->Reply("b.example", absl::UnavailableError("SERVFAIL"), {});
  resolver_->Reply("a.example", absl::OkStatus(), {"10.0.0.1"});
  EXPECT_EQ(published_.size(), 1u);  // b's last addresses kept: nothing changed
  EXPECT_EQ(refresher_->stats().update_failure, 1u);
  EXPECT_EQ(refresher_->stats().update_attempt, 2u);
  // A round that succeeds but changes nothing counts as no_rebuild.
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return resolver_->open() == 2; }, 10000));
  resolver_->Reply("a.example", absl::OkStatus(), {"10.0.0.1"});
  resolver_->Reply("b.example", absl::OkStatus(), {"10.0.0.3"});
  EXPECT_EQ(published_.size(), 1u);
  EXPECT_EQ(refresher_->stats().update_no_rebuild, 1u);
  // A change is published.
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return resolver_->open() == 2; }, 10000));
  resolver_->Reply("a.example", absl::OkStatus(), {"10.0.0.9"});
  resolver_->Reply("b.example", absl::OkStatus(), {"10.0.0.3"});
  ASSERT_EQ(published_.size(), 2u);
  EXPECT_EQ(Addresses(*published_[1]),
            (std::vector<std::string>{"10.0.0.9:8080", "10.0.0.3:8080"}));
}

TEST_F(DnsRefresherTest, RespectDnsTtlAndTheFailureBackoff) {
  DnsCluster c = Cluster({"a.example"});
  c.refresh_ms = 3600 * 1000;
  c.respect_dns_ttl = true;
  c.failure_base_ms = 200;
  c.failure_max_ms = 1000;
  Start(c);
  resolver_->Reply("a.example", absl::OkStatus(), {"10.0.0.1"}, /*ttl_s=*/7);
  EXPECT_EQ(refresher_->next_delay_ms(), 7000u);  // the TTL, not the hour
  // Failures: a jittered delay below an interval that doubles from 200 ms up to 1 s.
  refresher_.reset();
  published_.clear();
  Start(c);
  resolver_->Reply("a.example", absl::NotFoundError("NXDOMAIN"), {});
  EXPECT_EQ(published_.size(), 0u);
  EXPECT_EQ(first_rounds_, 2);  // the first round ends, even failed
  uint64_t limit = 200;
  for (int i = 0; i < 5; ++i) {
    EXPECT_LT(refresher_->next_delay_ms(), limit) << i;
    limit = std::min<uint64_t>(limit * 2, 1000);
    ASSERT_TRUE(dispatcher_.RunUntil([&] { return resolver_->open() == 1; }, 10000));
    resolver_->Reply("a.example", absl::DeadlineExceededError("timeout"), {});
  }
  // Back to the TTL once it answers.
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return resolver_->open() == 1; }, 10000));
  resolver_->Reply("a.example", absl::OkStatus(), {"10.0.0.1"}, 0);
  EXPECT_EQ(refresher_->next_delay_ms(), 3600u * 1000);  // a TTL of 0: dns_refresh_rate
}

TEST_F(DnsRefresherTest, LogicalDnsTakesTheFirstAddressOfTheNewestAnswer) {
  Start(Cluster({"a.example"}, /*logical=*/true));
  resolver_->Reply("a.example", absl::OkStatus(), {"10.0.0.1", "10.0.0.2"});
  ASSERT_EQ(published_.size(), 1u);
  EXPECT_EQ(Addresses(*published_[0]), (std::vector<std::string>{"10.0.0.1:8080"}));
}

TEST_F(DnsRefresherTest, DestroyingItCancelsItsQueries) {
  Start(Cluster({"a.example", "b.example"}));
  EXPECT_EQ(resolver_->open(), 2u);
  refresher_.reset();
  EXPECT_EQ(resolver_->open(), 0u);  // no callback can reach the freed refresher
}

}  // namespace
}  // namespace rpx
