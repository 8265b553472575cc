// ConfigManager: the main thread's owner of the running configuration, static and dynamic. It
// applies xDS updates (the applier of every XdsSources stream and file) and publishes every change
// to the workers as immutable snapshots.
//
// Rules it keeps:
// - An update is validated completely before anything changes; a bad one is refused (NACK) and
//   everything already accepted keeps serving.
// - Make-before-break: a new cluster serves once its endpoints have arrived and a new listener
//   once its routes have (or initial_fetch_timeout passed); an updated one keeps serving its old
//   form until then. Endpoint updates keep the pools of hosts that stay.
// - A removed listener stops accepting at once and drains its connections; a removed cluster's
//   pools drain on the workers.
// Main thread only.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "envoy/config/bootstrap/v3/bootstrap.pb.h"
#include "source/config/server_config.h"
#include "source/config/xds_client.h"
#include "source/config/xds_sources.h"
#include "source/event/dispatcher.h"
#include "source/network/listener.h"
#include "source/server/dns_refresher.h"
#include "source/server/worker.h"
#include "source/upstream/health_checker.h"

namespace rpx {

class ConfigManager : public XdsApplier {
 public:
  ConfigManager(Dispatcher& main, std::vector<std::unique_ptr<Worker>>& workers,
                const envoy::config::bootstrap::v3::Bootstrap& bootstrap, ServerConfig& config,
                uint32_t concurrency, uint64_t drain_ms);
  ~ConfigManager() override;

  // Opens the static listeners' sockets and hands them to the workers. False on a bind error.
  bool StartStatic(std::string* error);
  // Connects the manager to its xDS client before the client starts, and gives the client the
  // route and endpoint names the static listeners and clusters already reference (so its first
  // requests ask for them).
  void AttachXds(XdsSources* xds);
  // Sockets handed over by the process this one replaces (hot restart): listeners bound to their
  // addresses use them instead of opening new ones.
  void set_inherited(InheritedSockets* inherited) { inherited_ = inherited; }
  // Where listeners that arrive over LDS open their access logs (the bootstrap's files).
  void set_log_files(LogFileManager* files) { log_files_ = files; }
  // A static STRICT_DNS or LOGICAL_DNS cluster's hosts changed (its DnsRefresher).
  void UpdateStaticHosts(const std::string& cluster, std::shared_ptr<const HostSet> hosts);
  // The DNS clusters' refresh stats (cluster.<name>.update_attempt, ...), for /stats.
  void DnsStats(std::map<std::string, int64_t>* out) const;
  // How long /ready waits for a static DNS cluster's first resolution at most (a dead DNS
  // server must not hold startup forever).
  static constexpr uint64_t kStaticDnsWaitMs = 5000;

  // XdsApplier
  std::string Apply(const std::string& type_url, const XdsResourceMap& resources,
                    const std::string& version) override;
  void OnStreamState(bool connected) override { connected_ = connected; }

  // True once the first CDS and LDS answers were applied, every static EDS cluster has its first
  // endpoints, and nothing is warming (or the initial fetch timeout passed): what /ready reports.
  bool initialized() const;
  // A static DNS cluster's first resolution is still to finish (bounded by kStaticDnsWaitMs):
  // the server waits for it before its listeners accept, as Envoy's cluster initialization does.
  bool static_dns_pending() const { return !static_dns_waiting_.empty(); }
  // rpx's compact view (GET /config_summary): each resource's name, version, state and config,
  // and the xDS stream's state per type with the last NACK.
  std::string ConfigSummaryJson() const;
  // Envoy's typed dumps for /config_dump (see config_dump.h): bootstrap, clusters, listeners,
  // routes, secrets and, with `include_eds`, endpoints.
  std::vector<std::unique_ptr<google::protobuf::Message>> ConfigDumps(bool include_eds) const;
  uint64_t ignored_fields() const { return ignored_fields_; }
  // From an RDS response arriving to the new routes being in effect on every worker, for the
  // last route update (microseconds), and how many updates were measured.
  int64_t last_route_propagation_us() const { return last_route_propagation_us_; }
  uint64_t route_updates() const { return route_updates_; }
  // The active configuration (listeners and clusters) as the admin handler sees it.
  const ServerConfig& current() const { return config_; }

 private:
  // The form serving while a newer one warms, for /config_dump's active and warming states.
  struct ActiveForm {
    std::string bytes;
    std::string version;
    int64_t updated_ms = 0;
  };
  struct DynCluster {
    std::string bytes;  // serialized Cluster, to recognise unchanged resources
    ActiveForm active_form;
    envoy::config::cluster::v3::Cluster proto;
    ClusterEntry entry;    // the latest accepted form
    ClusterEntry serving;  // what workers use (the previous form while the latest warms)
    bool has_serving = false;
    std::string version;
    int64_t updated_ms = 0;
    bool endpoints_arrived = false;  // an EDS cluster's first assignment is in entry.hosts
    // A DNS cluster's resolution; it warms until the first round finished.
    std::unique_ptr<DnsRefresher> dns;
    bool dns_resolved = false;
    bool warm = false;
    std::unique_ptr<Timer> warm_timer;
  };
  struct SdsSecret {
    std::string bytes;
    envoy::extensions::transport_sockets::tls::v3::Secret proto;
    std::string version;
    int64_t updated_ms = 0;
  };
  struct Endpoints {
    std::string bytes;
    envoy::config::endpoint::v3::ClusterLoadAssignment proto;
    std::shared_ptr<const HostSet> hosts;
    std::string version;
    int64_t updated_ms = 0;
  };
  struct DynListener {
    std::string bytes;
    ActiveForm active_form;
    envoy::config::listener::v3::Listener proto;
    std::shared_ptr<const ListenerConfig> active;   // serving now (nullptr: not yet)
    std::shared_ptr<const ListenerConfig> pending;  // waiting for its routes
    // Sockets opened for `pending`. Those replacing sockets on the same port (new socket options)
    // are only bound, so they take no connection before they are accepted from; they listen at
    // activation (StartListening leaves the others as they are).
    std::vector<int> pending_fds;
    std::string version;
    int64_t updated_ms = 0;
    std::unique_ptr<Timer> warm_timer;
    bool is_static = false;  // from static_resources (RDS routes): LDS never removes it
  };
  struct Routes {
    std::string bytes;
    std::shared_ptr<const RouteTable> table;
    std::string version;
    int64_t updated_ms = 0;
  };

  std::string ApplyClusters(const XdsResourceMap& resources, const std::string& version);
  std::string ApplyEndpoints(const XdsResourceMap& resources, const std::string& version);
  std::string ApplyListeners(const XdsResourceMap& resources, const std::string& version);
  std::string ApplyRoutes(const XdsResourceMap& resources, const std::string& version);
  std::string ApplySecrets(const XdsResourceMap& resources, const std::string& version);
  // Builds again the TLS contexts that use the secrets `changed` (or all waiting ones) in
  // listeners and clusters, and publishes them: new handshakes use them, connections that
  // exist keep theirs.
  void ApplySecretChanges(const std::set<std::string>& changed);
  void RefreshSdsNames();
  // `l` with the TLS contexts of its chains that wait for secrets, or use one in `changed`,
  // built with the secrets there are now. The SDS names still missing go to `missing`.
  std::shared_ptr<const ListenerConfig> WithTlsContexts(const ListenerConfig& l,
                                                        const std::set<std::string>* changed,
                                                        std::vector<std::string>* missing) const;
  // A dynamic cluster starts serving its new form once it is ready (endpoints and secrets).
  void UpdateWarmth(DynCluster& d);
  static bool ClusterReady(const DynCluster& d);
  void PublishClusters();
  void RefreshEdsNames();
  void RefreshRdsNames();
  // `l` with each RDS chain's table from routes_. The names not arrived go to `missing`; those
  // chains keep what they have, or with `empty_if_missing` get an empty table (404s).
  std::shared_ptr<const ListenerConfig> WithRouteTables(const ListenerConfig& l,
                                                        bool empty_if_missing,
                                                        std::vector<std::string>* missing) const;
  // `next` with each chain's connection_limit counting on from `prev`'s chain of the same name.
  static std::shared_ptr<const ListenerConfig> CarryConnectionLimits(
      const ListenerConfig& prev, std::shared_ptr<const ListenerConfig> next);
  // The shortest initial_fetch_timeout of the listener's RDS chains (the ADS one if none).
  uint64_t InitialFetchTimeoutMs(const ListenerConfig& l) const;
  void TryActivate(const std::string& name, bool timed_out);
  void ActivateListener(DynListener& l, std::shared_ptr<const ListenerConfig> config,
                        std::vector<int> fds);
  void RebuildListenerList();
  // `replacing`: the address is held by this listener's current sockets (see OpenWorkerSockets).
  bool OpenSockets(const ListenerConfig& l, std::vector<int>* fds, std::string* error,
                   bool replacing = false);
  BuildOptions Options(const std::string& source) const;
  // A refresher for `dns` on its own resolver or the shared one (nullptr if c-ares cannot
  // start: logged). Started.
  std::unique_ptr<DnsRefresher> StartDns(
      const DnsCluster& dns, std::function<void(std::shared_ptr<const HostSet>)> publish,
      std::function<void()> first_round_done);

  Dispatcher& main_;
  std::vector<std::unique_ptr<Worker>>& workers_;
  const envoy::config::bootstrap::v3::Bootstrap& bootstrap_;
  ServerConfig& config_;  // config_.listeners / clusters: what is active now
  uint32_t concurrency_;
  // Active health checks of the published clusters (static and dynamic).
  HealthCheckers health_checkers_{main_};
  LogFileManager* log_files_ = nullptr;
  InheritedSockets* inherited_ = nullptr;
  int64_t start_unix_ms_ = 0;  // static resources' last_updated
  uint64_t drain_ms_;
  XdsSources* xds_ = nullptr;
  bool connected_ = false;
  ClusterMap static_clusters_;
  SecretMap static_secrets_;  // static_resources.secrets, for TLS contexts of dynamic resources
  // Static EDS clusters (by cluster name) whose first ClusterLoadAssignment has not arrived.
  std::set<std::string> static_eds_waiting_;
  // The resolver of DNS clusters that name none (the bootstrap's, else the system's), made at
  // first use; the static DNS clusters' refreshers, and those whose first round is still out
  // (until kStaticDnsWaitMs passed).
  std::shared_ptr<DnsResolver> default_resolver_;
  std::map<std::string, std::unique_ptr<DnsRefresher>> static_dns_;
  std::set<std::string> static_dns_waiting_;
  std::unique_ptr<Timer> static_dns_timer_;
  std::vector<std::shared_ptr<const ListenerConfig>> static_listeners_;
  std::map<std::string, DynCluster> clusters_;
  std::map<std::string, Endpoints> endpoints_;
  std::map<std::string, DynListener> listeners_;
  std::map<std::string, Routes> routes_;
  std::map<std::string, SdsSecret> secrets_;  // arrived over SDS
  bool cds_applied_ = false;
  bool lds_applied_ = false;
  bool init_timed_out_ = false;
  std::unique_ptr<Timer> init_timer_;
  uint64_t ignored_fields_ = 0;
  int64_t last_route_propagation_us_ = 0;
  uint64_t route_updates_ = 0;
  std::shared_ptr<std::atomic<int>> propagation_pending_;
  // Replaced route tables stay referenced here until every worker has switched, so the last
  // reference (and the cost of freeing a large table) falls on the main thread, not a worker.
  std::vector<std::shared_ptr<const RouteTable>> retired_tables_;
  envoy::config::route::v3::RouteConfiguration route_scratch_;  // see ApplyRoutes
};

}  // namespace rpx
