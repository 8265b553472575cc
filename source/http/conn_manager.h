// The HTTP connection manager's per-stream rules, written once for both downstream codecs
// (HTTP/1.1 in ServerConnection, HTTP/2 in Http2ServerConnection::Stream): what a stream counts
// and stamps when it starts and ends, what each timeout does to it, how a local reply is
// rewritten (local_reply_config), what formatters see, and the access log at its end. The codecs
// keep what depends on the wire: stream lifetime (one at a time, or many), framing, flow control
// and how a reply or a reset goes out.
//
// Stateless functions over the caller's StreamInfo; called on the worker thread that owns the
// stream. In a namespace of their own so that a codec's member of the same name never hides them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "source/event/dispatcher.h"
#include "source/http/formatter.h"
#include "source/http/headers.h"
#include "source/http/http_config.h"
#include "source/http/stream.h"
#include "source/http/stream_info.h"

namespace rpx {
namespace conn_manager {

// 1xx, 204 and 304 responses carry no body.
inline bool StatusHasNoBody(int status) {
  return (status >= 100 && status < 200) || status == 204 || status == 304;
}

// A request head arrived: counts the stream as started and active and stamps its start times
// (`request_complete`: the head ended the request). Returns the dispatcher's clock, which
// StreamEnded takes back for downstream_rq_time.
uint64_t StreamStarted(const HttpConfig& config, HttpStats& stats, Dispatcher& dispatcher,
                       StreamInfo& info, bool request_complete);

// The stream ended (its response finished, or it was reset) with its handler still alive:
// records its time, writes the access log lines, and counts it as no longer active.
void StreamEnded(const HttpConfig& config, HttpStats& stats, Dispatcher& dispatcher,
                 StreamInfo& info, uint64_t start_ms, const FormatContext& ctx);

// What formatters read about a stream (access logs, local replies, header formatters).
FormatContext Context(const HttpConfig& config, const RequestHead* request,
                      const DownstreamInfo* downstream);

// Writes the access log lines of `info` (whose end is now).
void LogStream(const HttpConfig& config, uint32_t worker, StreamInfo& info,
               const FormatContext& ctx);

enum class StreamTimeout {
  kIdle,         // stream_idle_timeout (or the route's idle_timeout): nothing moved
  kRequest,      // request_timeout: the whole request did not arrive in time
  kMaxDuration,  // max_stream_duration (or the route's, or a gRPC deadline it caps)
};

// What a codec sends when a timeout ends a stream whose response has not started (after that,
// the stream is reset).
struct TimeoutReply {
  int status;  // 408
  std::string_view body;
  const char* details;  // response_code_details
  int grpc_status;      // for a gRPC request; -1: from the HTTP status
};

// Counts the timeout and marks `info` with its response flag; returns the reply to send when
// the response has not started.
TimeoutReply StreamTimedOut(StreamTimeout timeout, HttpStats& stats, StreamInfo& info);

// A local reply (an error, a direct response, a redirect) as it goes out: the status (a 1xx
// becomes 500: as the answer it would leave the client waiting for another), then
// local_reply_config's rewrite of status, body, type and headers, then no body for 204 and 304.
// The views point into the caller's strings or into this object's storage.
struct LocalReplyParts {
  int status;
  std::string_view body;
  std::string_view content_type;
  const HeaderMap* headers;  // extra headers; may be null

  std::string body_storage, type_storage;
  HeaderMap headers_storage;
};
void PrepareLocalReply(const HttpConfig& config, const FormatContext& ctx, StreamInfo& info,
                       LocalReplyParts& reply);

}  // namespace conn_manager
}  // namespace rpx
