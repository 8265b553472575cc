#include "source/network/connection.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "source/common/assert.h"

namespace rpx {
namespace {
// Bytes read per syscall, and the most read per readiness event before yielding to other sockets.
// Each chunk is handed to the owner before the next read, so buffers stay small and cache-hot.
constexpr size_t kReadChunk = 32 * 1024;
constexpr size_t kMaxReadPerEvent = 256 * 1024;
// How long a closing connection keeps discarding input (nginx's lingering_timeout is 5 s).
constexpr uint64_t kLingerMs = 5000;
}  // namespace

RawTransport& RawTransport::Instance() {
  static RawTransport* raw = new RawTransport();
  return *raw;
}

ssize_t RawTransport::Read(int fd, char* buf, size_t len) {
  // recv, not read: the same for a socket, minus the VFS layers read(2) goes through.
  ssize_t n = ::recv(fd, buf, len, 0);
  return n >= 0 ? n : -errno;
}

ssize_t RawTransport::Write(int fd, const char* buf, size_t len, bool end_follows) {
  ssize_t n = ::send(fd, buf, len, MSG_NOSIGNAL | (end_follows ? MSG_MORE : 0));
  return n >= 0 ? n : -errno;
}

Connection::Connection(Dispatcher& dispatcher, int fd, bool connecting, uint32_t buffer_limit,
                       bool nodelay_set)
    : fd_(fd),
      high_watermark_(buffer_limit ? buffer_limit : 1024 * 1024),
      state_(connecting ? State::kConnecting : State::kOpen),
      above_high_(false),
      read_disabled_(false),
      flush_scheduled_(false),
      plaintext_(true),
      want_splice_read_(false),
      want_splice_write_(false),
      linger_after_flush_(false),
      self_owned_(false),
      peer_closed_(false),
      send_full_(false),
      owns_transport_(false),
      handshaking_(false),
      handshake_wants_write_(false),
      handshake_timed_out_(false),
      connect_pending_(connecting),
      half_close_(false),
      read_ended_(false),
      shutdown_pending_(false),
      write_shut_(false),
      transport_(&RawTransport::Instance()),
      // Edge-triggered: DoRead reads until a short read (drained) or activates itself again.
      file_event_(dispatcher, fd, connecting ? FileEvent::kWrite : FileEvent::kRead, this,
                  FileEvent::Trigger::kEdge) {
  if (!nodelay_set) {
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
}

Connection::~Connection() {
  // Deleted while still an orphan only by a dispatcher shutting down (it forgot us already).
  self_owned_ = false;
  if (state_ != State::kClosed) CloseNow(ConnectionEvent::kLocalClose, false);
  if (flush_scheduled_) dispatcher().CancelFlush(this);
  if (owns_transport_) delete transport_;
}

void Connection::SetTransport(std::unique_ptr<TransportSocket> transport,
                              uint64_t handshake_timeout_ms) {
  RPX_ASSERT(!owns_transport_ && state_ != State::kClosed);
  transport_ = transport.release();
  owns_transport_ = true;
  plaintext_ = false;  // no read or write batching, no splice: bytes go through the transport
  handshaking_ = true;
  if (handshake_timeout_ms) {
    linger_timer_ = dispatcher().CreateTimer([this] {
      handshake_timed_out_ = true;
      CloseNow(connect_pending_ ? ConnectionEvent::kConnectFailed : ConnectionEvent::kRemoteClose,
               true);
    });
    linger_timer_->Enable(handshake_timeout_ms);
  }
  // A transport that speaks first on an open socket starts now. One that waits for the peer
  // (a TLS server) starts at the socket's first readiness: epoll reports bytes already there
  // (a ClientHello a listener filter peeked at) when the socket is registered.
  if (state_ == State::kOpen && transport_->SpeaksFirst()) file_event_.Activate(FileEvent::kWrite);
}

bool Connection::DoHandshake() {
  switch (transport_->Handshake(fd_)) {
    case TransportSocket::HandshakeResult::kDone:
      handshaking_ = false;
      handshake_wants_write_ = false;
      if (linger_timer_) linger_timer_->Disable();
      connect_pending_ = false;
      UpdateInterest();
      if (callbacks_) callbacks_->OnEvent(ConnectionEvent::kConnected);
      return state_ != State::kClosed;
    case TransportSocket::HandshakeResult::kWantRead:
      handshake_wants_write_ = false;
      UpdateInterest();
      return true;
    case TransportSocket::HandshakeResult::kWantWrite:
      handshake_wants_write_ = true;
      UpdateInterest();
      return true;
    case TransportSocket::HandshakeResult::kFailed:
      break;
  }
  CloseNow(connect_pending_ ? ConnectionEvent::kConnectFailed : ConnectionEvent::kRemoteClose,
           true);
  return false;
}

std::unique_ptr<Connection> Connection::Connect(Dispatcher& dispatcher, const SocketAddress& addr,
                                                uint32_t buffer_limit, int* error,
                                                const ConnectOptions& bind, std::string* detail) {
  int fd = socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = errno;
    return nullptr;
  }
  if (bind.options) {
    auto st = ApplySocketOptions(fd, *bind.options, SocketOption::State::kPrebind);
    if (!st.ok()) {
      *error = errno;
      if (detail) *detail = std::string(st.message());
      close(fd);
      return nullptr;
    }
  }
  if (bind.source) {
    if (bind.source->port() == 0) {
      // The port is picked at connect(2), per destination, instead of at bind(2) from the
      // ephemeral ports not bound at all: without this a busy pool runs out of source ports.
      int one = 1;
      setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    }
    if (::bind(fd, bind.source->sa(), bind.source->len) != 0) {
      *error = errno;
      if (detail) {
        *detail = absl::StrCat("binding to source address ", bind.source->ToString(), ": ",
                               strerror(errno));
      }
      close(fd);
      return nullptr;
    }
  }
  int rc = connect(fd, addr.sa(), addr.len);
  if (rc != 0 && errno != EINPROGRESS) {
    *error = errno;
    close(fd);
    return nullptr;
  }
  *error = 0;
  return std::make_unique<Connection>(dispatcher, fd, true, buffer_limit);
}

void Connection::Write(std::string_view data) {
  if (state_ == State::kClosed) return;
  write_buffer_.Append(data);
  ScheduleWrite();
}

void Connection::WriteThrough(const char* data, size_t len) {
  if (state_ != State::kOpen || handshaking_ || !write_buffer_.empty() || flush_scheduled_) {
    if (state_ == State::kClosed) return;
    write_buffer_.Append(data, len);
    ScheduleWrite();
    return;
  }
  size_t sent = 0;
  while (sent < len) {
    ssize_t n = transport_->Write(fd_, data + sent, len - sent, false);
    if (n > 0) {
      sent += n;
      continue;
    }
    if (n == -EAGAIN || n == -EINTR) break;
    CloseNow(ConnectionEvent::kRemoteClose, true);
    return;
  }
  if (sent < len) {
    write_buffer_.Append(data + sent, len - sent);
    CheckWatermarks();
    UpdateInterest();
  }
}

void Connection::ScheduleWrite() {
  if (state_ == State::kClosed) return;
  if (!flush_scheduled_) {
    flush_scheduled_ = true;
    dispatcher().ScheduleFlush(this);
  }
  CheckWatermarks();
}

void Connection::Flush() {
  flush_scheduled_ = false;
  bool full = send_full_;
  send_full_ = false;
  // After a short or refused batched send, another send now would only fail: the socket's
  // write readiness (edge-triggered, armed below by UpdateInterest) resumes it.
  if (state_ == State::kOpen || state_ == State::kClosingAfterFlush) DoWrite(!full);
}

bool Connection::WriteAheadBuffer(int* fd, const char** buf, size_t* len, bool* end_follows) {
  if ((state_ != State::kOpen && state_ != State::kClosingAfterFlush) || write_buffer_.empty() ||
      !plaintext_) {
    return false;
  }
  *fd = fd_;
  *buf = write_buffer_.data();
  *len = write_buffer_.size();
  *end_follows = state_ == State::kClosingAfterFlush;
  return true;
}

void Connection::OnWriteAhead(ssize_t result) {
  if (result > 0) {
    size_t offered = write_buffer_.size();
    write_buffer_.Drain(result);
    send_full_ = static_cast<size_t>(result) < offered;
  } else {
    // -EAGAIN: full. An error, or -ECANCELED (never sent), is left to Flush()'s own send, which
    // meets the error again and closes, or sends.
    send_full_ = result == -EAGAIN;
  }
}

void Connection::ReadDisable(bool disable) {
  if (read_disabled_ == disable) return;
  read_disabled_ = disable;
  UpdateInterest();
  // Bytes the transport took off the socket before reading stopped get no new readiness.
  if (!disable && !plaintext_ && state_ == State::kOpen && transport_->HasPendingReadData()) {
    file_event_.Activate(FileEvent::kRead);
  }
}

void Connection::UpdateInterest() {
  if (state_ == State::kClosed) return;
  uint32_t interest = 0;
  if (state_ == State::kConnecting) {
    interest = FileEvent::kWrite;
  } else if (handshaking_) {
    interest = handshake_wants_write_ ? FileEvent::kWrite : FileEvent::kRead;
  } else {
    bool read = splice_source_ ? want_splice_read_ : !read_disabled_ && !read_ended_;
    if (read && state_ == State::kOpen) interest |= FileEvent::kRead;
    if (!write_buffer_.empty() || (splice_sink_ && want_splice_write_ && state_ == State::kOpen) ||
        (read && !plaintext_ && transport_->WantsWriteForRead())) {
      interest |= FileEvent::kWrite;
    }
  }
  file_event_.SetInterest(interest);
}

void Connection::SetSpliceSource(SpliceHandler* h) {
  splice_source_ = h;
  want_splice_read_ = false;
  UpdateTrigger();
  UpdateInterest();
}

void Connection::SetSpliceSink(SpliceHandler* h) {
  splice_sink_ = h;
  want_splice_write_ = false;
  UpdateTrigger();
  UpdateInterest();
}

void Connection::UpdateTrigger() {
  // A short or refused splice says the pipe is out of room (it holds a limited number of buffer
  // slots, whatever their size) as often as that the socket is drained, so the splicer cannot
  // know when it has taken all there was: while splicing, the socket is level-triggered and
  // reported again for as long as it is ready.
  file_event_.SetTrigger(splice_source_ || splice_sink_ ? FileEvent::Trigger::kLevel
                                                        : FileEvent::Trigger::kEdge);
}

void Connection::WantSpliceRead(bool want) {
  if (want_splice_read_ == want) return;
  want_splice_read_ = want;
  UpdateInterest();
}

void Connection::WantSpliceWrite(bool want) {
  if (want_splice_write_ == want) return;
  want_splice_write_ = want;
  UpdateInterest();
}

void Connection::OnFileEvent(uint32_t events) {
  // A read taken early for this event (read batching). If no DoRead below uses it, the
  // connection is closing, or splicing (which starts only with read_buffer_ empty, so then the
  // early read found nothing the splicer will not see again itself).
  int32_t ahead = read_ahead_;
  read_ahead_ = kNoReadAhead;
  if (events & FileEvent::kPeerClosed) peer_closed_ = true;
  if (state_ == State::kConnecting) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      CloseNow(ConnectionEvent::kConnectFailed, true);
      return;
    }
    state_ = State::kOpen;
    if (handshaking_) {
      DoHandshake();  // kConnected once the transport's handshake is done
      if (state_ == State::kOpen && !handshaking_ && !write_buffer_.empty()) DoWrite();
      return;
    }
    connect_pending_ = false;
    UpdateInterest();
    if (callbacks_) callbacks_->OnEvent(ConnectionEvent::kConnected);
    if (state_ == State::kOpen && !write_buffer_.empty()) DoWrite();
    return;
  }
  if (handshaking_ && state_ == State::kOpen) {
    if (!DoHandshake() || handshaking_) return;
    // Done: what was queued goes out, and what arrived with the last handshake message (a
    // request right behind the client's Finished) is read now: its readiness was reported
    // already.
    if (!write_buffer_.empty()) DoWrite();
    if (state_ == State::kOpen) DoRead(kNoReadAhead);
    return;
  }
  if (state_ == State::kLingering) {
    // Discard what the peer still sends; its close (or an error) ends the linger.
    char buf[16 * 1024];
    for (int i = 0; i < 16; ++i) {
      ssize_t n = transport_->Read(fd_, buf, sizeof(buf));
      if (n > 0) continue;
      if (n == -EAGAIN || n == -EINTR) return;
      CloseNow(ConnectionEvent::kLocalClose, false);
      return;
    }
    file_event_.Activate(FileEvent::kRead);  // not drained: no new edge would come for it
    return;
  }
  if ((events & FileEvent::kWrite) && state_ != State::kClosed) {
    // A TLS read that had to wait for the socket to be writable goes on now.
    if (!plaintext_ && transport_->WantsWriteForRead()) events |= FileEvent::kRead;
    DoWrite();
    if (splice_sink_ && want_splice_write_ && state_ == State::kOpen && write_buffer_.empty()) {
      splice_sink_->OnSpliceWritable();
    }
  }
  if (splice_source_ && state_ == State::kOpen) {
    // A hang-up still leaves bytes to move: the handler sees EOF itself.
    if (events & (FileEvent::kRead | FileEvent::kClosed)) splice_source_->OnSpliceReadable();
    if (splice_source_ && state_ == State::kOpen) return;
  }
  if ((events & FileEvent::kRead) && state_ == State::kOpen) DoRead(ahead);
  // Hang-up or error while reads are disabled: nothing above noticed it, and it is reported
  // whatever the interest (once, edge-triggered): close now.
  if ((events & FileEvent::kClosed) && state_ != State::kClosed) {
    if (half_close_ && !read_ended_ && state_ == State::kOpen) {
      // Both directions are shut (we ended ours, the peer its), but what the peer sent before
      // its end may still wait unread behind a read pause: unless the socket failed, it is read
      // when reading resumes, and the end of stream comes after it.
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0) return;
    }
    CloseNow(ConnectionEvent::kRemoteClose, true);
  }
}

size_t Connection::NextReadSize() const {
  // Read into the free tail when it is worth a syscall; else get a (pooled) block's worth.
  size_t writable = read_buffer_.WritableBytes();
  return writable >= 4096 ? std::min(writable, kMaxReadPerEvent) : kReadChunk;
}

bool Connection::ReadAheadBuffer(char** buf, size_t* len) {
  // Only where DoRead would read the socket next, with recv(2) on the raw bytes.
  if (state_ != State::kOpen || read_disabled_ || splice_source_ || !plaintext_ ||
      read_ahead_ != kNoReadAhead) {
    return false;
  }
  size_t want = NextReadSize();
  *buf = read_buffer_.Reserve(want);
  *len = want;
  read_ahead_want_ = static_cast<uint32_t>(want);
  return true;
}

void Connection::OnReadAhead(ssize_t result) {
  if (result == -ECANCELED) return;  // never ran: DoRead reads the socket itself
  if (result > 0) read_buffer_.Commit(result);
  read_ahead_ = static_cast<int32_t>(result);
}

void Connection::DoRead(int32_t ahead) {
  size_t total = 0;
  bool eof = false;
  // A splicer may take over the socket from inside OnData: stop reading into the buffer then.
  // A read taken early (read batching) counts as this loop's first.
  while (ahead != kNoReadAhead || (total < kMaxReadPerEvent && !read_disabled_ &&
                                   state_ == State::kOpen && !splice_source_)) {
    size_t want;
    ssize_t n;
    if (ahead != kNoReadAhead) {
      n = ahead;
      want = read_ahead_want_;
      ahead = kNoReadAhead;
      // Its bytes are in read_buffer_ already. An owner that disabled reading since finds them
      // there when it enables reading again (the ReadDisable contract).
      if (n > 0 && read_disabled_) break;
    } else {
      want = NextReadSize();
      char* p = read_buffer_.Reserve(want);
      n = transport_->Read(fd_, p, want);
      if (n > 0) read_buffer_.Commit(n);
    }
    if (n > 0) {
      total += n;
      if (callbacks_) callbacks_->OnData(read_buffer_);
      // A short read means the socket is drained (saves an EAGAIN read), unless the peer's end
      // of stream is known to be waiting behind the bytes.
      // A TLS read returns at most one record: short says nothing there, so read on to EAGAIN.
      if (static_cast<size_t>(n) < want && !peer_closed_ && plaintext_) break;
      continue;
    }
    if (n == 0) {
      eof = true;
      if (half_close_) {
        // The peer ended its side; ours stays open. No more read interest: at end of stream
        // the socket would report itself readable forever.
        read_ended_ = true;
        UpdateInterest();
        if (callbacks_) callbacks_->OnReadEnd();
        return;
      }
    } else if (n != -EAGAIN && n != -EINTR) {
      eof = true;
    }
    break;
  }
  if (state_ == State::kClosed) return;
  if (eof) {
    CloseNow(ConnectionEvent::kRemoteClose, true);
    return;
  }
  // Stopped at the per-event cap with the socket perhaps not drained: edge-triggered readiness
  // will not report it again, so come back on the next iteration (after the other sockets).
  // Stopping for any other reason needs nothing: a short read means drained, and turning reads
  // back on (ReadDisable(false), the splicer's WantSpliceRead) re-arms the readiness.
  if (total >= kMaxReadPerEvent && state_ == State::kOpen && !read_disabled_ && !splice_source_) {
    file_event_.Activate(FileEvent::kRead);
  }
  if (read_buffer_.empty()) read_buffer_.ReleaseIfEmpty();
}

void Connection::DoWrite(bool try_send) {
  if (handshaking_) {
    CheckWatermarks();  // sent once the handshake is done
    return;
  }
  while (try_send && !write_buffer_.empty()) {
    ssize_t n = transport_->Write(fd_, write_buffer_.data(), write_buffer_.size(),
                                  state_ == State::kClosingAfterFlush);
    if (n > 0) {
      write_buffer_.Drain(n);
      continue;
    }
    if (n == -EAGAIN || n == -EINTR) break;
    CloseNow(ConnectionEvent::kRemoteClose, true);
    return;
  }
  if (write_buffer_.empty()) {
    write_buffer_.ReleaseIfEmpty();
    if (shutdown_pending_ && state_ == State::kOpen) {
      shutdown_pending_ = false;
      write_shut_ = true;
      if (!plaintext_) transport_->Shutdown(fd_);
      ::shutdown(fd_, SHUT_WR);
    }
    if (state_ == State::kClosingAfterFlush) {
      if (linger_after_flush_) {
        StartLinger();
      } else {
        // The last bytes went with MSG_MORE and may still be held: shutdown sends them with the
        // FIN. close(2) alone would discard them if input is waiting unread (it resets then).
        if (!plaintext_) transport_->Shutdown(fd_);
        ::shutdown(fd_, SHUT_WR);
        CloseNow(ConnectionEvent::kLocalClose, false);
      }
      return;
    }
  }
  CheckWatermarks();
  UpdateInterest();
}

void Connection::CheckWatermarks() {
  if (!above_high_ && write_buffer_.size() > high_watermark_) {
    above_high_ = true;
    if (callbacks_) callbacks_->OnAboveWriteHighWatermark();
  } else if (above_high_ && write_buffer_.size() <= high_watermark_ / 2) {
    above_high_ = false;
    if (callbacks_) callbacks_->OnBelowWriteLowWatermark();
  }
}

void Connection::Release(std::unique_ptr<Connection> conn) {
  if (!conn) return;
  if (conn->state_ == State::kClosingAfterFlush || conn->state_ == State::kLingering) {
    conn->self_owned_ = true;
    Connection* c = conn.release();  // deletes itself (deferred) in CloseNow
    c->dispatcher().AdoptOrphan(c);
    return;
  }
  // Owners are themselves freed outside event dispatch (deferred), so closing now is safe.
  conn.reset();
}

void Connection::ShutdownWrite() {
  if (state_ != State::kOpen || write_shut_ || shutdown_pending_) return;
  shutdown_pending_ = true;
  if (write_buffer_.empty() && !handshaking_) {
    DoWrite(/*try_send=*/false);
  } else {
    ScheduleWrite();
  }
}

void Connection::StartLinger() {
  state_ = State::kLingering;
  if (!plaintext_) transport_->Shutdown(fd_);
  ::shutdown(fd_, SHUT_WR);
  read_buffer_.Clear();
  file_event_.SetInterest(FileEvent::kRead);
  // Input that arrived before the linger (a client still uploading) was reported while nobody
  // read it, and edge-triggered epoll will not report it again unless more comes (which a
  // client blocked on a full socket never sends): discard it on the loop's next pass.
  file_event_.Activate(FileEvent::kRead);
  linger_timer_ =
      dispatcher().CreateTimer([this] { CloseNow(ConnectionEvent::kLocalClose, false); });
  linger_timer_->Enable(kLingerMs);
}

void Connection::Close(CloseType type, bool notify) {
  if (state_ == State::kClosed || state_ == State::kClosingAfterFlush ||
      state_ == State::kLingering) {
    return;
  }
  if (type == CloseType::kFlushWriteThenLinger && state_ == State::kOpen) {
    if (notify && callbacks_) callbacks_->OnEvent(ConnectionEvent::kLocalClose);
    callbacks_ = nullptr;
    linger_after_flush_ = true;
    if (write_buffer_.empty()) {
      StartLinger();
      return;
    }
    state_ = State::kClosingAfterFlush;
    FlushBeforeClosing();
    return;
  }
  if (type != CloseType::kNoFlush && !write_buffer_.empty() && state_ == State::kOpen) {
    state_ = State::kClosingAfterFlush;
    // Stop delivering reads; the socket closes once the buffer is written.
    if (notify && callbacks_) callbacks_->OnEvent(ConnectionEvent::kLocalClose);
    callbacks_ = nullptr;
    FlushBeforeClosing();
    return;
  }
  CloseNow(ConnectionEvent::kLocalClose, notify);
}

void Connection::FlushBeforeClosing() {
  // With a flush already scheduled (a response just written: the usual case), interest stays as
  // it is: the flush writes the rest and closes, or sets interest itself if the socket cannot
  // take it all. Arming write readiness here would cost an epoll_ctl, and the report it brings
  // would send the bytes outside the flush's batch.
  if (flush_scheduled_) return;
  UpdateInterest();
  flush_scheduled_ = true;
  dispatcher().ScheduleFlush(this);
}

void Connection::CloseNow(ConnectionEvent event, bool notify) {
  if (state_ == State::kClosed) return;
  if (!plaintext_ && event == ConnectionEvent::kLocalClose && state_ == State::kOpen &&
      !handshaking_) {
    transport_->Shutdown(fd_);
  }
  state_ = State::kClosed;
  if (linger_timer_) linger_timer_->Disable();
  // Our fd is ours alone (accept4 and socket(2) with SOCK_CLOEXEC, never duplicated; the ring's
  // requests complete within Submit), so the close takes it out of the epoll set.
  file_event_.UnregisterForClose();
  ::close(fd_);
  read_buffer_.Clear();
  write_buffer_.Clear();
  // A splicer must not use the (soon reused) descriptor again.
  for (SpliceHandler* h : {splice_source_, splice_sink_}) {
    if (h) h->OnSpliceConnectionClosed();
  }
  splice_source_ = splice_sink_ = nullptr;
  ConnectionCallbacks* cb = callbacks_;
  callbacks_ = nullptr;
  if (notify && cb) cb->OnEvent(event);
  if (self_owned_) {
    self_owned_ = false;
    dispatcher().ForgetOrphan(this);
    dispatcher().DeferredDelete(std::unique_ptr<DeferredDeletable>(this));
  }
}

}  // namespace rpx
