// IoRing: a small io_uring used to issue many non-blocking socket reads, or many sends, in one
// system call.
//
// A worker's epoll batch often holds dozens of readable sockets, and its flush dozens of
// connections with output; reading or writing each with recv(2) or send(2) costs a kernel entry
// and exit apiece (about 1 us on a virtual machine, where that dominates a small request).
// Queued here, they all run inside one io_uring_enter(2).
//
// Contract: every operation is a recv or a send with MSG_DONTWAIT, or an accept with
// IORING_ACCEPT_DONTWAIT, which io_uring completes (or fails with -EAGAIN) inline instead of
// parking it, so Submit() returns with every queued operation done and no buffer is ever
// referenced by the kernel afterwards. Owned by one Dispatcher and used only on its thread.
// Create() returns nullptr where the kernel has no io_uring or refuses it (seccomp in containers,
// kernel.io_uring_disabled): callers then use recv(2), send(2) and accept4(2).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"

struct io_uring_sqe;

namespace rpx {

class IoRing {
 public:
  static std::unique_ptr<IoRing> Create(unsigned entries);
  ~IoRing();
  IoRing(const IoRing&) = delete;
  IoRing& operator=(const IoRing&) = delete;

  unsigned capacity() const { return sq_entries_; }
  unsigned queued() const { return queued_; }

  // Queues recv(fd, buf, len, MSG_DONTWAIT); `tag` comes back with its result. `buf` must stay
  // valid until Submit() returns. False when the ring is full (submit first).
  bool QueueRecv(int fd, char* buf, size_t len, uint64_t tag);
  // Queues send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL, plus MSG_MORE with `more`): the
  // result is the bytes the socket took (fewer than `len` when its buffer filled), or -errno
  // (-EAGAIN: full). A kernel older than the send operation (5.6) fails it with -EINVAL.
  bool QueueSend(int fd, const char* buf, size_t len, uint64_t tag, bool more = false);
  // Queues accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC) that does not wait: the result
  // is the new descriptor, or -errno (-EAGAIN: no connection queued). `addr` and `len` (in: the
  // room at addr) must stay valid until Submit() returns. Only where CanAcceptWithoutWaiting():
  // an older kernel would park the accept until a connection came.
  bool QueueAccept(int fd, sockaddr* addr, socklen_t* len, uint64_t tag);
  // Whether the kernel has IORING_ACCEPT_DONTWAIT (Linux 6.10). Asks it once, with a submit of
  // its own: call it with nothing queued.
  bool CanAcceptWithoutWaiting();

  // Runs everything queued and calls done(tag, result) once per operation, in completion order;
  // result is the byte count, 0 at end of stream, or -errno. An operation the kernel did not take
  // (it refused the batch as a whole) gets -ECANCELED: it never ran, and the caller does it
  // itself (with edge-triggered epoll nothing would report the socket again). Nothing is left
  // queued. Returns the number of operations completed.
  unsigned Submit(absl::FunctionRef<void(uint64_t tag, ssize_t result)> done);

 private:
  IoRing() = default;
  unsigned Reap(absl::FunctionRef<void(uint64_t, ssize_t)> done);
  // Fills the next submission entry (nullptr: the ring is full); the caller sets the rest.
  io_uring_sqe* Next(uint8_t opcode, int fd, uint64_t tag);
  bool Queue(uint8_t opcode, int fd, uint64_t addr, size_t len, int flags, uint64_t tag);

  int fd_ = -1;
  unsigned sq_entries_ = 0;
  unsigned queued_ = 0;
  void* sq_ring_ = nullptr;
  size_t sq_ring_size_ = 0;
  void* cq_ring_ = nullptr;  // == sq_ring_ with IORING_FEAT_SINGLE_MMAP
  size_t cq_ring_size_ = 0;
  void* sqes_ = nullptr;
  size_t sqes_size_ = 0;
  // Pointers into the shared rings.
  unsigned* sq_head_ = nullptr;
  unsigned* sq_tail_ = nullptr;
  unsigned sq_mask_ = 0;
  unsigned* sq_array_ = nullptr;
  unsigned* cq_head_ = nullptr;
  unsigned* cq_tail_ = nullptr;
  unsigned cq_mask_ = 0;
  void* cqes_ = nullptr;
  int accept_dontwait_ = -1;  // CanAcceptWithoutWaiting's answer, -1 until asked
};

}  // namespace rpx
