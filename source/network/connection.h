// Connection: one non-blocking TCP socket on one worker's dispatcher, with a read buffer, a write
// buffer, write watermarks (backpressure) and deferred deletion. Only the owning dispatcher's
// thread touches it. Bytes move through a TransportSocket, the seam where TLS will plug in;
// plaintext is RawTransport.
//
// Ownership: the creator owns the Connection through unique_ptr and must hand it to
// Dispatcher::DeferredDelete (never delete it inside one of its own callbacks).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "source/common/buffer.h"
#include "source/event/dispatcher.h"
#include "source/network/address.h"
#include "source/network/socket_option.h"

namespace rpx {

enum class ConnectionEvent { kConnected, kRemoteClose, kLocalClose, kConnectFailed };

class ConnectionCallbacks {
 public:
  virtual ~ConnectionCallbacks() = default;
  // New bytes are at the end of `in`; the callee drains what it consumed.
  virtual void OnData(Buffer& in) = 0;
  virtual void OnEvent(ConnectionEvent event) = 0;
  // The write buffer crossed the high watermark (stop producing) / fell below the low one.
  virtual void OnAboveWriteHighWatermark() {}
  virtual void OnBelowWriteLowWatermark() {}
  // Half-close (Connection::EnableHalfClose): the peer ended its sending side; everything it sent
  // has been through OnData. The connection stays open for writing.
  virtual void OnReadEnd() {}
};

// Reads and writes bytes for a connection. Returns bytes moved, 0 on EOF (read), or -errno.
// `end_follows`: the connection ends its stream right after these bytes (it closes, or shuts down
// its sending side), so they may leave together with the end of stream.
// A transport with a handshake (TLS) is driven through Handshake() until it is done, before any
// Read or Write; it may hold bytes it took off the socket (HasPendingReadData), and a read may
// have to wait for the socket to be writable (WantsWriteForRead).
class TransportSocket {
 public:
  enum class HandshakeResult { kDone, kWantRead, kWantWrite, kFailed };
  virtual ~TransportSocket() = default;
  virtual HandshakeResult Handshake(int /*fd*/) { return HandshakeResult::kDone; }
  virtual ssize_t Read(int fd, char* buf, size_t len) = 0;
  virtual ssize_t Write(int fd, const char* buf, size_t len, bool end_follows) = 0;
  virtual bool HasPendingReadData() const { return false; }
  // Its handshake starts by sending (a TLS client), not by waiting for the peer's bytes.
  virtual bool SpeaksFirst() const { return false; }
  virtual bool WantsWriteForRead() const { return false; }
  // The stream is about to end (before shutdown(2) or close(2)): tell the peer (close_notify).
  virtual void Shutdown(int /*fd*/) {}
  // Why the handshake or the connection failed, for logs and error responses.
  virtual std::string FailureReason() const { return ""; }
};

// Plaintext. With end_follows the bytes are sent with MSG_MORE: TCP holds a short last segment
// back, and the FIN that shutdown(2) sends next rides in it instead of following in a segment of
// its own (one packet less per closed connection for the peer to take in). The caller must end
// the stream with shutdown(2), not close(2) alone: a close with unread input resets the
// connection and discards what TCP still holds.
class RawTransport : public TransportSocket {
 public:
  static RawTransport& Instance();  // stateless: one for every plaintext connection
  ssize_t Read(int fd, char* buf, size_t len) override;
  ssize_t Write(int fd, const char* buf, size_t len, bool end_follows) override;
};

// Readiness for a Splicer (splice.h), which moves bytes between two sockets itself.
class SpliceHandler {
 public:
  virtual ~SpliceHandler() = default;
  virtual void OnSpliceReadable() = 0;  // the source socket has bytes (or EOF, or an error)
  virtual void OnSpliceWritable() = 0;  // the sink's write buffer is empty and the socket writable
  virtual void OnSpliceConnectionClosed() = 0;  // either connection closed: never touch it again
};

// What a cluster's upstream_bind_config asks of each socket before connect(2). Not owned.
struct ConnectOptions {
  const SocketAddress* source = nullptr;   // bind(2) to this address (port 0: chosen at connect)
  const SocketOptions* options = nullptr;  // the STATE_PREBIND ones are applied
};

class Connection : public DeferredDeletable, public Flushable {
 public:
  // Takes ownership of `fd`. `connecting` means a non-blocking connect() is in flight.
  // `nodelay_set`: the socket has TCP_NODELAY already (a Listener's accepted sockets); otherwise
  // the constructor sets it.
  Connection(Dispatcher& dispatcher, int fd, bool connecting, uint32_t buffer_limit,
             bool nodelay_set = false);
  ~Connection() override;

  // Starts a non-blocking connect; the result arrives as kConnected or kConnectFailed. On an
  // immediate failure returns nullptr with errno in `*error` and, when a bind step failed, what
  // failed in `*detail`.
  static std::unique_ptr<Connection> Connect(Dispatcher& dispatcher, const SocketAddress& addr,
                                             uint32_t buffer_limit, int* error,
                                             const ConnectOptions& bind = {},
                                             std::string* detail = nullptr);

  void SetCallbacks(ConnectionCallbacks* cb) { callbacks_ = cb; }
  // Makes the connection run over `transport` (TLS), owned from now on; call before the first
  // event (right after an accept, or while connecting). Its handshake runs first: an accepted
  // connection raises kConnected when it is done, a connecting one only then (instead of when
  // TCP connects); a failed handshake closes it (kRemoteClose, or kConnectFailed while
  // connecting), and so does one not done within `handshake_timeout_ms` (0: no limit).
  void SetTransport(std::unique_ptr<TransportSocket> transport, uint64_t handshake_timeout_ms);
  TransportSocket& transport() { return *transport_; }
  const TransportSocket& transport() const { return *transport_; }
  bool handshaking() const { return handshaking_; }
  // The handshake did not finish in time (then it closed with kRemoteClose).
  bool handshake_timed_out() const { return handshake_timed_out_; }
  void Write(std::string_view data);
  // Like Write, but when nothing is queued the bytes go to the socket at once, and only what the
  // socket does not take is buffered. For streamed bodies: the data is sent from the (cache-hot)
  // buffer it was just read into instead of piling up in ours.
  void WriteThrough(const char* data, size_t len);
  Buffer& write_buffer() { return write_buffer_; }
  // Call after appending to write_buffer() directly.
  void ScheduleWrite();
  // While disabled, bytes already read stay in read_buffer(); the owner processes them itself
  // when it re-enables (so no callback re-enters the owner from inside ReadDisable).
  void ReadDisable(bool disable);
  Buffer& read_buffer() { return read_buffer_; }
  bool read_disabled() const { return read_disabled_; }

  // kFlushWriteThenLinger: after the buffered output is written, shut down the write side and
  // discard input until the peer closes (or `linger_ms`): closing with unread input would send a
  // RST that can destroy the response before the peer reads it (a client still uploading a body
  // we answered early).
  enum class CloseType { kFlushWrite, kNoFlush, kFlushWriteThenLinger };
  // Closes now (or once buffered output is written, for kFlushWrite). Raises kLocalClose, unless
  // the close is silent (used when the owner is already tearing down).
  void Close(CloseType type, bool notify = true);
  bool closed() const { return state_ == State::kClosed; }
  // The peer has shut down its sending side (seen in a readiness report): from then on a short
  // read does not mean the socket is drained, since the end of the stream is still to be read.
  bool open() const { return state_ == State::kOpen; }

  // Splicing: while a source handler is set, read readiness goes to it and the socket is not read
  // into read_buffer(); `want` says whether it wants readiness now (read_disabled() is ignored).
  // While a sink handler is set and wants it, write readiness with an empty write buffer goes to
  // it (what is buffered is written first). nullptr ends it.
  void SetSpliceSource(SpliceHandler* h);
  void SetSpliceSink(SpliceHandler* h);
  void WantSpliceRead(bool want);
  void WantSpliceWrite(bool want);
  bool plaintext() const { return plaintext_; }
  bool closing() const { return state_ != State::kOpen && state_ != State::kConnecting; }
  bool above_high_watermark() const { return above_high_; }
  Dispatcher& dispatcher() { return file_event_.dispatcher(); }
  int fd() const { return fd_; }

  void Flush() override;
  // Write batching (Dispatcher::SetWriteBatching): the bytes buffered for the socket, if it is
  // plaintext and open for writing, and how much of them the batched send took.
  bool WriteAheadBuffer(int* fd, const char** buf, size_t* len, bool* end_follows) override;
  void OnWriteAhead(ssize_t result) override;

  // Read batching (Dispatcher::SetReadBatching), called by the file event: where the next read
  // may go (plaintext connections that want to read now), and its result, which the next
  // DoRead takes before it reads the socket itself.
  bool ReadAheadBuffer(char** buf, size_t* len);
  void OnReadAhead(ssize_t result);

  // Half-close, for byte streams (TCP proxy): the peer's end of stream is reported through
  // OnReadEnd instead of closing the connection, which can still write; ShutdownWrite ends our
  // side once what is buffered is sent. The owner closes the connection when both sides ended.
  void EnableHalfClose() { half_close_ = true; }
  bool read_ended() const { return read_ended_; }
  void ShutdownWrite();
  bool write_shut() const { return write_shut_; }
  // The connection's local address: the original destination when one was restored (a connection
  // redirected to rpx, see original_dst.h), else its socket's own (getsockname).
  void SetOriginalDestination(const SocketAddress& a) {
    original_dst_ = std::make_unique<SocketAddress>(a);
  }
  SocketAddress LocalAddress() const {
    return original_dst_ ? *original_dst_ : SocketAddress::LocalOf(fd_);
  }
  bool has_original_destination() const { return original_dst_ != nullptr; }

  // For an owner that goes away: a connection still flushing or lingering finishes that on its
  // own and then frees itself; any other is closed and freed now.
  static void Release(std::unique_ptr<Connection> conn);

 private:
  enum class State : uint8_t { kConnecting, kOpen, kClosingAfterFlush, kLingering, kClosed };
  void StartLinger();
  void OnFileEvent(uint32_t events);
  // Drives the transport's handshake; false if the connection closed.
  bool DoHandshake();
  void DoRead(int32_t ahead);
  size_t NextReadSize() const;
  void DoWrite(bool try_send = true);
  void CloseNow(ConnectionEvent event, bool notify);
  void FlushBeforeClosing();
  void UpdateInterest();
  void UpdateTrigger();
  void CheckWatermarks();

  // Every idle keep-alive connection holds one of these: fields are packed, the file event is
  // embedded, and only what a busy connection needs (the linger timer) is allocated apart.
  int fd_;
  uint32_t high_watermark_;  // the low watermark is half of it
  State state_;
  bool above_high_ : 1;
  bool read_disabled_ : 1;
  bool flush_scheduled_ : 1;
  bool plaintext_ : 1;  // bytes on the socket are the bytes of the stream (RawTransport)
  bool want_splice_read_ : 1;
  bool want_splice_write_ : 1;
  bool linger_after_flush_ : 1;
  bool self_owned_ : 1;      // released by its owner while closing; frees itself when closed
  bool peer_closed_ : 1;     // the peer shut down its side (reads go on until end of stream)
  bool send_full_ : 1;       // a batched send just found the socket's buffer full
  bool owns_transport_ : 1;  // transport_ is this connection's own (TLS), deleted with it
  bool handshaking_ : 1;     // the transport's handshake is not done
  bool handshake_wants_write_ : 1;
  bool handshake_timed_out_ : 1;
  bool connect_pending_ : 1;   // connecting: kConnected (or kConnectFailed) not raised yet
  bool half_close_ : 1;        // EnableHalfClose
  bool read_ended_ : 1;        // half-close: the peer's end of stream was read
  bool shutdown_pending_ : 1;  // ShutdownWrite once the write buffer is empty
  bool write_shut_ : 1;        // our sending side is shut down
  ConnectionCallbacks* callbacks_ = nullptr;
  // RawTransport's shared instance (it has no state), or this connection's own (TLS).
  TransportSocket* transport_;
  SpliceHandler* splice_source_ = nullptr;
  SpliceHandler* splice_sink_ = nullptr;
  // A read the dispatcher took early (read batching): its bytes are already in read_buffer_.
  static constexpr int32_t kNoReadAhead = INT32_MIN;
  int32_t read_ahead_ = kNoReadAhead;  // bytes, 0 (end of stream) or -errno
  uint32_t read_ahead_want_ = 0;       // how much it asked for: fewer means the socket is drained
  ReadingFileEvent<Connection, &Connection::OnFileEvent> file_event_;
  // The linger's deadline, or before it the handshake's (they never overlap: a connection
  // lingers only once open, and one closed while handshaking closes at once).
  std::unique_ptr<Timer> linger_timer_;
  std::unique_ptr<SocketAddress> original_dst_;  // restored original destination, if any
  Buffer read_buffer_;
  Buffer write_buffer_;
};

}  // namespace rpx
