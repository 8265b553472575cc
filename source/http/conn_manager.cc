#include "source/http/conn_manager.h"

#include "source/common/assert.h"

namespace rpx {
namespace conn_manager {

uint64_t StreamStarted(const HttpConfig& config, HttpStats& stats, Dispatcher& dispatcher,
                       StreamInfo& info, bool request_complete) {
  stats.downstream_rq_total.Inc();
  stats.downstream_rq_active.Inc();
  dispatcher.AddPending(1);
  if (config.record_durations) {
    info.start_ns = MonotonicNowNs();
    if (request_complete) info.request_end_ns = info.start_ns;
  }
  if (config.record_start_time) info.start_unix_ns = UnixNowNs();
  return dispatcher.NowMs();
}

void StreamEnded(const HttpConfig& config, HttpStats& stats, Dispatcher& dispatcher,
                 StreamInfo& info, uint64_t start_ms, const FormatContext& ctx) {
  stats.downstream_rq_time.Record(dispatcher.NowMs() - start_ms);
  LogStream(config, dispatcher.worker_index(), info, ctx);
  stats.downstream_rq_active.Dec();
  dispatcher.AddPending(-1);
}

FormatContext Context(const HttpConfig& config, const RequestHead* request,
                      const DownstreamInfo* downstream) {
  FormatContext ctx;
  ctx.request = request;
  ctx.downstream = downstream;
  if (!config.scheme_to_overwrite.empty()) ctx.scheme = &config.scheme_to_overwrite;
  return ctx;
}

void LogStream(const HttpConfig& config, uint32_t worker, StreamInfo& info,
               const FormatContext& ctx) {
  if (config.access_logs.empty()) return;
  if (config.record_durations) info.end_ns = MonotonicNowNs();
  FormatContext with_info = ctx;
  with_info.info = &info;
  with_info.response_headers = info.response_headers.get();
  for (const auto& log : config.access_logs) log->Log(with_info, worker);
}

TimeoutReply StreamTimedOut(StreamTimeout timeout, HttpStats& stats, StreamInfo& info) {
  switch (timeout) {
    case StreamTimeout::kIdle:
      stats.downstream_rq_idle_timeout.Inc();
      info.response_flags |= kStreamIdleTimeout;
      return {408, "stream idle timeout\n", "stream_idle_timeout", -1};
    case StreamTimeout::kRequest:
      stats.downstream_rq_timeout.Inc();
      info.response_flags |= kDurationTimeout;
      return {408, "request timeout\n", "request_overall_timeout", -1};
    case StreamTimeout::kMaxDuration:
      stats.downstream_rq_max_duration_reached.Inc();
      info.response_flags |= kDurationTimeout;
      return {408, "downstream duration timeout\n", "max_duration_timeout",
              4 /* DEADLINE_EXCEEDED */};
  }
  RPX_ASSERT(false);
  return {408, "timeout\n", "timeout", -1};
}

void PrepareLocalReply(const HttpConfig& config, const FormatContext& ctx, StreamInfo& info,
                       LocalReplyParts& reply) {
  if (reply.status < 200) reply.status = 500;
  if (config.local_reply) {
    reply.body_storage.assign(reply.body.data(), reply.body.size());
    reply.type_storage.assign(reply.content_type.data(), reply.content_type.size());
    if (reply.headers) reply.headers_storage = *reply.headers;
    FormatContext rewrite_ctx = ctx;
    config.local_reply->Rewrite(rewrite_ctx, info, &reply.status, &reply.body_storage,
                                &reply.headers_storage, &reply.type_storage);
    reply.body = reply.body_storage;
    reply.content_type = reply.type_storage;
    reply.headers = &reply.headers_storage;
  }
  if (StatusHasNoBody(reply.status)) reply.body = {};
}

}  // namespace conn_manager
}  // namespace rpx
