// Http2Client: one HTTP/2 connection to an upstream host (RFC 9113), carrying many requests at
// once, each an UpstreamStream. nghttp2 does the framing, HPACK and the protocol's checks of the
// responses; this class maps each stream to the router's ResponseDecoder and tells the pool how
// many streams it may carry (the peer's SETTINGS_MAX_CONCURRENT_STREAMS, at most the cluster's
// max_concurrent_streams; 100 until the peer's SETTINGS arrive) and when it takes no more
// (GOAWAY: the streams it names finish, the others are refused and may be sent again).
//
// Flow control follows the data: response DATA is acknowledged (WINDOW_UPDATE) only while the
// router reads it (UpstreamStream::ReadDisable), so a slow client holds at most a stream window
// per stream; a stream's unsent request body above the cluster's buffer limit tells its router
// to stop reading the client (OnUpstreamWriteWatermark), and frames are generated only while the
// socket's write buffer is under its high watermark.
//
// Owned by its ConnPool; worker thread only. Streams are deleted deferred (nghttp2 closes them
// from inside calls that came through them).
#pragma once

#include <nghttp2/nghttp2.h>

#include <memory>
#include <string>
#include <vector>

#include "source/upstream/conn_pool.h"

namespace rpx {

class Http2Client : public PoolClient {
 public:
  Http2Client(ConnPool& pool, std::unique_ptr<Connection> conn);
  ~Http2Client() override;
  // Queues the connection preface and SETTINGS. Once the connection is up (TLS included).
  void Start();

  // ConnectionCallbacks
  void OnData(Buffer& in) override;
  void OnEvent(ConnectionEvent event) override;
  void OnBelowWriteLowWatermark() override;

 private:
  class Stream;
  struct Callbacks;
  friend class Stream;
  friend struct Callbacks;

  // PoolClient
  UpstreamStream& NewStream() override;
  void CloseIdle() override;
  void OnTimer() override;

  // Hands nghttp2's queued frames to the socket (not from inside nghttp2's own callbacks: then it
  // runs when the outer call returns).
  void SendPending();
  // The connection is gone or broken: every open stream is reset (its decoder told), then the
  // pool is told the socket closed.
  void Terminate(UpstreamResetReason reason, const std::string& detail);
  // The peer's SETTINGS: how many streams this connection may carry now.
  void UpdateLimit();
  // A stream nghttp2 closed (or one that never got an id) leaves the connection.
  void StreamDone(Stream* s);
  // Streams that failed inside a router's call (StartRequest): told from the timer, not there.
  void FailLater(Stream* s);

  nghttp2_session* session_ = nullptr;
  Stream* streams_ = nullptr;  // open streams (intrusive list)
  std::vector<Stream*> failed_;
  bool started_ = false;
  bool in_recv_ = false;  // inside nghttp2_session_mem_recv
  bool sending_ = false;  // inside nghttp2_session_send
  bool send_wanted_ = false;
};

}  // namespace rpx
