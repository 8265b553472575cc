#include "source/upstream/health_checker.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "test/test_common/fake_upstream.h"

namespace rpx {
namespace {

constexpr uint64_t kWaitMs = 10000;  // generous: only a hang reaches it

// Answers every connection with one HTTP response of `status` and closes it.
class StatusServer {
 public:
  StatusServer() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(fd_, 16);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0 || stop_) {
          if (c >= 0) close(c);
          return;
        }
        char buf[1024];
        std::string in;
        while (in.find("\r\n\r\n") == std::string::npos) {
          ssize_t n = recv(c, buf, sizeof(buf), 0);
          if (n <= 0) break;
          in.append(buf, n);
        }
        std::string out =
            "HTTP/1.1 " + std::to_string(status.load()) + " x\r\nContent-Length: 0\r\n\r\n";
        send(c, out.data(), out.size(), MSG_NOSIGNAL);
        close(c);
      }
    });
  }
  ~StatusServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  uint16_t port() const { return port_; }
  std::atomic<int> status{200};

 private:
  int fd_;
  uint16_t port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::shared_ptr<Host> MakeHost(uint16_t port) {
  auto h = std::make_shared<Host>();
  h->address = *SocketAddress::FromIpPort("127.0.0.1", port);
  return h;
}

ClusterEntry Entry(std::vector<std::shared_ptr<Host>> hosts, uint32_t unhealthy_threshold,
                   uint32_t healthy_threshold) {
  auto info = std::make_shared<ClusterInfo>();
  info->name = "svc";
  info->stats_slots = 1;
  info->stats.reset(new ClusterStats[1]);
  auto hc = std::make_shared<HealthCheckConfig>();
  hc->interval_ms = hc->no_traffic_interval_ms = hc->no_traffic_healthy_interval_ms = 20;
  hc->timeout_ms = 1000;
  hc->path = "/healthz";
  hc->unhealthy_threshold = unhealthy_threshold;
  hc->healthy_threshold = healthy_threshold;
  info->health_check = hc;
  info->health = std::make_shared<ClusterHealth>();
  auto set = std::make_shared<HostSet>();
  for (auto& h : hosts) set->push_back(h);
  return ClusterEntry{info, set};
}

TEST(HealthCheckerTest, ANewHostStartsFailedAndOnePassingProbeMakesItHealthy) {
  Dispatcher d("test");
  FakeUpstream up;
  auto host = MakeHost(up.port());
  ClusterEntry e = Entry({host}, 3, 3);
  HealthChecker checker(d, e);
  EXPECT_TRUE(host->failed_active_hc.load());  // before any probe
  EXPECT_EQ(e.info->health->unhealthy.load(), 1u);
  ASSERT_TRUE(d.RunUntil([&] { return !host->failed_active_hc.load(); }, kWaitMs));
  // healthy_threshold is 3, but at startup one pass is enough (Envoy's rule).
  EXPECT_EQ(e.info->health->success.load(), 1u);
  EXPECT_EQ(e.info->health->unhealthy.load(), 0u);
  EXPECT_EQ(e.info->health->hosts.load(), 1u);
  EXPECT_GE(up.requests(), 1);
}

TEST(HealthCheckerTest, NetworkFailuresCountToUnhealthyThreshold) {
  Dispatcher d("test");
  auto up = std::make_unique<FakeUpstream>();
  auto host = MakeHost(up->port());
  ClusterEntry e = Entry({host}, 3, 1);
  HealthChecker checker(d, e);
  ASSERT_TRUE(d.RunUntil([&] { return !host->failed_active_hc.load(); }, kWaitMs));
  uint64_t generation = e.info->health->generation.load();
  up.reset();  // connection refused from now on
  ASSERT_TRUE(d.RunUntil([&] { return host->failed_active_hc.load(); }, kWaitMs));
  EXPECT_EQ(e.info->health->network_failure.load(), 3u);
  EXPECT_EQ(e.info->health->unhealthy.load(), 1u);
  EXPECT_GT(e.info->health->generation.load(), generation);  // workers see the change
}

TEST(HealthCheckerTest, AStatusOutsideExpectedFailsAtOnceAndPassesCountBack) {
  Dispatcher d("test");
  StatusServer server;
  auto host = MakeHost(server.port());
  ClusterEntry e = Entry({host}, 5, 2);
  HealthChecker checker(d, e);
  ASSERT_TRUE(d.RunUntil([&] { return !host->failed_active_hc.load(); }, kWaitMs));
  server.status = 503;
  ASSERT_TRUE(d.RunUntil([&] { return host->failed_active_hc.load(); }, kWaitMs));
  EXPECT_EQ(e.info->health->failure.load(), 1u);  // not unhealthy_threshold (5) of them
  uint64_t passes_before = e.info->health->success.load();
  server.status = 200;
  ASSERT_TRUE(d.RunUntil([&] { return !host->failed_active_hc.load(); }, kWaitMs));
  EXPECT_EQ(e.info->health->success.load() - passes_before, 2u);  // healthy_threshold
}

TEST(HealthCheckerTest, AnUpdateKeepsTheVerdictOfHostsThatStay) {
  Dispatcher d("test");
  FakeUpstream up;
  auto host = MakeHost(up.port());
  ClusterEntry e = Entry({host}, 1, 1);
  HealthChecker checker(d, e);
  ASSERT_TRUE(d.RunUntil([&] { return !host->failed_active_hc.load(); }, kWaitMs));
  // A new form of the cluster: the same endpoint (a new Host object) and a new one.
  auto same = MakeHost(up.port());
  auto added = MakeHost(up.port() == 65535 ? 1 : up.port() + 1);
  ClusterEntry next = Entry({same, added}, 1, 1);
  checker.Update(next);
  EXPECT_FALSE(same->failed_active_hc.load());  // carried before any worker sees it
  EXPECT_TRUE(added->failed_active_hc.load());  // until its first probe passes
  EXPECT_EQ(next.info->health->hosts.load(), 2u);
  EXPECT_EQ(next.info->health->unhealthy.load(), 1u);
}

}  // namespace
}  // namespace rpx
