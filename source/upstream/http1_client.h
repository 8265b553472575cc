// Http1Client: one keep-alive HTTP/1.1 connection to an upstream host, carrying one request at a
// time: the pool client and the request stream in one object. After a 101 to an upgrade request
// it becomes a tunnel: bytes pass as they are in both directions, the upstream's EOF ends the
// response, SendData(end_stream) closes it, and it is never reused.
//
// Owned by its ConnPool; worker thread only.
#pragma once

#include <memory>
#include <string>

#include "source/http/http1_parser.h"
#include "source/network/splice.h"
#include "source/upstream/conn_pool.h"

namespace rpx {

class Http1Client : public PoolClient,
                    public UpstreamStream,
                    public Http1ParserCallbacks,
                    public SplicerCallbacks {
 public:
  Http1Client(ConnPool& pool, std::unique_ptr<Connection> conn);
  ~Http1Client() override;

  // auto_config: the socket, for the Http2Client that takes it over after ALPN picked h2.
  std::unique_ptr<Connection> TakeConnection();

  // UpstreamStream
  void StartRequest(ResponseDecoder* decoder, const RequestHead& head) override;
  void SendData(const char* data, size_t len, bool end_stream) override;
  // Abandons the request in flight. If the request was sent whole and nothing is being spliced,
  // the connection stays open for a short while to read and discard the response, and goes back
  // to the pool if that response ends in time (HAProxy does the same: without it, a thousand
  // clients hanging up mean a thousand new upstream connections at once). Otherwise, or if the
  // response is too large or late, it is closed.
  void Reset() override;
  void ReadDisable(bool disable) override { conn_->ReadDisable(disable); }
  PoolClient& client() override { return *this; }

  // ConnectionCallbacks
  void OnData(Buffer& in) override;
  void OnEvent(ConnectionEvent event) override;
  void OnAboveWriteHighWatermark() override;
  void OnBelowWriteLowWatermark() override;
  // Http1ParserCallbacks
  void OnHead() override;
  void OnBody(const char* data, size_t len) override;
  void OnMessageComplete() override;
  // SplicerCallbacks
  void OnSpliceProgress(uint64_t bytes) override;
  void OnSpliceDone() override;
  void OnSpliceFailed(const std::string& detail) override;

 private:
  // PoolClient
  UpstreamStream& NewStream() override { return *this; }
  void OnTimer() override;

  // A request is in flight (or its abandoned response is being discarded).
  bool busy() const { return active_ > 0 && !closed_; }
  void MaybeSplice();
  void ParseResponse();
  void ReleaseAfterResponse(bool stray_bytes);
  void Fail(UpstreamResetReason reason, const std::string& detail);
  // Closes the connection of the request in flight (ending any discard) and hands it back.
  void CloseBusy();
  // Closes the socket and tells the pool the stream in flight ended with it.
  void CloseAndRelease(Connection::CloseType type);

  Http1Parser parser_;
  ResponseDecoder* decoder_ = nullptr;
  bool request_chunked_ = false;
  bool request_complete_ = false;
  bool response_complete_ = false;
  bool response_keep_alive_ = true;
  bool response_headers_sent_ = false;
  bool upgrade_requested_ = false;  // the request asked to switch protocols
  bool tunnel_ = false;             // ... and the upstream agreed (101): raw bytes both ways
  bool unexpected_101_ = false;
  bool discarding_ = false;  // reading an abandoned request's response (see Reset)
  uint64_t discarded_bytes_ = 0;
  std::unique_ptr<Splicer> splicer_;  // moving the rest of a large body (see MaybeSplice)
};

}  // namespace rpx
