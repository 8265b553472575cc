#include "source/router/router.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "source/common/free_blocks.h"
#include "source/common/hash.h"
#include "source/common/logger.h"
#include "source/router/retry_state.h"
#include "source/upstream/conn_pool.h"
#include "source/upstream/outlier_detector.h"

namespace rpx {
namespace {

// A grpc-timeout value (gRPC's PROTOCOL-HTTP2: up to 8 digits and a unit of H, M, S, m, u or n)
// in milliseconds, rounded up; nullopt when malformed.
std::optional<uint64_t> GrpcTimeoutMs(std::string_view v) {
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  uint64_t n = 0;
  for (char c : v.substr(0, v.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  switch (v.back()) {
    case 'H':
      return n * 3600 * 1000;
    case 'M':
      return n * 60 * 1000;
    case 'S':
      return n * 1000;
    case 'm':
      return n;
    case 'u':
      return (n + 999) / 1000;
    case 'n':
      return (n + 999999) / 1000000;
    default:
      return std::nullopt;
  }
}

class RouterStream final : public StreamHandler, public PoolCallbacks, public ResponseDecoder {
 public:
  RouterStream(Router& router, ResponseEncoder& encoder)
      : router_(router), encoder_(encoder), routes_(router.routes()) {}
  ~RouterStream() override { Cleanup(); }
  // One per request, with dozens in flight: more than glibc's per-thread cache keeps of one size
  // (7), so most took malloc's slow path. Only RouterStreams come here (the class is final).
  static void* operator new(size_t) { return FreeBlocks<sizeof(RouterStream), 1024>::Take(); }
  static void operator delete(void* p) { FreeBlocks<sizeof(RouterStream), 1024>::Give(p); }

  // StreamHandler
  void OnRequestHeaders(RequestHead& head, bool end_stream) override;
  void OnRequestData(const char* data, size_t len, bool end_stream) override;
  void OnRequestTrailers(HeaderMap& trailers) override;
  void OnDownstreamReset() override;
  void OnDownstreamWatermark(bool above) override;
  // PoolCallbacks
  void OnPoolReady(UpstreamStream& client) override;
  void OnPoolFailure(PoolFailure reason, const std::string& detail) override;
  // ResponseDecoder
  void OnResponseHeaders(ResponseHead& head, bool end_stream) override;
  void OnResponseData(const char* data, size_t len, bool end_stream) override;
  void OnResponseTrailers(HeaderMap& trailers) override;
  void OnUpstreamReset(UpstreamResetReason reason, const std::string& detail) override;
  void OnUpstreamWriteWatermark(bool above) override;
  Connection* SpliceTarget() override { return done_ ? nullptr : encoder_.SpliceTarget(); }
  void OnResponseDataSpliced(uint64_t bytes) override {
    if (!done_) encoder_.OnDataSpliced(bytes);
  }

 private:
  // Picks the host (and its pool) for an attempt; a retry avoids the hosts tried before when the
  // policy asks. Null after a local reply when there is none.
  ConnPool* SelectPool(RequestHead& head);
  void RewriteRequest(RequestHead& head, const VirtualHostEntry& vh, const WeightedTarget* wt);
  // x-envoy-* retry headers are honoured from clients rpx trusts: those behind it when it is
  // not the edge (use_remote_address false), or internal addresses (Envoy's rule).
  bool HonourEnvoyHeaders() const;
  // After an attempt failed in a way `retriable` says retry_on covers: true if another attempt
  // is on its way (after a backoff), false if the failure stands (no retry left, the body is no
  // longer held whole, a response byte already went out, or the cluster's retry limit).
  bool MaybeRetry(bool retriable);
  void OnRetryTimer();
  void OnPerTryIdleTimeout();
  void OnAttemptTimeout();
  void StartPerTryTimer();
  // The route's hash_policy applied to the request (Envoy's combination of several); false when
  // no policy yields a hash. A cookie policy with a ttl makes a cookie the response will set.
  bool RequestHash(const RequestHead& head, uint64_t* hash);
  // Gives up the retry slot an attempt held, once that attempt has an outcome.
  void ReleaseRetrySlot();
  // Sends `data` upstream, keeping it for a retry while the body fits the buffer limit.
  void SendBody(const char* data, size_t len, bool end_stream);
  // Body bytes to `client`; at the request's end its trailers, when it had some, end it instead.
  void SendToUpstream(UpstreamStream& client, const char* data, size_t len, bool end_stream);
  // x-forwarded-client-cert as the connection manager's settings say.
  void ForwardClientCert(const HttpConfig& config, HeaderMap& h);
  void StartRouteTimer();
  void OnRouteTimeout();
  // The route's or an attempt's timeout ended the request: a 504, or a reset once the response
  // has started; `details` for access logs.
  void TimedOut(const char* details);
  // Answers for rpx itself; `flags` and `details` say why, for access logs.
  void LocalReply(int status, std::string_view body, uint32_t flags, const char* details);
  FormatContext Context(const HeaderMap* response_headers) const {
    FormatContext ctx;
    ctx.info = &encoder_.stream_info();
    ctx.request = head_;
    ctx.response_headers = response_headers;
    ctx.downstream = &encoder_;
    const std::string& scheme = router_.config().scheme_to_overwrite;
    if (!scheme.empty()) ctx.scheme = &scheme;
    return ctx;
  }
  void Cleanup();
  void Finish();

  Router& router_;
  ResponseEncoder& encoder_;
  std::shared_ptr<const RouteTable> routes_;  // the table this request started with
  RequestHead* head_ = nullptr;
  const RouteEntry* route_ = nullptr;
  const VirtualHostEntry* vhost_ = nullptr;
  const WeightedTarget* weighted_ = nullptr;
  WorkerCluster* cluster_ = nullptr;
  ConnPool* pool_ = nullptr;
  ConnPool::Pending* pending_ = nullptr;
  UpstreamStream* client_ = nullptr;
  HeaderMap* request_trailers_ = nullptr;  // the downstream codec's; valid until the stream ends
  Buffer body_;  // request body received before the upstream connection was ready
  MemberTimer<RouterStream, &RouterStream::OnRouteTimeout> route_timer_{router_.dispatcher(), this};
  bool route_timer_started_ = false;
  bool request_resource_ = false;
  bool request_complete_ = false;
  bool done_ = false;
  bool downstream_paused_by_buffer_ = false;
  bool upgrade_ = false;            // the upgrade is allowed and was asked of the upstream
  bool tunnel_ = false;             // the upstream switched protocols (101)
  bool upstream_timed_ = false;     // upstream_rq_time recorded
  bool refused_resent_ = false;     // a stream the upstream refused was sent again (once)
  bool replay_held_ = false;        // ... with the body held for retries
  uint64_t upstream_start_ms_ = 0;  // the dispatcher's clock when the upstream request began
  // Retries: allocated only for requests a retry policy (or x-envoy-retry-on) covers, so the
  // others pay one null check.
  struct Retries {
    Retries(RouterStream* s, std::unique_ptr<RetryState> st)
        : state(std::move(st)),
          timer(s->router_.dispatcher(), s),
          idle_timer(s->router_.dispatcher(), s) {}
    std::unique_ptr<RetryState> state;
    // The cluster's shared limits, for the request and retry slots: during a backoff no pool is
    // held (an endpoint update may free it), so they are not reached through one.
    std::shared_ptr<ClusterResources> resources;
    Buffer held;               // the request body sent so far, sent again by a retry
    bool body_whole = true;    // `held` is all of it (false once it outgrew the buffer limit)
    bool slot = false;         // one of the cluster's retry slots is held
    bool backing_off = false;  // `timer` is the backoff before a retry, else the per-try timeout
    std::vector<const Host*> tried;  // hosts of earlier attempts
    MemberTimer<RouterStream, &RouterStream::OnRetryTimer> timer;
    MemberTimer<RouterStream, &RouterStream::OnPerTryIdleTimeout> idle_timer;
  };
  std::unique_ptr<Retries> retries_;
  // Consistent hashing: the request's hash (has_hash_), and the Set-Cookie a cookie policy made.
  uint64_t hash_ = 0;
  bool has_hash_ = false;
  std::string set_cookie_;
  uint32_t attempt() const { return retries_ ? retries_->state->attempt() : 1; }
  void RecordUpstreamTime() {
    if (upstream_timed_ || !cluster_) return;
    upstream_timed_ = true;
    cluster_->stats().upstream_rq_time.Record(router_.dispatcher().NowMs() - upstream_start_ms_);
  }
};

// Envoy's rule (ConnectionManagerImpl's createUpgradeFilterChain): a route that names the
// upgrade type decides; otherwise the connection manager's upgrade_configs do, and a type neither
// names is refused. So a route may enable an upgrade its listener does not list.
bool UpgradeAllowed(const HttpConfig& config, const RouteEntry& route, std::string_view type) {
  for (const auto& [t, enabled] : route.upgrade_overrides) {
    if (EqualsIgnoreCase(t, type)) return enabled;
  }
  for (const auto& u : config.upgrades) {
    if (EqualsIgnoreCase(u.type, type)) return u.enabled;
  }
  return false;
}

void RouterStream::LocalReply(int status, std::string_view body, uint32_t flags,
                              const char* details) {
  StreamInfo& info = encoder_.stream_info();
  info.response_flags |= flags;
  info.response_code_details = details;
  done_ = true;
  Cleanup();
  encoder_.SendLocalReply(status, body, nullptr, "text/plain");
}

void RouterStream::OnRequestHeaders(RequestHead& head, bool end_stream) {
  head_ = &head;
  request_complete_ = end_stream;
  HttpStats& stats = router_.stats();
  StreamInfo& info = encoder_.stream_info();
  DownstreamTlsFacts tls;
  if (routes_->matches_tls()) {
    tls.presented = encoder_.peer_certificate_presented();
    tls.validated = encoder_.peer_certificate_validated();
  }
  route_ = routes_->Route(head, &vhost_, tls);
  if (!route_) {
    stats.no_route.Inc();
    // Empty, as Envoy's (content-length: 0, no content-type); local_reply_config may add one.
    LocalReply(404, "", kNoRouteFound, "route_not_found");
    return;
  }
  info.route_name = &route_->name;
  switch (route_->action) {
    case RouteEntry::Action::kDirectResponse: {
      stats.rq_direct_response.Inc();
      info.response_code_details = "direct_response";
      done_ = true;
      HeaderMap extra;
      if (!route_->response_ops.empty() || !vhost_->response_ops.empty() ||
          !routes_->response_ops().empty()) {
        FormatContext ctx = Context(&extra);
        route_->response_ops.Apply(extra, ctx);
        vhost_->response_ops.Apply(extra, ctx);
        routes_->response_ops().Apply(extra, ctx);
      }
      encoder_.SendLocalReply(route_->direct_status, route_->direct_body, &extra, "text/plain");
      return;
    }
    case RouteEntry::Action::kRedirect: {
      stats.rq_redirect.Inc();
      info.response_code_details = "direct_response";
      done_ = true;
      HeaderMap extra;
      extra.Add("location", route_->RedirectLocation(head, encoder_.is_tls()));
      encoder_.SendLocalReply(route_->redirect_code, "", &extra, "text/plain");
      return;
    }
    case RouteEntry::Action::kWeightedClusters:
      weighted_ = &route_->PickWeighted(router_.random().Next());
      break;
    case RouteEntry::Action::kCluster:
      break;
  }
  if (!head.upgrade.empty()) {
    if (EqualsIgnoreCase(head.upgrade, "h2c")) {
      head.upgrade.clear();  // HTTP/2 is not offered over cleartext upgrade: stay on HTTP/1.1
    } else if (!UpgradeAllowed(router_.config(), *route_, head.upgrade)) {
      stats.downstream_rq_ws_on_non_ws_route.Inc();
      LocalReply(403,
                 absl::StrCat("upgrade to '", head.upgrade, "' is not enabled for this route\n"), 0,
                 "upgrade_failed");
      return;
    } else {
      upgrade_ = true;
    }
  }
  if (route_->has_idle_timeout) encoder_.SetStreamIdleTimeout(route_->idle_timeout_ms);
  if (route_->max_stream_duration_ms || route_->grpc_timeout_header_max_ms) {
    std::optional<uint64_t> ms = route_->max_stream_duration_ms;
    std::optional<std::string_view> header;
    if (route_->grpc_timeout_header_max_ms && (header = head.headers.Get("grpc-timeout"))) {
      if (std::optional<uint64_t> t = GrpcTimeoutMs(*header)) {
        uint64_t cap = *route_->grpc_timeout_header_max_ms;
        uint64_t v = cap && *t > cap ? cap : *t;
        uint64_t offset = route_->grpc_timeout_header_offset_ms;
        ms = v > offset ? v - offset : 1;  // nothing left: the stream times out at once
      }
    }
    if (ms) encoder_.SetMaxStreamDuration(*ms);
  }
  const std::string& cluster_name = weighted_ ? weighted_->cluster : route_->cluster;
  info.cluster_name = &cluster_name;
  cluster_ = router_.clusters().Get(cluster_name);
  if (!cluster_) {
    stats.no_cluster.Inc();
    LocalReply(503, absl::StrCat("cluster not found: ", cluster_name, "\n"), kNoClusterFound,
               "cluster_not_found");
    return;
  }
  ClusterStats& cstats = cluster_->stats();
  if (!upgrade_ && (route_->retry || head.headers.Get("x-envoy-retry-on"))) {
    auto state = RetryState::Create(route_->retry.get(), head, HonourEnvoyHeaders());
    if (state) retries_ = std::make_unique<Retries>(this, std::move(state));
  }
  if (const auto& od = cluster_->info().original_dst) {
    // ORIGINAL_DST: the request goes where the client's connection was going, or with
    // use_http_header where the header says.
    SocketAddress dst;
    std::optional<std::string_view> v;
    if (od->use_http_header) v = head.headers.Get(od->http_header_name);
    if (v) {
      auto a = SocketAddress::ParseIpPort(*v);
      if (!a.ok()) {
        LocalReply(503, absl::StrCat(od->http_header_name, ": ", a.status().message(), "\n"),
                   kNoHealthyUpstream, "no_healthy_upstream");
        return;
      }
      dst = *a;
    } else {
      // Only a restored destination: a connection made to rpx's own address (not redirected)
      // would otherwise be sent back to rpx, over and over (Envoy's rule too).
      dst = encoder_.original_destination();
    }
    pool_ = cluster_->PoolForOriginalDst(dst);
  } else {
    if (!route_->hash_policies.empty()) has_hash_ = RequestHash(head, &hash_);
    pool_ = cluster_->ChoosePool(router_.random().Next(), has_hash_ ? &hash_ : nullptr);
  }
  if (!pool_) {
    LocalReply(503, "no healthy upstream\n", kNoHealthyUpstream, "no_healthy_upstream");
    return;
  }
  info.upstream_address = &pool_->host().address;
  if (!pool_->cluster().resources->TryAcquireRequest()) {
    cstats.upstream_rq_pending_overflow.Inc();
    LocalReply(503, "upstream overflow: too many active requests\n", kUpstreamOverflow, "overflow");
    return;
  }
  request_resource_ = true;
  if (retries_) retries_->resources = pool_->cluster().resources;
  RewriteRequest(head, *vhost_, weighted_);
  if (pool_->cluster().auto_sni) {
    ConnPool* p = SelectPool(head);
    if (!p) return;
    pool_ = p;
  }
  if (head.expect_continue) {
    // rpx answers 100-continue itself (as Envoy does by default); the upstream never sees Expect.
    encoder_.Encode100Continue();
  }
  if (end_stream) StartRouteTimer();
  upstream_start_ms_ = router_.dispatcher().NowMs();
  pending_ = pool_->NewStream(*this);
}

ConnPool* RouterStream::SelectPool(RequestHead& head) {
  ConnPool* p = pool_;
  if (retries_ && retries_->state->attempt() > 1) {
    // A retry: another host, avoiding the ones tried when the policy says so.
    Retries& r = *retries_;
    auto tried = [&r](ConnPool* c) {
      return std::find(r.tried.begin(), r.tried.end(), &c->host()) != r.tried.end();
    };
    // (A hashed request's retry is placed at random: its own host is the one that failed.)
    // An original-destination request has one host: it is retried there.
    if (cluster_->info().original_dst) return p;
    p = cluster_->ChoosePool(router_.random().Next());
    for (uint32_t i = 0;
         p && r.state->avoid_previous_hosts() && tried(p) && i < r.state->host_selection_attempts();
         ++i) {
      p = cluster_->ChoosePool(router_.random().Next());
    }
    if (!p) {
      LocalReply(503, "no healthy upstream\n", kNoHealthyUpstream, "no_healthy_upstream");
      return nullptr;
    }
    if (route_->auto_host_rewrite && !p->host().hostname.empty()) {
      head.host = p->host().hostname;
      head.headers.Set("host", head.host);
    }
  }
  if (p->cluster().auto_sni) {
    // The SNI is the host the request now names (after rewrites), or a header's value.
    const ClusterInfo& info = p->cluster();
    std::string_view sni = head.host;
    if (!info.override_auto_sni_header.empty()) {
      if (auto v = head.headers.Get(info.override_auto_sni_header); v && !v->empty()) sni = *v;
    }
    if (!sni.empty() && sni.front() == '[') {
      sni = sni.substr(1, sni.find(']') - 1);  // an IPv6 literal, without brackets and port
    } else if (size_t colon = sni.rfind(':'); colon != std::string_view::npos) {
      sni = sni.substr(0, colon);
    }
    ConnPool* sni_pool = cluster_->PoolForSni(p, sni);
    if (!sni_pool) {
      LocalReply(503, "upstream overflow: too many distinct SNI names in use for this host\n",
                 kUpstreamOverflow, "overflow");
      return nullptr;
    }
    p = sni_pool;
  }
  return p;
}

void RouterStream::RewriteRequest(RequestHead& head, const VirtualHostEntry& vh,
                                  const WeightedTarget* wt) {
  HeaderMap& h = head.headers;
  RemoveHopByHopHeaders(h);  // with content-length and expect
  if (upgrade_) {
    h.Add("connection", "upgrade");
    h.Add("upgrade", head.upgrade);
  }
  const HttpConfig& config = router_.config();
  // As Envoy: the client's address is appended only where it is trusted as the remote address
  // (use_remote_address); otherwise rpx sits behind another proxy and leaves its XFF alone.
  if (config.use_remote_address && !config.skip_xff_append) {
    std::string ip = encoder_.remote_ip();
    if (auto xff = h.Get("x-forwarded-for")) {
      std::string joined;
      joined.reserve(xff->size() + 2 + ip.size());
      joined.append(*xff).append(", ").append(ip);
      h.Set("x-forwarded-for", joined);
    } else {
      h.Add("x-forwarded-for", ip);
    }
  }
  const char* proto = encoder_.is_tls() ? "https" : "http";
  if (config.use_remote_address || !h.Get("x-forwarded-proto")) {
    h.Set("x-forwarded-proto", proto);
  }
  ForwardClientCert(config, h);
  if (config.generate_request_id && !h.Get("x-request-id")) {
    char id[Random::kUuidSize];
    router_.random().Uuid(id);
    h.Add("x-request-id", std::string_view(id, sizeof(id)));
  }
  // Envoy's order: the most specific level first.
  FormatContext ctx = Context(nullptr);
  if (wt) wt->request_ops.Apply(h, ctx);
  route_->request_ops.Apply(h, ctx);
  vh.request_ops.Apply(h, ctx);
  routes_->request_ops().Apply(h, ctx);
  // Path and host rewrites.
  if (!route_->prefix_rewrite.empty() && route_->path_kind != RouteEntry::PathKind::kRegex) {
    size_t matched = route_->path_value.size();
    if (route_->path_kind == RouteEntry::PathKind::kPath) {
      size_t q = head.path.find('?');
      matched = q == std::string::npos ? head.path.size() : q;
    }
    head.path =
        absl::StrCat(route_->prefix_rewrite, head.path.substr(std::min(matched, head.path.size())));
  }
  if (!route_->host_rewrite_literal.empty()) {
    head.host = route_->host_rewrite_literal;
    h.Set("x-forwarded-host", head.host);
  } else if (route_->auto_host_rewrite && !pool_->host().hostname.empty()) {
    head.host = pool_->host().hostname;
  }
  auto host = h.Get("host");
  if (!host || *host != head.host) h.Set("host", head.host);
}

void RouterStream::StartRouteTimer() {
  if (route_->timeout_ms == 0 || route_timer_started_) return;
  route_timer_started_ = true;
  route_timer_.Enable(route_->timeout_ms);
}

void RouterStream::OnRouteTimeout() {
  if (done_) return;
  cluster_->stats().upstream_rq_timeout.Inc();
  if (client_) {
    client_->host_stats().rq_timeout.Inc();
    if (!encoder_.response_started()) ReportOutcome(pool_->cluster(), client_->host(), 0);
  }
  TimedOut("upstream_response_timeout");
}

void RouterStream::TimedOut(const char* details) {
  encoder_.stream_info().response_flags |= kUpstreamRequestTimeout;
  if (encoder_.response_started()) {
    done_ = true;
    Cleanup();
    encoder_.ResetStream();
    return;
  }
  LocalReply(504, "upstream request timeout\n", 0, details);
}

void RouterStream::OnRequestData(const char* data, size_t len, bool end_stream) {
  if (done_) return;
  if (tunnel_) {
    if (!client_) return;
    client_->SendData(data, len, end_stream);
    if (end_stream) {
      // The client ended the tunnel; the upstream side closes once what was sent is flushed.
      client_ = nullptr;
      done_ = true;
      Cleanup();
    }
    return;
  }
  if (end_stream) {
    request_complete_ = true;
    StartRouteTimer();
  }
  if (client_) {
    SendBody(data, len, end_stream);
    if (end_stream) StartPerTryTimer();
    return;
  }
  body_.Append(data, len);
  if (body_.size() > router_.config().buffer_limit && !downstream_paused_by_buffer_) {
    downstream_paused_by_buffer_ = true;
    encoder_.ReadDisable(true);
  }
}

void RouterStream::OnRequestTrailers(HeaderMap& trailers) {
  if (done_) return;
  if (!tunnel_) request_trailers_ = &trailers;
  OnRequestData(nullptr, 0, true);
}

void RouterStream::SendToUpstream(UpstreamStream& client, const char* data, size_t len,
                                  bool end_stream) {
  if (end_stream && request_trailers_) {
    if (len) client.SendData(data, len, false);
    client.SendTrailers(*request_trailers_);
  } else {
    client.SendData(data, len, end_stream);
  }
}

void RouterStream::OnPoolReady(UpstreamStream& client) {
  pending_ = nullptr;
  client_ = &client;
  if (router_.config().record_upstream_local_address) {
    SocketAddress a = SocketAddress::LocalOf(client.fd());
    if (a.len) encoder_.stream_info().upstream_local_address = a.ToString();
  }
  if (vhost_->include_request_attempt_count) {
    head_->headers.Set("x-envoy-attempt-count", std::to_string(attempt()));
  }
  client.StartRequest(this, *head_);
  if (retries_ && (retries_->state->attempt() > 1 || replay_held_) && !retries_->held.empty()) {
    // A retry: first what the earlier attempts sent.
    bool end = request_complete_ && body_.empty();
    SendToUpstream(client, retries_->held.data(), retries_->held.size(), end);
  }
  if (!body_.empty() || request_complete_) {
    if (!body_.empty() || (head_->has_body() && (!retries_ || retries_->held.empty()))) {
      SendBody(body_.data(), body_.size(), request_complete_);
    }
    body_.Clear();
  }
  if (downstream_paused_by_buffer_) {
    downstream_paused_by_buffer_ = false;
    encoder_.ReadDisable(false);
  }
  if (retries_) {
    if (request_complete_) StartPerTryTimer();
    if (uint64_t idle = retries_->state->per_try_idle_timeout_ms())
      retries_->idle_timer.Enable(idle);
  }
}

void RouterStream::SendBody(const char* data, size_t len, bool end_stream) {
  SendToUpstream(*client_, data, len, end_stream);
  if (!retries_ || !retries_->body_whole || len == 0) return;
  Retries& r = *retries_;
  uint32_t limit = route_->buffer_limit ? route_->buffer_limit : router_.config().buffer_limit;
  if (r.held.size() + len > limit) {
    // Too large to send again: this request is no longer retried (Envoy's rule).
    r.body_whole = false;
    r.held.Clear();
    return;
  }
  r.held.Append(data, len);
}

void RouterStream::StartPerTryTimer() {
  if (!retries_ || !client_ || retries_->backing_off) return;
  if (uint64_t ms = retries_->state->per_try_timeout_ms()) retries_->timer.Enable(ms);
}

namespace {

// The value of cookie `name` in a Cookie header ("a=1; b=2"), without quotes.
std::optional<std::string_view> CookieValue(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    size_t semi = header.find(';');
    std::string_view pair = header.substr(0, semi);
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    size_t eq = pair.find('=');
    if (eq == std::string_view::npos || pair.substr(0, eq) != name) continue;
    std::string_view v = pair.substr(eq + 1);
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    return v;
  }
  return std::nullopt;
}

// The value of query parameter `name` in a path ("/p?a=1&b=2").
std::optional<std::string_view> QueryValue(std::string_view path, std::string_view name) {
  size_t q = path.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::optional<std::string_view> out;
  ForEachQueryParam(path.substr(q + 1), [&](std::string_view k, std::string_view v) {
    if (k == name) out = v;
    return k == name;
  });
  return out;
}

}  // namespace

bool RouterStream::RequestHash(const RequestHead& head, uint64_t* hash) {
  bool have = false;
  for (const HashPolicyEntry& p : route_->hash_policies) {
    std::optional<uint64_t> h;
    switch (p.kind) {
      case HashPolicyEntry::Kind::kHeader:
        if (p.name == ":authority" || p.name == "host") {
          h = XxHash64(head.host);
        } else if (p.name == ":path") {
          h = XxHash64(head.path);
        } else if (p.name == ":method") {
          h = XxHash64(head.method);
        } else if (auto v = head.headers.Get(p.name)) {
          h = XxHash64(*v);
        }
        break;
      case HashPolicyEntry::Kind::kCookie: {
        std::optional<std::string_view> v;
        if (auto c = head.headers.Get("cookie")) v = CookieValue(*c, p.name);
        if (v) {
          h = XxHash64(*v);
        } else if (p.has_ttl) {
          // Envoy's way: a cookie named after the client's address, set on the response.
          char value[17];
          snprintf(value, sizeof(value), "%016llx",
                   static_cast<unsigned long long>(XxHash64(encoder_.remote_address())));
          h = XxHash64(value);
          set_cookie_ = absl::StrCat(p.name, "=\"", value, "\"");
          if (p.ttl_s) absl::StrAppend(&set_cookie_, "; Max-Age=", p.ttl_s);
          if (!p.path.empty()) absl::StrAppend(&set_cookie_, "; Path=", p.path);
          set_cookie_ += "; HttpOnly";
        }
        break;
      }
      case HashPolicyEntry::Kind::kSourceIp:
        h = XxHash64(encoder_.remote_ip());
        break;
      case HashPolicyEntry::Kind::kQueryParameter:
        if (auto v = QueryValue(head.path, p.name)) h = XxHash64(*v);
        break;
    }
    if (!h) continue;
    // Envoy's combination: the hash so far rotated left by one, xor the new one.
    *hash = have ? (((*hash << 1) | (*hash >> 63)) ^ *h) : *h;
    have = true;
    if (p.terminal) break;
  }
  return have;
}

bool RouterStream::HonourEnvoyHeaders() const {
  if (!router_.config().use_remote_address) return true;
  std::string ip = encoder_.remote_ip();
  // Loopback and private addresses (RFC 1918, RFC 4193), Envoy's classic internal ones.
  if (absl::StartsWith(ip, "127.") || ip == "::1" || absl::StartsWith(ip, "10.") ||
      absl::StartsWith(ip, "192.168.") || absl::StartsWith(ip, "fc") ||
      absl::StartsWith(ip, "fd")) {
    return true;
  }
  if (absl::StartsWith(ip, "172.")) {
    int second = atoi(ip.c_str() + 4);
    return second >= 16 && second <= 31;
  }
  return false;
}

void RouterStream::ReleaseRetrySlot() {
  if (!retries_ || !retries_->slot) return;
  retries_->slot = false;
  retries_->resources->ReleaseRetry();
}

bool RouterStream::MaybeRetry(bool retriable) {
  if (!retries_ || !retriable || done_ || encoder_.response_started()) return false;
  Retries& r = *retries_;
  ClusterStats& cs = cluster_->stats();
  if (!r.body_whole) return false;
  if (!r.state->retries_left()) {
    cs.upstream_rq_retry_limit_exceeded.Inc();
    return false;
  }
  if (!r.resources->TryAcquireRetry()) {
    cs.upstream_rq_retry_overflow.Inc();
    return false;
  }
  r.slot = true;
  cs.upstream_rq_retry.Inc();
  r.tried.push_back(&pool_->host());
  r.idle_timer.Disable();
  r.backing_off = true;
  // No pool is held while waiting (pool_ may be freed by an endpoint update); the cluster is
  // kept until the wait ends.
  pool_ = nullptr;
  encoder_.stream_info().upstream_address = nullptr;
  cluster_->RetryWaitStarted();
  r.timer.Enable(r.state->TakeRetry(router_.random().Next()));
  return true;
}

void RouterStream::OnRetryTimer() {
  if (done_) return;
  Retries& r = *retries_;
  if (!r.backing_off) {
    OnAttemptTimeout();  // per_try_timeout
    return;
  }
  r.backing_off = false;
  cluster_->RetryWaitEnded();
  ConnPool* p = SelectPool(*head_);
  if (!p) return;
  pool_ = p;
  encoder_.stream_info().upstream_address = &pool_->host().address;
  upstream_start_ms_ = router_.dispatcher().NowMs();
  pending_ = pool_->NewStream(*this);
}

void RouterStream::OnPerTryIdleTimeout() { OnAttemptTimeout(); }

void RouterStream::OnAttemptTimeout() {
  if (done_) return;
  Retries& r = *retries_;
  r.timer.Disable();
  r.idle_timer.Disable();
  cluster_->stats().upstream_rq_per_try_timeout.Inc();
  ReleaseRetrySlot();
  if (client_) {
    client_->host_stats().rq_timeout.Inc();
    ReportOutcome(pool_->cluster(), client_->host(), 0);
    UpstreamStream* c = client_;
    client_ = nullptr;
    c->Reset();
  }
  if (MaybeRetry(r.state->RetriableFailure(RetryState::Failure::kPerTryTimeout))) return;
  TimedOut("upstream_per_try_timeout");
}

void RouterStream::OnPoolFailure(PoolFailure reason, const std::string& detail) {
  pending_ = nullptr;
  ReleaseRetrySlot();
  if (reason == PoolFailure::kConnectFailure || reason == PoolFailure::kConnectTimeout) {
    ReportOutcome(pool_->cluster(), pool_->host(), 0);
  }
  if ((reason == PoolFailure::kConnectFailure || reason == PoolFailure::kConnectTimeout) &&
      retries_ &&
      MaybeRetry(retries_->state->RetriableFailure(RetryState::Failure::kConnectFailure))) {
    return;
  }
  switch (reason) {
    case PoolFailure::kOverflow:
      LocalReply(503, detail + "\n", kUpstreamOverflow, "overflow");
      return;
    case PoolFailure::kConnectTimeout:
      encoder_.stream_info().upstream_transport_failure_reason = "connection timeout";
      LocalReply(503, "upstream connect timeout\n", kUpstreamConnectionFailure,
                 "upstream_reset_before_response_started{connection_timeout}");
      return;
    default:
      encoder_.stream_info().upstream_transport_failure_reason = detail;
      LocalReply(503, absl::StrCat("upstream connect error: ", detail, "\n"),
                 kUpstreamConnectionFailure,
                 "upstream_reset_before_response_started{connection_failure}");
  }
}

void RouterStream::OnResponseHeaders(ResponseHead& head, bool end_stream) {
  if (done_) return;
  StreamInfo& info = encoder_.stream_info();
  info.response_code_details = "via_upstream";
  if (router_.config().record_durations) info.upstream_first_byte_ns = MonotonicNowNs();
  ClusterStats& cs = cluster_->stats();
  int s = head.status;
  if (s < 300) {
    cs.upstream_rq_2xx.Inc();
  } else if (s < 400) {
    cs.upstream_rq_3xx.Inc();
  } else if (s < 500) {
    cs.upstream_rq_4xx.Inc();
  } else {
    cs.upstream_rq_5xx.Inc();
  }
  if (client_) {
    HostStats& hs = client_->host_stats();
    (s >= 500 ? hs.rq_error : hs.rq_success).Inc();
    ReportOutcome(pool_->cluster(), client_->host(), s);
  }
  if (retries_) {
    Retries& r = *retries_;
    r.timer.Disable();  // per_try_timeout: this attempt answered
    ReleaseRetrySlot();
    if (s != 101 && MaybeRetry(r.state->RetriableResponse(s, head.headers))) {
      UpstreamStream* c = client_;  // the answer is dropped; the retry replaces it
      client_ = nullptr;
      if (c) c->Reset();
      return;
    }
    if (r.state->attempt() > 1) cs.upstream_rq_retry_success.Inc();
    if (uint64_t idle = r.state->per_try_idle_timeout_ms()) r.idle_timer.Enable(idle);
    if (vhost_->include_attempt_count_in_response) {
      head.headers.Set("x-envoy-attempt-count", std::to_string(r.state->attempt()));
    }
  } else if (vhost_->include_attempt_count_in_response) {
    head.headers.Set("x-envoy-attempt-count", "1");
  }
  std::string upgrade;
  if (s == 101) {
    // Only reached for an upgrade rpx asked for (the upstream client refuses any other 101).
    tunnel_ = true;
    route_timer_.Disable();  // the route timeout covers the handshake only
    if (auto u = head.headers.Get("upgrade")) upgrade = *u;
  }
  RemoveHopByHopHeaders(head.headers);  // with content-length
  if (tunnel_) {
    head.headers.Add("connection", "upgrade");
    head.headers.Add("upgrade", upgrade.empty() ? head_->upgrade : upgrade);
  }
  if (!set_cookie_.empty()) head.headers.Add("set-cookie", set_cookie_);
  FormatContext ctx = Context(&head.headers);
  if (weighted_) weighted_->response_ops.Apply(head.headers, ctx);
  route_->response_ops.Apply(head.headers, ctx);
  vhost_->response_ops.Apply(head.headers, ctx);
  routes_->response_ops().Apply(head.headers, ctx);
  if (end_stream) {
    // A response without a body (HTTP/2 upstreams end some with their HEADERS): the stream is
    // done with, as after the last data.
    RecordUpstreamTime();
    client_ = nullptr;
    done_ = true;
    Cleanup();
  }
  encoder_.EncodeHeaders(head, end_stream);
}

void RouterStream::OnResponseData(const char* data, size_t len, bool end_stream) {
  if (done_) return;
  if (retries_ && !end_stream) {
    if (uint64_t idle = retries_->state->per_try_idle_timeout_ms())
      retries_->idle_timer.Enable(idle);
  }
  if (end_stream) {
    RecordUpstreamTime();
    // The upstream connection goes back to its pool; nothing more to do with it.
    client_ = nullptr;
    done_ = true;
    Cleanup();
  }
  encoder_.EncodeData(data, len, end_stream);
}

void RouterStream::OnResponseTrailers(HeaderMap& trailers) {
  if (done_) return;
  RecordUpstreamTime();
  client_ = nullptr;
  done_ = true;
  Cleanup();
  encoder_.EncodeTrailers(trailers);
}

void RouterStream::OnUpstreamReset(UpstreamResetReason reason, const std::string& detail) {
  if (reason == UpstreamResetReason::kRefusedStream && !done_ && !refused_resent_ && pool_ &&
      !encoder_.response_started() &&
      (!head_->has_body() || (retries_ && retries_->body_whole && !retries_->backing_off))) {
    // The upstream did not process it (REFUSED_STREAM, or above a GOAWAY's last stream id): sent
    // again once, on another connection (the refusing one takes no new stream), as Envoy does.
    refused_resent_ = true;
    replay_held_ = retries_ != nullptr;
    client_ = nullptr;
    upstream_start_ms_ = router_.dispatcher().NowMs();
    pending_ = pool_->NewStream(*this);
    return;
  }
  // The client is still alive here (it is what reports the reset); a reset is the host's error.
  if (client_ && !done_) {
    client_->host_stats().rq_error.Inc();
    if (!encoder_.response_started()) ReportOutcome(pool_->cluster(), client_->host(), 0);
  }
  client_ = nullptr;
  if (done_) return;
  if (retries_) {
    retries_->timer.Disable();
    retries_->idle_timer.Disable();
    ReleaseRetrySlot();
    if (MaybeRetry(retries_->state->RetriableFailure(RetryState::Failure::kReset))) return;
  }
  StreamInfo& info = encoder_.stream_info();
  bool protocol = reason == UpstreamResetReason::kProtocolError;
  info.response_flags |= protocol ? kUpstreamProtocolError : kUpstreamConnectionTermination;
  info.upstream_transport_failure_reason = detail;
  if (encoder_.response_started()) {
    info.response_code_details =
        protocol ? "upstream_reset_after_response_started{protocol_error}"
                 : "upstream_reset_after_response_started{connection_termination}";
    done_ = true;
    Cleanup();
    encoder_.ResetStream();
    return;
  }
  LocalReply(502, detail + "\n", 0,
             protocol ? "upstream_reset_before_response_started{protocol_error}"
                      : "upstream_reset_before_response_started{connection_termination}");
}

void RouterStream::OnUpstreamWriteWatermark(bool above) { encoder_.ReadDisable(above); }

void RouterStream::OnDownstreamWatermark(bool above) {
  if (client_) client_->ReadDisable(above);
}

void RouterStream::OnDownstreamReset() {
  done_ = true;
  Cleanup();
}

void RouterStream::Cleanup() {
  route_timer_.Disable();
  if (retries_) {
    retries_->timer.Disable();
    retries_->idle_timer.Disable();
    ReleaseRetrySlot();
    if (retries_->backing_off) {
      retries_->backing_off = false;
      cluster_->RetryWaitEnded();
    }
  }
  if (pending_) {
    pool_->Cancel(pending_);
    pending_ = nullptr;
  }
  if (client_) {
    UpstreamStream* c = client_;
    client_ = nullptr;
    c->Reset();
  }
  if (request_resource_) {
    request_resource_ = false;
    (retries_ ? *retries_->resources : *pool_->cluster().resources).ReleaseRequest();
  }
}

}  // namespace

std::unique_ptr<StreamHandler> Router::CreateStream(ResponseEncoder& encoder) {
  return std::make_unique<RouterStream>(*this, encoder);
}

namespace {
// The headers a proxy never forwards as they are: hop-by-hop ones (RFC 9110 7.6.1) and the
// message framing, which rpx writes itself. Checked by length first: this runs for every header
// of every request and response.
bool IsHopByHopOrFraming(std::string_view n, std::string_view value) {
  using namespace std::literals;
  switch (n.size()) {
    case 2:
      return n == "te"sv && !EqualsIgnoreCase(value, "trailers");
    case 6:
      return n == "expect"sv;
    case 7:
      return n == "upgrade"sv || n == "trailer"sv;
    case 10:
      return n == "connection"sv || n == "keep-alive"sv;
    case 14:
      return n == "content-length"sv;
    case 16:
      return n == "proxy-connection"sv;
    case 17:
      return n == "transfer-encoding"sv;
    default:
      return false;
  }
}
}  // namespace

namespace {

// Percent-encodes all but RFC 3986's unreserved characters (Envoy's Cert= and Chain= values).
std::string UrlEncode(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3 / 2);
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

}  // namespace

void RouterStream::ForwardClientCert(const HttpConfig& config, HeaderMap& h) {
  using FCC = HttpConfig::ForwardClientCert;
  if (config.forward_client_cert == FCC::kAlwaysForwardOnly) return;
  PeerCertificateInfo cert;
  // Only a client that proved its identity (mTLS) may have its header kept or get one.
  if (config.forward_client_cert == FCC::kSanitize || !encoder_.PeerCertificate(&cert)) {
    h.Remove("x-forwarded-client-cert");
    return;
  }
  if (config.forward_client_cert == FCC::kForwardOnly) return;
  // One element, in Envoy's order: By, Hash, Cert, Chain, Subject, URI, DNS.
  std::string e;
  if (!cert.local_uri.empty()) absl::StrAppend(&e, "By=", cert.local_uri, ";");
  absl::StrAppend(&e, "Hash=", cert.hash);
  const auto& d = config.client_cert_details;
  if (d.cert) absl::StrAppend(&e, ";Cert=\"", UrlEncode(cert.cert_pem), "\"");
  if (d.chain) absl::StrAppend(&e, ";Chain=\"", UrlEncode(cert.chain_pem), "\"");
  if (d.subject) absl::StrAppend(&e, ";Subject=\"", cert.subject, "\"");
  if (d.uri) {
    for (const auto& u : cert.uris) absl::StrAppend(&e, ";URI=", u);
  }
  if (d.dns) {
    for (const auto& n : cert.dns) absl::StrAppend(&e, ";DNS=", n);
  }
  auto existing = h.Get("x-forwarded-client-cert");
  if (config.forward_client_cert == FCC::kAppendForward && existing && !existing->empty()) {
    std::string joined(existing->data(), existing->size());
    h.Set("x-forwarded-client-cert", joined.append(",").append(e));
  } else {
    h.Set("x-forwarded-client-cert", e);
  }
}

void RemoveHopByHopHeaders(HeaderMap& headers) {
  // One pass drops the fixed names. Names listed in Connection are hop-by-hop too, but Connection
  // usually lists only close or keep-alive: a second pass runs only when it names something else.
  // (The views stay valid: RemoveIf moves fields, not the bytes they point at.)
  std::vector<std::string_view> connection_values;
  headers.RemoveIf([&](const HeaderMap::Field& f) {
    if (!IsHopByHopOrFraming(f.name, f.value)) return false;
    if (f.name.size() == 10 && f.name == std::string_view("connection") &&
        !EqualsIgnoreCase(f.value, "keep-alive") && !EqualsIgnoreCase(f.value, "close")) {
      connection_values.push_back(f.value);
    }
    return true;
  });
  if (connection_values.empty()) return;
  std::vector<std::string> listed;
  for (std::string_view value : connection_values) {
    ForEachListToken(value, [&](std::string_view token) {
      if (!EqualsIgnoreCase(token, "close") && !EqualsIgnoreCase(token, "keep-alive")) {
        std::string t(token);
        ToLowerAscii(&t);
        listed.push_back(std::move(t));
      }
      return true;
    });
  }
  if (listed.empty()) return;
  headers.RemoveIf([&](const HeaderMap::Field& f) {
    if (f.name == std::string_view("te")) return false;  // "Connection: te" keeps "TE: trailers"
    for (const auto& l : listed) {
      if (f.name == l) return true;
    }
    return false;
  });
}

}  // namespace rpx
