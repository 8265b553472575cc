#include "source/event/dispatcher.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "source/common/logger.h"
#include "source/event/io_ring.h"

namespace rpx {
namespace {
uint64_t MonotonicMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}
uint32_t ToEpoll(uint32_t interest, bool edge) {
  uint32_t ev = edge ? EPOLLET : 0;
  if (interest & FileEvent::kRead) ev |= EPOLLIN | EPOLLRDHUP;
  if (interest & FileEvent::kWrite) ev |= EPOLLOUT;
  return ev;
}
}  // namespace

namespace {
class CallbackFileEvent final : public FileEvent {
 public:
  CallbackFileEvent(Dispatcher& d, int fd, Callback cb, uint32_t interest, Trigger trigger)
      : FileEvent(d, fd, interest, trigger), cb_(std::move(cb)) {}

 private:
  void OnEvents(uint32_t events) override { cb_(events); }
  Callback cb_;
};

class CallbackTimer final : public Timer {
 public:
  CallbackTimer(Dispatcher& d, std::function<void()> cb) : Timer(d), cb_(std::move(cb)) {}

 private:
  void OnFire() override { cb_(); }
  std::function<void()> cb_;
};
}  // namespace

FileEvent::FileEvent(Dispatcher& d, int fd, uint32_t interest, Trigger trigger)
    : dispatcher_(d),
      fd_(fd),
      interest_(static_cast<uint16_t>(interest)),
      edge_(trigger == Trigger::kEdge) {
  struct epoll_event ev;
  ev.events = ToEpoll(interest, edge_);
  ev.data.ptr = this;
  if (epoll_ctl(d.epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    RPX_LOG(kError, "epoll_ctl add fd %d: %s", fd, strerror(errno));
  }
}

FileEvent::~FileEvent() { Unregister(); }

void FileEvent::Unregister() {
  if (fd_ >= 0) epoll_ctl(dispatcher_.epoll_fd_, EPOLL_CTL_DEL, fd_, nullptr);
  UnregisterForClose();
}

void FileEvent::UnregisterForClose() {
  if (activated_) {
    activated_ = 0;
    for (FileEvent*& e : dispatcher_.activated_) {
      if (e == this) e = nullptr;
    }
  }
  fd_ = -1;
}

void FileEvent::Activate(uint32_t events) {
  if (fd_ < 0) return;
  if (!activated_) dispatcher_.activated_.push_back(this);
  activated_ |= static_cast<uint8_t>(events);
}

void FileEvent::SetTrigger(Trigger trigger) {
  bool edge = trigger == Trigger::kEdge;
  if (edge == edge_ || fd_ < 0) return;
  edge_ = edge;
  Modify();
}

void FileEvent::SetInterest(uint32_t interest) {
  // With edge triggering, turning interest on (MOD) also re-arms it: epoll looks at the
  // descriptor again and reports it if it is ready, so nothing that arrived meanwhile is missed.
  if (interest == interest_ || fd_ < 0) return;
  interest_ = static_cast<uint16_t>(interest);
  Modify();
}

void FileEvent::Modify() {
  struct epoll_event ev;
  ev.events = ToEpoll(interest_, edge_);
  ev.data.ptr = this;
  epoll_ctl(dispatcher_.epoll_fd_, EPOLL_CTL_MOD, fd_, &ev);
}

void Timer::Enable(uint64_t delay_ms) {
  uint64_t deadline = dispatcher_.NowMs() + delay_ms;
  if (enabled() && deadline >= key_) {
    deadline_ = deadline;  // re-queued when the earlier slot fires
    return;
  }
  Disable();
  deadline_ = key_ = deadline;
  dispatcher_.QueueTimer(this, delay_ms);
}

void Timer::Disable() {
  if (enabled()) dispatcher_.UnqueueTimer(this);
}

void Dispatcher::QueueTimer(Timer* t, uint64_t delay_ms) {
  size_t n = timer_lists_.size();
  size_t i = 0;
  while (i < n && timer_lists_[i].delay != delay_ms) ++i;
  if (i == n) {
    // A new delay takes an empty list (its delay may never come again), else a new one, else the
    // heap.
    i = 0;
    while (i < n && timer_lists_[i].head) ++i;
    if (i < n) {
      timer_lists_[i].delay = delay_ms;
    } else if (n < Timer::kMaxLists) {
      timer_lists_.push_back(TimerList{delay_ms, nullptr, nullptr});
    } else {
      PushTimer(t);
      return;
    }
  }
  TimerList& list = timer_lists_[i];
  t->seq_ = next_timer_seq_++;
  t->index_ = Timer::kInList + static_cast<uint32_t>(i);
  t->prev_ = list.tail;
  t->next_ = nullptr;
  if (list.tail) {
    list.tail->next_ = t;
  } else {
    list.head = t;
  }
  list.tail = t;
}

void Dispatcher::UnqueueTimer(Timer* t) {
  if (t->index_ < Timer::kInList) {
    RemoveTimer(t);
    return;
  }
  TimerList& list = timer_lists_[t->index_ - Timer::kInList];
  if (t->prev_) {
    t->prev_->next_ = t->next_;
  } else {
    list.head = t->next_;
  }
  if (t->next_) {
    t->next_->prev_ = t->prev_;
  } else {
    list.tail = t->prev_;
  }
  t->prev_ = t->next_ = nullptr;
  t->index_ = Timer::kNotQueued;
}

Timer* Dispatcher::NextTimer() const {
  Timer* next = timers_.empty() ? nullptr : timers_.front();
  for (const TimerList& list : timer_lists_) {
    if (list.head && (!next || Earlier(list.head, next))) next = list.head;
  }
  return next;
}

void Dispatcher::PushTimer(Timer* t) {
  t->seq_ = next_timer_seq_++;
  t->index_ = static_cast<uint32_t>(timers_.size());
  timers_.push_back(t);
  SiftUp(t->index_);
}

void Dispatcher::RemoveTimer(Timer* t) {
  uint32_t i = t->index_;
  t->index_ = Timer::kNotQueued;
  Timer* last = timers_.back();
  timers_.pop_back();
  if (last == t) return;
  timers_[i] = last;
  last->index_ = i;
  SiftUp(i);
  SiftDown(last->index_);
}

void Dispatcher::SiftUp(uint32_t i) {
  Timer* t = timers_[i];
  while (i > 0) {
    uint32_t parent = (i - 1) / 2;
    if (!Earlier(t, timers_[parent])) break;
    timers_[i] = timers_[parent];
    timers_[i]->index_ = i;
    i = parent;
  }
  timers_[i] = t;
  t->index_ = i;
}

void Dispatcher::SiftDown(uint32_t i) {
  Timer* t = timers_[i];
  uint32_t n = static_cast<uint32_t>(timers_.size());
  while (true) {
    uint32_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && Earlier(timers_[child + 1], timers_[child])) ++child;
    if (!Earlier(timers_[child], t)) break;
    timers_[i] = timers_[child];
    timers_[i]->index_ = i;
    i = child;
  }
  timers_[i] = t;
  t->index_ = i;
}

Dispatcher::Dispatcher(std::string name) : name_(std::move(name)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  struct epoll_event ev;
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // nullptr marks the wake-up eventfd
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  now_ms_ = MonotonicMs();
}

Dispatcher::~Dispatcher() {
  EndOrphans();
  ClearDeferred();
  ring_.reset();
  close(wake_fd_);
  close(epoll_fd_);
}

std::unique_ptr<FileEvent> Dispatcher::CreateFileEvent(int fd, FileEvent::Callback cb,
                                                       uint32_t interest,
                                                       FileEvent::Trigger trigger) {
  return std::make_unique<CallbackFileEvent>(*this, fd, std::move(cb), interest, trigger);
}

std::unique_ptr<Timer> Dispatcher::CreateTimer(std::function<void()> cb) {
  return std::make_unique<CallbackTimer>(*this, std::move(cb));
}

void Dispatcher::DeferredDelete(std::unique_ptr<DeferredDeletable> obj) {
  deferred_.push_back(std::move(obj));
}

void Dispatcher::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    posted_.push_back(std::move(fn));
  }
  uint64_t one = 1;
  ssize_t unused = write(wake_fd_, &one, sizeof(one));
  (void)unused;
}

void Dispatcher::Exit() {
  exit_.store(true);
  Post([] {});
}

void Dispatcher::UpdateTime() { now_ms_ = MonotonicMs(); }

bool Dispatcher::IsThisThread() const {
  return thread_id_.load() == static_cast<uint64_t>(pthread_self());
}

void Dispatcher::RunTimers() {
  while (Timer* t = NextTimer()) {
    if (t->key_ > now_ms_) break;
    UnqueueTimer(t);
    if (t->deadline_ > t->key_) {
      // Pushed later while armed: queue it again under its real deadline (the heap: not now + a
      // list's delay). Even when that deadline has passed too (a late loop), so overdue timers
      // still fire in deadline order.
      t->key_ = t->deadline_;
      PushTimer(t);
      continue;
    }
    t->OnFire();
  }
}

void Dispatcher::RunPosted() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) fn();
}

void Dispatcher::RunActivated() {
  // Only what was queued before this pass: an event that activates itself again waits for the
  // next iteration (and its epoll events), so it cannot starve the loop.
  size_t n = activated_.size();
  for (size_t i = 0; i < n; ++i) {
    FileEvent* fe = activated_[i];
    if (fe == nullptr) continue;  // unregistered since
    activated_[i] = nullptr;
    uint32_t ev = fe->activated_;
    fe->activated_ = 0;
    if (fe->fd_ < 0) continue;
    fe->OnEvents(ev);
    RunFlushes();
  }
  activated_.erase(activated_.begin(), activated_.begin() + n);
}

void Dispatcher::RunFlushes() {
  if (write_batching_ && flush_.size() > 1) WriteAhead();
  // Flushing may schedule more flushes (a write failure closing a peer); index, don't iterate.
  for (size_t i = 0; i < flush_.size(); ++i) {
    if (flush_[i]) flush_[i]->Flush();
  }
  flush_.clear();
}

void Dispatcher::CancelFlush(Flushable* f) {
  std::replace(flush_.begin(), flush_.end(), f, static_cast<Flushable*>(nullptr));
}

void Dispatcher::EndOrphans() {
  while (!orphans_.empty()) {
    DeferredDeletable* o = *orphans_.begin();
    orphans_.erase(orphans_.begin());
    delete o;
  }
}

void Dispatcher::ClearDeferred() {
  // Deleting one object may defer-delete others (into deferred_, now the emptied other vector);
  // loop until empty.
  while (!deferred_.empty()) {
    deleting_.swap(deferred_);
    deleting_.clear();
  }
}

int Dispatcher::Poll(struct epoll_event* events, int max_events, int timeout_ms) {
  if (timeout_ms == 0 || batch_wait_us_ == 0 || pending_ < kBatchMinPending) {
    return epoll_wait(epoll_fd_, events, max_events, timeout_ms);
  }
  int n = epoll_wait(epoll_fd_, events, max_events, 0);
  if (n != 0) return n;
  // Nothing yet, but requests are in flight: sleep instead of waiting in epoll, so that what
  // arrives meanwhile wakes nobody. The sleeps total far less than a millisecond, so timers keep
  // their (millisecond) accuracy.
  for (int i = 0; i < batch_sleeps_; ++i) {
    struct timespec ts = {0, static_cast<long>(batch_wait_us_) * 1000};
    nanosleep(&ts, nullptr);
    n = epoll_wait(epoll_fd_, events, max_events, 0);
    if (n != 0) {
      ++batch_hits_;
      batch_sleeps_ = kBatchMaxSleeps;
      return n;
    }
  }
  ++batch_misses_;
  batch_sleeps_ = std::max(1, batch_sleeps_ / 2);
  return epoll_wait(epoll_fd_, events, max_events, timeout_ms);
}

// Must hold one whole epoll batch (RunOnce's kMaxEvents).
constexpr unsigned kRingEntries = 256;

bool Dispatcher::EnsureRing() {
  if (ring_) return true;
  ring_ = IoRing::Create(kRingEntries);
  if (ring_ && ring_->capacity() >= kRingEntries) {
    accept_batching_ = ring_->CanAcceptWithoutWaiting();
    return true;
  }
  RPX_LOG(kWarn, "%s: io_uring unavailable (%s); reading and sending socket by socket",
          name_.c_str(), ring_ ? "ring too small" : strerror(errno));
  ring_.reset();
  read_batching_ = false;
  write_batching_ = false;
  return false;
}

void Dispatcher::ReadAhead(struct epoll_event* events, int n) {
  if (!EnsureRing()) return;
  for (int i = 0; i < n; ++i) {
    auto* fe = static_cast<FileEvent*>(events[i].data.ptr);
    if (fe == nullptr || fe->fd_ < 0) continue;
    if (!(events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) continue;
    char* buf;
    size_t len;
    // With one event a plain recv is as cheap as the ring. Not so an accept: the ring also
    // takes the one that finds the queue empty, a syscall of its own otherwise.
    if (n > 1 && fe->ReadAheadBuffer(&buf, &len)) {
      ring_->QueueRecv(fe->fd_, buf, len, i);
      continue;
    }
    if (!accept_batching_) continue;
    AcceptSlot* slots;
    size_t k = fe->AcceptAheadSlots(&slots);
    for (size_t s = 0; s < k; ++s) {
      // Slot s + 1 in the tag's high half (0 there: a recv).
      uint64_t tag = static_cast<uint64_t>(i) | static_cast<uint64_t>(s + 1) << 32;
      if (!ring_->QueueAccept(fe->fd_, reinterpret_cast<sockaddr*>(&slots[s].addr), &slots[s].len,
                              tag)) {
        break;
      }
    }
  }
  if (ring_->queued() == 0) return;
  ++read_batches_;
  ring_->Submit([this, events](uint64_t tag, ssize_t result) {
    auto* fe = static_cast<FileEvent*>(events[tag & 0xffffffffu].data.ptr);
    uint64_t slot = tag >> 32;
    if (slot == 0) {
      ++batched_reads_;
      fe->OnReadAhead(result);
    } else {
      if (result >= 0) ++batched_accepts_;
      fe->OnAcceptAhead(slot - 1, static_cast<int>(result));
    }
  });
}

void Dispatcher::WriteAhead() {
  if (!EnsureRing()) return;
  // The first ring's worth; the rest (rare: a batch is at most that many events) send as before.
  size_t n = std::min<size_t>(flush_.size(), ring_->capacity());
  for (size_t i = 0; i < n; ++i) {
    int fd;
    const char* buf;
    size_t len;
    bool end_follows = false;
    if (flush_[i] && flush_[i]->WriteAheadBuffer(&fd, &buf, &len, &end_follows)) {
      ring_->QueueSend(fd, buf, len, i, end_follows);
    }
  }
  if (ring_->queued() == 0) return;
  ++write_batches_;
  bool unsupported = false;
  // No owner code runs until Submit returns, so every flush_[i] queued is still there.
  batched_writes_ += ring_->Submit([this, &unsupported](uint64_t i, ssize_t result) {
    // A kernel without IORING_OP_SEND: Flush() sends it, and later batches do not try.
    if (result == -EINVAL || result == -EOPNOTSUPP) {
      unsupported = true;
      result = -ECANCELED;
    }
    flush_[i]->OnWriteAhead(result);
  });
  if (unsupported) {
    RPX_LOG(kWarn, "%s: io_uring cannot send here; sending to sockets one by one", name_.c_str());
    write_batching_ = false;
  }
}

void Dispatcher::RunOnce(int max_wait_ms) {
  constexpr int kMaxEvents = static_cast<int>(kRingEntries);
  struct epoll_event events[kMaxEvents];
  int timeout = max_wait_ms;
  if (Timer* t = NextTimer()) {
    uint64_t next = t->key_;
    int until = next > now_ms_ ? static_cast<int>(next - now_ms_) : 0;
    if (timeout < 0 || until < timeout) timeout = until;
  }
  if (!deferred_.empty() || !flush_.empty() || !activated_.empty()) timeout = 0;
  int n = Poll(events, kMaxEvents, timeout);
  UpdateTime();
  if (n < 0 && errno != EINTR) {
    RPX_LOG(kCritical, "epoll_wait: %s", strerror(errno));
    exit_.store(true);
    return;
  }
  if (read_batching_ && n > 0) ReadAhead(events, n);
  bool posted = false;
  for (int i = 0; i < n; ++i) {
    auto* fe = static_cast<FileEvent*>(events[i].data.ptr);
    if (fe == nullptr) {
      uint64_t v;
      ssize_t unused = read(wake_fd_, &v, sizeof(v));
      (void)unused;
      // Posted work runs after the batch's events: it may destroy a FileEvent at once (a
      // listener removed by a configuration change), and one later in `events` would then be
      // freed memory.
      posted = true;
      continue;
    }
    if (fe->fd_ < 0) continue;  // closed earlier in this batch; memory lives until ClearDeferred
    uint32_t ev = 0;
    if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ev |= FileEvent::kRead;
    if (events[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) ev |= FileEvent::kWrite;
    if (events[i].events & (EPOLLHUP | EPOLLERR)) ev |= FileEvent::kClosed;
    if (events[i].events & EPOLLRDHUP) ev |= FileEvent::kPeerClosed;
    fe->OnEvents(ev);
    // Writes go out once per kFlushEvents events, not after each one: the sends of a batch then
    // reach a peer in one burst, which wakes it once instead of once per response (less CPU per
    // request; docs/benchmarks.md), and a large batch still does not hold its first response
    // back for long. A connection's headers and body still leave in one syscall.
    if ((i + 1) % kFlushEvents == 0) RunFlushes();
  }
  if (posted) {
    // What the batch wrote leaves before posted work (a configuration change) applies, as when
    // every event flushed at once. (A connection it destroys cancels its own flush.)
    RunFlushes();
    RunPosted();
  }
  if (!activated_.empty()) RunActivated();
  RunTimers();
  RunFlushes();
  ClearDeferred();
}

void Dispatcher::Run() {
  thread_id_.store(static_cast<uint64_t>(pthread_self()));
  // The batching sleeps are a few microseconds; the default 50 us timer slack would stretch them.
  if (batch_wait_us_ != 0) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  while (!exit_.load(std::memory_order_relaxed)) RunOnce(-1);
  RunPosted();
  RunFlushes();
  EndOrphans();
  ClearDeferred();
}

bool Dispatcher::RunUntil(const std::function<bool()>& done, uint64_t timeout_ms) {
  thread_id_.store(static_cast<uint64_t>(pthread_self()));
  UpdateTime();
  uint64_t deadline = now_ms_ + timeout_ms;
  while (!done() && now_ms_ < deadline && !exit_.load(std::memory_order_relaxed)) {
    RunOnce(static_cast<int>(std::min<uint64_t>(deadline - now_ms_, 50)));
  }
  return done();
}

}  // namespace rpx
