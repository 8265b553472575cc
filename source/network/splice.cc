#include "source/network/splice.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rpx {
namespace {
std::atomic<bool> g_enabled{true};

// Bigger pipes mean fewer splice calls per body; 256 KiB is below the unprivileged
// /proc/sys/fs/pipe-max-size (1 MiB) default.
constexpr int kPipeSize = 256 * 1024;
// A byte stream (Splicer::kUntilEnd) lives long and moves much: a pipe of the unprivileged
// maximum halves its splice calls again. Not pooled.
constexpr int kStreamPipeSize = 1024 * 1024;
constexpr int kSinkNotsentLowat = 128 * 1024;
// Empty pipes kept per worker thread for the next body (two descriptors each).
constexpr size_t kMaxPooledPipes = 16;

struct Pipe {
  int r, w;
  size_t size;
};

// Per thread (each worker runs one dispatcher), so no locking.
std::vector<Pipe>& PipePool() {
  thread_local std::vector<Pipe> pool;
  thread_local struct Closer {
    ~Closer() {
      for (const Pipe& p : PipePool()) {
        ::close(p.r);
        ::close(p.w);
      }
    }
  } closer;
  (void)closer;
  return pool;
}

bool TakePipe(Pipe* out, int size_wanted) {
  auto& pool = PipePool();
  if (!pool.empty() && size_wanted == kPipeSize) {
    *out = pool.back();
    pool.pop_back();
    return true;
  }
  int fds[2];
  if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return false;
  int size = ::fcntl(fds[1], F_SETPIPE_SZ, size_wanted);
  if (size < 0) size = ::fcntl(fds[1], F_GETPIPE_SZ);
  *out = Pipe{fds[0], fds[1], static_cast<size_t>(size > 0 ? size : 65536)};
  return true;
}

void ReturnPipe(const Pipe& p, bool empty) {
  auto& pool = PipePool();
  if (empty && pool.size() < kMaxPooledPipes && p.size == static_cast<size_t>(kPipeSize)) {
    pool.push_back(p);
    return;
  }
  ::close(p.r);
  ::close(p.w);
}
}  // namespace

void Splicer::SetEnabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }
bool Splicer::enabled() { return g_enabled.load(std::memory_order_relaxed); }

std::unique_ptr<Splicer> Splicer::Create(Connection& source, Connection& sink, uint64_t length,
                                         SplicerCallbacks& callbacks) {
  if (!enabled() || !source.plaintext() || !sink.plaintext() || !source.open() || !sink.open() ||
      !source.read_buffer().empty()) {
    return nullptr;
  }
  Pipe p;
  if (!TakePipe(&p, length == kUntilEnd ? kStreamPipeSize : kPipeSize)) return nullptr;
  return std::unique_ptr<Splicer>(new Splicer(source, sink, length, callbacks, p.r, p.w, p.size));
}

Splicer::Splicer(Connection& source, Connection& sink, uint64_t length, SplicerCallbacks& callbacks,
                 int pipe_r, int pipe_w, size_t pipe_size)
    : source_(&source),
      sink_(&sink),
      callbacks_(callbacks),
      pipe_r_(pipe_r),
      pipe_w_(pipe_w),
      pipe_size_(pipe_size),
      to_read_(length),
      until_end_(length == kUntilEnd) {}

Splicer::~Splicer() {
  if (destroyed_) *destroyed_ = true;
  Detach();
  ReturnPipe(Pipe{pipe_r_, pipe_w_, pipe_size_}, in_pipe_ == 0);
}

void Splicer::RestoreSocketOptions() {
  // The client connection carries on with ordinary writes.
  if (sink_ && !sink_->closed()) {
    int notsent = 0;  // the system default (net.ipv4.tcp_notsent_lowat)
    ::setsockopt(sink_->fd(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &notsent, sizeof(notsent));
  }
}

void Splicer::Detach() {
  RestoreSocketOptions();
  if (source_) source_->SetSpliceSource(nullptr);
  if (sink_) sink_->SetSpliceSink(nullptr);
  source_ = sink_ = nullptr;
}

void Splicer::Start() {
  // Keep at most this much of the body unsent in the client socket; the rest waits in the pipe.
  // Without it the socket's send buffer autotunes to megabytes, and each ACK from the client
  // then transmits the queued data from the client's side: on one host, the client's CPU ends
  // up doing the proxy's sending (the 4 MiB benchmark row ran at 0.6x the origin's own speed).
  int notsent = kSinkNotsentLowat;
  ::setsockopt(sink_->fd(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &notsent, sizeof(notsent));
  source_->SetSpliceSource(this);
  sink_->SetSpliceSink(this);
  Pump(/*source_event=*/true);
}

void Splicer::OnSpliceReadable() { Pump(/*source_event=*/true); }
void Splicer::OnSpliceWritable() { Pump(/*source_event=*/false); }

void Splicer::OnSpliceConnectionClosed() {
  // Called from inside the closing connection: forget both before reporting.
  bool source_closed = source_ && source_->closed();
  RestoreSocketOptions();
  if (source_ && !source_->closed()) source_->SetSpliceSource(nullptr);
  if (sink_ && !sink_->closed()) sink_->SetSpliceSink(nullptr);
  source_ = sink_ = nullptr;
  if (finished_) return;
  Fail(source_closed ? "upstream connection closed mid-body" : "downstream connection closed");
}

void Splicer::Fail(const std::string& detail) {
  if (finished_) return;
  finished_ = true;
  Detach();
  callbacks_.OnSpliceFailed(detail);  // may delete this
}

void Splicer::Pump(bool source_event) {
  if (finished_ || pumping_) return;
  pumping_ = true;
  bool destroyed = false;
  destroyed_ = &destroyed;
  uint64_t moved_total = 0;
  // A short or EAGAIN splice means that side is done for this wakeup: not asking it again saves
  // a syscall (splice calls are most of the cost of a spliced body); level-triggered readiness
  // reports anything that changes meanwhile. A sink that refused bytes is not offered more
  // until it reports itself writable.
  if (!source_event) sink_blocked_ = false;
  bool source_dry = false, sink_full = sink_blocked_;
  while (true) {
    if (!source_dry && !FillPipe(source_event, &source_dry))
      return;  // Fail() ran; `this` may be gone
    uint64_t pipe_before = in_pipe_;
    if (!sink_full && !DrainPipe(&sink_full)) return;
    moved_total += pipe_before - in_pipe_;
    bool can_fill = !source_dry && !pipe_stalled_ && to_read_ > 0 && in_pipe_ < pipe_size_;
    bool can_drain = !sink_full && in_pipe_ > 0;
    if (!can_fill && !can_drain) break;
    if (pipe_before == in_pipe_ && !can_fill) break;  // the sink took nothing more
  }
  // Readiness wanted: the source while there is room and bytes to take, the sink while the
  // pipe holds bytes.
  if (source_) source_->WantSpliceRead(to_read_ > 0 && in_pipe_ < pipe_size_ && !pipe_stalled_);
  if (sink_) sink_->WantSpliceWrite(in_pipe_ > 0);
  pumping_ = false;
  if (moved_total > 0) {
    callbacks_.OnSpliceProgress(moved_total);
    if (destroyed) return;
  }
  destroyed_ = nullptr;
  if (to_read_ == 0 && in_pipe_ == 0 && !finished_) {
    finished_ = true;
    Detach();
    callbacks_.OnSpliceDone();  // may delete this
  }
}

bool Splicer::FillPipe(bool source_event, bool* dry) {
  while (to_read_ > 0 && in_pipe_ < pipe_size_ && !pipe_stalled_ && source_) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(to_read_, pipe_size_ - in_pipe_));
    ssize_t n =
        ::splice(source_->fd(), nullptr, pipe_w_, nullptr, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      to_read_ -= n;
      in_pipe_ += n;
      if (static_cast<size_t>(n) < want) {
        *dry = true;
        if (in_pipe_ > 0) pipe_stalled_ = true;
        break;
      }
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      *dry = true;
      if (in_pipe_ > 0) pipe_stalled_ = true;
      break;
    }
    if (n == 0 && until_end_) {
      // The stream's end: once the pipe is drained, the splice is done.
      to_read_ = 0;
      *dry = true;
      break;
    }
    FailReading(n);
    return false;
  }
  if (pipe_stalled_) *dry = true;
  // (A stream's end is expected, and an error is met by the next splice: no peek for them.)
  if (source_event && !until_end_ && to_read_ > 0 && (in_pipe_ >= pipe_size_ || pipe_stalled_) &&
      source_) {
    // The pipe is full, so the source is not read; still notice a reset or an early EOF (a
    // hang-up is reported whatever the interest, and would otherwise be reported forever).
    char c;
    ssize_t n = ::recv(source_->fd(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      FailReading(n);
      return false;
    }
  }
  return true;
}

void Splicer::FailReading(ssize_t n) {
  pumping_ = false;
  destroyed_ = nullptr;
  Fail(n == 0 ? absl::StrCat("upstream closed the connection with ", to_read_,
                             " body bytes still to come")
              : absl::StrCat("reading the upstream failed: ", std::strerror(errno)));
}

bool Splicer::DrainPipe(bool* full) {
  // The sink's own buffer (the head) goes first.
  if (!sink_ || !sink_->write_buffer().empty()) return true;
  while (in_pipe_ > 0) {
    ssize_t n = ::splice(
        pipe_r_, nullptr, sink_->fd(), nullptr, in_pipe_,
        SPLICE_F_MOVE | SPLICE_F_NONBLOCK | (to_read_ > 0 && !until_end_ ? SPLICE_F_MORE : 0));
    if (n > 0) {
      bool partial = static_cast<uint64_t>(n) < in_pipe_;
      in_pipe_ -= n;
      pipe_stalled_ = false;
      if (partial) {
        *full = true;
        sink_blocked_ = true;
        break;
      }
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      *full = true;
      sink_blocked_ = true;
      break;
    }
    pumping_ = false;
    destroyed_ = nullptr;
    Fail(absl::StrCat("writing to the client failed: ",
                      n == 0 ? "no progress" : std::strerror(errno)));
    return false;
  }
  return true;
}

}  // namespace rpx
