// DownstreamConnection: what a listener's owner (the worker) holds for one accepted HTTP
// connection, whichever codec serves it: the HTTP/1 ServerConnection or Http2ServerConnection.
// Both run the same StreamHandler per request (the router never knows which). Owned by the
// worker's connection list; worker thread only; deleted deferred after OnClosed.
#pragma once

#include "source/event/dispatcher.h"
#include "source/network/connection.h"

namespace rpx {

class DownstreamConnection : public ConnectionCallbacks, public DeferredDeletable {
 public:
  // Drain: ends the connection once the streams in flight are done. HTTP/1 answers the next
  // response with Connection: close (an idle keep-alive connection closes after a short grace);
  // HTTP/2 sends GOAWAY with the last stream id it will serve.
  virtual void CloseWhenIdle() = 0;
  virtual bool draining() const = 0;
  // Ends the connection now (a drain that ran out of time): streams in flight are reset.
  virtual void CloseNow() = 0;

 protected:
  // Runs once when the connection closes (the owner then defer-deletes it); not on destruction.
  virtual void OnClosed() {}
  // The transport's handshake (TLS) is done.
  virtual void OnTransportConnected() {}
};

}  // namespace rpx
