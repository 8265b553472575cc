// Dispatcher: one epoll event loop, owned and run by exactly one thread (a worker or the main
// thread). Everything but Post() and Exit() must be called on that thread. Objects that may be
// destroyed from inside one of their own callbacks go through DeferredDelete, which frees them
// after the current batch of events.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

struct epoll_event;

namespace rpx {

class Dispatcher;
class IoRing;

// Where an accept taken by accept batching puts the peer's address (see FileEvent).
struct AcceptSlot {
  sockaddr_storage addr;
  socklen_t len;
};

// Readiness for one file descriptor. The owner turns read and write interest on and off (that is
// how backpressure stops reading from a socket).
// Level-triggered (the default) reports a ready descriptor at every loop iteration until it is
// no longer ready. Edge-triggered reports readiness once, when it arises (or when interest is
// turned on while the descriptor is ready), which saves epoll a second look at every descriptor
// it reported: the owner must then read until the socket is drained (a short read says so), or
// call Activate() to be called again on the next iteration.
// Two forms: Dispatcher::CreateFileEvent with a callback, or a MemberFileEvent embedded in its
// owner (no allocation of its own: every connection has one).
class FileEvent {
 public:
  // kPeerClosed comes with kRead when the peer has shut down its side (EPOLLRDHUP): after an
  // edge-triggered report with it, a short read no longer means drained (the end of the stream
  // is still to be read).
  enum : uint32_t { kRead = 1, kWrite = 2, kClosed = 4, kPeerClosed = 8 };
  enum class Trigger : uint8_t { kLevel, kEdge };
  using Callback = std::function<void(uint32_t events)>;
  virtual ~FileEvent();
  FileEvent(const FileEvent&) = delete;
  FileEvent& operator=(const FileEvent&) = delete;
  void SetInterest(uint32_t interest);  // kRead | kWrite
  uint32_t interest() const { return interest_; }
  // Switches between level and edge triggering (a MOD, which also re-arms: see SetInterest).
  void SetTrigger(Trigger trigger);
  // Calls OnEvents(events) on the next loop iteration, as if epoll had reported them (an
  // edge-triggered owner that stopped before draining its socket). Repeated calls before then
  // merge. Forgotten if the descriptor is unregistered first.
  void Activate(uint32_t events);
  // Removes the fd from epoll before the owner closes it (a later fd with the same number must
  // not be unregistered by our destructor). Events already fetched for it are then dropped.
  void Unregister();
  // The same, for an owner about to close(2) an fd that nothing else refers to (no dup, no
  // fork, no io_uring request in flight): the close takes it out of the epoll set, so this skips
  // the EPOLL_CTL_DEL (one syscall less per connection).
  void UnregisterForClose();
  Dispatcher& dispatcher() const { return dispatcher_; }

 protected:
  // Registers `fd` with epoll at once.
  FileEvent(Dispatcher& d, int fd, uint32_t interest, Trigger trigger = Trigger::kLevel);
  virtual void OnEvents(uint32_t events) = 0;
  // Read batching (Dispatcher::SetReadBatching): an owner that reads its fd with recv(2) can let
  // the loop take its next read early, together with the batch's other reads. ReadAheadBuffer
  // offers where to put the bytes (false: not now); OnReadAhead gets the result (bytes, 0 at end
  // of stream, or -errno), always before OnEvents of the same batch.
  virtual bool ReadAheadBuffer(char** /*buf*/, size_t* /*len*/) { return false; }
  virtual void OnReadAhead(ssize_t /*result*/) {}
  // Accept batching, read batching's counterpart for a listening socket: its owner can let the
  // loop take its next connections early, in the batch's io_uring_enter, instead of an accept4(2)
  // each and one more that finds the queue empty. AcceptAheadSlots offers how many to try (0: not
  // now) and where their peers' addresses go (`*slots`, valid until the results are in);
  // OnAcceptAhead(i, result) gets slot i's result (the new descriptor, non-blocking and
  // close-on-exec, or -errno: -EAGAIN once the queue is empty), always before OnEvents of the
  // same batch. A slot that gets no result was not tried (the ring was full).
  virtual size_t AcceptAheadSlots(AcceptSlot** /*slots*/) { return 0; }
  virtual void OnAcceptAhead(size_t /*slot*/, int /*result*/) {}

 private:
  friend class Dispatcher;
  void Modify();  // EPOLL_CTL_MOD with the current interest and trigger

  Dispatcher& dispatcher_;
  int fd_;
  uint16_t interest_;
  uint8_t activated_ = 0;  // events Activate() queued, not delivered yet
  bool edge_;
};

// A FileEvent that calls `(owner->*M)(events)`, for embedding in the owner.
template <class T, void (T::*M)(uint32_t)>
class MemberFileEvent final : public FileEvent {
 public:
  MemberFileEvent(Dispatcher& d, int fd, uint32_t interest, T* owner,
                  Trigger trigger = Trigger::kLevel)
      : FileEvent(d, fd, interest, trigger), owner_(owner) {}

 private:
  void OnEvents(uint32_t events) override { (owner_->*M)(events); }
  T* owner_;
};

// A MemberFileEvent whose owner also takes part in read batching, through
// `owner->ReadAheadBuffer(buf, len)` and `owner->OnReadAhead(result)`.
template <class T, void (T::*M)(uint32_t)>
class ReadingFileEvent final : public FileEvent {
 public:
  ReadingFileEvent(Dispatcher& d, int fd, uint32_t interest, T* owner,
                   Trigger trigger = Trigger::kLevel)
      : FileEvent(d, fd, interest, trigger), owner_(owner) {}

 private:
  void OnEvents(uint32_t events) override { (owner_->*M)(events); }
  bool ReadAheadBuffer(char** buf, size_t* len) override {
    return owner_->ReadAheadBuffer(buf, len);
  }
  void OnReadAhead(ssize_t result) override { owner_->OnReadAhead(result); }
  T* owner_;
};

// One-shot timer. Enable() re-arms it; destroying or disabling it cancels it. Two forms:
// Dispatcher::CreateTimer with a callback, or a MemberTimer embedded in its owner.
// Pushing an armed timer's deadline later (the common case: idle timeouts refreshed on every
// request) only records the new deadline; the timer is re-queued when its old slot comes up, so
// the hot path does no heap insert or erase. Timers armed with one of a few delays in use (a
// route's timeout, started and cancelled once per request) queue in a list per delay, in
// deadline order by construction: arming and cancelling those is O(1) (libevent's "common
// timeouts"). Timers due at the same millisecond fire in the order they were queued.
class Timer {
 public:
  virtual ~Timer() { Disable(); }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  void Enable(uint64_t delay_ms);
  void Disable();
  bool enabled() const { return index_ != kNotQueued; }

 protected:
  explicit Timer(Dispatcher& d) : dispatcher_(d) {}
  virtual void OnFire() = 0;

 private:
  friend class Dispatcher;
  static constexpr uint32_t kNotQueued = UINT32_MAX;
  // index_ from kInList on: in the dispatcher's same-delay list number index_ - kInList.
  static constexpr uint32_t kMaxLists = 8;
  static constexpr uint32_t kInList = kNotQueued - kMaxLists;
  Dispatcher& dispatcher_;
  uint64_t deadline_ = 0;  // when it fires (may be later than key_: re-queued then)
  uint64_t key_ = 0;       // the deadline it is queued under
  Timer* prev_ = nullptr;  // neighbours in a same-delay list
  Timer* next_ = nullptr;
  // Queueing order, for timers with the same key (wraps: compared as a difference).
  uint32_t seq_ = 0;
  uint32_t index_ = kNotQueued;  // position in the dispatcher's heap, or kInList + list
};

// A Timer that calls `(owner->*M)()`, for embedding in the owner.
template <class T, void (T::*M)()>
class MemberTimer final : public Timer {
 public:
  MemberTimer(Dispatcher& d, T* owner) : Timer(d), owner_(owner) {}

 private:
  void OnFire() override { (owner_->*M)(); }
  T* owner_;
};

class DeferredDeletable {
 public:
  virtual ~DeferredDeletable() = default;
};

// Something with buffered output that the loop flushes after every kFlushEvents events of a batch
// and at its end, so the writes one event causes (a response's headers and body) leave in one
// syscall, and the writes of neighbouring events reach their peers together.
// With write batching (Dispatcher::SetWriteBatching) the loop first sends what every scheduled
// Flushable offers in one io_uring_enter(2): WriteAheadBuffer says which socket and bytes (false:
// not now) and whether the stream ends right after them (sent with MSG_MORE, see RawTransport),
// OnWriteAhead gets the result (bytes taken, or -errno; -ECANCELED: not sent at all), and Flush()
// follows as always, to finish what the batched send left.
class Flushable {
 public:
  virtual ~Flushable() = default;
  virtual void Flush() = 0;
  virtual bool WriteAheadBuffer(int* /*fd*/, const char** /*buf*/, size_t* /*len*/,
                                bool* /*end_follows*/) {
    return false;
  }
  virtual void OnWriteAhead(ssize_t /*result*/) {}
};

class Dispatcher {
 public:
  explicit Dispatcher(std::string name);
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  std::unique_ptr<FileEvent> CreateFileEvent(
      int fd, FileEvent::Callback cb, uint32_t interest,
      FileEvent::Trigger trigger = FileEvent::Trigger::kLevel);
  std::unique_ptr<Timer> CreateTimer(std::function<void()> cb);
  void DeferredDelete(std::unique_ptr<DeferredDeletable> obj);
  // `f` must stay alive until the end of the current batch (deferred deletion guarantees that).
  void ScheduleFlush(Flushable* f) { flush_.push_back(f); }
  // For a Flushable destroyed before its scheduled flush ran (rare: owners are deleted deferred,
  // after the batch's flushes; a posted task or a timer may still destroy one within the batch).
  void CancelFlush(Flushable* f);
  // An orphan outlives its owner and frees itself later (a connection still flushing or lingering
  // when its owner went away). It must be forgotten before it frees itself; whatever is left
  // when the dispatcher shuts down is deleted then, instead of leaking.
  void AdoptOrphan(DeferredDeletable* o) { orphans_.insert(o); }
  void ForgetOrphan(DeferredDeletable* o) { orphans_.erase(o); }

  // Thread-safe: runs `fn` on the dispatcher's thread soon. Used for config updates and shutdown,
  // never on the request path.
  void Post(std::function<void()> fn);

  // Runs until Exit() is called (from any thread).
  void Run();
  // Runs the loop until `done()` is true or `timeout_ms` passed; returns done(). For tests and for
  // bounded waits such as draining.
  bool RunUntil(const std::function<bool()>& done, uint64_t timeout_ms);
  void Exit();

  // Batching. A loop that finds no events normally blocks in epoll_wait, and then every packet
  // that arrives for it wakes it: on another CPU that is an inter-processor interrupt, paid by the
  // CPU that sends it (on a VM, a trip through the hypervisor). When it is known that events are
  // coming (at least kBatchMinPending pieces of work are waiting on peers: requests in flight), the
  // loop instead sleeps `us` microseconds and polls again, up to a budget of sleeps, so arrivals
  // only queue and are handled together. The budget halves each time the sleeps find nothing (a
  // quiet loop soon blocks at once) and is restored when one finds events. 0 (the default) turns
  // batching off. Every wait is bounded: at most kBatchMaxSleeps * us before the loop blocks.
  static constexpr int kBatchMinPending = 8;
  static constexpr int kBatchMaxSleeps = 10;
  // Scheduled writes run after this many events of an epoll batch, and at the end of the batch.
  static constexpr int kFlushEvents = 64;
  void SetBatchWait(uint32_t us) { batch_wait_us_ = us; }
  // Read batching: the sockets that one epoll batch reports readable are read together, in one
  // io_uring_enter(2) (IoRing), before their events run; each owner then finds its bytes already
  // read. One kernel entry instead of one per socket, and nothing waits: the reads are
  // non-blocking and the data was already there. Off by default. If the kernel refuses io_uring
  // the loop logs it once and reads with recv(2) as before.
  void SetReadBatching(bool on) { read_batching_ = on; }
  bool read_batching() const { return read_batching_; }
  // Accept batching (FileEvent::AcceptAheadSlots) comes with read batching, on a kernel whose
  // io_uring can accept without waiting (Linux 6.10); elsewhere listeners use accept4(2).
  // Reads taken early by read batching, connections accepted early, and io_uring_enter calls
  // that took them (tests, stats).
  uint64_t batched_reads() const { return batched_reads_; }
  uint64_t batched_accepts() const { return batched_accepts_; }
  uint64_t read_batches() const { return read_batches_; }
  // Write batching: when two or more Flushables are scheduled, their sends go out together in one
  // io_uring_enter(2) before each one's Flush() (see Flushable). The same trade as read
  // batching: one kernel entry for the batch's sends instead of one each. Off by default; where
  // the kernel refuses io_uring (or its send operation) the loop logs it once and sends with
  // send(2).
  void SetWriteBatching(bool on) { write_batching_ = on; }
  uint64_t batched_writes() const { return batched_writes_; }
  uint64_t write_batches() const { return write_batches_; }

  // Work waiting on a peer (a request in flight) starts (+1) or ends (-1).
  void AddPending(int delta) { pending_ += delta; }
  int pending() const { return pending_; }
  // Loop iterations that slept and then found events, and that slept and found none (tests).
  uint64_t batch_hits() const { return batch_hits_; }
  uint64_t batch_misses() const { return batch_misses_; }

  // Monotonic milliseconds, refreshed once per loop iteration (cheap to read).
  uint64_t NowMs() const { return now_ms_; }
  void UpdateTime();
  const std::string& name() const { return name_; }
  // The worker this loop belongs to (0 for the main thread): its slot in per-worker buffers.
  uint32_t worker_index() const { return worker_index_; }
  void set_worker_index(uint32_t i) { worker_index_ = i; }
  bool IsThisThread() const;

 private:
  friend class FileEvent;
  friend class Timer;
  void RunTimers();
  // The timer queue: up to Timer::kMaxLists FIFO lists, one per delay (appending keeps each in
  // deadline order, since now only grows), and a binary min-heap on (key_, seq_) for every other
  // delay and for re-queued timers; each timer knows where it is.
  struct TimerList {
    uint64_t delay;
    Timer* head;
    Timer* tail;
  };
  static bool Earlier(const Timer* a, const Timer* b) {
    return a->key_ < b->key_ || (a->key_ == b->key_ && static_cast<int32_t>(a->seq_ - b->seq_) < 0);
  }
  void QueueTimer(Timer* t, uint64_t delay_ms);
  void UnqueueTimer(Timer* t);
  Timer* NextTimer() const;  // the earliest queued, or nullptr
  void PushTimer(Timer* t);
  void RemoveTimer(Timer* t);
  void SiftUp(uint32_t i);
  void SiftDown(uint32_t i);
  void RunPosted();
  void RunActivated();
  void ClearDeferred();
  void RunFlushes();
  void RunOnce(int max_wait_ms);
  int Poll(struct epoll_event* events, int max_events, int timeout_ms);
  void ReadAhead(struct epoll_event* events, int n);
  void WriteAhead();
  // Creates the ring at first use; where the kernel refuses it, turns read and write batching off.
  bool EnsureRing();
  void EndOrphans();

  std::string name_;
  uint32_t worker_index_ = 0;
  int epoll_fd_;
  int wake_fd_;
  std::atomic<bool> exit_{false};
  uint64_t now_ms_ = 0;
  std::vector<Timer*> timers_;
  std::vector<TimerList> timer_lists_;
  uint32_t next_timer_seq_ = 0;
  std::vector<std::unique_ptr<DeferredDeletable>> deferred_;
  // ClearDeferred's other half: the two swap, so both keep their capacity and deferring a delete
  // (every finished request does) never allocates.
  std::vector<std::unique_ptr<DeferredDeletable>> deleting_;
  std::vector<Flushable*> flush_;
  // FileEvents that Activate() queued; an entry is nulled when its event is unregistered.
  std::vector<FileEvent*> activated_;
  std::unordered_set<DeferredDeletable*> orphans_;  // connections closing without an owner: few
  std::mutex post_mu_;
  std::vector<std::function<void()>> posted_;
  std::atomic<uint64_t> thread_id_{0};
  uint32_t batch_wait_us_ = 0;
  int batch_sleeps_ = kBatchMaxSleeps;  // the current budget
  int pending_ = 0;
  uint64_t batch_hits_ = 0;
  uint64_t batch_misses_ = 0;
  bool read_batching_ = false;
  std::unique_ptr<IoRing> ring_;  // created on the loop's thread at first use
  bool accept_batching_ = false;  // set when the ring is made
  uint64_t batched_reads_ = 0;
  uint64_t batched_accepts_ = 0;
  uint64_t read_batches_ = 0;
  bool write_batching_ = false;
  uint64_t batched_writes_ = 0;
  uint64_t write_batches_ = 0;
};

}  // namespace rpx
