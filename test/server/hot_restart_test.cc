#include "source/server/hot_restart.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "source/network/listener.h"

namespace rpx {
namespace {

using ::testing::HasSubstr;

uint32_t BaseId() { return static_cast<uint32_t>(getpid()) * 4; }

// The parent (epoch 0) runs its handover on its dispatcher's thread; the child (epoch 1) takes
// the parent's listening sockets, then asks it to drain.
TEST(HotRestartTest, ChildTakesTheParentsListeningSocketsThenTheParentDrains) {
  auto listening = OpenWorkerSockets(*SocketAddress::FromIpPort("127.0.0.1", 0), true, 2);
  ASSERT_TRUE(listening.ok()) << listening.status();
  SocketAddress addr = SocketAddress::LocalOf((*listening)[0]);
  std::string address = addr.ToString();

  Dispatcher main("main");
  HotRestart parent(BaseId(), 0);
  std::atomic<uint64_t> drained_with{0};
  std::string error;
  ASSERT_TRUE(parent.Listen(
      main, [&](uint64_t ms) { drained_with = ms; }, &error))
      << error;
  std::atomic<bool> stop{false};
  std::thread loop([&] { main.RunUntil([&] { return stop.load() || drained_with != 0; }, 20000); });

  HotRestart child(BaseId(), 1);
  ASSERT_TRUE(child.TakeParentSockets(&error)) << error;
  std::vector<int> taken = child.inherited().Take(addr, 8);
  EXPECT_EQ(taken.size(), 2u);  // both SO_REUSEPORT sockets, as new descriptors
  for (int fd : taken) {
    EXPECT_EQ(SocketAddress::LocalOf(fd).ToString(), address);
    for (int p : *listening) EXPECT_NE(fd, p);
  }
  EXPECT_GT(child.first_start_unix_ms(), 0);
  child.ReleaseParent(1234);
  loop.join();
  EXPECT_EQ(drained_with.load(), 1234u);

  // One handover per process: epoch 0 no longer answers.
  HotRestart late(BaseId(), 1);
  EXPECT_FALSE(late.TakeParentSockets(&error));
  EXPECT_THAT(error, HasSubstr("no rpx of epoch 0"));
  for (int fd : taken) close(fd);
  for (int fd : *listening) close(fd);
}

TEST(HotRestartTest, OneEpochPerBaseId) {
  Dispatcher main("main");
  HotRestart a(BaseId() + 1, 0), b(BaseId() + 1, 0);
  std::string error;
  ASSERT_TRUE(a.Listen(
      main, [](uint64_t) {}, &error))
      << error;
  EXPECT_FALSE(b.Listen(
      main, [](uint64_t) {}, &error));
  EXPECT_THAT(error, HasSubstr("another rpx runs with --base-id"));
}

TEST(HotRestartTest, EpochZeroHasNoParent) {
  HotRestart first(BaseId() + 2, 0);
  std::string error;
  EXPECT_TRUE(first.TakeParentSockets(&error));
  EXPECT_EQ(first.inherited().size(), 0u);
}

}  // namespace
}  // namespace rpx
