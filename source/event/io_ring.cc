#include "source/event/io_ring.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace rpx {

namespace {

int Setup(unsigned entries, io_uring_params* p) {
  return static_cast<int>(syscall(__NR_io_uring_setup, entries, p));
}

int Enter(int fd, unsigned to_submit, unsigned min_complete, unsigned flags) {
  return static_cast<int>(
      syscall(__NR_io_uring_enter, fd, to_submit, min_complete, flags, nullptr, 0));
}

// IORING_ACCEPT_DONTWAIT (Linux 6.10): newer than the headers this builds with.
constexpr uint16_t kAcceptDontWait = 1U << 1;

template <class T>
T* At(void* base, uint32_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

}  // namespace

std::unique_ptr<IoRing> IoRing::Create(unsigned entries) {
  io_uring_params p;
  memset(&p, 0, sizeof(p));
  // SUBMIT_ALL: one failing operation does not stop the rest of the batch. COOP_TASKRUN: no
  // interrupts to post completions; we collect them in io_uring_enter anyway. Older kernels
  // reject unknown flags with EINVAL: retry plain.
  p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
  int fd = Setup(entries, &p);
  if (fd < 0 && errno == EINVAL) {
    memset(&p, 0, sizeof(p));
    fd = Setup(entries, &p);
  }
  if (fd < 0) return nullptr;

  std::unique_ptr<IoRing> ring(new IoRing());
  ring->fd_ = fd;
  ring->sq_entries_ = p.sq_entries;
  ring->sq_ring_size_ = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  ring->cq_ring_size_ = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
  bool single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
  if (single)
    ring->sq_ring_size_ = ring->cq_ring_size_ = std::max(ring->sq_ring_size_, ring->cq_ring_size_);
  void* sq = mmap(nullptr, ring->sq_ring_size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                  fd, IORING_OFF_SQ_RING);
  if (sq == MAP_FAILED) return nullptr;
  ring->sq_ring_ = sq;
  void* cq = sq;
  if (!single) {
    cq = mmap(nullptr, ring->cq_ring_size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
              IORING_OFF_CQ_RING);
    if (cq == MAP_FAILED) return nullptr;
  }
  ring->cq_ring_ = cq;
  ring->sqes_size_ = p.sq_entries * sizeof(io_uring_sqe);
  void* sqes = mmap(nullptr, ring->sqes_size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                    fd, IORING_OFF_SQES);
  if (sqes == MAP_FAILED) return nullptr;
  ring->sqes_ = sqes;

  ring->sq_head_ = At<unsigned>(sq, p.sq_off.head);
  ring->sq_tail_ = At<unsigned>(sq, p.sq_off.tail);
  ring->sq_mask_ = *At<unsigned>(sq, p.sq_off.ring_mask);
  ring->sq_array_ = At<unsigned>(sq, p.sq_off.array);
  ring->cq_head_ = At<unsigned>(cq, p.cq_off.head);
  ring->cq_tail_ = At<unsigned>(cq, p.cq_off.tail);
  ring->cq_mask_ = *At<unsigned>(cq, p.cq_off.ring_mask);
  ring->cqes_ = At<void>(cq, p.cq_off.cqes);
  return ring;
}

IoRing::~IoRing() {
  if (sqes_) munmap(sqes_, sqes_size_);
  if (cq_ring_ && cq_ring_ != sq_ring_) munmap(cq_ring_, cq_ring_size_);
  if (sq_ring_) munmap(sq_ring_, sq_ring_size_);
  if (fd_ >= 0) close(fd_);
}

bool IoRing::QueueRecv(int fd, char* buf, size_t len, uint64_t tag) {
  return Queue(IORING_OP_RECV, fd, reinterpret_cast<uint64_t>(buf), len, MSG_DONTWAIT, tag);
}

bool IoRing::QueueSend(int fd, const char* buf, size_t len, uint64_t tag, bool more) {
  return Queue(IORING_OP_SEND, fd, reinterpret_cast<uint64_t>(buf), len,
               MSG_DONTWAIT | MSG_NOSIGNAL | (more ? MSG_MORE : 0), tag);
}

bool IoRing::QueueAccept(int fd, sockaddr* addr, socklen_t* len, uint64_t tag) {
  io_uring_sqe* sqe = Next(IORING_OP_ACCEPT, fd, tag);
  if (sqe == nullptr) return false;
  sqe->addr = reinterpret_cast<uint64_t>(addr);
  sqe->addr2 = reinterpret_cast<uint64_t>(len);
  sqe->accept_flags = SOCK_NONBLOCK | SOCK_CLOEXEC;
  // Without it io_uring parks an accept that finds the queue empty (whatever the socket's
  // O_NONBLOCK) until a connection arrives: the request would outlive Submit().
  sqe->ioprio = kAcceptDontWait;
  return true;
}

bool IoRing::CanAcceptWithoutWaiting() {
  if (accept_dontwait_ >= 0) return accept_dontwait_ != 0;
  // The flags are checked when the request is prepared, before its descriptor is looked up:
  // a kernel that knows the flag fails an accept on fd -1 with EBADF, one that does not with
  // EINVAL. Anything else counts as no.
  sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  ssize_t result = 0;
  if (queued_ == 0 && QueueAccept(-1, reinterpret_cast<sockaddr*>(&addr), &len, 0)) {
    Submit([&result](uint64_t, ssize_t r) { result = r; });
  }
  accept_dontwait_ = result == -EBADF ? 1 : 0;
  return accept_dontwait_ != 0;
}

io_uring_sqe* IoRing::Next(uint8_t opcode, int fd, uint64_t tag) {
  if (queued_ == sq_entries_) return nullptr;
  unsigned tail = *sq_tail_;  // only this thread writes it
  unsigned index = tail & sq_mask_;
  io_uring_sqe* sqe = static_cast<io_uring_sqe*>(sqes_) + index;
  memset(sqe, 0, sizeof(*sqe));
  sqe->opcode = opcode;
  sqe->fd = fd;
  sqe->user_data = tag;
  sq_array_[index] = index;
  __atomic_store_n(sq_tail_, tail + 1, __ATOMIC_RELEASE);
  ++queued_;
  return sqe;
}

bool IoRing::Queue(uint8_t opcode, int fd, uint64_t addr, size_t len, int flags, uint64_t tag) {
  io_uring_sqe* sqe = Next(opcode, fd, tag);
  if (sqe == nullptr) return false;
  sqe->addr = addr;
  sqe->len = static_cast<uint32_t>(std::min<size_t>(len, INT_MAX));
  // MSG_DONTWAIT also tells io_uring not to park the request when the socket is not ready
  // (nothing to read, no room to write): it completes with -EAGAIN, so nothing is ever left in
  // flight (see the header).
  sqe->msg_flags = flags;
  return true;
}

unsigned IoRing::Submit(absl::FunctionRef<void(uint64_t, ssize_t)> done) {
  if (queued_ == 0) return 0;
  int r;
  do {
    r = Enter(fd_, queued_, queued_, IORING_ENTER_GETEVENTS);
  } while (r < 0 && errno == EINTR);
  unsigned completed = Reap(done);
  // What the kernel did not take (the whole batch on an error) never ran: take it back, and
  // say so (-ECANCELED), so that the callers do it themselves.
  unsigned head = __atomic_load_n(sq_head_, __ATOMIC_ACQUIRE);
  unsigned tail = *sq_tail_;
  for (unsigned i = head; i != tail; ++i) {
    const io_uring_sqe* sqe = static_cast<io_uring_sqe*>(sqes_) + (i & sq_mask_);
    done(sqe->user_data, -ECANCELED);
    ++completed;
  }
  __atomic_store_n(sq_tail_, head, __ATOMIC_RELEASE);
  queued_ = 0;
  return completed;
}

unsigned IoRing::Reap(absl::FunctionRef<void(uint64_t, ssize_t)> done) {
  unsigned head = *cq_head_;
  unsigned tail = __atomic_load_n(cq_tail_, __ATOMIC_ACQUIRE);
  unsigned n = 0;
  for (; head != tail; ++head, ++n) {
    const io_uring_cqe* cqe = static_cast<io_uring_cqe*>(cqes_) + (head & cq_mask_);
    done(cqe->user_data, cqe->res);
  }
  __atomic_store_n(cq_head_, head, __ATOMIC_RELEASE);
  return n;
}

}  // namespace rpx
