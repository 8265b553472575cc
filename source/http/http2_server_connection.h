// Http2ServerConnection: one downstream HTTP/2 connection (RFC 9113), the HTTP/2 codec of the
// connection manager. nghttp2 does the framing, HPACK and the protocol's own checks (pseudo
// headers, connection-specific headers, Content-Length against DATA, stream states); this class
// maps each stream to the same StreamHandler / ResponseEncoder seam the HTTP/1 codec uses, so the
// router never knows which codec a request came on.
//
// Flow control follows the data: request DATA is acknowledged (WINDOW_UPDATE) only once the
// handler has taken it, so a stream whose upstream is slow (ReadDisable) holds at most its
// window; response data waits in the stream until the client's window and the socket take it,
// and a stream holding more than the connection's buffer limit tells its handler to stop reading
// the upstream (OnDownstreamWatermark). Frames are generated only while the socket's write buffer
// is under its high watermark.
//
// Owned like ServerConnection (the worker's connection list); worker thread only; deleted
// deferred after OnClosed. Streams are deleted deferred too (nghttp2 may close one from inside a
// call that came through it).
#pragma once

#include <nghttp2/nghttp2.h>

#include <memory>
#include <vector>

#include "source/http/downstream_connection.h"
#include "source/http/http_config.h"
#include "source/http/stream.h"
#include "source/network/address.h"

namespace rpx {

class Http2ServerConnection : public DownstreamConnection {
 public:
  // `counted`: the connection is already in downstream_cx_total (it began on the HTTP/1 codec,
  // which handed it over on seeing the preface or ALPN h2).
  Http2ServerConnection(std::unique_ptr<Connection> conn, std::shared_ptr<const HttpConfig> config,
                        HttpStats& stats, StreamHandlerFactory& factory, const SocketAddress& peer,
                        bool counted);
  ~Http2ServerConnection() override;
  // Sends the server's SETTINGS and serves what the client has sent already. Once, after the
  // owner has put the connection where OnClosed can find it (it may close at once).
  void Start();

  // GOAWAY with the last stream id received; those streams finish, then the connection closes.
  void CloseWhenIdle() override;
  bool draining() const override { return drain_; }
  void CloseNow() override { Close(true); }

  // ConnectionCallbacks
  void OnData(Buffer& in) override;
  void OnEvent(ConnectionEvent event) override;
  void OnBelowWriteLowWatermark() override;

 protected:
  Connection& connection() { return *conn_; }

 private:
  class Stream;
  friend class Stream;
  struct Callbacks;
  friend struct Callbacks;

  // Hands nghttp2's queued frames to the socket (not from inside nghttp2's own callbacks: then it
  // runs when the outer call returns).
  void SendPending();
  // Ends the connection: open streams are reset (their handlers told), then the socket closes.
  void Close(bool flush);
  // A protocol violation of the client's (flood, malformed framing): GOAWAY with `error`, then
  // close once it is written.
  void ConnectionError(uint32_t error, Counter* stat);
  void OnIdleTimeout();
  // GOAWAY (NO_ERROR) naming the last stream rpx has seen: those still finish. Once.
  void SendGoaway();
  void StreamClosed(Stream* s);
  void UpdateIdleTimer();

  std::unique_ptr<Connection> conn_;
  std::shared_ptr<const HttpConfig> config_;
  HttpStats& stats_;
  StreamHandlerFactory& factory_;
  SocketAddress peer_;
  nghttp2_session* session_ = nullptr;
  MemberTimer<Http2ServerConnection, &Http2ServerConnection::OnIdleTimeout> idle_timer_;
  std::unique_ptr<Timer> duration_timer_;  // max_connection_duration; only when configured
  Stream* streams_ = nullptr;              // open streams (intrusive list)
  size_t active_streams_ = 0;
  // Streams whose buffered response fell under the low watermark during a send: told after it.
  std::vector<int32_t> below_low_;
  // Flood accounting (Envoy's http2_protocol_options limits).
  int32_t highest_stream_id_ = 0;  // the highest stream id the client's HEADERS used
  uint32_t consecutive_empty_frames_ = 0;
  uint64_t inbound_streams_ = 0;
  uint64_t inbound_priority_frames_ = 0;
  uint64_t inbound_window_update_frames_ = 0;
  uint64_t outbound_data_frames_ = 0;
  uint64_t frames_since_drained_ = 0;  // frames written while the write buffer never emptied
  bool in_recv_ = false;               // inside nghttp2_session_mem_recv
  bool sending_ = false;               // inside nghttp2_session_send
  bool send_wanted_ = false;
  bool closed_ = false;
  bool drain_ = false;
  bool goaway_sent_ = false;
  bool error_ = false;  // a connection error: close once the GOAWAY is written
};

}  // namespace rpx
