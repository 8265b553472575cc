#include "source/router/retry_state.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "source/config/yaml_loader.h"

namespace rpx {
namespace {

std::shared_ptr<const RetryPolicy> Policy(const std::string& yaml) {
  envoy::config::route::v3::RetryPolicy p;
  std::vector<std::string> errors;
  EXPECT_TRUE(LoadYamlIntoMessage(yaml, "test", &p, &errors)) << errors[0];
  auto r = RetryPolicy::Create(p, "retry_policy");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : nullptr;
}

std::string PolicyError(const std::string& yaml) {
  envoy::config::route::v3::RetryPolicy p;
  std::vector<std::string> errors;
  EXPECT_TRUE(LoadYamlIntoMessage(yaml, "test", &p, &errors)) << errors[0];
  auto r = RetryPolicy::Create(p, "retry_policy");
  return r.ok() ? "" : std::string(r.status().message());
}

RequestHead Req(std::vector<std::pair<std::string, std::string>> headers = {},
                std::string method = "GET") {
  RequestHead r;
  r.method = method;
  r.host = "h";
  r.path = "/";
  for (auto& [k, v] : headers) r.headers.Add(k, v);
  return r;
}

TEST(RetryStateTest, ConditionsAsEnvoyReadsThem) {
  HeaderMap none;
  auto p5xx = Policy("retry_on: 5xx");
  auto s = RetryState::Create(p5xx.get(), Req(), false);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->RetriableResponse(500, none));
  EXPECT_TRUE(s->RetriableResponse(503, none));
  EXPECT_FALSE(s->RetriableResponse(404, none));
  EXPECT_FALSE(s->RetriableResponse(200, none));
  // 5xx covers no response at all, connect failures included.
  EXPECT_TRUE(s->RetriableFailure(RetryState::Failure::kReset));
  EXPECT_TRUE(s->RetriableFailure(RetryState::Failure::kConnectFailure));
  EXPECT_TRUE(s->RetriableFailure(RetryState::Failure::kPerTryTimeout));

  auto gw = Policy("retry_on: gateway-error");
  s = RetryState::Create(gw.get(), Req(), false);
  EXPECT_FALSE(s->RetriableResponse(500, none));
  EXPECT_TRUE(s->RetriableResponse(502, none));
  EXPECT_TRUE(s->RetriableResponse(504, none));

  auto cf = Policy("retry_on: connect-failure");
  s = RetryState::Create(cf.get(), Req(), false);
  EXPECT_TRUE(s->RetriableFailure(RetryState::Failure::kConnectFailure));
  EXPECT_FALSE(s->RetriableFailure(RetryState::Failure::kReset));
  EXPECT_FALSE(s->RetriableResponse(503, none));

  auto codes = Policy(R"(
retry_on: "retriable-4xx,retriable-status-codes,retriable-headers"
retriable_status_codes: [418]
retriable_headers: [{name: x-retry-me, present_match: true}]
)");
  s = RetryState::Create(codes.get(), Req(), false);
  EXPECT_TRUE(s->RetriableResponse(409, none));
  EXPECT_TRUE(s->RetriableResponse(418, none));
  EXPECT_FALSE(s->RetriableResponse(503, none));
  HeaderMap marked;
  marked.Add("x-retry-me", "1");
  EXPECT_TRUE(s->RetriableResponse(200, marked));
  EXPECT_FALSE(s->RetriableFailure(RetryState::Failure::kReset));
}

TEST(RetryStateTest, RequestHeadersAddToThePolicyWhenHonoured) {
  HeaderMap none;
  auto p = Policy("retry_on: connect-failure\nnum_retries: 1");
  auto req = Req({{"x-envoy-retry-on", "5xx, unknown-thing"},
                  {"x-envoy-max-retries", "3"},
                  {"x-envoy-upstream-rq-per-try-timeout-ms", "250"}});
  auto s = RetryState::Create(p.get(), req, true);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->RetriableResponse(503, none));  // or-ed in; the unknown token is skipped
  EXPECT_EQ(s->per_try_timeout_ms(), 250u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(s->retries_left());
    s->TakeRetry(i);
  }
  EXPECT_FALSE(s->retries_left());
  // Not honoured (an external client at the edge): the policy alone.
  s = RetryState::Create(p.get(), req, false);
  EXPECT_FALSE(s->RetriableResponse(503, none));
  // Headers alone make a request retriable; without anything, no state at all.
  EXPECT_TRUE(RetryState::Create(nullptr, Req({{"x-envoy-retry-on", "5xx"}}), true));
  EXPECT_FALSE(RetryState::Create(nullptr, Req({{"x-envoy-retry-on", "5xx"}}), false));
  EXPECT_FALSE(RetryState::Create(nullptr, Req(), true));
  // x-envoy-retriable-status-codes goes with retriable-status-codes.
  s = RetryState::Create(nullptr,
                         Req({{"x-envoy-retry-on", "retriable-status-codes"},
                              {"x-envoy-retriable-status-codes", "418, 429"}}),
                         true);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->RetriableResponse(429, none));
  EXPECT_FALSE(s->RetriableResponse(503, none));
}

TEST(RetryStateTest, RetriableRequestHeadersLimitWhichRequestsAreRetried) {
  auto p = Policy(R"(
retry_on: 5xx
retriable_request_headers: [{name: ":method", string_match: {exact: GET}}]
)");
  EXPECT_TRUE(RetryState::Create(p.get(), Req({}, "GET"), false));
  EXPECT_FALSE(RetryState::Create(p.get(), Req({}, "POST"), false));
}

TEST(RetryStateTest, BackoffIsJitteredExponentialAndCapped) {
  auto p = Policy(R"(
retry_on: 5xx
num_retries: 5
retry_back_off: {base_interval: 0.1s, max_interval: 0.5s}
)");
  // The n-th retry waits in [0, (2^n - 1) x base), at most max_interval.
  const uint64_t upper[] = {100, 300, 500, 500, 500};
  for (uint64_t seed : {0ull, 7ull, 99ull, 123456789ull, ~0ull}) {
    auto s = RetryState::Create(p.get(), Req(), false);
    std::set<uint64_t> seen;
    for (int n = 0; n < 5; ++n) {
      EXPECT_EQ(s->attempt(), static_cast<uint32_t>(n + 1));
      uint64_t wait = s->TakeRetry(seed * 31 + n);
      EXPECT_LT(wait, upper[n]) << "retry " << n + 1;
    }
    EXPECT_FALSE(s->retries_left());
    EXPECT_EQ(s->attempt(), 6u);
  }
  // Defaults: 25 ms base, 250 ms max.
  auto d = Policy("retry_on: 5xx\nnum_retries: 10");
  auto s = RetryState::Create(d.get(), Req(), false);
  uint64_t most = 0;
  for (int n = 0; n < 10; ++n) most = std::max(most, s->TakeRetry(~0ull - n));
  EXPECT_LT(most, 250u);
}

TEST(RetryStateTest, ConfigErrorsNameTheField) {
  EXPECT_EQ(PolicyError("retry_on: \"5xx,sometimes\""),
            "retry_policy.retry_on: unknown retry condition 'sometimes' (5xx, gateway-error, "
            "reset, connect-failure, retriable-4xx, refused-stream, retriable-status-codes, "
            "retriable-headers, envoy-ratelimited, or a gRPC one)");
  EXPECT_EQ(PolicyError("retry_on: 5xx\nretry_back_off: {max_interval: 1s}"),
            "retry_policy.retry_back_off.base_interval: is required");
  EXPECT_EQ(PolicyError("retry_on: 5xx\nretry_back_off: {base_interval: 1s, max_interval: 0.5s}"),
            "retry_policy.retry_back_off.max_interval: must not be below base_interval");
  EXPECT_EQ(PolicyError("retry_on: 5xx\nretry_host_predicate: [{name: envoy.retry_host_predicates."
                        "omit_canary_hosts}]"),
            "retry_policy.retry_host_predicate[0]: 'envoy.retry_host_predicates.omit_canary_hosts'"
            " is not supported (envoy.retry_host_predicates.previous_hosts is)");
  // gRPC conditions are accepted (Istio's default policy names them).
  EXPECT_EQ(PolicyError("retry_on: connect-failure,refused-stream,unavailable,cancelled,"
                        "retriable-status-codes"),
            "");
  auto p = Policy(R"(
retry_on: 5xx
retry_host_predicate:
- name: envoy.retry_host_predicates.previous_hosts
  typed_config: {"@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}
host_selection_retry_max_attempts: 3
)");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->avoid_previous_hosts);
  EXPECT_EQ(p->host_selection_attempts, 3u);
}

}  // namespace
}  // namespace rpx
