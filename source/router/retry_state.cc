#include "source/router/retry_state.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "source/common/assert.h"

namespace rpx {
namespace {

constexpr char kPreviousHostsType[] =
    "envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate";
constexpr char kPreviousHostsName[] = "envoy.retry_host_predicates.previous_hosts";

absl::string_view A(std::string_view v) { return absl::string_view(v.data(), v.size()); }

// x-envoy-retriable-status-codes: "503,504".
std::vector<uint32_t> ParseCodes(std::string_view list) {
  std::vector<uint32_t> out;
  ForEachListToken(list, [&out](std::string_view t) {
    uint32_t code = 0;
    if (absl::SimpleAtoi(A(t), &code)) out.push_back(code);
    return true;
  });
  return out;
}

}  // namespace

absl::StatusOr<uint32_t> ParseRetryOn(std::string_view list, bool strict) {
  static const std::pair<std::string_view, uint32_t> kConditions[] = {
      {"5xx", kRetry5xx},
      {"gateway-error", kRetryGatewayError},
      {"reset", kRetryReset},
      {"connect-failure", kRetryConnectFailure},
      {"retriable-4xx", kRetryRetriable4xx},
      {"refused-stream", kRetryRefusedStream},
      {"retriable-status-codes", kRetryStatusCodes},
      {"retriable-headers", kRetryHeaders},
      {"envoy-ratelimited", kRetryRateLimited},
      // gRPC status and HTTP/3 conditions: nothing rpx carries today can meet them.
      {"cancelled", 0},
      {"deadline-exceeded", 0},
      {"internal", 0},
      {"resource-exhausted", 0},
      {"unavailable", 0},
      {"http3-post-connect-failure", 0},
  };
  uint32_t bits = 0;
  std::string unknown;
  ForEachListToken(list, [&](std::string_view t) {
    for (const auto& [name, bit] : kConditions) {
      if (t == name) {
        bits |= bit;
        return true;
      }
    }
    if (unknown.empty()) unknown = std::string(t);
    return true;
  });
  if (strict && !unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown retry condition '", unknown,
        "' (5xx, gateway-error, reset, connect-failure, retriable-4xx, refused-stream, "
        "retriable-status-codes, retriable-headers, envoy-ratelimited, or a gRPC one)"));
  }
  return bits;
}

absl::StatusOr<std::shared_ptr<const RetryPolicy>> RetryPolicy::Create(
    const envoy::config::route::v3::RetryPolicy& p, const std::string& path) {
  auto err = [&path](const std::string& field, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".", field, ": ", what));
  };
  auto out = std::make_shared<RetryPolicy>();
  auto on = ParseRetryOn(p.retry_on(), true);
  if (!on.ok()) return err("retry_on", std::string(on.status().message()));
  out->retry_on = *on;
  if (p.has_num_retries()) out->num_retries = p.num_retries().value();
  if (p.has_per_try_timeout()) out->per_try_timeout_ms = DurationMs(p.per_try_timeout());
  if (p.has_per_try_idle_timeout())
    out->per_try_idle_timeout_ms = DurationMs(p.per_try_idle_timeout());
  if (p.has_retry_back_off()) {
    const auto& b = p.retry_back_off();
    if (!b.has_base_interval()) return err("retry_back_off.base_interval", "is required");
    out->base_interval_ms = DurationMs(b.base_interval());
    if (out->base_interval_ms == 0) {
      return err("retry_back_off.base_interval", "must be at least 1ms");
    }
    out->max_interval_ms =
        b.has_max_interval() ? DurationMs(b.max_interval()) : out->base_interval_ms * 10;
    if (out->max_interval_ms < out->base_interval_ms) {
      return err("retry_back_off.max_interval", "must not be below base_interval");
    }
  }
  out->retriable_status_codes.assign(p.retriable_status_codes().begin(),
                                     p.retriable_status_codes().end());
  for (int i = 0; i < p.retriable_headers_size(); ++i) {
    auto m = BuildHeaderMatcher(p.retriable_headers(i),
                                absl::StrCat(path, ".retriable_headers[", i, "]"));
    if (!m.ok()) return m.status();
    out->retriable_headers.push_back(std::move(*m));
  }
  for (int i = 0; i < p.retriable_request_headers_size(); ++i) {
    auto m = BuildHeaderMatcher(p.retriable_request_headers(i),
                                absl::StrCat(path, ".retriable_request_headers[", i, "]"));
    if (!m.ok()) return m.status();
    out->retriable_request_headers.push_back(std::move(*m));
  }
  for (int i = 0; i < p.retry_host_predicate_size(); ++i) {
    const auto& h = p.retry_host_predicate(i);
    std::string type;
    if (h.has_typed_config()) {
      const std::string& url = h.typed_config().type_url();
      type = url.substr(url.rfind('/') + 1);
    }
    if (type == kPreviousHostsType || (type.empty() && h.name() == kPreviousHostsName)) {
      out->avoid_previous_hosts = true;
      continue;
    }
    return err(absl::StrCat("retry_host_predicate[", i, "]"),
               absl::StrCat("'", h.name(), "' is not supported (", kPreviousHostsName, " is)"));
  }
  if (p.has_retry_priority()) {
    return err("retry_priority", absl::StrCat("'", p.retry_priority().name(),
                                              "' is not supported (rpx has no priorities yet)"));
  }
  if (p.host_selection_retry_max_attempts() < 0) {
    return err("host_selection_retry_max_attempts", "must not be negative");
  }
  if (p.host_selection_retry_max_attempts() > 0) {
    out->host_selection_attempts =
        static_cast<uint32_t>(std::min<int64_t>(p.host_selection_retry_max_attempts(), 100));
  }
  return std::shared_ptr<const RetryPolicy>(std::move(out));
}

std::unique_ptr<RetryState> RetryState::Create(const RetryPolicy* policy, const RequestHead& head,
                                               bool honour_headers) {
  const HeaderMap& request = head.headers;
  uint32_t on = policy ? policy->retry_on : 0;
  uint32_t retries = policy ? policy->num_retries : 1;
  uint64_t per_try = policy ? policy->per_try_timeout_ms : 0;
  std::vector<uint32_t> codes;
  if (honour_headers) {
    if (auto v = request.Get("x-envoy-retry-on")) on |= *ParseRetryOn(*v, false);
    if (auto v = request.Get("x-envoy-retriable-status-codes")) codes = ParseCodes(*v);
    if (auto v = request.Get("x-envoy-max-retries")) {
      uint32_t n = 0;
      if (absl::SimpleAtoi(A(*v), &n)) retries = n;
    }
    if (auto v = request.Get("x-envoy-upstream-rq-per-try-timeout-ms")) {
      uint64_t ms = 0;
      if (absl::SimpleAtoi(A(*v), &ms)) per_try = ms;
    }
  }
  if (on == 0 || retries == 0) return nullptr;
  if (policy && !policy->retriable_request_headers.empty()) {
    bool any = false;
    for (const auto& m : policy->retriable_request_headers) any = any || m.Matches(head);
    if (!any) return nullptr;
  }
  std::unique_ptr<RetryState> s(new RetryState());
  s->policy_ = policy;
  s->retry_on_ = on;
  s->retries_left_ = retries;
  s->per_try_timeout_ms_ = per_try;
  s->header_status_codes_ = std::move(codes);
  return s;
}

RetryState::~RetryState() = default;

bool RetryState::RetriableResponse(int status, const HeaderMap& headers) const {
  if ((retry_on_ & kRetry5xx) && status >= 500 && status < 600) return true;
  if ((retry_on_ & kRetryGatewayError) && status >= 502 && status <= 504) return true;
  if ((retry_on_ & kRetryRetriable4xx) && status == 409) return true;
  if (retry_on_ & kRetryStatusCodes) {
    auto has = [status](const std::vector<uint32_t>& v) {
      return std::find(v.begin(), v.end(), static_cast<uint32_t>(status)) != v.end();
    };
    if ((policy_ && has(policy_->retriable_status_codes)) || has(header_status_codes_)) {
      return true;
    }
  }
  if ((retry_on_ & kRetryHeaders) && policy_) {
    for (const auto& m : policy_->retriable_headers) {
      if (m.Matches(headers)) return true;
    }
  }
  if ((retry_on_ & kRetryRateLimited) && headers.Get("x-envoy-ratelimited")) return true;
  return false;
}

bool RetryState::RetriableFailure(Failure f) const {
  // No response at all: each of these conditions covers it (Envoy's reading).
  constexpr uint32_t kNoResponse = kRetry5xx | kRetryGatewayError | kRetryReset;
  switch (f) {
    case Failure::kConnectFailure:
      return (retry_on_ & (kNoResponse | kRetryConnectFailure)) != 0;
    case Failure::kReset:
    case Failure::kPerTryTimeout:
      return (retry_on_ & kNoResponse) != 0;
  }
  RPX_ASSERT(false);
  return false;
}

uint64_t RetryState::TakeRetry(uint64_t random) {
  RPX_ASSERT(retries_left_ > 0);
  --retries_left_;
  uint32_t n = attempt_++;  // the n-th retry
  uint64_t base = policy_ ? policy_->base_interval_ms : 25;
  uint64_t max = policy_ ? policy_->max_interval_ms : 250;
  uint64_t factor = n >= 32 ? UINT32_MAX : (uint64_t{1} << n) - 1;
  uint64_t upper = std::min(max, base * factor);
  return upper ? random % upper : 0;
}

uint64_t RetryState::per_try_idle_timeout_ms() const {
  return policy_ ? policy_->per_try_idle_timeout_ms : 0;
}
bool RetryState::avoid_previous_hosts() const { return policy_ && policy_->avoid_previous_hosts; }
uint32_t RetryState::host_selection_attempts() const {
  return policy_ ? policy_->host_selection_attempts : 1;
}

}  // namespace rpx
