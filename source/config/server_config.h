// ServerConfig: everything rpx runs from, built on the main thread from an Envoy v3 Bootstrap and
// then only read. Workers receive the listeners and clusters as shared_ptr<const ...> values.
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "envoy/config/bootstrap/v3/bootstrap.pb.h"
#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/endpoint/v3/endpoint.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "source/common/log_file.h"
#include "source/config/tls_config.h"
#include "source/config/xds_source.h"
#include "source/http/http_config.h"
#include "source/network/address.h"
#include "source/network/filter_chain_match.h"
#include "source/network/socket_option.h"
#include "source/router/route_table.h"
#include "source/tcp_proxy/tcp_proxy.h"
#include "source/tls/tls_context.h"
#include "source/upstream/worker_cluster.h"

namespace rpx {

// envoy.filters.network.connection_limit: a cap on a listener's open downstream connections,
// counted across every worker. Beyond it a new connection is closed at once (or after `delay_ms`)
// without being read; connections already open are not touched.
struct ConnectionLimit {
  struct State {
    std::atomic<uint64_t> active{0};
    std::atomic<uint64_t> limited{0};  // connections refused
  };
  std::string stat_prefix;
  uint64_t max_connections = 0;
  uint64_t delay_ms = 0;
  // Shared by all workers, and carried over when the listener is updated (ConfigManager), so the
  // connections already open keep counting.
  std::shared_ptr<State> state = std::make_shared<State>();

  // Any thread. Takes a slot if one is free.
  bool TryAcquire() const {
    if (state->active.fetch_add(1, std::memory_order_relaxed) >= max_connections) {
      state->active.fetch_sub(1, std::memory_order_relaxed);
      state->limited.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  void Release() const { state->active.fetch_sub(1, std::memory_order_relaxed); }
};

// One filter chain of a listener: when it is chosen, its TLS, and its HTTP connection manager.
struct FilterChainConfig {
  std::string name;  // FilterChain.name, or its field path
  FilterChainMatch match;
  // transport_socket envoy.transport_sockets.tls. With tls_required and no tls, the context
  // waits for SDS secrets (sds_secrets): its connections are refused, never served in cleartext.
  bool tls_required = false;
  std::shared_ptr<const TlsContext> tls;
  std::vector<std::string> sds_secrets;  // SDS secret names the context uses
  uint64_t sds_fetch_timeout_ms = 0;     // their sds_configs' initial_fetch_timeout (0: none)
  // The DownstreamTlsContext and its field path, to build the context again with new secrets.
  std::shared_ptr<const envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext>
      tls_config;
  std::string tls_path;
  uint64_t handshake_timeout_ms = 0;  // transport_socket_connect_timeout; 0: none
  // What serves the chain's connections: an HTTP connection manager (`http`) or a TCP proxy
  // (`tcp`); exactly one is set.
  std::shared_ptr<const HttpConfig> http;
  std::shared_ptr<const TcpProxyConfig> tcp;
  // Inline route_config, or the RDS route table once it has arrived (nullptr while warming).
  std::shared_ptr<const RouteTable> routes;
  std::string rds_name;           // non-empty: routes come from RDS under this name
  XdsSource rds_source;           // where (rds.config_source)
  std::string route_config_path;  // field path of the HCM, for messages
  uint64_t initial_fetch_timeout_ms = 15000;
  std::shared_ptr<const ConnectionLimit> connection_limit;  // nullptr: no cap
};

// Per-worker counters of one listener (Envoy's listener.<stat_prefix>.* and its ssl.* ones).
struct alignas(64) ListenerStats {
  Counter downstream_cx_total;
  Counter no_filter_chain_match;
  Counter downstream_pre_cx_timeout;  // the ClientHello did not come in listener_filters_timeout
  Counter ssl_handshake;
  Counter ssl_connection_error;  // a failed handshake (or TLS error)
  Counter ssl_session_reused;
  Counter ssl_handshake_timeout;  // transport_socket_connect_timeout
  Counter ssl_no_certificate;     // handshakes without a client certificate
  // Refused: overload.global_downstream_max_connections was reached.
  Counter downstream_global_cx_overflow;
};
struct ListenerStatsBlock {
  explicit ListenerStatsBlock(uint32_t slots)
      : slots(std::max(1u, slots)), stats(new ListenerStats[this->slots]) {}
  uint32_t slots;
  std::unique_ptr<ListenerStats[]> stats;
};

struct ListenerConfig {
  std::string name;
  std::string stat_prefix;  // Listener.stat_prefix, or the address (Envoy's default)
  SocketAddress address;
  uint32_t buffer_limit = 1024 * 1024;
  bool reuse_port = true;
  bool inbound = false;  // traffic_direction INBOUND (/drain_listeners?inboundonly)
  // Applied to the listening sockets (accepted ones inherit most): the configured ones, after
  // rpx's TCP_QUICKACK 0 on listeners whose chains are all HTTP.
  SocketOptions socket_options;
  // filter_chains in order, then default_filter_chain (if any) last.
  std::vector<std::shared_ptr<const FilterChainConfig>> chains;
  bool has_default_chain = false;
  // Every connection takes chains[0] without looking (one chain that matches anything).
  bool single_catch_all = false;
  // The tls_inspector reads the ClientHello (without consuming it) before a chain is chosen:
  // configured as a listener filter, or implied by a chain that matches on what it finds.
  bool inspect_tls = false;
  bool needs_local_address = false;  // a chain matches on the destination port or address
  // envoy.filters.listener.http_inspector: a plaintext connection's first bytes say whether it
  // is HTTP/1.x or h2c (application_protocols) before a chain is chosen.
  bool inspect_http = false;
  // envoy.filters.listener.original_dst: a redirected connection's original destination is its
  // local address (chain matching, ORIGINAL_DST clusters, logs).
  bool original_dst = false;
  // use_original_dst: a connection whose original destination is another listener's address
  // (exact, else the wildcard address with that port) is handed to that listener.
  bool use_original_dst = false;
  // bind_to_port false: no socket of its own; it takes only connections handed over by a
  // use_original_dst listener (Envoy's virtual listeners).
  bool bind_to_port = true;
  uint64_t listener_filters_timeout_ms = 15000;
  bool continue_on_listener_filters_timeout = false;
  std::shared_ptr<ListenerStatsBlock> stats;

  // The chain for a new connection (an index into chains), or -1: none matches.
  int SelectChain(const ConnectionFacts& facts) const;
  // A chain's TLS context still waits for SDS secrets.
  bool tls_pending() const {
    for (const auto& c : chains) {
      if (c->tls_required && !c->tls) return true;
    }
    return false;
  }
  bool uses_rds() const {
    for (const auto& c : chains) {
      if (!c->rds_name.empty()) return true;
    }
    return false;
  }
};

// dynamic_resources: where the ADS stream goes and how it talks, and where each type comes from.
struct XdsConfig {
  // Type URL -> its source, for the types the bootstrap names (LDS and CDS from
  // dynamic_resources; RDS and EDS from static listeners and clusters; SDS is ADS only).
  std::map<std::string, XdsSource> sources;
  // gRPC target of each cluster that carries xDS (ADS or a type's own stream).
  std::map<std::string, std::string> grpc_targets;
  // Its TLS, from the cluster's transport_socket (enabled false: cleartext).
  std::map<std::string, XdsTls> grpc_tls;
  bool enabled = false;  // an ADS stream runs (ads_config, and something that uses it)
  // Anything comes over xDS or from watched files (ADS, a type's own stream, a file).
  bool dynamic() const { return enabled || !sources.empty(); }
  bool has_ads_config = false;  // dynamic_resources.ads_config is set
  std::string cluster;          // static cluster named by ads_config.grpc_services[0].envoy_grpc
  bool delta = false;           // DELTA_GRPC / AGGREGATED_DELTA_GRPC
  bool lds = false;             // listeners come from LDS (lds_config, any source)
  bool cds = false;             // clusters come from CDS (cds_config, any source)
  uint64_t initial_fetch_timeout_ms = 15000;
  // gRPC's target for the stream: "ipv4:127.0.0.1:18000" for a STATIC cluster's first
  // endpoint, "dns:///xds.example.com:18000" for a STRICT_DNS one (gRPC resolves it, and again
  // when it reconnects).
  std::string target;
};

// layered_runtime: the static layers' keys, flattened
// ("overload.global_downstream_max_connections"), later layers over earlier ones. rpx applies the
// keys it knows and lists the others.
struct RuntimeConfig {
  std::vector<std::string> layers;                               // every layer's name, in order
  std::vector<std::map<std::string, std::string>> layer_values;  // each layer's own keys
  std::map<std::string, std::string> values;                     // key -> final value, as text
  std::vector<std::string> unused_keys;                          // keys rpx does not read (sorted)
  uint64_t global_max_connections = 0;  // overload.global_downstream_max_connections; 0: none
  int admin_layer = -1;                 // the layer /runtime_modify writes to; -1: none
};

// /runtime_modify: sets (or, with an empty value, removes) keys in the admin layer and resolves
// the runtime again. Either every change applies or none does; returns the error naming the key
// and value rpx cannot use, or "" on success.
std::string ModifyRuntime(const std::map<std::string, std::string>& changes, RuntimeConfig* rt);

// Connections open across every listener and worker, for
// overload.global_downstream_max_connections. Shared by the workers (any thread); one per process,
// so a new configuration keeps the count.
class GlobalConnectionLimit {
 public:
  void set_max(uint64_t max) { max_.store(max, std::memory_order_relaxed); }
  uint64_t max() const { return max_.load(std::memory_order_relaxed); }
  bool TryAcquire() {
    uint64_t max = max_.load(std::memory_order_relaxed);
    if (max == 0) {
      active_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    int64_t n = active_.fetch_add(1, std::memory_order_relaxed);
    if (n >= static_cast<int64_t>(max)) {
      active_.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  void Release() { active_.fetch_sub(1, std::memory_order_relaxed); }
  int64_t active() const { return active_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> max_{0};
  std::atomic<int64_t> active_{0};
};

// Where a DNS cluster's names are asked (Envoy's CaresDnsResolverConfig).
struct DnsResolverConfig {
  std::vector<SocketAddress> resolvers;  // empty: /etc/resolv.conf's
  bool use_tcp = false;                  // dns_resolver_options.use_tcp_for_dns_lookups
  bool no_search = false;                // dns_resolver_options.no_default_search_domain
};

// A STRICT_DNS or LOGICAL_DNS cluster's names, resolved asynchronously by the main thread (see
// source/server/dns_refresher.h): again refresh_ms after a round (or the answer's TTL with
// respect_dns_ttl), sooner after a failure with dns_failure_refresh_rate.
struct DnsCluster {
  struct Target {
    std::string hostname;
    uint32_t port;
    uint32_t weight;
    // As Host's: every address of the target takes these.
    uint32_t priority = 0;
    std::string locality;
    uint32_t locality_weight = 0;
  };
  std::string cluster;
  std::vector<Target> targets;
  uint32_t stats_slots = 1;  // per-worker host stats blocks (the number of workers)
  // LOGICAL_DNS: one host, the first address of the answer (Envoy's logical host).
  bool logical = false;
  // dns_lookup_family: V4_ONLY and V6_ONLY filter; V4_PREFERRED / AUTO order the answer (IPv4 /
  // IPv6 first); ALL keeps it as it is.
  enum class Family { kAuto, kV4Only, kV6Only, kV4Preferred, kAll } family = Family::kAuto;
  uint64_t refresh_ms = 5000;
  // load_assignment.policy, for the host sets the answers make.
  uint32_t overprovisioning_factor = 140;
  bool weighted_priority_health = false;
  // dns_failure_refresh_rate: after a failed round the next comes after a jittered exponential
  // backoff from failure_base_ms, capped at failure_max_ms. 0: refresh_ms, as after a success.
  uint64_t failure_base_ms = 0;
  uint64_t failure_max_ms = 0;
  bool respect_dns_ttl = false;  // the next round after the answer's TTL (0: refresh_ms)
  // typed_dns_resolver_config / dns_resolution_config / dns_resolvers; unset: the bootstrap's
  // typed_dns_resolver_config, else the system's.
  std::optional<DnsResolverConfig> resolver;
};

struct ServerConfig {
  std::string node_id;
  std::string node_cluster;
  std::vector<std::shared_ptr<const ListenerConfig>> listeners;
  ClusterMap clusters;
  std::vector<DnsCluster> dns_clusters;
  // Bootstrap.typed_dns_resolver_config: the resolver of DNS clusters that name none.
  std::optional<DnsResolverConfig> dns_resolver;
  std::optional<SocketAddress> admin_address;
  // admin.access_log (and the deprecated access_log_path): the loggers and what they need
  // recorded, in an HttpConfig the admin's own takes them from (null: none).
  std::shared_ptr<HttpConfig> admin_logging;
  XdsConfig xds;
  RuntimeConfig runtime;
};

struct BuildOptions {
  uint32_t stats_slots = 1;  // number of workers: one stats block each
  std::string source;        // file name, for messages
  SecretMap secrets;         // static_resources.secrets
  SecretMap sds_secrets;     // secrets that arrived over SDS
  // Opens access log files; null: they are checked but not opened (--mode validate).
  LogFileManager* log_files = nullptr;
};

// Reads a ConfigSource (ads, api_config_source GRPC / DELTA_GRPC, path_config_source, path) into
// `*out`; appends what is wrong to `errors` with `path` naming the field. An unset source leaves
// `*out` unset.
bool ParseConfigSource(const envoy::config::core::v3::ConfigSource& cs, const std::string& path,
                       XdsSource* out, std::vector<std::string>* errors);

// Builds `out` from `bootstrap`. Returns false after appending every problem to `errors`.
bool BuildServerConfig(const envoy::config::bootstrap::v3::Bootstrap& bootstrap,
                       const BuildOptions& options, ServerConfig* out,
                       std::vector<std::string>* errors);

// A chain's TLS context built again with `secrets` (after SDS secrets arrived or changed).
// Returns the new chain, or nullptr with `*missing` set (secrets still missing) or errors.
std::shared_ptr<const FilterChainConfig> RebuildChainTls(const FilterChainConfig& chain,
                                                         const BuildOptions& options, bool* missing,
                                                         std::vector<std::string>* errors);

// Building single resources, as xDS delivers them. Each appends its problems to `errors` (with
// `path` naming the resource) and returns nullptr / false when there was any.
std::shared_ptr<const ListenerConfig> BuildListener(const envoy::config::listener::v3::Listener& l,
                                                    const std::string& path,
                                                    const BuildOptions& options,
                                                    std::vector<std::string>* errors);
// For a STRICT_DNS or LOGICAL_DNS cluster `dns` receives its targets (nothing is resolved here:
// the cluster comes back with no hosts); EDS clusters come back with no hosts.
bool BuildCluster(const envoy::config::cluster::v3::Cluster& c, const std::string& path,
                  const BuildOptions& options, ClusterEntry* out, std::optional<DnsCluster>* dns,
                  std::vector<std::string>* errors);
std::shared_ptr<const HostSet> BuildHostSet(
    const envoy::config::endpoint::v3::ClusterLoadAssignment& cla, const std::string& path,
    uint32_t stats_slots, std::vector<std::string>* errors);

}  // namespace rpx
