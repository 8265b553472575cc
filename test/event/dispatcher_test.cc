#include "source/event/dispatcher.h"

#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rpx {
namespace {

TEST(DispatcherTest, TimersFireInDeadlineOrder) {
  Dispatcher d("t");
  std::vector<int> order;
  auto a = d.CreateTimer([&] { order.push_back(1); });
  auto b = d.CreateTimer([&] { order.push_back(2); });
  a->Enable(20);
  b->Enable(5);
  ASSERT_TRUE(d.RunUntil([&] { return order.size() == 2; }, 5000));
  EXPECT_EQ(order, (std::vector<int>{2, 1}));
  EXPECT_FALSE(a->enabled());
}

TEST(DispatcherTest, PushingDeadlineLaterDelaysFiring) {
  Dispatcher d("t");
  int fired = 0;
  auto t = d.CreateTimer([&] { ++fired; });
  auto marker = d.CreateTimer([] {});
  t->Enable(10);
  t->Enable(60);  // lazily moved: must not fire at 10 ms
  marker->Enable(30);
  ASSERT_TRUE(d.RunUntil([&] { return !marker->enabled(); }, 5000));
  EXPECT_EQ(fired, 0);
  EXPECT_TRUE(t->enabled());
  ASSERT_TRUE(d.RunUntil([&] { return fired == 1; }, 5000));
}

TEST(DispatcherTest, PullingDeadlineEarlierFiresEarlier) {
  Dispatcher d("t");
  int fired = 0;
  auto t = d.CreateTimer([&] { ++fired; });
  t->Enable(100000);
  t->Enable(1);
  ASSERT_TRUE(d.RunUntil([&] { return fired == 1; }, 5000));
}

TEST(DispatcherTest, DisableAndDestroyCancel) {
  Dispatcher d("t");
  int fired = 0;
  auto a = d.CreateTimer([&] { ++fired; });
  auto b = d.CreateTimer([&] { ++fired; });
  a->Enable(1);
  b->Enable(1);
  a->Disable();
  b.reset();
  auto marker = d.CreateTimer([] {});
  marker->Enable(20);
  ASSERT_TRUE(d.RunUntil([&] { return !marker->enabled(); }, 5000));
  EXPECT_EQ(fired, 0);
}

TEST(DispatcherTest, PostFromAnotherThread) {
  Dispatcher d("t");
  bool ran = false;
  std::thread other([&] { d.Post([&] { ran = true; }); });
  ASSERT_TRUE(d.RunUntil([&] { return ran; }, 5000));
  other.join();
}

TEST(DispatcherTest, FileEventsAndDeferredDelete) {
  Dispatcher d("t");
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  struct Victim : DeferredDeletable {
    explicit Victim(bool* flag) : deleted(flag) {}
    ~Victim() override { *deleted = true; }
    bool* deleted;
  };
  bool deleted = false;
  int reads = 0;
  auto ev = d.CreateFileEvent(
      fds[0],
      [&](uint32_t events) {
        if (events & FileEvent::kRead) {
          char buf[16];
          if (read(fds[0], buf, sizeof(buf)) > 0) ++reads;
          d.DeferredDelete(std::make_unique<Victim>(&deleted));
          EXPECT_FALSE(deleted);  // not inside the callback
        }
      },
      FileEvent::kRead);
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  ASSERT_TRUE(d.RunUntil([&] { return deleted; }, 5000));
  EXPECT_EQ(reads, 1);
  ev.reset();
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace rpx
