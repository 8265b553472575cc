// Splicer: moves exactly `length` bytes from one connection's socket to another's through a pipe
// with splice(2), so a large body never enters userspace (HAProxy's kernel splicing; nginx and
// Envoy copy). Used for plaintext HTTP/1 bodies of known length once their head is forwarded.
//
// While splicing, the sink holds little unsent data (TCP_NOTSENT_LOWAT, reset when done). No
// SO_RCVLOWAT on the source: an upstream that pauses mid-body must not hold back what it sent
// (and, measured, fewer wakeups from it saved nothing once EAGAIN splices were gone).
//
// Ordering: bytes already in the sink's write buffer (the response head) go out first; the
// splicer writes only while that buffer is empty. Backpressure is the pipe: a sink that does not
// drain stops reads from the source once the pipe is full, so memory stays at one pipe.
//
// Ownership and threads: created and destroyed by the owner of the source connection, on the
// connections' worker. Both connections must outlive it or close (the splicer then stops touching
// them and reports an error). Callbacks may destroy the splicer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "source/network/connection.h"

namespace rpx {

class SplicerCallbacks {
 public:
  virtual ~SplicerCallbacks() = default;
  // `bytes` more reached the sink socket.
  virtual void OnSpliceProgress(uint64_t bytes) = 0;
  // All `length` bytes reached the sink socket.
  virtual void OnSpliceDone() = 0;
  // The source ended early or a socket failed; `detail` says which. Nothing more is moved.
  virtual void OnSpliceFailed(const std::string& detail) = 0;
};

class Splicer : public SpliceHandler {
 public:
  // Whether splicing is used at all (rpx --disable-splice turns it off, for comparisons).
  static void SetEnabled(bool enabled);
  static bool enabled();

  // `length` for a byte stream (a TCP proxy): everything until the source's end of stream, which
  // is then not a failure: OnSpliceDone means the source ended and all it sent reached the sink
  // (whose sending side the caller may then shut down). No SPLICE_F_MORE in this mode: with no
  // end in sight it would hold back the last short segment of every exchange.
  static constexpr uint64_t kUntilEnd = UINT64_MAX;

  // nullptr when the bytes cannot be spliced (disabled, a TLS transport, no pipe available):
  // the caller then copies as usual.
  static std::unique_ptr<Splicer> Create(Connection& source, Connection& sink, uint64_t length,
                                         SplicerCallbacks& callbacks);
  ~Splicer() override;

  // Starts moving bytes (separate from Create so the owner has stored the splicer first).
  void Start();
  uint64_t remaining() const { return to_read_ + in_pipe_; }

  // SpliceHandler
  void OnSpliceReadable() override;
  void OnSpliceWritable() override;
  void OnSpliceConnectionClosed() override;

 private:
  Splicer(Connection& source, Connection& sink, uint64_t length, SplicerCallbacks& callbacks,
          int pipe_r, int pipe_w, size_t pipe_size);
  // source_event: called for an event on the source (which may be a hang-up to notice).
  void Pump(bool source_event);
  // Both return false when they failed (the callback was made); *dry / *full are set when the
  // source had no more bytes / the sink took no more.
  bool FillPipe(bool source_event, bool* dry);
  bool DrainPipe(bool* full);
  void Fail(const std::string& detail);
  void FailReading(ssize_t n);  // the source read returned `n` (0: EOF, <0: errno is set)
  void Detach();
  void RestoreSocketOptions();  // undoes what splicing set on the sockets still open

  Connection* source_;
  Connection* sink_;
  SplicerCallbacks& callbacks_;
  int pipe_r_, pipe_w_;
  size_t pipe_size_;
  uint64_t to_read_;      // bytes still to take from the source (kUntilEnd: until its end)
  const bool until_end_;  // length was kUntilEnd
  uint64_t in_pipe_ = 0;  // bytes in the pipe, not yet in the sink
  // A fill stopped short with bytes in the pipe. The pipe may be out of slots (it holds a fixed
  // number of buffers, whatever their size) rather than bytes, so the source is not read again
  // until the sink has taken some: with a level-triggered source that still has data, asking
  // again at once would spin on EAGAIN.
  bool pipe_stalled_ = false;
  bool sink_blocked_ = false;  // the sink took less than offered: wait for it to be writable
  bool finished_ = false;      // done or failed: no more callbacks
  bool pumping_ = false;
  bool* destroyed_ = nullptr;  // set while a callback runs, to detect `delete this`
};

}  // namespace rpx
