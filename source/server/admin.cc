#include "source/server/admin.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "source/common/logger.h"

namespace rpx {
namespace {

class AdminStream : public StreamHandler {
 public:
  AdminStream(Admin& admin, ResponseEncoder& encoder) : admin_(admin), encoder_(encoder) {}
  void OnRequestHeaders(RequestHead& head, bool end_stream) override {
    head_ = &head;
    if (end_stream) Respond();
  }
  void OnRequestData(const char*, size_t, bool end_stream) override {
    if (end_stream) Respond();
  }
  void OnDownstreamReset() override {}
  void OnDownstreamWatermark(bool) override {}

 private:
  void Respond() {
    int status = 200;
    std::string content_type = "text/plain";
    std::string body = admin_.Handle(*head_, &status, &content_type);
    encoder_.SendLocalReply(status, body, nullptr, content_type);
  }
  Admin& admin_;
  ResponseEncoder& encoder_;
  RequestHead* head_ = nullptr;
};

}  // namespace

Admin::Admin(Dispatcher& dispatcher, const ServerConfig& config, uint32_t concurrency,
             std::function<void()> quit)
    : dispatcher_(dispatcher), config_(config), concurrency_(concurrency), quit_(std::move(quit)) {
  http_config_ = std::make_shared<HttpConfig>();
  http_config_->stat_prefix = "admin";
  http_config_->stats_slots = 1;
  http_config_->stats.reset(new HttpStats[1]);
}

Admin::~Admin() {
  connections_.clear();
  listener_.reset();
}

class Admin::AdminConnection final : public ServerConnection {
 public:
  AdminConnection(Admin& admin, std::unique_ptr<Connection> conn, const SocketAddress& peer)
      : ServerConnection(std::move(conn), admin.http_config_, admin.http_config_->stats[0], admin,
                         peer),
        admin_(admin) {}

 private:
  void OnClosed() override { admin_.OnConnectionClosed(this); }
  Admin& admin_;
};

void Admin::Start(int fd) {
  listener_ =
      std::make_unique<Listener>(dispatcher_, fd, [this](int cfd, const SocketAddress& peer) {
        auto conn = std::make_unique<Connection>(dispatcher_, cfd, false, 1024 * 1024,
                                                 /*nodelay_set=*/true);
        auto sc = std::make_unique<AdminConnection>(*this, std::move(conn), peer);
        ServerConnection* raw = sc.get();
        connections_.emplace(raw, std::move(sc));
      });
}

void Admin::OnConnectionClosed(ServerConnection* c) {
  auto it = connections_.find(c);
  if (it == connections_.end()) return;
  dispatcher_.DeferredDelete(std::move(it->second));
  connections_.erase(it);
}

std::unique_ptr<StreamHandler> Admin::CreateStream(ResponseEncoder& encoder) {
  return std::make_unique<AdminStream>(*this, encoder);
}

std::string Admin::Handle(const RequestHead& head, int* status, std::string* content_type) {
  std::string path = head.path.substr(0, head.path.find('?'));
  if (path == "/ready") {
    *status = Ready() ? 200 : 503;
    // As Envoy: a failed health check reads DRAINING too (Envoy's server state).
    if (draining_ || health_failed_) return "DRAINING\n";
    return Ready() ? "LIVE\n" : (ready_ ? "INITIALIZING\n" : "PRE_INITIALIZING\n");
  }
  if (path == "/config_dump") {
    *content_type = "application/json";
    return config_dump_ ? config_dump_() : "{}\n";
  }
  if (path == "/stats") return StatsText();
  if (path == "/server_info") {
    *content_type = "application/json";
    return absl::StrCat(
        "{\"version\":\"rpx/0.1\",\"state\":\"",
        draining_ || health_failed_ ? "DRAINING" : (Ready() ? "LIVE" : "INITIALIZING"),
        "\",\"node\":{\"id\":\"", config_.node_id, "\",\"cluster\":\"", config_.node_cluster,
        "\"},\"concurrency\":", concurrency_, "}\n");
  }
  bool mutating = path == "/quitquitquit" || path == "/drain_listeners" ||
                  path == "/healthcheck/fail" || path == "/healthcheck/ok" ||
                  path == "/reopen_logs";
  if (mutating && head.method != "POST") {
    *status = 405;
    return "use POST\n";
  }
  if (path == "/quitquitquit") {
    dispatcher_.Post(quit_);
    return "OK\n";
  }
  if (path == "/drain_listeners") {
    bool graceful = head.path.find("graceful") != std::string::npos;
    draining_ = true;
    if (drain_listeners_) drain_listeners_(graceful);
    return "OK\n";
  }
  if (path == "/healthcheck/fail" || path == "/healthcheck/ok") {
    health_failed_ = path == "/healthcheck/fail";
    return "OK\n";
  }
  if (path == "/reopen_logs") {
    if (reopen_logs_) reopen_logs_();
    return "OK\n";
  }
  if (path == "/") {
    return "rpx admin\n  /ready\n  /stats\n  /server_info\n  /config_dump\n  /quitquitquit "
           "(POST)\n  /drain_listeners[?graceful] (POST)\n  /healthcheck/fail, /healthcheck/ok "
           "(POST)\n  /reopen_logs (POST)\n";
  }
  *status = 404;
  return absl::StrCat("unknown admin path: ", path, "\n");
}

std::string Admin::StatsText() const {
  std::map<std::string, int64_t> out;
  for (const auto& [name, entry] : config_.clusters) {
    const ClusterInfo& c = *entry.info;
    const ClusterStats* s = c.stats.get();
    uint32_t n = c.stats_slots;
    std::string p = absl::StrCat("cluster.", name, ".");
#define RPX_CLUSTER_STAT(field)                                   \
  {                                                               \
    int64_t total = 0;                                            \
    for (uint32_t i = 0; i < n; ++i) total += s[i].field.Value(); \
    out[p + #field] = total;                                      \
  }
    RPX_CLUSTER_STAT(upstream_cx_total)
    RPX_CLUSTER_STAT(upstream_cx_active)
    RPX_CLUSTER_STAT(upstream_cx_connect_fail)
    RPX_CLUSTER_STAT(upstream_cx_connect_timeout)
    RPX_CLUSTER_STAT(upstream_cx_idle_timeout)
    RPX_CLUSTER_STAT(upstream_cx_max_requests)
    RPX_CLUSTER_STAT(upstream_cx_destroy_remote)
    RPX_CLUSTER_STAT(upstream_cx_overflow)
    RPX_CLUSTER_STAT(upstream_rq_total)
    RPX_CLUSTER_STAT(upstream_rq_active)
    RPX_CLUSTER_STAT(upstream_rq_pending_total)
    RPX_CLUSTER_STAT(upstream_rq_pending_active)
    RPX_CLUSTER_STAT(upstream_rq_pending_overflow)
    RPX_CLUSTER_STAT(upstream_rq_timeout)
    RPX_CLUSTER_STAT(upstream_rq_reset)
    RPX_CLUSTER_STAT(upstream_cx_kept_after_reset)
    RPX_CLUSTER_STAT(upstream_rq_body_spliced)
    RPX_CLUSTER_STAT(upstream_rq_2xx)
    RPX_CLUSTER_STAT(upstream_rq_3xx)
    RPX_CLUSTER_STAT(upstream_rq_4xx)
    RPX_CLUSTER_STAT(upstream_rq_5xx)
    if (c.transport.tls_required || !c.transport_matches.empty()) {
      auto sum = [&](Counter ClusterStats::*field) {
        int64_t total = 0;
        for (uint32_t i = 0; i < n; ++i) total += (s[i].*field).Value();
        return total;
      };
      out[p + "ssl.handshake"] = sum(&ClusterStats::ssl_handshake);
      out[p + "ssl.session_reused"] = sum(&ClusterStats::ssl_session_reused);
      out[p + "ssl.connection_error"] = sum(&ClusterStats::ssl_connection_error);
      out[p + "ssl.fail_verify"] = sum(&ClusterStats::ssl_fail_verify);
    }
#undef RPX_CLUSTER_STAT
    out[p + "membership_total"] = entry.hosts ? entry.hosts->size() : 0;
    out[p + "circuit_breakers.default.cx_open_count"] = c.resources->connections();
    out[p + "circuit_breakers.default.rq_pending_open_count"] = c.resources->pending();
  }
  for (const auto& l : config_.listeners) {
    for (const auto& chain : l->chains) {
      if (!chain->connection_limit) continue;
      const ConnectionLimit& cl = *chain->connection_limit;
      std::string p = absl::StrCat("connection_limit.", cl.stat_prefix, ".");
      out[p + "active_connections"] = cl.state->active.load(std::memory_order_relaxed);
      out[p + "limited_connections"] = cl.state->limited.load(std::memory_order_relaxed);
    }
  }
  // Listener counters (Envoy's listener.<stat_prefix>.*), summed over workers and over
  // listeners that share a stat_prefix.
  for (const auto& l : config_.listeners) {
    std::string p = absl::StrCat("listener.", l->stat_prefix, ".");
    auto add = [&](const std::string& name, uint64_t v) { out[p + name] += v; };
    for (uint32_t i = 0; i < l->stats->slots; ++i) {
      const ListenerStats& st = l->stats->stats[i];
      add("downstream_cx_total", st.downstream_cx_total.Value());
      add("no_filter_chain_match", st.no_filter_chain_match.Value());
      add("downstream_pre_cx_timeout", st.downstream_pre_cx_timeout.Value());
      add("downstream_cx_transport_socket_connect_timeout", st.ssl_handshake_timeout.Value());
      add("ssl.handshake", st.ssl_handshake.Value());
      add("ssl.connection_error", st.ssl_connection_error.Value());
      add("ssl.session_reused", st.ssl_session_reused.Value());
      add("ssl.no_certificate", st.ssl_no_certificate.Value());
    }
  }
  // HTTP connection manager counters (http.<stat_prefix>.*): every chain's, summed over chains
  // and listeners that share a stat_prefix.
  std::vector<const HttpConfig*> https;
  for (const auto& l : config_.listeners) {
    for (const auto& chain : l->chains) https.push_back(chain->http.get());
  }
  for (const HttpConfig* h : https) {
    std::string p = absl::StrCat("http.", h->stat_prefix, ".");
    if (out.count(p + "downstream_cx_total")) continue;  // counted with an earlier one
#define RPX_HTTP_STAT(field)                           \
  {                                                    \
    int64_t total = 0;                                 \
    for (const HttpConfig* h2 : https) {               \
      if (h2->stat_prefix != h->stat_prefix) continue; \
      for (uint32_t i = 0; i < h2->stats_slots; ++i) { \
        total += h2->stats[i].field.Value();           \
      }                                                \
    }                                                  \
    out[p + #field] = total;                           \
  }
    RPX_HTTP_STAT(downstream_cx_total)
    RPX_HTTP_STAT(downstream_cx_active)
    RPX_HTTP_STAT(downstream_cx_protocol_error)
    RPX_HTTP_STAT(downstream_cx_idle_timeout)
    RPX_HTTP_STAT(downstream_cx_headers_timeout)
    RPX_HTTP_STAT(downstream_rq_total)
    RPX_HTTP_STAT(downstream_rq_active)
    RPX_HTTP_STAT(downstream_rq_1xx)
    RPX_HTTP_STAT(downstream_rq_2xx)
    RPX_HTTP_STAT(downstream_rq_3xx)
    RPX_HTTP_STAT(downstream_rq_4xx)
    RPX_HTTP_STAT(downstream_rq_5xx)
    RPX_HTTP_STAT(downstream_rq_idle_timeout)
    RPX_HTTP_STAT(downstream_rq_timeout)
    RPX_HTTP_STAT(downstream_rq_rx_reset)
    RPX_HTTP_STAT(no_route)
    RPX_HTTP_STAT(no_cluster)
    RPX_HTTP_STAT(rq_direct_response)
    RPX_HTTP_STAT(rq_redirect)
    RPX_HTTP_STAT(downstream_cx_upgrades_total)
    RPX_HTTP_STAT(downstream_cx_upgrades_active)
    RPX_HTTP_STAT(downstream_rq_ws_on_non_ws_route)
#undef RPX_HTTP_STAT
  }
  out["server.concurrency"] = concurrency_;
  out["server.live"] = Ready() ? 1 : 0;
  if (extra_stats_) extra_stats_(&out);
  std::string text;
  for (const auto& [k, v] : out) absl::StrAppend(&text, k, ": ", v, "\n");
  return text;
}

}  // namespace rpx
