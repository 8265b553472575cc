// Retries, as Envoy's router makes them: RetryPolicy is a route's (or virtual host's)
// retry_policy, built once with the route table; RetryState is one request's view of it (the
// policy, or-ed with what the request's x-envoy-retry-on / x-envoy-max-retries headers ask), and
// decides after each failed attempt whether another one is made and after how long.
//
// RetryState knows nothing of connections: the router tells it what happened (a response head, a
// connect failure, a reset, a per-try timeout) and whether the request can still be sent again
// (its body held whole, no response byte sent downstream). Worker thread only; one per request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "envoy/config/route/v3/route_components.pb.h"
#include "source/http/headers.h"
#include "source/router/route_table.h"

namespace rpx {

// What retry_on lists, as bits.
enum RetryOn : uint32_t {
  kRetry5xx = 1 << 0,             // any 5xx, and no response at all (reset, connect failure)
  kRetryGatewayError = 1 << 1,    // 502, 503, 504, and no response at all
  kRetryReset = 1 << 2,           // no response: reset, disconnect, per-try timeout
  kRetryConnectFailure = 1 << 3,  // the connection could not be made
  kRetryRetriable4xx = 1 << 4,    // 409
  kRetryRefusedStream = 1 << 5,   // HTTP/2 REFUSED_STREAM (never seen over HTTP/1)
  kRetryStatusCodes = 1 << 6,     // retriable_status_codes (and x-envoy-retriable-status-codes)
  kRetryHeaders = 1 << 7,         // retriable_headers match the response
  kRetryRateLimited = 1 << 8,     // envoy-ratelimited: the response has x-envoy-ratelimited
};

// Parses a retry_on list ("5xx,reset"). gRPC conditions (cancelled, deadline-exceeded, internal,
// resource-exhausted, unavailable) and http3-post-connect-failure are accepted and never met:
// rpx carries no gRPC or HTTP/3 yet. With `strict` an unknown condition is an error naming it;
// otherwise (a request header, as Envoy reads it) it is skipped.
absl::StatusOr<uint32_t> ParseRetryOn(std::string_view list, bool strict);

struct RetryPolicy {
  uint32_t retry_on = 0;
  uint32_t num_retries = 1;
  uint64_t per_try_timeout_ms = 0;       // 0: none (the route's timeout still bounds all tries)
  uint64_t per_try_idle_timeout_ms = 0;  // 0: none
  uint64_t base_interval_ms = 25;
  uint64_t max_interval_ms = 250;  // 10 x base unless given
  std::vector<uint32_t> retriable_status_codes;
  std::vector<HeaderMatch> retriable_headers;
  std::vector<HeaderMatch> retriable_request_headers;  // only matching requests are retried
  bool avoid_previous_hosts = false;                   // envoy.retry_host_predicates.previous_hosts
  uint32_t host_selection_attempts = 1;                // host_selection_retry_max_attempts

  // Errors name fields under `path` (e.g. "...routes[0].route.retry_policy").
  static absl::StatusOr<std::shared_ptr<const RetryPolicy>> Create(
      const envoy::config::route::v3::RetryPolicy& proto, const std::string& path);
};

class RetryState {
 public:
  enum class Failure { kConnectFailure, kReset, kPerTryTimeout };

  // What the request asks for: `policy` (may be null) and, when `honour_headers`,
  // x-envoy-retry-on, x-envoy-retriable-status-codes, x-envoy-max-retries and
  // x-envoy-upstream-rq-per-try-timeout-ms. Null when nothing asks for retries.
  static std::unique_ptr<RetryState> Create(const RetryPolicy* policy, const RequestHead& request,
                                            bool honour_headers);
  ~RetryState();

  // Whether this outcome of an attempt calls for another one under retry_on (not whether one is
  // left: see TakeRetry).
  bool RetriableResponse(int status, const HeaderMap& headers) const;
  bool RetriableFailure(Failure f) const;
  bool retries_left() const { return retries_left_ > 0; }
  // Uses up one retry and returns how long to wait before it: jittered exponential backoff,
  // uniform in [0, (2^n - 1) x base) for the n-th retry, capped at max_interval.
  uint64_t TakeRetry(uint64_t random);

  uint32_t attempt() const { return attempt_; }  // 1 for the first try
  uint64_t per_try_timeout_ms() const { return per_try_timeout_ms_; }
  uint64_t per_try_idle_timeout_ms() const;
  bool avoid_previous_hosts() const;
  uint32_t host_selection_attempts() const;

 private:
  RetryState() = default;
  const RetryPolicy* policy_ = nullptr;  // may be null (headers only)
  uint32_t retry_on_ = 0;
  uint32_t retries_left_ = 0;
  uint32_t attempt_ = 1;
  uint64_t per_try_timeout_ms_ = 0;
  std::vector<uint32_t> header_status_codes_;  // x-envoy-retriable-status-codes
};

}  // namespace rpx
