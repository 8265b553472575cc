// Admin: the admin HTTP listener on the main thread (Envoy's admin address). Endpoints:
//   GET /ready   200 "LIVE" once serving
//   GET /stats   counters and gauges, summed over workers ("name: value" lines; ?filter=regex,
//                ?usedonly, ?format=json|prometheus)
//   GET /stats/prometheus  the same in the Prometheus text format, with Envoy's tags
//   GET /listeners, /clusters  Envoy's text formats, or ?format=json
//   GET /runtime  the layered_runtime keys (Envoy's JSON), and those rpx does not read
//   GET /memory   Envoy's Memory JSON from malloc's counters and the RSS
//   GET /logging  the log level; POST /logging?level=debug sets it
//   GET /server_info  JSON: version, state, node, concurrency
//   GET /config_dump  JSON: active listeners, routes, clusters, endpoints (version, time applied)
//                     and the xDS state with the last NACK
//   POST /quitquitquit  stops the server at once
//   POST /drain_listeners[?graceful]  stops accepting and drains connections (the server stays)
//   POST /healthcheck/fail, /healthcheck/ok  /ready answers 503 (or again 200), for load
//                     balancers that take the node out before it is stopped
//   POST /reopen_logs  reopens the access log files (after logrotate renamed them)
// It reuses the HTTP/1 ServerConnection with its own StreamHandler; it must be bound to loopback
// in shipped configs (it can stop the server).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "google/protobuf/message.h"
#include "source/config/server_config.h"
#include "source/event/dispatcher.h"
#include "source/http/server_connection.h"
#include "source/network/listener.h"
#include "source/server/admin_stats.h"

namespace rpx {

class Admin : public StreamHandlerFactory {
 public:
  // `config` must outlive the Admin; `quit` is called for /quitquitquit.
  Admin(Dispatcher& dispatcher, const ServerConfig& config, uint32_t concurrency,
        std::function<void()> quit);
  ~Admin() override;
  // Takes ownership of the listening socket.
  void Start(int fd);
  struct RestartInfo {
    bool enabled = false;
    uint32_t epoch = 0;
    uint32_t base_id = 0;
    int64_t first_start_unix_ms = 0;  // epoch 0's start: uptime_all_epochs
  };
  void set_restart_info(const RestartInfo& info) { restart_ = info; }
  // Stops accepting admin connections (hot restart: the successor serves the admin socket).
  void StopListening() { listener_.reset(); }
  void set_ready(bool ready) { ready_ = ready; }
  // Draining (SIGTERM): /ready answers 503 DRAINING from now on.
  void set_draining(bool draining) { draining_ = draining; }
  // What POST /drain_listeners does (`gradual` with ?graceful, `inbound_only` with ?inboundonly).
  void set_drain_listeners(std::function<void(bool gradual, bool inbound_only)> fn) {
    drain_listeners_ = std::move(fn);
  }
  // What POST /reopen_logs does.
  void set_reopen_logs(std::function<void()> fn) { reopen_logs_ = std::move(fn); }
  // POST /runtime_modify: applies the changes, returns an error or "".
  void set_runtime_modify(
      std::function<std::string(const std::map<std::string, std::string>&)> fn) {
    runtime_modify_ = std::move(fn);
  }
  // Readiness beyond "started" (xDS initialization), and the /config_dump body.
  using ConfigDumps =
      std::function<std::vector<std::unique_ptr<google::protobuf::Message>>(bool include_eds)>;
  void set_hooks(std::function<bool()> initialized, ConfigDumps config_dumps,
                 std::function<std::string()> config_summary,
                 std::function<void(std::map<std::string, int64_t>*)> extra_stats) {
    initialized_ = std::move(initialized);
    config_dumps_ = std::move(config_dumps);
    config_summary_ = std::move(config_summary);
    extra_stats_ = std::move(extra_stats);
  }

  std::unique_ptr<StreamHandler> CreateStream(ResponseEncoder& encoder) override;
  // The /stats text (exposed for tests), and every stat with its Prometheus name and tags.
  std::string StatsText() const;
  // `used_only`: zero counters and empty histograms are left out (?usedonly).
  std::vector<StatEntry> CollectStats(bool used_only = false) const;
  std::string Handle(const RequestHead& head, int* status, std::string* content_type);

 private:
  class AdminConnection;
  void OnConnectionClosed(ServerConnection* c);
  std::string Listeners(bool json, std::string* content_type) const;
  std::string Clusters(bool json, std::string* content_type) const;
  std::string RuntimeJson() const;
  std::string MemoryJson() const;

  Dispatcher& dispatcher_;
  const ServerConfig& config_;
  uint32_t concurrency_;
  std::function<void()> quit_;
  uint64_t started_ms_;
  RestartInfo restart_;
  bool ready_ = false;
  bool draining_ = false;
  bool health_failed_ = false;  // POST /healthcheck/fail
  bool Ready() const {
    return ready_ && !draining_ && !health_failed_ && (!initialized_ || initialized_());
  }
  std::function<void(bool, bool)> drain_listeners_;
  std::function<void()> reopen_logs_;
  std::function<std::string(const std::map<std::string, std::string>&)> runtime_modify_;
  std::function<bool()> initialized_;
  ConfigDumps config_dumps_;
  std::function<std::string()> config_summary_;
  std::function<void(std::map<std::string, int64_t>*)> extra_stats_;
  std::shared_ptr<HttpConfig> http_config_;
  std::unique_ptr<Listener> listener_;
  absl::flat_hash_map<ServerConnection*, std::unique_ptr<ServerConnection>> connections_;
};

}  // namespace rpx
