#include "source/upstream/http1_client.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "source/common/logger.h"

namespace rpx {
namespace {
// An abandoned request's response is read and discarded to keep the connection if it ends
// within this time and this many bytes; bigger or later ones are not worth waiting for.
constexpr uint64_t kDiscardMs = 1000;
constexpr uint64_t kDiscardMaxBytes = 256 * 1024;
}  // namespace

Http1Client::Http1Client(ConnPool& pool, std::unique_ptr<Connection> conn)
    : PoolClient(pool, std::move(conn), 1),
      parser_(Http1Parser::Type::kResponse, *this,
              Http1Parser::Limits{80 * 1024, pool.cluster().max_response_headers_count}) {
  conn_->SetCallbacks(this);
}

void Http1Client::OnTimer() {
  if (busy() && discarding_) {
    // Bytes Reset found already read (parsing leaves none behind otherwise): parse them now.
    if (!conn_->read_buffer().empty()) {
      timer_->Enable(kDiscardMs);
      OnData(conn_->read_buffer());
      return;
    }
    CloseBusy();
  }
}

Http1Client::~Http1Client() {
  splicer_.reset();  // it points at conn_
}

std::unique_ptr<Connection> Http1Client::TakeConnection() {
  RPX_ASSERT(state() == State::kConnecting && !closed_);
  closed_ = true;  // the socket lives on in the Http2Client
  timer_->Disable();
  return std::move(conn_);
}

void Http1Client::StartRequest(ResponseDecoder* decoder, const RequestHead& head) {
  decoder_ = decoder;
  request_complete_ = false;
  response_complete_ = false;
  response_headers_sent_ = false;
  upgrade_requested_ = !head.upgrade.empty();
  tunnel_ = false;
  unexpected_101_ = false;
  request_chunked_ = head.chunked;
  discarding_ = false;
  discarded_bytes_ = 0;
  parser_.set_expect_no_body(head.method == std::string_view("HEAD"));
  Buffer& out = conn_->write_buffer();
  out.Append(head.method);
  out.Append(" ", 1);
  out.Append(head.path);
  out.Append(" HTTP/1.1\r\n", 11);
  AppendHeaders(out, head.headers);
  if (head.chunked) {
    out.Append("transfer-encoding: chunked\r\n");
  } else if (head.has_content_length) {
    out.Append("content-length: ", 16);
    out.AppendDecimal(head.content_length);
    out.Append("\r\n", 2);
  }
  out.Append("\r\n", 2);
  conn_->ScheduleWrite();
  if (!head.has_body()) request_complete_ = true;
}

void Http1Client::SendData(const char* data, size_t len, bool end_stream) {
  if (!busy()) return;
  if (tunnel_ && end_stream) {
    if (len) conn_->Write(std::string_view(data, len));
    decoder_ = nullptr;
    conn_->Close(Connection::CloseType::kFlushWrite, false);
    closed_ = true;
    pool_.OnStreamDone(this, false);
    return;
  }
  Buffer& out = conn_->write_buffer();
  if (request_chunked_) {
    if (len > 0) {
      out.AppendHex(len);
      out.Append("\r\n", 2);
      out.Append(data, len);
      out.Append("\r\n", 2);
    }
    if (end_stream) out.Append("0\r\n\r\n", 5);
  } else if (!end_stream) {
    conn_->WriteThrough(data, len);
    return;
  } else {
    out.Append(data, len);
  }
  conn_->ScheduleWrite();
  if (end_stream) {
    request_complete_ = true;
  }
}

void Http1Client::Reset() {
  if (!busy() || discarding_) return;
  decoder_ = nullptr;
  pool_.stats().upstream_rq_reset.Inc();
  if (request_complete_ && !splicer_ && !upgrade_requested_ && !tunnel_) {
    discarding_ = true;
    conn_->ReadDisable(false);  // the client's backpressure no longer applies
    // Bytes already read (taken by the loop's read batching ahead of this reset, or held back
    // by that backpressure) are parsed on the next pass, not here in the caller's cleanup, where
    // a finished response would hand the connection to a waiting request. (Closing instead
    // cost 54 of 1,373 connections reset by three `wrk -c 1000` runs ending.)
    timer_->Enable(conn_->read_buffer().empty() ? kDiscardMs : 0);
    return;
  }
  splicer_.reset();
  CloseBusy();
}

void Http1Client::CloseBusy() {
  discarding_ = false;
  timer_->Disable();
  conn_->Close(Connection::CloseType::kNoFlush, false);
  closed_ = true;
  pool_.OnStreamDone(this, false);
}

void Http1Client::OnData(Buffer& in) {
  if (state() == State::kIdle) {
    // Bytes on an idle keep-alive connection: the upstream is confused; do not reuse it.
    conn_->Close(Connection::CloseType::kNoFlush, false);
    closed_ = true;
    pool_.OnClientClosed(this);
    return;
  }
  if (discarding_) {
    discarded_bytes_ += in.size();
    if (discarded_bytes_ > kDiscardMaxBytes) {
      CloseBusy();
      return;
    }
    ParseResponse();
    return;
  }
  if (!busy() || decoder_ == nullptr) return;
  if (tunnel_) {
    size_t n = in.size();
    decoder_->OnResponseData(in.data(), n, false);
    if (busy()) in.Drain(n);
    return;
  }
  ParseResponse();
}

void Http1Client::ParseResponse() {
  Buffer& in = conn_->read_buffer();
  size_t consumed = 0;
  Http1Parser::Result r = parser_.Execute(in.data(), in.size(), &consumed);
  if (!busy()) return;  // a callback reset us
  if (unexpected_101_) {
    Fail(UpstreamResetReason::kProtocolError,
         "upstream switched protocols (101) to a request that did not ask for an upgrade");
    return;
  }
  if (tunnel_) {
    // The head is forwarded; what follows it is the new protocol's first bytes.
    in.Drain(consumed);
    if (!in.empty() && decoder_) {
      size_t n = in.size();
      decoder_->OnResponseData(in.data(), n, false);
      if (busy()) in.Drain(n);
    }
    return;
  }
  if (r == Http1Parser::Result::kError) {
    Fail(UpstreamResetReason::kProtocolError,
         absl::StrCat("upstream sent a malformed response (", parser_.error_reason(), ")"));
    return;
  }
  in.Drain(consumed);
  if (r == Http1Parser::Result::kPaused) {
    parser_.Resume();
    // The response is complete. Bytes after it mean a confused upstream: do not reuse.
    bool stray = !in.empty();
    in.Clear();
    ReleaseAfterResponse(stray);
    return;
  }
  MaybeSplice();
}

// Bodies at least this large go through splice(2): below it the pipe's syscalls cost more than
// the copy they save.
constexpr uint64_t kSpliceMinBytes = 64 * 1024;

void Http1Client::MaybeSplice() {
  if (splicer_ || decoder_ == nullptr || tunnel_) return;
  uint64_t remaining = parser_.remaining_body_length();
  if (remaining < kSpliceMinBytes || !conn_->read_buffer().empty()) return;
  Connection* sink = decoder_->SpliceTarget();
  if (sink == nullptr) return;
  splicer_ = Splicer::Create(*conn_, *sink, remaining, *this);
  if (!splicer_) return;
  pool_.stats().upstream_rq_body_spliced.Inc();
  splicer_->Start();
}

void Http1Client::OnSpliceProgress(uint64_t bytes) {
  if (decoder_) decoder_->OnResponseDataSpliced(bytes);
}

void Http1Client::OnSpliceDone() {
  splicer_.reset();
  parser_.SkipRemainingBody();
  OnMessageComplete();
  // Anything already waiting after the body is a confused upstream (ReleaseAfterResponse).
  ReleaseAfterResponse(false);
}

void Http1Client::OnSpliceFailed(const std::string& detail) {
  splicer_.reset();
  if (busy()) Fail(UpstreamResetReason::kConnectionClosed, detail);
}

void Http1Client::OnEvent(ConnectionEvent event) {
  switch (event) {
    case ConnectionEvent::kConnected:
      timer_->Disable();
      if (!conn_->plaintext()) pool_.OnTlsConnected(static_cast<TlsTransport&>(conn_->transport()));
      pool_.OnConnected(this);
      return;
    case ConnectionEvent::kConnectFailed:
      ConnectFailed();
      return;
    case ConnectionEvent::kRemoteClose:
    case ConnectionEvent::kLocalClose:
      if (state() == State::kConnecting) {
        closed_ = true;
        timer_->Disable();
        pool_.OnConnectFailed(this, PoolFailure::kConnectFailure, "connection closed");
        return;
      }
      if (busy() && decoder_ != nullptr && tunnel_) {
        // The upstream ended the tunnel: that ends the response.
        closed_ = true;
        ResponseDecoder* d = decoder_;
        decoder_ = nullptr;
        pool_.OnStreamDone(this, false);
        d->OnResponseData(nullptr, 0, true);
        return;
      }
      if (busy() && decoder_ != nullptr) {
        if (parser_.in_message() && parser_.message_needs_eof()) {
          // A close-delimited body ends here.
          if (parser_.Finish() == Http1Parser::Result::kOk && busy()) {
            response_keep_alive_ = false;
            if (!response_complete_) OnMessageComplete();
            ReleaseAfterResponse(true);
            return;
          }
        }
        if (busy()) {
          closed_ = true;
          ResponseDecoder* d = decoder_;
          decoder_ = nullptr;
          pool_.stats().upstream_cx_destroy_remote.Inc();
          pool_.OnStreamDone(this, false);
          d->OnUpstreamReset(UpstreamResetReason::kConnectionClosed,
                             response_headers_sent_
                                 ? "upstream closed the connection mid-response"
                                 : "upstream closed the connection before responding");
        }
        return;
      }
      if (!closed_) {
        if (state() == State::kIdle) pool_.stats().upstream_cx_destroy_remote.Inc();
        bool in_flight = busy();
        closed_ = true;
        if (in_flight) {
          pool_.OnStreamDone(this, false);
        } else {
          pool_.OnClientClosed(this);
        }
      }
      return;
  }
}

void Http1Client::OnAboveWriteHighWatermark() {
  if (decoder_) decoder_->OnUpstreamWriteWatermark(true);
}

void Http1Client::OnBelowWriteLowWatermark() {
  if (decoder_) decoder_->OnUpstreamWriteWatermark(false);
}

void Http1Client::OnHead() {
  ResponseHead& head = parser_.response();
  if (head.status == 101) {
    if (!upgrade_requested_) {
      unexpected_101_ = true;  // failed once the parser returns
      return;
    }
    tunnel_ = true;
    response_keep_alive_ = false;
    response_headers_sent_ = true;
    if (decoder_) decoder_->OnResponseHeaders(head, false);
    return;
  }
  if (head.status < 200) return;  // interim responses are not forwarded (we answered Expect)
  response_keep_alive_ = head.keep_alive;
  response_headers_sent_ = true;
  if (decoder_) decoder_->OnResponseHeaders(head, false);
}

void Http1Client::OnBody(const char* data, size_t len) {
  if (decoder_) decoder_->OnResponseData(data, len, false);
}

void Http1Client::OnMessageComplete() {
  // The pool gets the connection back in ReleaseAfterResponse, once the parser has returned and
  // we know whether stray bytes followed the response.
  if (tunnel_ || unexpected_101_) return;  // a 101 head is not the end of anything
  response_complete_ = true;
  ResponseDecoder* d = decoder_;
  decoder_ = nullptr;
  if (d) d->OnResponseData(nullptr, 0, true);
}

void Http1Client::ReleaseAfterResponse(bool stray_bytes) {
  if (!busy()) return;
  bool was_discarding = discarding_;
  if (discarding_) {
    discarding_ = false;
    timer_->Disable();
  }
  if (request_complete_) {
    bool reusable = response_keep_alive_ && !stray_bytes;
    if (was_discarding && reusable) pool_.stats().upstream_cx_kept_after_reset.Inc();
    pool_.OnStreamDone(this, reusable);
    return;
  }
  // The upstream answered before the request body was sent (e.g. 413): the connection cannot
  // carry another request, and the rest of the body is not sent.
  conn_->Close(Connection::CloseType::kFlushWrite, false);
  closed_ = true;
  pool_.OnStreamDone(this, false);
}

void Http1Client::Fail(UpstreamResetReason reason, const std::string& detail) {
  ResponseDecoder* d = decoder_;
  decoder_ = nullptr;
  conn_->Close(Connection::CloseType::kNoFlush, false);
  closed_ = true;
  pool_.OnStreamDone(this, false);
  if (d) d->OnUpstreamReset(reason, detail);
}

}  // namespace rpx
