#include "source/server/admin.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "source/common/logger.h"
#include "source/server/admin_stats.h"
#include "source/server/config_dump.h"

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
    : dispatcher_(dispatcher),
      config_(config),
      concurrency_(concurrency),
      quit_(std::move(quit)),
      started_ms_(dispatcher.NowMs()) {
  http_config_ = std::make_shared<HttpConfig>();
  http_config_->stat_prefix = "admin";
  http_config_->stats_slots = 1;
  http_config_->stats.reset(new HttpStats[1]);
  if (config.admin_logging) {
    // admin.access_log: written from the main thread, in its own slot of each file.
    const HttpConfig& l = *config.admin_logging;
    http_config_->access_logs = l.access_logs;
    http_config_->record_start_time = l.record_start_time;
    http_config_->record_durations = l.record_durations;
    http_config_->record_response_headers = l.record_response_headers;
    http_config_->record_upstream_local_address = l.record_upstream_local_address;
  }
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
    auto query =
        ParseQuery(head.path.size() > path.size() ? head.path.substr(path.size() + 1) : "");
    ConfigDumpQuery q;
    q.resource = query.count("resource") ? query["resource"] : "";
    q.mask = query.count("mask") ? query["mask"] : "";
    std::string body;
    *status =
        RenderConfigDump(config_dumps_ ? config_dumps_(query.count("include_eds") > 0)
                                       : std::vector<std::unique_ptr<google::protobuf::Message>>{},
                         q, &body);
    return body;
  }
  if (path == "/config_summary") {
    *content_type = "application/json";
    return config_summary_ ? config_summary_() : "{}\n";
  }
  if (path == "/stats" || path == "/stats/prometheus") {
    auto query =
        ParseQuery(head.path.size() > path.size() ? head.path.substr(path.size() + 1) : "");
    StatsQuery q;
    q.used_only = query.count("usedonly") > 0;
    if (auto f = query.find("filter"); f != query.end() && !f->second.empty()) {
      RE2::Options opts;
      opts.set_log_errors(false);
      q.filter = std::make_unique<RE2>(f->second, opts);
      if (!q.filter->ok()) {
        *status = 400;
        return absl::StrCat("invalid filter regex '", f->second, "': ", q.filter->error(), "\n");
      }
    }
    std::string format = path == "/stats/prometheus" ? "prometheus" : "text";
    if (auto f = query.find("format"); f != query.end()) format = f->second;
    if (format == "json") {
      *content_type = "application/json";
      return RenderStatsJson(CollectStats(q.used_only), q);
    }
    if (format == "prometheus") {
      *content_type = "text/plain; version=0.0.4";
      return RenderPrometheus(CollectStats(q.used_only), q);
    }
    if (format != "text") {
      *status = 400;
      return absl::StrCat("unknown format '", format, "' (text, json or prometheus)\n");
    }
    return RenderStatsText(CollectStats(q.used_only), q);
  }
  if (path == "/runtime") {
    *content_type = "application/json";
    return RuntimeJson();
  }
  if (path == "/runtime_modify") {
    if (head.method != "POST") {
      *status = 405;
      return "use POST to modify the runtime\n";
    }
    auto query =
        ParseQuery(head.path.size() > path.size() ? head.path.substr(path.size() + 1) : "");
    std::string error = runtime_modify_ ? runtime_modify_(query) : "runtime is not modifiable";
    if (!error.empty()) {
      *status = 400;
      return error + "\n";
    }
    return "OK\n";
  }
  if (path == "/listeners")
    return Listeners(head.path.find("format=json") != std::string::npos, content_type);
  if (path == "/clusters")
    return Clusters(head.path.find("format=json") != std::string::npos, content_type);
  if (path == "/server_info") {
    *content_type = "application/json";
    // Envoy's ServerInfo fields that mean something here (uptime as a proto Duration string).
    uint64_t uptime_s = (dispatcher_.NowMs() - started_ms_) / 1000;
    uint64_t uptime_all_s = uptime_s;
    if (restart_.first_start_unix_ms > 0) {
      int64_t now = static_cast<int64_t>(time(nullptr)) * 1000;
      uptime_all_s = std::max<int64_t>(uptime_s, (now - restart_.first_start_unix_ms) / 1000);
    }
    return absl::StrCat(
        "{\"version\":\"rpx/0.1\",\"state\":\"",
        draining_ || health_failed_ ? "DRAINING" : (Ready() ? "LIVE" : "INITIALIZING"),
        "\",\"hot_restart_version\":\"", restart_.enabled ? "rpx.1" : "disabled",
        "\",\"node\":{\"id\":", JsonQuote(config_.node_id),
        ",\"cluster\":", JsonQuote(config_.node_cluster), "},\"uptime_current_epoch\":\"", uptime_s,
        "s\",\"uptime_all_epochs\":\"", uptime_all_s,
        "s\",\"command_line_options\":{\"concurrency\":", concurrency_, ",\"log_level\":\"",
        LogLevelName(GetLogLevel()), "\",\"restart_epoch\":", restart_.epoch, ",\"base_id\":\"",
        restart_.base_id, "\",\"disable_hot_restart\":", restart_.enabled ? "false" : "true",
        "},\"concurrency\":", concurrency_, "}\n");
  }
  if (path == "/memory") {
    *content_type = "application/json";
    return MemoryJson();
  }
  if (path == "/logging") {
    // GET lists; POST ?level=<name> (or ?rpx=<name>) sets. rpx has one logger, named "rpx".
    auto query =
        ParseQuery(head.path.size() > path.size() ? head.path.substr(path.size() + 1) : "");
    if (!query.empty()) {
      if (head.method != "POST") {
        *status = 405;
        return "use POST to change the level\n";
      }
      for (const auto& [k, v] : query) {
        if (k != "level" && k != "rpx") {
          *status = 404;
          return absl::StrCat("unknown logger '", k,
                              "': rpx has one logger, 'rpx' (or use ?level=<level>)\n");
        }
        LogLevel level;
        if (!ParseLogLevel(v, &level)) {
          *status = 400;
          return absl::StrCat("unknown level '", v,
                              "' (trace, debug, info, warning, error, critical, off)\n");
        }
        SetLogLevel(level);
      }
    }
    return absl::StrCat("active loggers:\n  rpx: ", LogLevelName(GetLogLevel()), "\n");
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
    auto query =
        ParseQuery(head.path.size() > path.size() ? head.path.substr(path.size() + 1) : "");
    for (const auto& [k, v] : query) {
      if (k != "graceful" && k != "inboundonly") {
        *status = 400;
        return absl::StrCat("unknown parameter '", k, "' (graceful, inboundonly)\n");
      }
    }
    draining_ = true;
    if (drain_listeners_)
      drain_listeners_(query.count("graceful") > 0, query.count("inboundonly") > 0);
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
    return "rpx admin\n  /ready\n  /stats\n  /server_info\n  /config_dump\n  /config_summary\n  "
           "/quitquitquit "
           "(POST)\n  /drain_listeners[?graceful][&inboundonly] (POST)\n  "
           "/runtime_modify?key=value (POST)\n  /healthcheck/fail, /healthcheck/ok "
           "(POST)\n  /reopen_logs (POST)\n  /stats/prometheus\n  /listeners[?format=json]\n"
           "  /clusters[?format=json]\n  /runtime\n  /memory\n"
           "  /logging (GET lists, POST ?level=<level> sets)\n";
  }
  *status = 404;
  return absl::StrCat("unknown admin path: ", path, "\n");
}

namespace {
std::string SocketAddressJson(const SocketAddress& a) {
  return absl::StrCat("{\"socket_address\":{\"address\":", JsonQuote(a.Ip()),
                      ",\"port_value\":", a.port(), "}}");
}
}  // namespace

std::string Admin::Listeners(bool json, std::string* content_type) const {
  std::string out;
  if (!json) {
    for (const auto& l : config_.listeners) {
      absl::StrAppend(&out, l->name, "::", l->address.ToString(), "\n");
    }
    return out;
  }
  *content_type = "application/json";
  out = "{\"listener_statuses\":[";
  bool first = true;
  for (const auto& l : config_.listeners) {
    absl::StrAppend(&out, first ? "" : ",", "{\"name\":", JsonQuote(l->name),
                    ",\"local_address\":", SocketAddressJson(l->address), "}");
    first = false;
  }
  return out + "]}\n";
}

namespace {

// Envoy's health flags for /clusters: "healthy", or the failures joined ("/failed_active_hc").
std::string HealthFlags(const Host& h, const ClusterInfo& c) {
  std::string flags;
  if (h.eds_unhealthy) flags += "/failed_eds_health";
  if (c.health && h.failed_active_hc.load(std::memory_order_relaxed)) flags += "/failed_active_hc";
  if (c.health && h.ejected.load(std::memory_order_relaxed)) flags += "/failed_outlier_check";
  return flags.empty() ? "healthy" : flags;
}

// The same in /clusters?format=json's HostHealthStatus (the fields before eds_health_status).
std::string HealthStatusJson(const Host& h, const ClusterInfo& c) {
  std::string out;
  if (c.health && h.failed_active_hc.load(std::memory_order_relaxed)) {
    out += "\"failed_active_health_check\":true,";
  }
  if (c.health && h.ejected.load(std::memory_order_relaxed)) {
    out += "\"failed_outlier_check\":true,";
  }
  return out;
}

}  // namespace

std::string Admin::Clusters(bool json, std::string* content_type) const {
  // Envoy's shape, with what rpx knows: circuit breaker limits, and per host its counters
  // (summed over the workers), address, hostname, weight, priority, locality and health.
  struct Sum {
    uint64_t cx_total = 0, cx_connect_fail = 0, rq_total = 0, rq_success = 0, rq_error = 0,
             rq_timeout = 0;
    int64_t cx_active = 0, rq_active = 0;
  };
  auto sum = [](const Host& h) {
    Sum s;
    for (uint32_t w = 0; w < h.stats_slots; ++w) {
      const HostStats& st = h.stats[w];
      s.cx_total += st.cx_total.Value();
      s.cx_connect_fail += st.cx_connect_fail.Value();
      s.rq_total += st.rq_total.Value();
      s.rq_success += st.rq_success.Value();
      s.rq_error += st.rq_error.Value();
      s.rq_timeout += st.rq_timeout.Value();
      s.cx_active += st.cx_active.Value();
      s.rq_active += st.rq_active.Value();
    }
    // Counted on different workers, a gauge's blocks may briefly not add up.
    s.cx_active = std::max<int64_t>(s.cx_active, 0);
    s.rq_active = std::max<int64_t>(s.rq_active, 0);
    return s;
  };
  std::vector<std::string> names;
  for (const auto& [name, entry] : config_.clusters) names.push_back(name);
  std::sort(names.begin(), names.end());
  std::string out;
  if (json) {
    *content_type = "application/json";
    out = "{\"cluster_statuses\":[";
  }
  bool first_cluster = true;
  for (const auto& name : names) {
    const ClusterEntry& entry = config_.clusters.at(name);
    const ClusterResources& r = *entry.info->resources;
    if (!json) {
      std::string p = name + "::";
      absl::StrAppend(&out, p, "observability_name::", name, "\n");
      absl::StrAppend(&out, p, "default_priority::max_connections::", r.max_connections(), "\n");
      absl::StrAppend(&out, p, "default_priority::max_pending_requests::", r.max_pending(), "\n");
      absl::StrAppend(&out, p, "default_priority::max_requests::", r.max_requests(), "\n");
      if (entry.hosts) {
        for (const auto& h : *entry.hosts) {
          std::string hp = absl::StrCat(p, h->address.ToString(), "::");
          Sum st = sum(*h);
          absl::StrAppend(&out, hp, "cx_active::", st.cx_active, "\n", hp,
                          "cx_connect_fail::", st.cx_connect_fail, "\n", hp,
                          "cx_total::", st.cx_total, "\n", hp, "rq_active::", st.rq_active, "\n",
                          hp, "rq_error::", st.rq_error, "\n");
          absl::StrAppend(&out, hp, "rq_success::", st.rq_success, "\n", hp,
                          "rq_timeout::", st.rq_timeout, "\n", hp, "rq_total::", st.rq_total, "\n");
          absl::StrAppend(&out, hp, "hostname::", h->hostname, "\n");
          absl::StrAppend(&out, hp, "health_flags::", HealthFlags(*h, *entry.info), "\n");
          absl::StrAppend(&out, hp, "weight::", h->weight, "\n");
          absl::StrAppend(&out, hp, "priority::", h->priority, "\n");
          std::vector<std::string> locality = absl::StrSplit(h->locality, '/');
          if (locality.size() == 3) {
            absl::StrAppend(&out, hp, "region::", locality[0], "\n", hp, "zone::", locality[1],
                            "\n", hp, "sub_zone::", locality[2], "\n");
          }
        }
      }
      continue;
    }
    absl::StrAppend(&out, first_cluster ? "" : ",", "{\"name\":", JsonQuote(name),
                    ",\"observability_name\":", JsonQuote(name),
                    ",\"circuit_breakers\":{\"thresholds\":[{\"priority\":\"DEFAULT\","
                    "\"max_connections\":",
                    r.max_connections(), ",\"max_pending_requests\":", r.max_pending(),
                    ",\"max_requests\":", r.max_requests(), "}]},\"host_statuses\":[");
    first_cluster = false;
    bool first_host = true;
    if (entry.hosts) {
      for (const auto& h : *entry.hosts) {
        Sum st = sum(*h);
        // Envoy's SimpleMetric: uint64 values as JSON strings; COUNTER is the default type.
        auto counter = [](const char* name, uint64_t v) {
          return absl::StrCat("{\"name\":\"", name, "\",\"value\":\"", v, "\"}");
        };
        auto gauge = [](const char* name, int64_t v) {
          return absl::StrCat("{\"type\":\"GAUGE\",\"name\":\"", name, "\",\"value\":\"", v, "\"}");
        };
        std::string stats = absl::StrCat(
            "[", counter("cx_connect_fail", st.cx_connect_fail), ",",
            counter("cx_total", st.cx_total), ",", counter("rq_error", st.rq_error), ",",
            counter("rq_success", st.rq_success), ",", counter("rq_timeout", st.rq_timeout), ",",
            counter("rq_total", st.rq_total), ",", gauge("cx_active", st.cx_active), ",",
            gauge("rq_active", st.rq_active), "]");
        absl::StrAppend(&out, first_host ? "" : ",", "{\"address\":", SocketAddressJson(h->address),
                        ",\"stats\":", stats, ",\"hostname\":", JsonQuote(h->hostname),
                        ",\"health_status\":{", HealthStatusJson(*h, *entry.info),
                        "\"eds_health_status\":\"", h->eds_unhealthy ? "UNHEALTHY" : "HEALTHY",
                        "\"},\"weight\":", h->weight, ",\"priority\":", h->priority, "}");
        first_host = false;
      }
    }
    out += "]}";
  }
  if (json) out += "]}\n";
  return out;
}

std::string Admin::RuntimeJson() const {
  // Envoy's shape, plus the keys rpx does not read ("unused_keys").
  const RuntimeConfig& r = config_.runtime;
  std::string out = "{\"layers\":[";
  for (size_t i = 0; i < r.layers.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", JsonQuote(r.layers[i]));
  }
  out += "],\"entries\":{";
  bool first = true;
  for (const auto& [key, value] : r.values) {
    absl::StrAppend(&out, first ? "" : ",", JsonQuote(key), ":{\"final_value\":", JsonQuote(value),
                    ",\"layer_values\":[");
    for (size_t i = 0; i < r.layer_values.size(); ++i) {
      auto it = r.layer_values[i].find(key);
      absl::StrAppend(&out, i ? "," : "",
                      JsonQuote(it == r.layer_values[i].end() ? "" : it->second));
    }
    out += "]}";
    first = false;
  }
  out += "},\"unused_keys\":[";
  for (size_t i = 0; i < r.unused_keys.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", JsonQuote(r.unused_keys[i]));
  }
  return out + "]}\n";
}

std::string Admin::MemoryJson() const {
  // Envoy's Memory message (tcmalloc's fields) filled from glibc's malloc: values as strings,
  // as the proto JSON of uint64 fields has them.
  struct mallinfo2 m = mallinfo2();
  uint64_t rss_pages = 0;
  if (FILE* f = fopen("/proc/self/statm", "r")) {
    unsigned long long size = 0, resident = 0;
    if (fscanf(f, "%llu %llu", &size, &resident) == 2) rss_pages = resident;
    fclose(f);
  }
  uint64_t rss = rss_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return absl::StrCat("{\"allocated\":\"", m.uordblks + m.hblkhd, "\",\"heap_size\":\"",
                      m.arena + m.hblkhd, "\",\"pageheap_unmapped\":\"0\",\"pageheap_free\":\"",
                      m.fordblks, "\",\"total_thread_cache\":\"0\",\"total_physical_bytes\":\"",
                      rss, "\"}\n");
}

std::string Admin::StatsText() const { return RenderStatsText(CollectStats(), StatsQuery()); }

std::vector<StatEntry> Admin::CollectStats(bool used_only) const {
  std::map<std::string, int64_t> out;
  std::map<std::string, HistogramTotals> hists;
  // The scopes stats are under, for the Prometheus tags: (kind, name).
  std::vector<std::pair<std::string, std::string>> scopes;
  for (const auto& [name, entry] : config_.clusters) {
    const ClusterInfo& c = *entry.info;
    const ClusterStats* s = c.stats.get();
    uint32_t n = c.stats_slots;
    std::string p = absl::StrCat("cluster.", name, ".");
    scopes.emplace_back("cluster", name);
    // With ?usedonly, zeros are left out here already: 10,000 clusters' unused stats would
    // otherwise be built as strings only to be dropped when rendered.
#define RPX_CLUSTER_STAT(field)                                   \
  {                                                               \
    int64_t total = 0;                                            \
    for (uint32_t i = 0; i < n; ++i) total += s[i].field.Value(); \
    if (total || !used_only) out[p + #field] = total;             \
  }
    RPX_CLUSTER_STAT(upstream_cx_total)
    RPX_CLUSTER_STAT(upstream_cx_active)
    RPX_CLUSTER_STAT(upstream_cx_connect_fail)
    RPX_CLUSTER_STAT(upstream_cx_connect_timeout)
    RPX_CLUSTER_STAT(upstream_cx_idle_timeout)
    RPX_CLUSTER_STAT(upstream_cx_max_requests)
    RPX_CLUSTER_STAT(upstream_cx_destroy_remote)
    RPX_CLUSTER_STAT(upstream_cx_http1_total)
    RPX_CLUSTER_STAT(upstream_cx_http2_total)
    RPX_CLUSTER_STAT(upstream_cx_close_notify)
    RPX_CLUSTER_STAT(upstream_cx_protocol_error)
    RPX_CLUSTER_STAT(upstream_cx_overflow)
    RPX_CLUSTER_STAT(upstream_rq_total)
    RPX_CLUSTER_STAT(upstream_rq_active)
    RPX_CLUSTER_STAT(upstream_rq_pending_total)
    RPX_CLUSTER_STAT(upstream_rq_pending_active)
    RPX_CLUSTER_STAT(upstream_rq_pending_overflow)
    RPX_CLUSTER_STAT(upstream_rq_retry)
    RPX_CLUSTER_STAT(upstream_rq_retry_success)
    RPX_CLUSTER_STAT(upstream_rq_retry_overflow)
    RPX_CLUSTER_STAT(upstream_rq_retry_limit_exceeded)
    RPX_CLUSTER_STAT(upstream_rq_per_try_timeout)
    RPX_CLUSTER_STAT(upstream_rq_timeout)
    RPX_CLUSTER_STAT(upstream_rq_reset)
    RPX_CLUSTER_STAT(upstream_cx_kept_after_reset)
    RPX_CLUSTER_STAT(upstream_rq_body_spliced)
    RPX_CLUSTER_STAT(upstream_rq_2xx)
    RPX_CLUSTER_STAT(upstream_rq_3xx)
    RPX_CLUSTER_STAT(upstream_rq_4xx)
    RPX_CLUSTER_STAT(upstream_rq_5xx)
    RPX_CLUSTER_STAT(lb_healthy_panic)
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
    if (c.health) {
      const ClusterHealth& h = *c.health;
      // Two loads, not one snapshot: a transient mix is clamped at zero.
      int64_t healthy =
          std::max<int64_t>(0, static_cast<int64_t>(h.hosts.load(std::memory_order_relaxed)) -
                                   h.unhealthy.load(std::memory_order_relaxed));
      out[p + "membership_healthy"] = healthy;
      if (c.health_check) {
        out[p + "health_check.attempt"] = h.attempt.load(std::memory_order_relaxed);
        out[p + "health_check.success"] = h.success.load(std::memory_order_relaxed);
        out[p + "health_check.failure"] = h.failure.load(std::memory_order_relaxed);
        out[p + "health_check.network_failure"] = h.network_failure.load(std::memory_order_relaxed);
        out[p + "health_check.healthy"] = healthy;
      }
      if (c.outlier) {
#define RPX_OUTLIER_STAT(f) out[p + "outlier_detection." #f] = h.f.load(std::memory_order_relaxed);
        RPX_OUTLIER_STAT(ejections_active)
        RPX_OUTLIER_STAT(ejections_enforced_total)
        RPX_OUTLIER_STAT(ejections_overflow)
        RPX_OUTLIER_STAT(ejections_enforced_consecutive_5xx)
        RPX_OUTLIER_STAT(ejections_detected_consecutive_5xx)
        RPX_OUTLIER_STAT(ejections_enforced_consecutive_gateway_failure)
        RPX_OUTLIER_STAT(ejections_detected_consecutive_gateway_failure)
        RPX_OUTLIER_STAT(ejections_enforced_consecutive_local_origin_failure)
        RPX_OUTLIER_STAT(ejections_detected_consecutive_local_origin_failure)
        RPX_OUTLIER_STAT(ejections_enforced_success_rate)
        RPX_OUTLIER_STAT(ejections_detected_success_rate)
        RPX_OUTLIER_STAT(ejections_enforced_failure_percentage)
        RPX_OUTLIER_STAT(ejections_detected_failure_percentage)
#undef RPX_OUTLIER_STAT
      }
    }
    out[p + "circuit_breakers.default.cx_open_count"] = c.resources->connections();
    out[p + "circuit_breakers.default.rq_pending_open_count"] = c.resources->pending();
    for (auto [hname, member] :
         {std::pair{"upstream_rq_time", &ClusterStats::upstream_rq_time},
          std::pair{"upstream_cx_connect_ms", &ClusterStats::upstream_cx_connect_ms},
          std::pair{"upstream_cx_length_ms", &ClusterStats::upstream_cx_length_ms}}) {
      HistogramTotals t;
      for (uint32_t i = 0; i < n; ++i) t.Add(s[i].*member);
      if (t.count || !used_only) hists[p + hname] = t;
    }
  }
  for (const auto& l : config_.listeners) {
    for (const auto& chain : l->chains) {
      if (!chain->connection_limit) continue;
      const ConnectionLimit& cl = *chain->connection_limit;
      std::string p = absl::StrCat("connection_limit.", cl.stat_prefix, ".");
      scopes.emplace_back("connection_limit", cl.stat_prefix);
      out[p + "active_connections"] = cl.state->active.load(std::memory_order_relaxed);
      out[p + "limited_connections"] = cl.state->limited.load(std::memory_order_relaxed);
    }
  }
  // Listener counters (Envoy's listener.<stat_prefix>.*), summed over workers and over
  // listeners that share a stat_prefix.
  for (const auto& l : config_.listeners) {
    std::string p = absl::StrCat("listener.", l->stat_prefix, ".");
    scopes.emplace_back("listener", l->stat_prefix);
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
      add("downstream_global_cx_overflow", st.downstream_global_cx_overflow.Value());
    }
  }
  // HTTP connection manager counters (http.<stat_prefix>.*): every chain's, summed over chains
  // and listeners that share a stat_prefix.
  std::vector<const HttpConfig*> https;
  for (const auto& l : config_.listeners) {
    for (const auto& chain : l->chains) {
      if (chain->http) https.push_back(chain->http.get());
    }
  }
  // TCP proxy counters (tcp.<stat_prefix>.*), summed over workers and over the chains that share
  // a stat_prefix.
  for (const auto& l : config_.listeners) {
    for (const auto& chain : l->chains) {
      if (!chain->tcp) continue;
      const TcpProxyConfig& t = *chain->tcp;
      std::string p = absl::StrCat("tcp.", t.stat_prefix, ".");
      scopes.emplace_back("tcp", t.stat_prefix);
      auto add = [&](const char* name, uint64_t v) { out[p + name] += v; };
      for (uint32_t i = 0; i < t.stats_slots; ++i) {
        const TcpProxyStats& st = t.stats[i];
        add("downstream_cx_total", st.downstream_cx_total.Value());
        add("downstream_cx_no_route", st.downstream_cx_no_route.Value());
        add("downstream_cx_rx_bytes_total", st.downstream_cx_rx_bytes_total.Value());
        add("downstream_cx_tx_bytes_total", st.downstream_cx_tx_bytes_total.Value());
        add("downstream_flow_control_paused_reading_total",
            st.downstream_flow_control_paused_reading_total.Value());
        add("downstream_flow_control_resumed_reading_total",
            st.downstream_flow_control_resumed_reading_total.Value());
        add("idle_timeout", st.idle_timeout.Value());
        add("max_downstream_connection_duration", st.max_downstream_connection_duration.Value());
        add("upstream_flush_total", st.upstream_flush_total.Value());
      }
    }
  }
  for (const HttpConfig* h : https) {
    std::string p = absl::StrCat("http.", h->stat_prefix, ".");
    if (out.count(p + "downstream_cx_total")) continue;  // counted with an earlier one
    scopes.emplace_back("http", h->stat_prefix);
#define RPX_HTTP_STAT_AS(field, name)                  \
  {                                                    \
    int64_t total = 0;                                 \
    for (const HttpConfig* h2 : https) {               \
      if (h2->stat_prefix != h->stat_prefix) continue; \
      for (uint32_t i = 0; i < h2->stats_slots; ++i) { \
        total += h2->stats[i].field.Value();           \
      }                                                \
    }                                                  \
    out[p + name] = total;                             \
  }
#define RPX_HTTP_STAT(field) RPX_HTTP_STAT_AS(field, #field)
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
    RPX_HTTP_STAT(downstream_cx_max_duration_reached)
    RPX_HTTP_STAT(downstream_rq_max_duration_reached)
    RPX_HTTP_STAT(requests_rejected_with_underscores_in_headers)
    RPX_HTTP_STAT(dropped_headers_with_underscores)
    RPX_HTTP_STAT(downstream_cx_http2_total)
    RPX_HTTP_STAT(downstream_cx_http2_active)
    // Envoy's http2.* codec stats, under the connection manager's prefix.
    RPX_HTTP_STAT_AS(http2_rx_reset, "http2.rx_reset")
    RPX_HTTP_STAT_AS(http2_tx_reset, "http2.tx_reset")
    RPX_HTTP_STAT_AS(http2_goaway_sent, "http2.goaway_sent")
    RPX_HTTP_STAT_AS(http2_header_overflow, "http2.header_overflow")
    RPX_HTTP_STAT_AS(http2_rx_messaging_error, "http2.rx_messaging_error")
    RPX_HTTP_STAT_AS(http2_inbound_empty_frames_flood, "http2.inbound_empty_frames_flood")
    RPX_HTTP_STAT_AS(http2_inbound_priority_frames_flood, "http2.inbound_priority_frames_flood")
    RPX_HTTP_STAT_AS(http2_inbound_window_update_frames_flood,
                     "http2.inbound_window_update_frames_flood")
    RPX_HTTP_STAT_AS(http2_outbound_flood, "http2.outbound_flood")
    RPX_HTTP_STAT_AS(http2_outbound_control_flood, "http2.outbound_control_flood")
#undef RPX_HTTP_STAT
#undef RPX_HTTP_STAT_AS
    HistogramTotals& rq_time = hists[p + "downstream_rq_time"];
    for (const HttpConfig* h2 : https) {
      if (h2->stat_prefix != h->stat_prefix) continue;
      for (uint32_t i = 0; i < h2->stats_slots; ++i) rq_time.Add(h2->stats[i].downstream_rq_time);
    }
  }
  out["runtime.num_layers"] = config_.runtime.layers.size();
  out["runtime.num_keys"] = config_.runtime.values.size();
  out["runtime.unused_keys"] = config_.runtime.unused_keys.size();  // rpx: keys it does not read
  out["server.concurrency"] = concurrency_;
  out["server.hot_restart_epoch"] = restart_.epoch;
  out["server.live"] = Ready() ? 1 : 0;
  if (extra_stats_) extra_stats_(&out);
  // A stat "kind.scope.rest" belongs to the longest scope of that kind that prefixes it (a
  // cluster "a.b" owns "cluster.a.b.x", not a cluster "a"): the scopes by kind in hash sets, and
  // each name's dots tried from the right, so 10,000 clusters cost a few lookups per stat rather
  // than a scan of every scope.
  absl::flat_hash_map<std::string, absl::flat_hash_set<std::string>> by_kind;
  for (const auto& [kind, scope] : scopes) by_kind[kind].insert(scope);
  auto make = [&](const std::string& name, int64_t value) {
    size_t dot = name.find('.');
    if (dot != std::string::npos) {
      auto k = by_kind.find(absl::string_view(name).substr(0, dot));
      if (k != by_kind.end()) {
        absl::string_view rest = absl::string_view(name).substr(dot + 1);
        for (size_t end = rest.rfind('.'); end != absl::string_view::npos && end > 0;
             end = rest.rfind('.', end - 1)) {
          if (end + 1 < rest.size() && k->second.contains(rest.substr(0, end))) {
            return MakeStat(k->first, std::string(rest.substr(0, end)),
                            std::string(rest.substr(end + 1)), value);
          }
        }
      }
    }
    return MakeFlatStat(name, value);
  };
  std::vector<StatEntry> entries;
  entries.reserve(out.size() + hists.size());
  for (const auto& [name, value] : out) entries.push_back(make(name, value));
  for (const auto& [name, totals] : hists) {
    StatEntry e = make(name, static_cast<int64_t>(totals.count));
    e.histogram = true;
    e.gauge = false;
    e.hist = totals;
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace rpx
