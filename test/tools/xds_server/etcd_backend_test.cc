#include "tools/xds_server/etcd_backend.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/tools/xds_server/test_util.h"

namespace rpx {
namespace xds_server {
namespace {

using ::testing::HasSubstr;

TEST(ParseEtcdUrlTest, Endpoints) {
  EtcdOptions o;
  std::string error;
  ASSERT_TRUE(ParseEtcdUrl("etcd://127.0.0.1:2379,10.0.0.2:2379", &o, &error)) << error;
  EXPECT_EQ(o.endpoints, (std::vector<std::string>{"127.0.0.1:2379", "10.0.0.2:2379"}));
  EXPECT_FALSE(ParseEtcdUrl("http://127.0.0.1:2379", &o, &error));
  EXPECT_THAT(error, HasSubstr("expected etcd://HOST:PORT"));
  EXPECT_FALSE(ParseEtcdUrl("etcd://127.0.0.1", &o, &error));
  EXPECT_THAT(error, HasSubstr("'127.0.0.1' is not HOST:PORT"));
  EXPECT_FALSE(ParseEtcdUrl("etcd://h:99999", &o, &error));
  EXPECT_FALSE(ParseEtcdUrl("etcd://", &o, &error));
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A real etcd (Debian's etcd-server, installed by tools/setup.sh) on loopback, killed by PID.
class EtcdBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/etcd (etcd-server)";
    dir_ = MakeTempDir();
    port_ = FreePort();
    int peer = FreePort();
    std::string client = "http://127.0.0.1:" + std::to_string(port_);
    std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    pid_ = fork();
    if (pid_ == 0) {
      std::string log = dir_ + "/etcd.log";
      FILE* f = freopen(log.c_str(), "w", stderr);
      (void)f;
      execl("/usr/bin/etcd", "etcd", "--name", "t", "--data-dir", (dir_ + "/data").c_str(),
            "--listen-client-urls", client.c_str(), "--advertise-client-urls", client.c_str(),
            "--listen-peer-urls", peer_url.c_str(), "--initial-advertise-peer-urls",
            peer_url.c_str(), "--initial-cluster", ("t=" + peer_url).c_str(), nullptr);
      _exit(127);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (ReadFileText(dir_ + "/etcd.log").find("ready to serve client requests") ==
           std::string::npos) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << ReadFileText(dir_ + "/etcd.log");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }

  std::unique_ptr<StoreBackend> Backend() {
    EtcdOptions o;
    o.endpoints = {"127.0.0.1:" + std::to_string(port_)};
    o.prefix = "/test/";
    return MakeEtcdBackend(o);
  }

  static rpx::control::v1::StoredVersion Version(uint64_t v) {
    rpx::control::v1::StoredVersion s;
    s.mutable_info()->set_version(v);
    s.mutable_info()->set_author("t");
    s.mutable_resources()->add_routes()->set_name("r" + std::to_string(v));
    return s;
  }
  static rpx::control::v1::StoredState State(uint64_t default_version) {
    rpx::control::v1::StoredState s;
    s.add_assignments()->set_version(default_version);
    return s;
  }

  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

TEST_F(EtcdBackendTest, CommitLoadAndPrune) {
  auto backend = Backend();
  EXPECT_TRUE(backend->shared());
  StoredData empty;
  std::string error;
  ASSERT_TRUE(backend->Load(&empty, &error)) << error;
  EXPECT_TRUE(empty.versions.empty());
  EXPECT_FALSE(empty.has_state);
  ASSERT_TRUE(backend->Commit(Version(1), State(1), {}, &error)) << error;
  ASSERT_TRUE(backend->Commit(Version(2), State(2), {}, &error)) << error;
  ASSERT_TRUE(backend->Commit(Version(3), State(3), {1}, &error)) << error;
  StoredData d;
  ASSERT_TRUE(Backend()->Load(&d, &error)) << error;
  ASSERT_EQ(d.versions.size(), 2u);
  EXPECT_EQ(d.versions[0].info().version(), 2u);
  EXPECT_EQ(d.versions[1].resources().routes(0).name(), "r3");
  ASSERT_TRUE(d.has_state);
  EXPECT_EQ(d.state.assignments(0).version(), 3u);
}

TEST_F(EtcdBackendTest, AWriterThatMissedAChangeIsRefused) {
  auto a = Backend();
  auto b = Backend();
  StoredData d;
  std::string error;
  ASSERT_TRUE(a->Load(&d, &error));
  ASSERT_TRUE(b->Load(&d, &error));
  ASSERT_TRUE(a->Commit(Version(1), State(1), {}, &error)) << error;
  EXPECT_FALSE(b->Commit(Version(1), State(1), {}, &error));
  EXPECT_THAT(error, HasSubstr("another control-plane replica changed the configuration first"));
  // Once it has seen the change, it may write.
  ASSERT_TRUE(b->Load(&d, &error));
  EXPECT_TRUE(b->Commit(Version(2), State(2), {}, &error)) << error;
}

TEST_F(EtcdBackendTest, WatchDeliversWhatOthersWrite) {
  auto watcher = Backend();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> seen;
  bool full_seen = false;
  std::vector<uint64_t> removed_seen;
  watcher->Watch([&](const StoredData& d, bool full, const std::vector<uint64_t>& removed) {
    std::lock_guard<std::mutex> lock(mu);
    full_seen = full_seen || full;
    for (const auto& v : d.versions) seen.push_back(v.info().version());
    for (uint64_t v : removed) removed_seen.push_back(v);
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return full_seen; }));
  }
  auto writer = Backend();
  StoredData d;
  std::string error;
  ASSERT_TRUE(writer->Load(&d, &error));
  ASSERT_TRUE(writer->Commit(Version(1), State(1), {}, &error)) << error;
  ASSERT_TRUE(writer->Commit(Version(2), State(2), {1}, &error)) << error;
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10),
                          [&] { return seen.size() >= 2 && !removed_seen.empty(); }));
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(removed_seen, (std::vector<uint64_t>{1}));
  lock.unlock();
  watcher->Stop();
}

TEST_F(EtcdBackendTest, UnreachableEtcdIsAClearError) {
  EtcdOptions o;
  o.endpoints = {"127.0.0.1:" + std::to_string(FreePort())};
  o.timeout = std::chrono::milliseconds(500);
  auto backend = MakeEtcdBackend(o);
  StoredData d;
  std::string error;
  EXPECT_FALSE(backend->Load(&d, &error));
  EXPECT_THAT(error, HasSubstr("etcd unreachable (etcd 127.0.0.1:"));
  EXPECT_FALSE(backend->Commit(Version(1), State(1), {}, &error));
  EXPECT_THAT(error, HasSubstr("etcd unreachable"));
}

}  // namespace
}  // namespace xds_server
}  // namespace rpx
