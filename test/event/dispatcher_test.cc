#include "source/event/dispatcher.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "test/common/allocation_counter.h"

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

TEST(DispatcherTest, SameDeadlineFiresInQueueOrder) {
  Dispatcher d("t");
  std::vector<int> order;
  auto a = d.CreateTimer([&] { order.push_back(1); });
  auto b = d.CreateTimer([&] { order.push_back(2); });
  auto c = d.CreateTimer([&] { order.push_back(3); });
  a->Enable(5);
  b->Enable(5);
  c->Enable(5);
  a->Disable();
  a->Enable(5);  // queued again: now last
  ASSERT_TRUE(d.RunUntil([&] { return order.size() == 3; }, 5000));
  EXPECT_EQ(order, (std::vector<int>{2, 3, 1}));
}

// Timers of one delay share a list: leaving it from the head, the middle or the tail keeps the
// rest in order, and a timer queued after that joins at the end.
TEST(DispatcherTest, TimersOfOneDelayLeaveTheirListFromAnywhere) {
  Dispatcher d("t");
  std::vector<int> order;
  std::vector<std::unique_ptr<Timer>> t;
  for (int i = 0; i < 6; ++i) t.push_back(d.CreateTimer([&, i] { order.push_back(i); }));
  d.UpdateTime();
  for (int i = 0; i < 5; ++i) t[i]->Enable(10);
  t[0]->Disable();  // head
  t[2].reset();     // middle, destroyed
  t[4]->Disable();  // tail
  t[5]->Enable(10);
  t[4]->Enable(10);  // queued again: after 5
  ASSERT_TRUE(d.RunUntil([&] { return order.size() == 4; }, 5000));
  d.RunUntil([] { return false; }, 20);  // nothing more fires
  EXPECT_EQ(order, (std::vector<int>{1, 3, 5, 4}));
  EXPECT_FALSE(t[0]->enabled());
}

// More delays than the dispatcher keeps lists for: the rest go to the heap, and all fire in
// deadline order; an emptied list takes the next new delay.
TEST(DispatcherTest, MoreDelaysThanListsFireInDeadlineOrder) {
  Dispatcher d("t");
  std::vector<int> order;
  std::vector<std::unique_ptr<Timer>> t;
  constexpr int kDelays = 20;
  for (int i = 0; i < kDelays; ++i) t.push_back(d.CreateTimer([&, i] { order.push_back(i); }));
  d.UpdateTime();
  for (int i = 0; i < kDelays; ++i) t[i]->Enable(5 + 2 * (kDelays - i));  // latest first
  ASSERT_TRUE(d.RunUntil([&] { return order.size() == kDelays; }, 5000));
  std::vector<int> want;
  for (int i = kDelays; i-- > 0;) want.push_back(i);
  EXPECT_EQ(order, want);
  // Every list is empty now: new delays reuse them.
  order.clear();
  for (int i = 0; i < kDelays; ++i) t[i]->Enable(3 + (kDelays - i));
  ASSERT_TRUE(d.RunUntil([&] { return order.size() == kDelays; }, 5000));
  EXPECT_EQ(order, want);
}

// Many timers armed, re-armed (earlier and later), disabled and destroyed at random: each armed
// one fires exactly once, in deadline order (a timer pushed later must not fire at its old slot).
TEST(DispatcherTest, ManyTimersFireInDeadlineOrder) {
  Dispatcher d("t");
  constexpr int kTimers = 300;
  std::vector<int> fired;
  std::vector<std::unique_ptr<Timer>> timers;
  for (int i = 0; i < kTimers; ++i) timers.push_back(d.CreateTimer([&, i] { fired.push_back(i); }));
  std::vector<std::optional<uint64_t>> delay_of(kTimers);  // the model: armed timers' delays
  uint32_t rng = 12345;
  auto next = [&] { return (rng = rng * 1103515245u + 12345u) >> 8; };
  d.UpdateTime();  // every Enable below counts from the same now
  for (int step = 0; step < 3000; ++step) {
    int i = next() % kTimers;
    switch (next() % 4) {
      case 0:
      case 1:
        delay_of[i] = 20 + next() % 40;
        timers[i]->Enable(*delay_of[i]);
        break;
      case 2:
        timers[i]->Disable();
        delay_of[i].reset();
        break;
      case 3:
        timers[i] = d.CreateTimer([&, i] { fired.push_back(i); });
        delay_of[i].reset();
        break;
    }
  }
  std::vector<uint64_t> want_delays;
  std::vector<int> want_ids;
  for (int i = 0; i < kTimers; ++i) {
    EXPECT_EQ(timers[i]->enabled(), delay_of[i].has_value());
    if (delay_of[i]) {
      want_delays.push_back(*delay_of[i]);
      want_ids.push_back(i);
    }
  }
  std::sort(want_delays.begin(), want_delays.end());
  ASSERT_TRUE(d.RunUntil([&] { return fired.size() >= want_ids.size(); }, 5000));
  d.RunUntil([] { return false; }, 30);  // nothing more fires
  ASSERT_EQ(fired.size(), want_ids.size());
  std::vector<uint64_t> got_delays;
  for (int i : fired) got_delays.push_back(*delay_of[i]);
  EXPECT_EQ(got_delays, want_delays);
  std::vector<int> got_ids(fired);
  std::sort(got_ids.begin(), got_ids.end());
  EXPECT_EQ(got_ids, want_ids);
  for (auto& t : timers) EXPECT_FALSE(t->enabled());
}

// A timer pushed later while armed keeps its early slot until that slot comes. When the loop
// runs late (every deadline already passed), it must still fire after a timer whose deadline
// is earlier than its new one.
TEST(DispatcherTest, OverdueTimersFireInDeadlineOrderAfterAPushBack) {
  Dispatcher d("t");
  std::vector<char> fired;
  auto a = d.CreateTimer([&] { fired.push_back('a'); });
  auto b = d.CreateTimer([&] { fired.push_back('b'); });
  d.UpdateTime();
  a->Enable(10);
  a->Enable(50);  // later: stays in the 10 ms slot for now
  b->Enable(30);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));  // every deadline passes
  ASSERT_TRUE(d.RunUntil([&] { return fired.size() == 2; }, 5000));
  EXPECT_EQ(fired, (std::vector<char>{'b', 'a'}));
}

TEST(DispatcherTest, PostFromAnotherThread) {
  Dispatcher d("t");
  bool ran = false;
  std::thread other([&] { d.Post([&] { ran = true; }); });
  ASSERT_TRUE(d.RunUntil([&] { return ran; }, 5000));
  other.join();
}

// Posted work (a configuration change) may destroy a FileEvent at once: it runs after the
// batch's events, so an event that epoll reported in the same batch, after the wake-up, is
// handled first instead of being read from freed memory.
TEST(DispatcherTest, PostedWorkRunsAfterTheEventsOfItsBatch) {
  Dispatcher d("t");
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  std::vector<std::string> order;
  std::unique_ptr<FileEvent> ev = d.CreateFileEvent(
      fds[0],
      [&](uint32_t) {
        char buf[16];
        while (read(fds[0], buf, sizeof(buf)) > 0) {
        }
        order.push_back("event");
      },
      FileEvent::kRead);
  // The wake-up becomes ready first, then the socket: epoll reports them in that order.
  d.Post([&] {
    order.push_back("posted");
    ev.reset();
  });
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  ASSERT_TRUE(d.RunUntil([&] { return ev == nullptr; }, 5000));
  EXPECT_EQ(order, (std::vector<std::string>{"event", "posted"}));
  close(fds[0]);
  close(fds[1]);
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

// A destructor run by the deferred deletion may defer another delete: it runs in the same pass,
// and the loop keeps deleting until nothing is left. Once warm, deferring and clearing allocate
// nothing of their own (every finished request defers a delete): ClearDeferred swaps two vectors
// that keep their capacity. Counted with the global operator new
// (//test/common:allocation_counter): per pass, exactly the deferred objects themselves.
TEST(DispatcherTest, DeferredDeletesMadeWhileDeletingRunInTheSamePassWithoutAllocating) {
  Dispatcher d("t");
  struct Chain : DeferredDeletable {
    Chain(Dispatcher* d, int left, int* deleted) : d(d), left(left), deleted(deleted) {}
    ~Chain() override {
      ++*deleted;
      if (left > 0) d->DeferredDelete(std::make_unique<Chain>(d, left - 1, deleted));
    }
    Dispatcher* d;
    int left;
    int* deleted;
  };
  int deleted = 0;
  const std::function<bool()> done = [&] { return deleted > 0; };
  for (int pass = 1; pass <= 3; ++pass) {
    deleted = 0;
    uint64_t before = AllocationCount();
    d.DeferredDelete(std::make_unique<Chain>(&d, 4, &deleted));
    ASSERT_TRUE(d.RunUntil(done, 5000));
    uint64_t allocations = AllocationCount() - before;
    EXPECT_EQ(deleted, 5) << "pass " << pass;  // the whole chain, in the pass that deferred it
    if (pass > 1 && AllocationsCounted()) {
      // Each deleted Chain was one allocation: nothing else may have allocated.
      EXPECT_EQ(allocations, static_cast<uint64_t>(deleted)) << "pass " << pass;
    }
  }
}

// A connected pair of non-blocking UNIX stream sockets, closed when it goes out of scope.
struct SocketPair {
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0); }
  ~SocketPair() {
    close(fds[0]);
    close(fds[1]);
  }
  int fds[2] = {-1, -1};
};

// Runs the loop for `iterations` non-blocking passes (RunUntil with a condition that never holds
// would wait; each pass here polls once).
void Spin(Dispatcher& d, int iterations) {
  int n = 0;
  d.RunUntil([&] { return ++n > iterations; }, 1000);
}

// Level-triggered readiness is reported at every pass while the socket is unread; edge-triggered
// readiness once, until interest is turned on again (a re-arm) or the owner activates itself.
TEST(DispatcherTest, EdgeTriggeredReportsOnceUntilReArmedOrActivated) {
  SocketPair level_pair, edge_pair;
  int* level_fds = level_pair.fds;
  int* edge_fds = edge_pair.fds;
  Dispatcher d("t");
  int level_calls = 0, edge_calls = 0;
  std::vector<uint32_t> edge_events;
  auto level = d.CreateFileEvent(
      level_fds[0], [&](uint32_t) { ++level_calls; }, FileEvent::kRead);
  auto edge = d.CreateFileEvent(
      edge_fds[0],
      [&](uint32_t ev) {
        ++edge_calls;
        edge_events.push_back(ev);
      },
      FileEvent::kRead, FileEvent::Trigger::kEdge);
  ASSERT_EQ(write(level_fds[1], "x", 1), 1);
  ASSERT_EQ(write(edge_fds[1], "x", 1), 1);  // neither is ever read
  Spin(d, 5);
  EXPECT_GE(level_calls, 5);
  EXPECT_EQ(edge_calls, 1);
  // Interest off and on again: epoll looks at the socket afresh and reports it.
  edge->SetInterest(0);
  edge->SetInterest(FileEvent::kRead);
  Spin(d, 5);
  EXPECT_EQ(edge_calls, 2);
  // Activate: once, on the next pass, with the events asked for (merged).
  edge->Activate(FileEvent::kRead);
  edge->Activate(FileEvent::kWrite);
  EXPECT_EQ(edge_calls, 2);  // not from inside Activate
  Spin(d, 5);
  EXPECT_EQ(edge_calls, 3);
  EXPECT_EQ(edge_events.back(), FileEvent::kRead | FileEvent::kWrite);
  // New bytes are a new edge.
  ASSERT_EQ(write(edge_fds[1], "y", 1), 1);
  Spin(d, 5);
  EXPECT_EQ(edge_calls, 4);
}

// An event that activates itself from its callback runs once per pass, not in a loop within one
// pass; and an activation is dropped when the event is unregistered before it runs.
TEST(DispatcherTest, ActivationRunsOncePerPassAndDiesWithItsEvent) {
  SocketPair self_pair, victim_pair;
  Dispatcher d("t");
  int self_calls = 0, victim_calls = 0;
  std::unique_ptr<FileEvent> self, victim;
  self = d.CreateFileEvent(
      self_pair.fds[0],
      [&](uint32_t) {
        ++self_calls;
        if (self_calls < 3) self->Activate(FileEvent::kRead);
      },
      0, FileEvent::Trigger::kEdge);
  victim = d.CreateFileEvent(
      victim_pair.fds[0], [&](uint32_t) { ++victim_calls; }, 0, FileEvent::Trigger::kEdge);
  self->Activate(FileEvent::kRead);
  victim->Activate(FileEvent::kRead);
  victim->Unregister();
  int passes = 0;
  d.RunUntil([&] { return ++passes > 1; }, 1000);  // one pass
  EXPECT_EQ(self_calls, 1);
  Spin(d, 5);
  EXPECT_EQ(self_calls, 3);
  EXPECT_EQ(victim_calls, 0);
  self.reset();
  victim.reset();
}

// Batching (SetBatchWait): below kBatchMinPending, or with batching off, the loop never takes
// the sleeping path.
TEST(DispatcherTest, BatchingNeedsEnoughPendingWork) {
  Dispatcher d("t");
  d.SetBatchWait(20);
  d.AddPending(Dispatcher::kBatchMinPending - 1);
  bool fired = false;
  auto timer = d.CreateTimer([&] { fired = true; });
  timer->Enable(20);
  ASSERT_TRUE(d.RunUntil([&] { return fired; }, 5000));
  EXPECT_EQ(d.batch_hits() + d.batch_misses(), 0u);

  Dispatcher off("off");
  off.AddPending(Dispatcher::kBatchMinPending);
  fired = false;
  auto timer2 = off.CreateTimer([&] { fired = true; });
  timer2->Enable(20);
  ASSERT_TRUE(off.RunUntil([&] { return fired; }, 5000));
  EXPECT_EQ(off.batch_hits() + off.batch_misses(), 0u);
}

// With nothing arriving, the sleeps end and the loop blocks as usual: timers still fire.
TEST(DispatcherTest, QuietBatchingLoopStillBlocksAndFiresTimers) {
  Dispatcher d("t");
  d.SetBatchWait(20);
  d.AddPending(Dispatcher::kBatchMinPending);
  EXPECT_EQ(d.pending(), Dispatcher::kBatchMinPending);
  bool fired = false;
  auto timer = d.CreateTimer([&] { fired = true; });
  timer->Enable(30);
  ASSERT_TRUE(d.RunUntil([&] { return fired; }, 5000));
  EXPECT_GE(d.batch_misses(), 1u);
  EXPECT_EQ(d.batch_hits(), 0u);
  d.AddPending(-Dispatcher::kBatchMinPending);
  EXPECT_EQ(d.pending(), 0);
}

// Events that arrive from another thread while the loop sleeps, or after it gave up sleeping and
// blocked, are all handled: batching never loses a wakeup.
TEST(DispatcherTest, BatchingLoopHandlesEveryArrival) {
  Dispatcher d("t");
  d.SetBatchWait(20);
  d.AddPending(Dispatcher::kBatchMinPending);
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  constexpr int kWrites = 20;
  std::atomic<int> reads{0};
  auto ev = d.CreateFileEvent(
      fds[0],
      [&](uint32_t events) {
        char buf[64];
        if ((events & FileEvent::kRead) && read(fds[0], buf, sizeof(buf)) > 0) ++reads;
      },
      FileEvent::kRead);
  std::thread writer([&] {
    for (int i = 0; i < kWrites; ++i) {
      // Wait until the previous byte was read, then a little more: the loop is idle by then.
      while (reads.load() < i) std::this_thread::sleep_for(std::chrono::microseconds(100));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ASSERT_EQ(write(fds[1], "x", 1), 1);
    }
  });
  bool done = d.RunUntil([&] { return reads.load() == kWrites; }, 10000);
  writer.join();
  EXPECT_TRUE(done);
  EXPECT_EQ(reads.load(), kWrites);
  // Every idle moment went through the sleeping path (found the byte there, or blocked after it).
  EXPECT_GE(d.batch_hits() + d.batch_misses(), 1u);
  ev.reset();
  close(fds[0]);
  close(fds[1]);
}

// An epoll batch's writes go out after every kFlushEvents events and at the end of the batch, not
// after each event (fewer wake-ups of the peers) and not only at the end (a big batch would hold
// its first responses back).
TEST(DispatcherTest, ScheduledFlushesRunEveryKFlushEventsAndAtTheEndOfTheBatch) {
  constexpr int kReady = Dispatcher::kFlushEvents + 36;  // one epoll batch holds up to 256
  Dispatcher d("t");
  struct Recorder : Flushable {
    Recorder(int* h, std::vector<int>* s) : handled(h), seen(s) {}
    void Flush() override { seen->push_back(*handled); }
    int* handled;
    std::vector<int>* seen;  // how many events had run when each flush ran
  };
  int handled = 0;
  std::vector<int> seen;
  std::vector<std::unique_ptr<SocketPair>> pairs;
  std::vector<std::unique_ptr<FileEvent>> events;
  std::vector<Recorder> recorders(kReady, Recorder(&handled, &seen));
  for (int i = 0; i < kReady; ++i) {
    pairs.push_back(std::make_unique<SocketPair>());
    int fd = pairs.back()->fds[0];
    Recorder* r = &recorders[i];
    events.push_back(d.CreateFileEvent(
        fd,
        [&, fd, r](uint32_t) {
          char buf[8];
          while (read(fd, buf, sizeof(buf)) > 0) {
          }
          ++handled;
          d.ScheduleFlush(r);
        },
        FileEvent::kRead));
    ASSERT_EQ(write(pairs.back()->fds[1], "x", 1), 1);
  }
  ASSERT_TRUE(d.RunUntil([&] { return handled == kReady; }, 5000));
  ASSERT_EQ(seen.size(), static_cast<size_t>(kReady));
  // All were ready before the loop ran, so one batch took them all.
  int first = Dispatcher::kFlushEvents;
  EXPECT_EQ(std::count(seen.begin(), seen.end(), first), first);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), kReady), kReady - first);
}

TEST(DispatcherTest, ACancelledFlushDoesNotRun) {
  Dispatcher d("t");
  struct Counter : Flushable {
    void Flush() override { ++flushes; }
    int flushes = 0;
  };
  Counter kept, cancelled;
  d.ScheduleFlush(&kept);
  d.ScheduleFlush(&cancelled);
  d.CancelFlush(&cancelled);
  Spin(d, 2);
  EXPECT_EQ(kept.flushes, 1);
  EXPECT_EQ(cancelled.flushes, 0);
}

}  // namespace
}  // namespace rpx
