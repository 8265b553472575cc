#include "source/config/server_config.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/extensions/access_loggers/file/v3/file.pb.h"
#include "envoy/extensions/filters/http/router/v3/router.pb.h"
#include "envoy/extensions/filters/network/connection_limit/v3/connection_limit.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy.pb.h"
#include "envoy/extensions/network/dns_resolver/cares/v3/cares_dns_resolver.pb.h"
#include "envoy/extensions/upstreams/http/v3/http_protocol_options.pb.h"
#include "source/config/access_log_config.h"
#include "source/config/tls_config.h"

namespace rpx {
namespace {

constexpr char kListenerTypeUrl[] = "type.googleapis.com/envoy.config.listener.v3.Listener";
constexpr char kRouteTypeUrl[] = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
constexpr char kClusterTypeUrl[] = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
constexpr char kEndpointTypeUrl[] =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

using envoy::config::cluster::v3::Cluster;
using envoy::config::listener::v3::FilterChain;
using envoy::config::listener::v3::Listener;
using envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
using ConnectionLimitProto =
    envoy::extensions::filters::network::connection_limit::v3::ConnectionLimit;

constexpr char kConnectionLimitType[] =
    "envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit";
constexpr char kHcmType[] =
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
constexpr char kRouterType[] = "envoy.extensions.filters.http.router.v3.Router";
constexpr char kUpstreamHttpOptions[] = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
constexpr char kTlsInspectorType[] =
    "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector";
constexpr char kOriginalDstType[] = "envoy.extensions.filters.listener.original_dst.v3.OriginalDst";
constexpr char kHttpInspectorType[] =
    "envoy.extensions.filters.listener.http_inspector.v3.HttpInspector";
constexpr char kTcpProxyType[] = "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";
constexpr char kDownstreamTlsType[] =
    "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";
constexpr char kUpstreamTlsType[] = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
constexpr char kRawBufferType[] = "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer";
// A TLS handshake not done within this is closed (transport_socket_connect_timeout; Envoy has
// none by default, which lets a client that stops mid-handshake hold a connection for good).
constexpr uint64_t kDefaultHandshakeTimeoutMs = 10000;

uint64_t Ms(const google::protobuf::Duration& d) {
  return static_cast<uint64_t>(d.seconds()) * 1000 + d.nanos() / 1000000;
}

// ALPN offers (or accepts) only what rpx's codecs speak there: h2 on a listener whose
// connection manager takes HTTP/2 (AUTO or HTTP2), HTTP/1.x; upstream HTTP/1.1 only for now.
// Selecting a protocol and then speaking another would break every such peer, which instead
// falls back to what is left.
void KeepSpokenAlpn(TlsContextOptions* o, bool h2 = false) {
  std::vector<std::string> spoken;
  for (const auto& p : o->alpn) {
    if (p == "http/1.1" || (o->server && p == "http/1.0") || (h2 && p == "h2")) {
      spoken.push_back(p);
    }
  }
  o->alpn = std::move(spoken);
}

// The TLS context of `chain` (its tls_config) with the secrets in `options`. Null with
// `*missing` when SDS secrets have not arrived, or with errors.
std::shared_ptr<const TlsContext> BuildDownstreamTls(const FilterChainConfig& chain,
                                                     const BuildOptions& options,
                                                     std::vector<std::string>* sds_names,
                                                     bool* missing,
                                                     std::vector<std::string>* errors,
                                                     uint64_t* sds_fetch_timeout_ms = nullptr) {
  TlsContextOptions o;
  SecretSources secrets{&options.secrets, &options.sds_secrets, sds_names};
  if (!DownstreamTlsOptions(*chain.tls_config, chain.tls_path, &secrets, &o, errors)) {
    return nullptr;
  }
  if (sds_fetch_timeout_ms) *sds_fetch_timeout_ms = secrets.fetch_timeout_ms;
  *missing = secrets.sds_missing;
  if (*missing) return nullptr;
  KeepSpokenAlpn(&o, chain.http && chain.http->codec != HttpConfig::Codec::kHttp1);
  auto context = TlsContext::Create(o);
  if (!context.ok()) {
    errors->push_back(std::string(context.status().message()));
    return nullptr;
  }
  return *context;
}

class Builder {
 public:
  Builder(const BuildOptions& options, std::vector<std::string>* errors)
      : options_(options), errors_(errors) {}

  void Error(const std::string& path, const std::string& what) {
    errors_->push_back(absl::StrCat(options_.source, ": ", path, ": ", what));
  }
  // Messages that already start with their field path ("path: what"), from the helpers that
  // report into a vector of their own.
  void ErrorLines(const std::vector<std::string>& lines) {
    for (const auto& e : lines) errors_->push_back(absl::StrCat(options_.source, ": ", e));
  }

  bool Address(const envoy::config::core::v3::Address& a, const std::string& path,
               SocketAddress* out) {
    if (!a.has_socket_address()) {
      Error(path, "socket_address is required");
      return false;
    }
    return SocketAddr(a.socket_address(), path + ".socket_address", out);
  }

  bool SocketAddr(const envoy::config::core::v3::SocketAddress& sa, const std::string& path,
                  SocketAddress* out) {
    if (sa.protocol() != envoy::config::core::v3::SocketAddress::TCP) {
      Error(path + ".protocol", "only TCP is supported");
      return false;
    }
    auto parsed = SocketAddress::FromIpPort(sa.address(), sa.port_value());
    if (!parsed.ok()) {
      Error(path + ".address", std::string(parsed.status().message()));
      return false;
    }
    *out = *parsed;
    return true;
  }

  // Envoy's SocketOption list at `path`. `prebind_only`: the BindConfig of a cluster, where (as
  // in Envoy) only STATE_PREBIND means anything.
  void Options(const google::protobuf::RepeatedPtrField<envoy::config::core::v3::SocketOption>& in,
               const std::string& path, bool prebind_only, SocketOptions* out) {
    using Proto = envoy::config::core::v3::SocketOption;
    constexpr int64_t kIntMin = std::numeric_limits<int>::min();
    constexpr int64_t kIntMax = std::numeric_limits<int>::max();
    for (int i = 0; i < in.size(); ++i) {
      const Proto& p = in[i];
      std::string op = absl::StrCat(path, "[", i, "]");
      SocketOption o;
      o.description = p.description();
      bool ok = true;
      if (p.level() < kIntMin || p.level() > kIntMax) {
        Error(op + ".level", absl::StrCat(p.level(), " is not a setsockopt level"));
        ok = false;
      }
      if (p.name() < kIntMin || p.name() > kIntMax) {
        Error(op + ".name", absl::StrCat(p.name(), " is not a setsockopt option name"));
        ok = false;
      }
      o.level = static_cast<int>(p.level());
      o.name = static_cast<int>(p.name());
      switch (p.value_case()) {
        case Proto::kIntValue:
          // setsockopt's integer options take a C int, as in Envoy.
          if (p.int_value() < kIntMin || p.int_value() > kIntMax) {
            Error(op + ".int_value", absl::StrCat(p.int_value(), " does not fit in a C int"));
            ok = false;
          }
          o.int_value = static_cast<int>(p.int_value());
          break;
        case Proto::kBufValue:
          o.is_int = false;
          o.buf_value = p.buf_value();
          break;
        default:
          Error(op, "int_value or buf_value is required");
          ok = false;
      }
      switch (p.state()) {
        case Proto::STATE_PREBIND:
          o.state = SocketOption::State::kPrebind;
          break;
        case Proto::STATE_BOUND:
          o.state = SocketOption::State::kBound;
          break;
        case Proto::STATE_LISTENING:
          o.state = SocketOption::State::kListening;
          break;
        default:
          Error(op + ".state", absl::StrCat("unknown state ", static_cast<int>(p.state())));
          ok = false;
      }
      if (prebind_only && p.state() != Proto::STATE_PREBIND) {
        Error(op + ".state", "only STATE_PREBIND applies to upstream connections");
        ok = false;
      }
      if (ok) out->push_back(std::move(o));
    }
  }

  // A bad level, name or value is better refused with the configuration than met on every
  // connection: try a cluster's options on a scratch socket (the kernel is the only judge of
  // what they mean). `family` is the source address's, or 0 when the upstream family is not
  // known yet (EDS, DNS): then either IPv4 or IPv6 accepting them is enough.
  void TryOptions(const SocketOptions& options, int family, const std::string& path) {
    if (options.empty()) return;
    std::string first_error;
    for (int f : {AF_INET, AF_INET6}) {
      if (family != 0 && f != family) continue;
      int fd = ::socket(f, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;  // no such family here: nothing to judge with
      auto st = ApplySocketOptions(fd, options, SocketOption::State::kPrebind);
      ::close(fd);
      if (st.ok()) return;
      if (first_error.empty()) first_error = std::string(st.message());
    }
    if (!first_error.empty()) Error(path, first_error);
  }

  void BuildCluster(const Cluster& c, const std::string& path, ServerConfig* out);
  void BuildHosts(const envoy::config::endpoint::v3::ClusterLoadAssignment& la,
                  const std::string& path, DnsCluster* dns, HostSet* hosts);
  // Names of clusters that were defined, even if they failed to build (no cascading errors).
  absl::flat_hash_set<std::string> defined_clusters;
  void BuildListener(const Listener& l, const std::string& path, ServerConfig* out);

  // typed_dns_resolver_config: c-ares is the one resolver rpx has.
  std::optional<DnsResolverConfig> TypedDnsResolver(
      const envoy::config::core::v3::TypedExtensionConfig& t, const std::string& path);

 private:
  // `downstream`: the options of a connection manager (clients' connections), where
  // allow_connect is supported; a cluster's refuse it.
  void BuildHttp2Options(const envoy::config::core::v3::Http2ProtocolOptions& o,
                         const std::string& path, Http2Options* out, bool downstream = false);
  bool BuildHttp(const HttpConnectionManager& hcm, const std::string& path, uint32_t buffer_limit,
                 FilterChainConfig* lc);
  std::shared_ptr<const TcpProxyConfig> BuildTcpProxy(
      const envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy& t,
      const std::string& path);
  std::shared_ptr<const FilterChainConfig> BuildChain(const FilterChain& chain,
                                                      const std::string& cp,
                                                      const ListenerConfig& lc);
  bool BuildMatch(const envoy::config::listener::v3::FilterChainMatch& m, const std::string& path,
                  FilterChainMatch* out);
  bool Cidrs(const google::protobuf::RepeatedPtrField<envoy::config::core::v3::CidrRange>& in,
             const std::string& path, std::vector<CidrRange>* out);
  bool DownstreamTransport(const envoy::config::core::v3::TransportSocket& ts,
                           const std::string& path, FilterChainConfig* chain);
  // The transport in `out`; SDS names go to info->sds_secrets.
  bool UpstreamTransport(const envoy::config::core::v3::TransportSocket& ts,
                         const std::string& path, ClusterInfo* info, ClusterInfo::Transport* out);
  // The type of a transport socket's typed_config ("" if none).
  // A Duration field that, when given, must be at least 1 ms: into *out (left as is if absent).
  void PositiveMs(bool has, const google::protobuf::Duration& d, const std::string& path,
                  bool required, uint64_t* out);
  // A resolver's addresses and options (CaresDnsResolverConfig's, or the deprecated fields').
  void DnsResolvers(const google::protobuf::RepeatedPtrField<envoy::config::core::v3::Address>& in,
                    const std::string& path, DnsResolverConfig* out);
  void DnsResolverOptions(const envoy::config::core::v3::DnsResolverOptions& o,
                          DnsResolverConfig* out);
  std::shared_ptr<const OutlierConfig> Outlier(
      const envoy::config::cluster::v3::OutlierDetection& o, const std::string& path);
  std::shared_ptr<const HealthCheckConfig> HealthCheck(
      const envoy::config::core::v3::HealthCheck& h, const std::string& path);
  static std::string TransportType(const envoy::config::core::v3::TransportSocket& ts);
  const BuildOptions& options_;
  std::vector<std::string>* errors_;
};

void Builder::BuildCluster(const Cluster& c, const std::string& path, ServerConfig* out) {
  size_t errors_before = errors_->size();
  defined_clusters.insert(c.name());
  auto info = std::make_shared<ClusterInfo>();
  info->name = c.name();
  if (c.name().empty()) Error(path + ".name", "is required");
  if (out->clusters.contains(c.name())) {
    Error(path + ".name", absl::StrCat("duplicate cluster name '", c.name(), "'"));
  }
  if (c.cluster_discovery_type_case() != Cluster::kType &&
      c.cluster_discovery_type_case() != Cluster::CLUSTER_DISCOVERY_TYPE_NOT_SET) {
    Error(path, "custom cluster types are not supported");
  }
  bool dns = false;
  bool logical_dns = false;
  switch (c.type()) {
    case Cluster::STATIC:
      break;
    case Cluster::STRICT_DNS:
      dns = true;
      break;
    case Cluster::LOGICAL_DNS:
      dns = true;
      logical_dns = true;
      break;
    case Cluster::EDS: {
      info->eds = true;
      const auto& eds = c.eds_cluster_config();
      info->eds_service_name = eds.service_name().empty() ? c.name() : eds.service_name();
      if (eds.has_eds_config()) {
        XdsSource src;
        ParseConfigSource(eds.eds_config(),
                          options_.source + ": " + path + ".eds_cluster_config.eds_config", &src,
                          errors_);
      }
      if (c.has_load_assignment()) {
        Error(path + ".load_assignment", "an EDS cluster takes its endpoints from EDS");
      }
      break;
    }
    case Cluster::ORIGINAL_DST: {
      ClusterInfo::OriginalDst od;
      if (c.lb_policy() != Cluster::CLUSTER_PROVIDED) {
        Error(path + ".lb_policy",
              absl::StrCat("an ORIGINAL_DST cluster needs lb_policy CLUSTER_PROVIDED, not ",
                           Cluster::LbPolicy_Name(c.lb_policy())));
      }
      if (c.has_load_assignment() && c.load_assignment().endpoints_size() > 0) {
        Error(path + ".load_assignment",
              "an ORIGINAL_DST cluster has no endpoints (each connection goes to its original "
              "destination)");
      }
      if (c.health_checks_size() > 0) {
        Error(path + ".health_checks", "an ORIGINAL_DST cluster has no hosts to health check");
      }
      if (c.has_original_dst_lb_config()) {
        const auto& o = c.original_dst_lb_config();
        od.use_http_header = o.use_http_header();
        if (!o.http_header_name().empty()) {
          od.http_header_name = absl::AsciiStrToLower(o.http_header_name());
        }
        if (o.has_upstream_port_override()) {
          uint32_t port = o.upstream_port_override().value();
          if (port == 0 || port > 65535) {
            Error(path + ".original_dst_lb_config.upstream_port_override",
                  "must be within [1, 65535]");
          }
          od.port_override = port;
        }
      }
      PositiveMs(c.has_cleanup_interval(), c.cleanup_interval(), path + ".cleanup_interval", false,
                 &od.cleanup_interval_ms);
      info->original_dst = od;
      break;
    }
    default:
      Error(path + ".type",
            absl::StrCat("cluster type ", Cluster::DiscoveryType_Name(c.type()),
                         " is not supported (STATIC, STRICT_DNS, LOGICAL_DNS, EDS and "
                         "ORIGINAL_DST are)"));
  }
  if (c.has_original_dst_lb_config() && c.type() != Cluster::ORIGINAL_DST) {
    Error(path + ".original_dst_lb_config", "needs type ORIGINAL_DST");
  }
  switch (c.lb_policy()) {
    case Cluster::ROUND_ROBIN:
      info->lb_policy = LbPolicy::kRoundRobin;
      break;
    case Cluster::LEAST_REQUEST:
      info->lb_policy = LbPolicy::kLeastRequest;
      break;
    case Cluster::RANDOM:
      info->lb_policy = LbPolicy::kRandom;
      break;
    case Cluster::RING_HASH:
      info->lb_policy = LbPolicy::kRingHash;
      break;
    case Cluster::MAGLEV:
      info->lb_policy = LbPolicy::kMaglev;
      break;
    case Cluster::CLUSTER_PROVIDED:
      if (c.type() != Cluster::ORIGINAL_DST) {
        Error(path + ".lb_policy", "CLUSTER_PROVIDED is for ORIGINAL_DST clusters only");
      }
      break;
    default:
      Error(path + ".lb_policy",
            absl::StrCat("lb_policy ", Cluster::LbPolicy_Name(c.lb_policy()),
                         " is not supported (ROUND_ROBIN, LEAST_REQUEST, RANDOM, RING_HASH, "
                         "MAGLEV and, for ORIGINAL_DST clusters, CLUSTER_PROVIDED are)"));
  }
  if (c.has_ring_hash_lb_config()) {
    const auto& r = c.ring_hash_lb_config();
    std::string rp = path + ".ring_hash_lb_config";
    if (c.lb_policy() != Cluster::RING_HASH) Error(rp, "needs lb_policy RING_HASH");
    if (r.hash_function() != Cluster::RingHashLbConfig::XX_HASH) {
      Error(rp + ".hash_function", "only XX_HASH is supported");
    }
    if (r.has_minimum_ring_size()) info->ring_min_size = r.minimum_ring_size().value();
    if (r.has_maximum_ring_size()) info->ring_max_size = r.maximum_ring_size().value();
    if (info->ring_max_size > 8 * 1024 * 1024) {
      Error(rp + ".maximum_ring_size", "must be at most 8388608");
    }
    if (info->ring_min_size == 0 || info->ring_min_size > info->ring_max_size) {
      Error(rp + ".minimum_ring_size", "must be within [1, maximum_ring_size]");
    }
  }
  if (c.has_maglev_lb_config()) {
    std::string mp = path + ".maglev_lb_config";
    if (c.lb_policy() != Cluster::MAGLEV) Error(mp, "needs lb_policy MAGLEV");
    if (c.maglev_lb_config().has_table_size()) {
      uint64_t m = c.maglev_lb_config().table_size().value();
      bool prime = m >= 2 && m <= 5000011;
      for (uint64_t d = 2; prime && d * d <= m; ++d) prime = m % d != 0;
      if (!prime) Error(mp + ".table_size", "must be a prime no larger than 5000011");
      info->maglev_table_size = m;
    }
  }
  if (c.has_common_lb_config() && c.common_lb_config().has_healthy_panic_threshold()) {
    double t = c.common_lb_config().healthy_panic_threshold().value();
    if (t < 0 || t > 100) {
      Error(path + ".common_lb_config.healthy_panic_threshold", "must be within [0, 100]");
    }
    info->panic_threshold = t;
  }
  info->locality_weighted = c.common_lb_config().has_locality_weighted_lb_config();
  // RuntimeDouble: the default value; a runtime key would make it change at runtime, which rpx's
  // runtime does not do for these.
  auto runtime_double = [&](const envoy::config::core::v3::RuntimeDouble& r,
                            const std::string& rp) {
    if (!r.runtime_key().empty()) {
      Error(rp + ".runtime_key", "runtime overrides of this value are not supported");
    }
    return r.default_value();
  };
  auto slow_start = [&](const Cluster::SlowStartConfig& ss, const std::string& sp) {
    ClusterInfo::SlowStart out;
    PositiveMs(ss.has_slow_start_window(), ss.slow_start_window(), sp + ".slow_start_window",
               /*required=*/true, &out.window_ms);
    if (ss.has_aggression()) {
      out.aggression = runtime_double(ss.aggression(), sp + ".aggression");
      if (!(out.aggression > 0)) Error(sp + ".aggression.default_value", "must be positive");
    }
    if (ss.has_min_weight_percent()) {
      double v = ss.min_weight_percent().value();
      if (v < 0 || v > 100) Error(sp + ".min_weight_percent", "must be within [0, 100]");
      out.min_weight = v / 100;
    }
    info->slow_start = out;
  };
  if (c.has_round_robin_lb_config()) {
    std::string rp = path + ".round_robin_lb_config";
    if (c.lb_policy() != Cluster::ROUND_ROBIN) Error(rp, "needs lb_policy ROUND_ROBIN");
    if (c.round_robin_lb_config().has_slow_start_config()) {
      slow_start(c.round_robin_lb_config().slow_start_config(), rp + ".slow_start_config");
    }
  }
  if (c.has_least_request_lb_config()) {
    const auto& lr = c.least_request_lb_config();
    std::string lp = path + ".least_request_lb_config";
    if (c.lb_policy() != Cluster::LEAST_REQUEST) Error(lp, "needs lb_policy LEAST_REQUEST");
    if (lr.has_choice_count()) {
      info->choice_count = lr.choice_count().value();
      if (info->choice_count < 2 || info->choice_count > 100) {
        Error(lp + ".choice_count", "must be within [2, 100]");
      }
    }
    if (lr.has_active_request_bias()) {
      // rpx weighs hosts by active requests per unit of weight: Envoy's bias 1.0.
      double bias = runtime_double(lr.active_request_bias(), lp + ".active_request_bias");
      if (bias != 1.0) {
        Error(lp + ".active_request_bias",
              "only 1.0 (active requests per unit of weight) is "
              "supported");
      }
    }
    if (lr.has_slow_start_config()) slow_start(lr.slow_start_config(), lp + ".slow_start_config");
  }
  if (c.health_checks_size() > 1) {
    Error(path + ".health_checks", "one health check per cluster is supported");
  } else if (c.health_checks_size() == 1) {
    info->health_check = HealthCheck(c.health_checks(0), path + ".health_checks[0]");
  }
  if (c.has_outlier_detection()) {
    info->outlier = Outlier(c.outlier_detection(), path + ".outlier_detection");
    if (info->outlier) info->outlier_sink = std::make_shared<OutlierSink>();
  }
  if (info->health_check || info->outlier) info->health = std::make_shared<ClusterHealth>();
  if (c.has_connect_timeout()) {
    info->connect_timeout_ms = Ms(c.connect_timeout());
    if (info->connect_timeout_ms == 0) Error(path + ".connect_timeout", "must be positive");
  }
  if (c.has_per_connection_buffer_limit_bytes()) {
    info->buffer_limit = c.per_connection_buffer_limit_bytes().value();
  }
  if (c.has_upstream_bind_config()) {
    const auto& bind = c.upstream_bind_config();
    std::string bp = path + ".upstream_bind_config";
    int family = 0;
    if (bind.has_source_address()) {
      SocketAddress source;
      if (SocketAddr(bind.source_address(), bp + ".source_address", &source)) {
        info->source_address = source;
        family = source.family();
      }
    }
    if (bind.has_freebind()) {
      SocketOption o;
      o.description = "IP_FREEBIND (upstream_bind_config.freebind)";
      o.level = IPPROTO_IP;
      o.name = IP_FREEBIND;
      o.int_value = bind.freebind().value() ? 1 : 0;
      info->socket_options.push_back(o);
    }
    Options(bind.socket_options(), bp + ".socket_options", /*prebind_only=*/true,
            &info->socket_options);
    TryOptions(info->socket_options, family, bp);
  }
  uint32_t max_connections = 1024, max_pending = 1024, max_requests = 1024, max_retries = 3;
  double budget_percent = -1;
  uint32_t budget_min = 3;
  for (int i = 0; i < c.circuit_breakers().thresholds_size(); ++i) {
    const auto& t = c.circuit_breakers().thresholds(i);
    std::string tp = absl::StrCat(path, ".circuit_breakers.thresholds[", i, "]");
    if (t.priority() != envoy::config::core::v3::DEFAULT) {
      Error(tp + ".priority", "only the DEFAULT priority is supported");
      continue;
    }
    if (t.has_max_connections()) max_connections = t.max_connections().value();
    if (t.has_max_pending_requests()) max_pending = t.max_pending_requests().value();
    if (t.has_max_requests()) max_requests = t.max_requests().value();
    if (t.has_max_retries()) max_retries = t.max_retries().value();
    if (t.has_retry_budget()) {
      const auto& b = t.retry_budget();
      budget_percent = b.has_budget_percent() ? b.budget_percent().value() : 20.0;
      if (budget_percent < 0 || budget_percent > 100) {
        Error(tp + ".retry_budget.budget_percent", "must be within [0, 100]");
      }
      if (b.has_min_retry_concurrency()) budget_min = b.min_retry_concurrency().value();
    }
  }
  info->resources =
      std::make_shared<ClusterResources>(max_connections, max_pending, max_requests, max_retries);
  if (budget_percent >= 0) info->resources->SetRetryBudget(budget_percent, budget_min);
  auto apply_common = [&](const envoy::config::core::v3::HttpProtocolOptions& o,
                          const std::string& op) {
    // Downstream-only here: a cluster's connections have no such limits yet.
    if (o.has_max_connection_duration()) {
      Error(op + ".max_connection_duration", "is not supported on upstream connections");
    }
    if (o.has_max_stream_duration()) {
      Error(op + ".max_stream_duration", "is not supported on upstream connections");
    }
    if (o.has_idle_timeout()) info->idle_timeout_ms = Ms(o.idle_timeout());
    if (o.has_max_headers_count()) info->max_response_headers_count = o.max_headers_count().value();
    if (o.has_max_requests_per_connection()) {
      info->max_requests_per_connection = o.max_requests_per_connection().value();
    }
  };
  if (c.has_common_http_protocol_options()) {
    apply_common(c.common_http_protocol_options(), path + ".common_http_protocol_options");
  }
  if (c.has_max_requests_per_connection()) {
    info->max_requests_per_connection = c.max_requests_per_connection().value();
  }
  for (const auto& [key, any] : c.typed_extension_protocol_options()) {
    std::string kp = absl::StrCat(path, ".typed_extension_protocol_options[\"", key, "\"]");
    if (key != kUpstreamHttpOptions && key != "envoy.upstreams.http.http_protocol_options") {
      Error(kp,
            "unsupported extension (only envoy.extensions.upstreams.http.v3."
            "HttpProtocolOptions is)");
      continue;
    }
    envoy::extensions::upstreams::http::v3::HttpProtocolOptions opts;
    if (!any.UnpackTo(&opts)) {
      Error(kp, absl::StrCat("expected a ", kUpstreamHttpOptions, ", got ", any.type_url()));
      continue;
    }
    if (opts.has_common_http_protocol_options()) {
      apply_common(opts.common_http_protocol_options(), kp + ".common_http_protocol_options");
    }
    const auto& up = opts.upstream_http_protocol_options();
    info->auto_sni = up.auto_sni();
    info->auto_san_validation = up.auto_san_validation();
    info->override_auto_sni_header = absl::AsciiStrToLower(up.override_auto_sni_header());
    using Opts = envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
    switch (opts.upstream_protocol_options_case()) {
      case Opts::kExplicitHttpConfig: {
        const auto& e = opts.explicit_http_config();
        if (e.has_http2_protocol_options()) {
          info->protocol = ClusterInfo::Protocol::kHttp2;
          BuildHttp2Options(e.http2_protocol_options(),
                            kp + ".explicit_http_config.http2_protocol_options",
                            &info->http2_options);
        }
        break;
      }
      case Opts::kAutoConfig: {
        const auto& a = opts.auto_config();
        info->protocol = ClusterInfo::Protocol::kAuto;
        if (a.has_http2_protocol_options()) {
          BuildHttp2Options(a.http2_protocol_options(), kp + ".auto_config.http2_protocol_options",
                            &info->http2_options);
        }
        break;
      }
      case Opts::kUseDownstreamProtocolConfig:
        Error(kp + ".use_downstream_protocol_config",
              "is not supported (use explicit_http_config or auto_config)");
        break;
      default:
        break;
    }
  }
  if (c.has_http2_protocol_options()) {
    info->protocol = ClusterInfo::Protocol::kHttp2;
    BuildHttp2Options(c.http2_protocol_options(), path + ".http2_protocol_options",
                      &info->http2_options);
  }
  if (c.has_transport_socket()) {
    UpstreamTransport(c.transport_socket(), path + ".transport_socket", info.get(),
                      &info->transport);
  }
  for (int i = 0; i < c.transport_socket_matches_size(); ++i) {
    const auto& m = c.transport_socket_matches(i);
    std::string mp = absl::StrCat(path, ".transport_socket_matches[", i, "]");
    ClusterInfo::Transport t;
    t.name = m.name();
    if (m.name().empty()) Error(mp + ".name", "is required");
    for (const auto& [key, value] : m.match().fields()) t.match[key] = value.SerializeAsString();
    if (!m.has_transport_socket()) {
      Error(mp + ".transport_socket", "is required");
      continue;
    }
    UpstreamTransport(m.transport_socket(), mp + ".transport_socket", info.get(), &t);
    info->transport_matches.push_back(std::move(t));
  }
  std::string upo = path + ".typed_extension_protocol_options.upstream_http_protocol_options";
  if (info->auto_san_validation && !info->transport.tls && !info->transport.tls_required) {
    Error(upo + ".auto_san_validation", "needs a TLS transport_socket");
  } else if (info->auto_san_validation && info->transport.tls && !info->transport.verifies) {
    Error(upo + ".auto_san_validation",
          "needs a validation_context with a trusted_ca to check the certificate against");
  }
  if (info->max_response_headers_count == 0) {
    Error(path + ".common_http_protocol_options.max_headers_count", "must be positive");
  }
  // Hosts.
  auto hosts = std::make_shared<HostSet>();
  DnsCluster dns_cluster;
  dns_cluster.cluster = c.name();
  dns_cluster.stats_slots = options_.stats_slots;
  dns_cluster.logical = logical_dns;
  switch (c.dns_lookup_family()) {
    case Cluster::V4_ONLY:
      dns_cluster.family = DnsCluster::Family::kV4Only;
      break;
    case Cluster::V6_ONLY:
      dns_cluster.family = DnsCluster::Family::kV6Only;
      break;
    case Cluster::V4_PREFERRED:
      dns_cluster.family = DnsCluster::Family::kV4Preferred;
      break;
    case Cluster::ALL:
      dns_cluster.family = DnsCluster::Family::kAll;
      break;
    default:
      break;
  }
  PositiveMs(c.has_dns_refresh_rate(), c.dns_refresh_rate(), path + ".dns_refresh_rate", false,
             &dns_cluster.refresh_ms);
  if (c.has_dns_failure_refresh_rate()) {
    const auto& fr = c.dns_failure_refresh_rate();
    std::string fp = path + ".dns_failure_refresh_rate";
    PositiveMs(fr.has_base_interval(), fr.base_interval(), fp + ".base_interval", true,
               &dns_cluster.failure_base_ms);
    dns_cluster.failure_max_ms = dns_cluster.failure_base_ms * 10;  // Envoy's default
    if (fr.has_max_interval()) {
      PositiveMs(true, fr.max_interval(), fp + ".max_interval", false, &dns_cluster.failure_max_ms);
      if (dns_cluster.failure_max_ms < dns_cluster.failure_base_ms) {
        Error(fp + ".max_interval", "must not be shorter than base_interval");
      }
    }
  }
  dns_cluster.respect_dns_ttl = c.respect_dns_ttl();
  // The resolver: typed_dns_resolver_config wins over dns_resolution_config, which wins over the
  // deprecated dns_resolvers and use_tcp_for_dns_lookups (Envoy's order).
  if (c.has_typed_dns_resolver_config()) {
    dns_cluster.resolver =
        TypedDnsResolver(c.typed_dns_resolver_config(), path + ".typed_dns_resolver_config");
  } else if (c.has_dns_resolution_config()) {
    DnsResolverConfig r;
    const auto& rc = c.dns_resolution_config();
    if (rc.resolvers().empty()) {
      Error(path + ".dns_resolution_config.resolvers", "needs at least one resolver");
    }
    DnsResolvers(rc.resolvers(), path + ".dns_resolution_config.resolvers", &r);
    DnsResolverOptions(rc.dns_resolver_options(), &r);
    dns_cluster.resolver = r;
  } else if (!c.dns_resolvers().empty() || c.use_tcp_for_dns_lookups()) {
    DnsResolverConfig r;
    DnsResolvers(c.dns_resolvers(), path + ".dns_resolvers", &r);
    r.use_tcp = c.use_tcp_for_dns_lookups();
    dns_cluster.resolver = r;
  }
  // On a cluster that resolves nothing the DNS fields mean nothing, and Envoy accepts them there
  // (control planes set dns_refresh_rate or a resolver on every cluster): accepted, unused.
  const auto& la = c.load_assignment();
  if (!la.cluster_name().empty() && la.cluster_name() != c.name()) {
    Error(path + ".load_assignment.cluster_name",
          absl::StrCat("'", la.cluster_name(), "' differs from the cluster name '", c.name(), "'"));
  }
  BuildHosts(la, path + ".load_assignment", dns ? &dns_cluster : nullptr, hosts.get());
  dns_cluster.overprovisioning_factor = hosts->overprovisioning_factor;
  dns_cluster.weighted_priority_health = hosts->weighted_priority_health;
  if (dns && dns_cluster.targets.empty()) {
    Error(path + ".load_assignment", absl::StrCat("a ", logical_dns ? "LOGICAL_DNS" : "STRICT_DNS",
                                                  " cluster needs at least one endpoint"));
  }
  if (logical_dns && dns_cluster.targets.size() > 1) {
    Error(
        path + ".load_assignment",
        "a LOGICAL_DNS cluster takes exactly one endpoint (Envoy's rule: it is one logical host)");
  }
  if (errors_->size() != errors_before) return;
  info->stats_slots = std::max<uint32_t>(1, options_.stats_slots);
  info->stats.reset(new ClusterStats[info->stats_slots]);
  // Resolved later, asynchronously, by the main thread (never here: --mode validate and config
  // updates must not wait on DNS); until the first answer the cluster has no hosts.
  if (dns) out->dns_clusters.push_back(std::move(dns_cluster));
  out->clusters[c.name()] = ClusterEntry{std::move(info), std::move(hosts)};
}

void Builder::BuildHosts(const envoy::config::endpoint::v3::ClusterLoadAssignment& la,
                         const std::string& path, DnsCluster* dns, HostSet* hosts) {
  if (la.has_policy()) {
    const auto& policy = la.policy();
    if (policy.has_overprovisioning_factor()) {
      hosts->overprovisioning_factor = policy.overprovisioning_factor().value();
      if (hosts->overprovisioning_factor == 0) {
        Error(path + ".policy.overprovisioning_factor", "must be positive");
      }
    }
    hosts->weighted_priority_health = policy.weighted_priority_health();
  }
  for (int i = 0; i < la.endpoints_size(); ++i) {
    const auto& loc = la.endpoints(i);
    std::string lp = absl::StrCat(path, ".endpoints[", i, "]");
    if (loc.priority() > 128) Error(lp + ".priority", "must be at most 128");
    uint32_t locality_weight = 0;
    if (loc.has_load_balancing_weight()) {
      locality_weight = loc.load_balancing_weight().value();
      if (locality_weight == 0) Error(lp + ".load_balancing_weight", "must be at least 1");
    }
    std::string locality = absl::StrCat(loc.locality().region(), "/", loc.locality().zone(), "/",
                                        loc.locality().sub_zone());
    for (int j = 0; j < loc.lb_endpoints_size(); ++j) {
      const auto& lbe = loc.lb_endpoints(j);
      std::string ep = absl::StrCat(lp, ".lb_endpoints[", j, "]");
      auto hs = lbe.health_status();
      // As Envoy: such endpoints take no traffic (unless their level panics), but they count in
      // the size of their priority level.
      bool eds_unhealthy = hs == envoy::config::core::v3::UNHEALTHY ||
                           hs == envoy::config::core::v3::DRAINING ||
                           hs == envoy::config::core::v3::TIMEOUT;
      uint32_t weight = lbe.has_load_balancing_weight() ? lbe.load_balancing_weight().value() : 1;
      if (weight == 0) {
        Error(ep + ".load_balancing_weight", "must be at least 1");
        continue;
      }
      const auto& addr = lbe.endpoint().address();
      if (!addr.has_socket_address()) {
        Error(ep + ".endpoint.address", "socket_address is required");
        continue;
      }
      const auto& sa = addr.socket_address();
      if (sa.port_value() == 0 || sa.port_value() > 65535) {
        Error(ep + ".endpoint.address.socket_address.port_value", "must be within [1, 65535]");
        continue;
      }
      if (dns) {
        if (eds_unhealthy) continue;  // a DNS target is resolved to take traffic, or left out
        dns->targets.push_back(
            {sa.address(), sa.port_value(), weight, loc.priority(), locality, locality_weight});
        continue;
      }
      SocketAddress a;
      if (!Address(addr, ep + ".endpoint.address", &a)) continue;
      auto h = std::make_shared<Host>();
      h->address = a;
      h->hostname = lbe.endpoint().hostname();
      h->weight = weight;
      h->priority = loc.priority();
      h->locality = locality;
      h->locality_weight = locality_weight;
      h->eds_unhealthy = eds_unhealthy;
      h->AllocateStats(options_.stats_slots);
      auto md = lbe.metadata().filter_metadata().find("envoy.transport_socket_match");
      if (md != lbe.metadata().filter_metadata().end()) {
        for (const auto& [key, value] : md->second.fields()) {
          h->transport_socket_match[key] = value.SerializeAsString();
        }
      }
      hosts->push_back(std::move(h));
    }
  }
}

void Builder::BuildHttp2Options(const envoy::config::core::v3::Http2ProtocolOptions& o,
                                const std::string& path, Http2Options* out, bool downstream) {
  // Envoy's bounds (its validation rules on these fields).
  auto bounded = [&](bool has, uint32_t value, const char* field, uint32_t lo, uint32_t hi,
                     uint32_t* dst) {
    if (!has) return;
    if (value < lo || value > hi) {
      Error(absl::StrCat(path, ".", field), absl::StrCat("must be within [", lo, ", ", hi, "]"));
      return;
    }
    *dst = value;
  };
  bounded(o.has_hpack_table_size(), o.hpack_table_size().value(), "hpack_table_size", 0, UINT32_MAX,
          &out->hpack_table_size);
  bounded(o.has_max_concurrent_streams(), o.max_concurrent_streams().value(),
          "max_concurrent_streams", 1, 2147483647, &out->max_concurrent_streams);
  bounded(o.has_initial_stream_window_size(), o.initial_stream_window_size().value(),
          "initial_stream_window_size", 65535, 2147483647, &out->initial_stream_window_size);
  bounded(o.has_initial_connection_window_size(), o.initial_connection_window_size().value(),
          "initial_connection_window_size", 65535, 2147483647,
          &out->initial_connection_window_size);
  bounded(o.has_max_outbound_frames(), o.max_outbound_frames().value(), "max_outbound_frames", 1,
          UINT32_MAX, &out->max_outbound_frames);
  bounded(o.has_max_outbound_control_frames(), o.max_outbound_control_frames().value(),
          "max_outbound_control_frames", 1, UINT32_MAX, &out->max_outbound_control_frames);
  bounded(o.has_max_consecutive_inbound_frames_with_empty_payload(),
          o.max_consecutive_inbound_frames_with_empty_payload().value(),
          "max_consecutive_inbound_frames_with_empty_payload", 0, UINT32_MAX,
          &out->max_consecutive_inbound_frames_with_empty_payload);
  bounded(o.has_max_inbound_priority_frames_per_stream(),
          o.max_inbound_priority_frames_per_stream().value(),
          "max_inbound_priority_frames_per_stream", 0, UINT32_MAX,
          &out->max_inbound_priority_frames_per_stream);
  bounded(o.has_max_inbound_window_update_frames_per_data_frame_sent(),
          o.max_inbound_window_update_frames_per_data_frame_sent().value(),
          "max_inbound_window_update_frames_per_data_frame_sent", 1, UINT32_MAX,
          &out->max_inbound_window_update_frames_per_data_frame_sent);
  if (o.has_override_stream_error_on_invalid_http_message()) {
    out->stream_error_on_invalid_http_message =
        o.override_stream_error_on_invalid_http_message().value();
  } else if (o.stream_error_on_invalid_http_messaging()) {
    out->stream_error_on_invalid_http_message = true;
  }
  if (o.allow_connect()) {
    if (downstream) {
      out->allow_connect = true;
    } else {
      Error(path + ".allow_connect",
            "extended CONNECT to upstreams is not supported (a client's WebSocket over HTTP/2 is: "
            "allow_connect on the connection manager's http2_protocol_options)");
    }
  }
  if (o.allow_metadata()) Error(path + ".allow_metadata", "METADATA frames are not supported");
}

bool Builder::BuildHttp(const HttpConnectionManager& hcm, const std::string& path,
                        uint32_t buffer_limit, FilterChainConfig* lc) {
  size_t errors_before = errors_->size();
  lc->route_config_path = path;
  auto http = std::make_shared<HttpConfig>();
  http->stat_prefix = hcm.stat_prefix();
  if (hcm.stat_prefix().empty()) Error(path + ".stat_prefix", "is required");
  using HCM = HttpConnectionManager;
  switch (hcm.codec_type()) {
    case HCM::AUTO:
      http->codec = HttpConfig::Codec::kAuto;
      break;
    case HCM::HTTP1:
      http->codec = HttpConfig::Codec::kHttp1;
      break;
    case HCM::HTTP2:
      http->codec = HttpConfig::Codec::kHttp2;
      break;
    default:
      Error(path + ".codec_type", "only AUTO, HTTP1 and HTTP2 are supported (not HTTP3)");
  }
  if (hcm.has_http2_protocol_options()) {
    BuildHttp2Options(hcm.http2_protocol_options(), path + ".http2_protocol_options", &http->http2,
                      /*downstream=*/true);
  }
  if (hcm.http_filters_size() == 0) {
    Error(path + ".http_filters", "the router filter (envoy.filters.http.router) is required");
  }
  for (int i = 0; i < hcm.http_filters_size(); ++i) {
    const auto& f = hcm.http_filters(i);
    std::string fp = absl::StrCat(path, ".http_filters[", i, "]");
    bool is_router = f.has_typed_config()
                         ? f.typed_config().type_url().find(kRouterType) != std::string::npos
                         : f.name() == "envoy.filters.http.router";
    if (!is_router) {
      Error(fp, absl::StrCat("http filter '", f.name(),
                             "' is not supported (only envoy.filters.http.router is)"));
    } else if (i != hcm.http_filters_size() - 1) {
      Error(fp, "the router filter must be the last http filter");
    }
  }
  if (hcm.has_stream_idle_timeout()) http->stream_idle_timeout_ms = Ms(hcm.stream_idle_timeout());
  if (hcm.has_request_timeout()) http->request_timeout_ms = Ms(hcm.request_timeout());
  if (hcm.has_request_headers_timeout()) {
    http->request_headers_timeout_ms = Ms(hcm.request_headers_timeout());
  }
  if (hcm.has_max_request_headers_kb()) {
    uint32_t kb = hcm.max_request_headers_kb().value();
    if (kb < 1 || kb > 8192) {
      Error(path + ".max_request_headers_kb", "must be within [1, 8192]");
    }
    http->max_request_headers_kb = kb;
  }
  const auto& common = hcm.common_http_protocol_options();
  if (common.has_idle_timeout()) http->idle_timeout_ms = Ms(common.idle_timeout());
  if (common.has_max_headers_count()) {
    http->max_headers_count = common.max_headers_count().value();
    if (http->max_headers_count == 0) {
      Error(path + ".common_http_protocol_options.max_headers_count", "must be positive");
    }
  }
  if (common.has_max_requests_per_connection()) {
    http->max_requests_per_connection = common.max_requests_per_connection().value();
  }
  if (common.has_max_connection_duration()) {
    http->max_connection_duration_ms = Ms(common.max_connection_duration());
  }
  if (common.has_max_stream_duration()) {
    http->max_stream_duration_ms = Ms(common.max_stream_duration());
  }
  switch (common.headers_with_underscores_action()) {
    case envoy::config::core::v3::HttpProtocolOptions::REJECT_REQUEST:
      http->headers_with_underscores = HttpConfig::Underscores::kReject;
      break;
    case envoy::config::core::v3::HttpProtocolOptions::DROP_HEADER:
      http->headers_with_underscores = HttpConfig::Underscores::kDrop;
      break;
    default:
      break;
  }
  http->use_remote_address = hcm.has_use_remote_address() && hcm.use_remote_address().value();
  http->skip_xff_append = hcm.skip_xff_append();
  http->generate_request_id = !hcm.has_generate_request_id() || hcm.generate_request_id().value();
  if (!hcm.server_name().empty()) http->server_name = hcm.server_name();
  using FCC = HttpConfig::ForwardClientCert;
  switch (hcm.forward_client_cert_details()) {
    case HCM::FORWARD_ONLY:
      http->forward_client_cert = FCC::kForwardOnly;
      break;
    case HCM::APPEND_FORWARD:
      http->forward_client_cert = FCC::kAppendForward;
      break;
    case HCM::SANITIZE_SET:
      http->forward_client_cert = FCC::kSanitizeSet;
      break;
    case HCM::ALWAYS_FORWARD_ONLY:
      http->forward_client_cert = FCC::kAlwaysForwardOnly;
      break;
    default:
      break;
  }
  const auto& details = hcm.set_current_client_cert_details();
  http->client_cert_details.subject = details.has_subject() && details.subject().value();
  http->client_cert_details.cert = details.cert();
  http->client_cert_details.chain = details.chain();
  http->client_cert_details.dns = details.dns();
  http->client_cert_details.uri = details.uri();
  switch (hcm.server_header_transformation()) {
    case HCM::OVERWRITE:
      http->server_header = HttpConfig::ServerHeader::kOverwrite;
      break;
    case HCM::APPEND_IF_ABSENT:
      http->server_header = HttpConfig::ServerHeader::kAppendIfAbsent;
      break;
    case HCM::PASS_THROUGH:
      http->server_header = HttpConfig::ServerHeader::kPassThrough;
      break;
    default:
      break;
  }
  for (int i = 0; i < hcm.upgrade_configs_size(); ++i) {
    const auto& u = hcm.upgrade_configs(i);
    std::string up = absl::StrCat(path, ".upgrade_configs[", i, "]");
    HttpConfig::Upgrade entry;
    entry.type = absl::AsciiStrToLower(u.upgrade_type());
    entry.enabled = !u.has_enabled() || u.enabled().value();
    if (entry.type.empty()) Error(up + ".upgrade_type", "is required");
    if (entry.type == "connect" || entry.type == "h2c") {
      Error(up + ".upgrade_type", absl::StrCat("'", u.upgrade_type(), "' cannot be tunnelled"));
    }
    for (const auto& prev : http->upgrades) {
      if (prev.type == entry.type) Error(up + ".upgrade_type", "is listed twice");
    }
    http->upgrades.push_back(std::move(entry));
  }
  http->buffer_limit = buffer_limit;
  if (hcm.has_scheme_header_transformation()) {
    const auto& t = hcm.scheme_header_transformation();
    // match_upstream sets :scheme from the upstream's transport, which matters to HTTP/2
    // upstreams only; rpx's are HTTP/1, where no :scheme is sent.
    if (!t.scheme_to_overwrite().empty()) {
      if (t.scheme_to_overwrite() != "http" && t.scheme_to_overwrite() != "https") {
        Error(path + ".scheme_header_transformation.scheme_to_overwrite",
              absl::StrCat("must be http or https, not '", t.scheme_to_overwrite(), "'"));
      }
      http->scheme_to_overwrite = t.scheme_to_overwrite();
    }
  }
  {
    std::vector<std::string> log_errors;
    BuildAccessLogs(hcm.access_log(), path, options_.log_files, http.get(), &log_errors);
    if (hcm.has_local_reply_config()) {
      http->local_reply =
          BuildLocalReply(hcm.local_reply_config(), path + ".local_reply_config", &log_errors);
    }
    ErrorLines(log_errors);
  }
  if (hcm.has_rds()) {
    const auto& rds = hcm.rds();
    if (rds.route_config_name().empty()) {
      Error(path + ".rds.route_config_name", "is required");
    }
    ParseConfigSource(rds.config_source(), options_.source + ": " + path + ".rds.config_source",
                      &lc->rds_source, errors_);
    if (rds.config_source().config_source_specifier_case() ==
        envoy::config::core::v3::ConfigSource::CONFIG_SOURCE_SPECIFIER_NOT_SET) {
      Error(path + ".rds.config_source", "is required (ads: {}, api_config_source or path)");
    }
    lc->rds_name = rds.route_config_name();
    if (rds.config_source().has_initial_fetch_timeout()) {
      lc->initial_fetch_timeout_ms = Ms(rds.config_source().initial_fetch_timeout());
    }
  } else if (!hcm.has_route_config()) {
    Error(path + ".route_config", "route_config or rds is required");
  } else {
    auto table = RouteTable::Create(hcm.route_config(), "route_config");
    if (!table.ok()) {
      errors_->push_back(absl::StrCat(options_.source, ": ", path, ".", table.status().message()));
    } else {
      lc->routes = *table;
    }
  }
  if (errors_->size() != errors_before) return false;
  http->stats_slots = std::max<uint32_t>(1, options_.stats_slots);
  http->stats.reset(new HttpStats[http->stats_slots]);
  lc->http = std::move(http);
  return true;
}

void Builder::BuildListener(const Listener& l, const std::string& path, ServerConfig* out) {
  size_t errors_before = errors_->size();
  auto lc = std::make_shared<ListenerConfig>();
  lc->name = l.name();
  // A static listener may go unnamed (Envoy's examples often do): it is named after its address,
  // which no other listener may share. An xDS listener's name is its resource name.
  bool is_static = absl::StartsWith(path, "static_resources.");
  if (l.name().empty() && !is_static) Error(path + ".name", "is required");
  if (!Address(l.address(), path + ".address", &lc->address)) return;
  if (lc->name.empty()) lc->name = lc->address.ToString();
  for (const auto& other : out->listeners) {
    if (other->name == lc->name) {
      Error(path + ".name", absl::StrCat("duplicate listener name '", lc->name, "'"));
    }
  }
  for (const auto& other : out->listeners) {
    if (other->address == lc->address && lc->address.port() != 0) {
      Error(path + ".address", absl::StrCat("address ", lc->address.ToString(),
                                            " is already used by listener '", other->name, "'"));
    }
  }
  lc->stat_prefix = l.stat_prefix();
  if (lc->stat_prefix.empty()) {
    // Envoy's default: the address, with ':' made '_' ("127.0.0.1_10000").
    lc->stat_prefix = absl::StrReplaceAll(lc->address.ToString(), {{":", "_"}});
  }
  if (l.has_per_connection_buffer_limit_bytes()) {
    lc->buffer_limit = l.per_connection_buffer_limit_bytes().value();
    if (lc->buffer_limit < 1024) {
      Error(path + ".per_connection_buffer_limit_bytes", "must be at least 1024");
    }
  }
  lc->reuse_port = !l.has_enable_reuse_port() || l.enable_reuse_port().value();
  lc->inbound = l.traffic_direction() == envoy::config::core::v3::INBOUND;
  Options(l.socket_options(), path + ".socket_options", /*prebind_only=*/false,
          &lc->socket_options);
  for (int i = 0; i < l.listener_filters_size(); ++i) {
    const auto& f = l.listener_filters(i);
    std::string fp = absl::StrCat(path, ".listener_filters[", i, "]");
    // By the typed_config's type, or (without one) by Envoy's well-known filter name.
    auto is = [&f](const char* type, const char* name) {
      return f.has_typed_config() ? f.typed_config().type_url().find(type) != std::string::npos
                                  : f.name() == name;
    };
    if (is(kTlsInspectorType, "envoy.filters.listener.tls_inspector")) {
      lc->inspect_tls = true;
    } else if (is(kHttpInspectorType, "envoy.filters.listener.http_inspector")) {
      lc->inspect_http = true;
    } else if (is(kOriginalDstType, "envoy.filters.listener.original_dst")) {
      lc->original_dst = true;
    } else {
      Error(fp, absl::StrCat("listener filter '", f.name(),
                             "' is not supported (envoy.filters.listener.tls_inspector, "
                             "http_inspector and original_dst are)"));
    }
  }
  lc->use_original_dst = l.has_use_original_dst() && l.use_original_dst().value();
  lc->bind_to_port = !l.has_bind_to_port() || l.bind_to_port().value();
  if (lc->use_original_dst && !lc->bind_to_port) {
    Error(path + ".use_original_dst",
          "a listener without a socket (bind_to_port: false) receives no connection to hand on");
  }
  if (l.has_listener_filters_timeout()) {
    lc->listener_filters_timeout_ms = Ms(l.listener_filters_timeout());
  }
  lc->continue_on_listener_filters_timeout = l.continue_on_listener_filters_timeout();
  if (l.filter_chains_size() == 0 && !l.has_default_filter_chain()) {
    Error(path + ".filter_chains",
          "at least one filter chain (or a default_filter_chain) is required");
    return;
  }
  for (int i = 0; i < l.filter_chains_size(); ++i) {
    std::string cp = absl::StrCat(path, ".filter_chains[", i, "]");
    auto chain = BuildChain(l.filter_chains(i), cp, *lc);
    if (!chain) continue;
    for (size_t j = 0; j < lc->chains.size(); ++j) {
      if (lc->chains[j]->match == chain->match) {
        Error(cp + ".filter_chain_match",
              absl::StrCat("the same as filter_chains[", j,
                           "]'s: two chains with one match cannot be told apart"));
      }
    }
    lc->chains.push_back(std::move(chain));
  }
  if (l.has_default_filter_chain()) {
    std::string cp = path + ".default_filter_chain";
    if (l.default_filter_chain().has_filter_chain_match()) {
      Error(cp + ".filter_chain_match", "a default filter chain matches what no other chain does");
    }
    auto chain = BuildChain(l.default_filter_chain(), cp, *lc);
    if (chain) {
      lc->chains.push_back(std::move(chain));
      lc->has_default_chain = true;
    }
  }
  if (errors_->size() != errors_before) return;
  bool all_http = !lc->chains.empty();
  for (const auto& c : lc->chains) all_http &= c->http != nullptr;
  if (all_http) {
    // rpx's own option, ahead of the configured ones (which may override it): accepted sockets
    // start out of quick-ACK mode, as HAProxy's HTTP listeners' do, so a new connection's request
    // is acknowledged by the response instead of by a pure ACK ahead of it. Set once listening
    // (listen(2) resets it); inherited by accepted sockets. Not with TCP proxy chains: an
    // interactive protocol's small writes could wait on the delayed ACK under the client's Nagle.
    SocketOption delay_acks;
    delay_acks.description = "TCP_QUICKACK 0 (rpx's default for HTTP listeners)";
    delay_acks.level = IPPROTO_TCP;
    delay_acks.name = TCP_QUICKACK;
    delay_acks.int_value = 0;
    delay_acks.state = SocketOption::State::kListening;
    lc->socket_options.insert(lc->socket_options.begin(), std::move(delay_acks));
  }
  for (const auto& c : lc->chains) {
    // A chain that matches on SNI, ALPN or the transport protocol needs the ClientHello read
    // first: as Envoy once did, rpx inspects it even when tls_inspector is not listed.
    lc->inspect_tls |= c->match.NeedsClientHello();
    lc->needs_local_address |= c->match.NeedsLocalAddress();
  }
  lc->single_catch_all = lc->chains.size() == 1 && lc->chains[0]->match == FilterChainMatch();
  lc->stats = std::make_shared<ListenerStatsBlock>(options_.stats_slots);
  out->listeners.push_back(std::move(lc));
}

bool Builder::Cidrs(
    const google::protobuf::RepeatedPtrField<envoy::config::core::v3::CidrRange>& in,
    const std::string& path, std::vector<CidrRange>* out) {
  bool ok = true;
  for (int i = 0; i < in.size(); ++i) {
    auto r = CidrRange::Create(in[i].address_prefix(),
                               in[i].has_prefix_len() ? in[i].prefix_len().value() : 0);
    if (!r.ok()) {
      Error(absl::StrCat(path, "[", i, "]"), std::string(r.status().message()));
      ok = false;
      continue;
    }
    out->push_back(*r);
  }
  return ok;
}

bool Builder::BuildMatch(const envoy::config::listener::v3::FilterChainMatch& m,
                         const std::string& path, FilterChainMatch* out) {
  size_t before = errors_->size();
  if (m.has_destination_port()) {
    if (m.destination_port().value() == 0 || m.destination_port().value() > 65535) {
      Error(path + ".destination_port", "must be within [1, 65535]");
    }
    out->destination_port = m.destination_port().value();
  }
  Cidrs(m.prefix_ranges(), path + ".prefix_ranges", &out->prefix_ranges);
  for (int i = 0; i < m.server_names_size(); ++i) {
    auto n = NormalizeServerName(m.server_names(i));
    if (!n.ok()) {
      Error(absl::StrCat(path, ".server_names[", i, "]"), std::string(n.status().message()));
      continue;
    }
    out->server_names.push_back(*n);
  }
  out->transport_protocol = m.transport_protocol();
  if (!out->transport_protocol.empty() && out->transport_protocol != "tls" &&
      out->transport_protocol != "raw_buffer") {
    Error(path + ".transport_protocol",
          absl::StrCat("'", out->transport_protocol, "' is never detected (tls or raw_buffer)"));
  }
  out->application_protocols.assign(m.application_protocols().begin(),
                                    m.application_protocols().end());
  Cidrs(m.direct_source_prefix_ranges(), path + ".direct_source_prefix_ranges",
        &out->direct_source_prefix_ranges);
  using CST = envoy::config::listener::v3::FilterChainMatch;
  switch (m.source_type()) {
    case CST::SAME_IP_OR_LOOPBACK:
      out->source_type = FilterChainMatch::SourceType::kSameIpOrLoopback;
      break;
    case CST::EXTERNAL:
      out->source_type = FilterChainMatch::SourceType::kExternal;
      break;
    default:
      break;
  }
  Cidrs(m.source_prefix_ranges(), path + ".source_prefix_ranges", &out->source_prefix_ranges);
  for (int i = 0; i < m.source_ports_size(); ++i) {
    if (m.source_ports(i) == 0 || m.source_ports(i) > 65535) {
      Error(absl::StrCat(path, ".source_ports[", i, "]"), "must be within [1, 65535]");
    }
    out->source_ports.push_back(m.source_ports(i));
  }
  return errors_->size() == before;
}

void Builder::PositiveMs(bool has, const google::protobuf::Duration& d, const std::string& path,
                         bool required, uint64_t* out) {
  if (!has) {
    if (required) Error(path, "is required");
    return;
  }
  *out = Ms(d);
  if (*out == 0) Error(path, "must be at least 1ms");
}

void Builder::DnsResolvers(
    const google::protobuf::RepeatedPtrField<envoy::config::core::v3::Address>& in,
    const std::string& path, DnsResolverConfig* out) {
  for (int i = 0; i < in.size(); ++i) {
    std::string ap = absl::StrCat(path, "[", i, "]");
    if (!in[i].has_socket_address()) {
      Error(ap, "socket_address is required");
      continue;
    }
    const auto& sa = in[i].socket_address();
    // A name server is asked by its address: a name here would need a resolver to find it.
    auto parsed = SocketAddress::FromIpPort(sa.address(), sa.port_value());
    if (!parsed.ok()) {
      Error(ap + ".socket_address.address",
            absl::StrCat("'", sa.address(),
                         "' is not an IP address (a DNS resolver is given by "
                         "its address)"));
      continue;
    }
    out->resolvers.push_back(*parsed);  // port 0: 53
  }
}

void Builder::DnsResolverOptions(const envoy::config::core::v3::DnsResolverOptions& o,
                                 DnsResolverConfig* out) {
  out->use_tcp = o.use_tcp_for_dns_lookups();
  out->no_search = o.no_default_search_domain();
}

std::optional<DnsResolverConfig> Builder::TypedDnsResolver(
    const envoy::config::core::v3::TypedExtensionConfig& t, const std::string& path) {
  envoy::extensions::network::dns_resolver::cares::v3::CaresDnsResolverConfig cares;
  if (!t.has_typed_config() || !t.typed_config().Is<decltype(cares)>()) {
    Error(path + ".typed_config",
          absl::StrCat("unsupported DNS resolver type '", t.typed_config().type_url(),
                       "' (rpx has c-ares: envoy.extensions.network.dns_resolver.cares.v3."
                       "CaresDnsResolverConfig)"));
    return std::nullopt;
  }
  if (!t.typed_config().UnpackTo(&cares)) {
    Error(path + ".typed_config", "cannot decode CaresDnsResolverConfig");
    return std::nullopt;
  }
  DnsResolverConfig out;
  std::string cp = path + ".typed_config";
  if (cares.resolvers().empty()) {
    Error(cp + ".resolvers", "needs at least one resolver");  // Envoy's rule (min_items: 1)
  }
  DnsResolvers(cares.resolvers(), cp + ".resolvers", &out);
  DnsResolverOptions(cares.dns_resolver_options(), &out);
  return out;
}

std::shared_ptr<const OutlierConfig> Builder::Outlier(
    const envoy::config::cluster::v3::OutlierDetection& o, const std::string& path) {
  size_t before = errors_->size();
  auto c = std::make_shared<OutlierConfig>();
  PositiveMs(o.has_interval(), o.interval(), path + ".interval", false, &c->interval_ms);
  PositiveMs(o.has_base_ejection_time(), o.base_ejection_time(), path + ".base_ejection_time",
             false, &c->base_ejection_time_ms);
  PositiveMs(o.has_max_ejection_time(), o.max_ejection_time(), path + ".max_ejection_time", false,
             &c->max_ejection_time_ms);
  if (o.has_max_ejection_time_jitter()) {
    c->max_ejection_time_jitter_ms = Ms(o.max_ejection_time_jitter());
  }
  auto value = [&](bool has, uint32_t v, const char* field, uint32_t* out, bool percent) {
    if (!has) return;
    if (percent && v > 100) Error(absl::StrCat(path, ".", field), "must be within [0, 100]");
    *out = v;
  };
#define RPX_OUTLIER(field, percent) \
  value(o.has_##field(), o.field().value(), #field, &c->field, percent)
  RPX_OUTLIER(consecutive_5xx, false);
  RPX_OUTLIER(enforcing_consecutive_5xx, true);
  RPX_OUTLIER(consecutive_gateway_failure, false);
  RPX_OUTLIER(enforcing_consecutive_gateway_failure, true);
  RPX_OUTLIER(consecutive_local_origin_failure, false);
  RPX_OUTLIER(enforcing_consecutive_local_origin_failure, true);
  RPX_OUTLIER(max_ejection_percent, true);
  RPX_OUTLIER(success_rate_minimum_hosts, false);
  RPX_OUTLIER(success_rate_request_volume, false);
  RPX_OUTLIER(success_rate_stdev_factor, false);
  RPX_OUTLIER(enforcing_success_rate, true);
  RPX_OUTLIER(failure_percentage_threshold, true);
  RPX_OUTLIER(enforcing_failure_percentage, true);
  RPX_OUTLIER(failure_percentage_minimum_hosts, false);
  RPX_OUTLIER(failure_percentage_request_volume, false);
#undef RPX_OUTLIER
  c->split_external_local_origin_errors = o.split_external_local_origin_errors();
  if (o.has_always_eject_one_host()) c->always_eject_one_host = o.always_eject_one_host().value();
  if (o.has_successful_active_health_check_uneject_host()) {
    c->successful_active_health_check_uneject_host =
        o.successful_active_health_check_uneject_host().value();
  }
  if (o.has_enforcing_local_origin_success_rate() &&
      o.enforcing_local_origin_success_rate().value() > 0) {
    Error(path + ".enforcing_local_origin_success_rate",
          "success rates of local-origin errors are not judged separately yet");
  }
  if (o.has_enforcing_failure_percentage_local_origin() &&
      o.enforcing_failure_percentage_local_origin().value() > 0) {
    Error(path + ".enforcing_failure_percentage_local_origin",
          "failure percentages of local-origin errors are not judged separately yet");
  }
  if (errors_->size() != before) return nullptr;
  return c;
}

std::shared_ptr<const HealthCheckConfig> Builder::HealthCheck(
    const envoy::config::core::v3::HealthCheck& h, const std::string& path) {
  using HC = envoy::config::core::v3::HealthCheck;
  size_t before = errors_->size();
  auto c = std::make_shared<HealthCheckConfig>();
  auto positive = [&](const google::protobuf::Duration& d, bool has, const char* field,
                      uint64_t* out, bool required) {
    PositiveMs(has, d, absl::StrCat(path, ".", field), required, out);
  };
  positive(h.timeout(), h.has_timeout(), "timeout", &c->timeout_ms, true);
  positive(h.interval(), h.has_interval(), "interval", &c->interval_ms, true);
  if (h.has_initial_jitter()) c->initial_jitter_ms = Ms(h.initial_jitter());
  if (h.has_interval_jitter()) c->interval_jitter_ms = Ms(h.interval_jitter());
  c->interval_jitter_percent = h.interval_jitter_percent();
  if (!h.has_unhealthy_threshold()) Error(path + ".unhealthy_threshold", "is required");
  if (!h.has_healthy_threshold()) Error(path + ".healthy_threshold", "is required");
  c->unhealthy_threshold = std::max<uint32_t>(1, h.unhealthy_threshold().value());
  c->healthy_threshold = std::max<uint32_t>(1, h.healthy_threshold().value());
  positive(h.no_traffic_interval(), h.has_no_traffic_interval(), "no_traffic_interval",
           &c->no_traffic_interval_ms, false);
  c->no_traffic_healthy_interval_ms = c->no_traffic_interval_ms;
  positive(h.no_traffic_healthy_interval(), h.has_no_traffic_healthy_interval(),
           "no_traffic_healthy_interval", &c->no_traffic_healthy_interval_ms, false);
  positive(h.unhealthy_interval(), h.has_unhealthy_interval(), "unhealthy_interval",
           &c->unhealthy_interval_ms, false);
  positive(h.unhealthy_edge_interval(), h.has_unhealthy_edge_interval(), "unhealthy_edge_interval",
           &c->unhealthy_edge_interval_ms, false);
  positive(h.healthy_edge_interval(), h.has_healthy_edge_interval(), "healthy_edge_interval",
           &c->healthy_edge_interval_ms, false);
  if (h.has_alt_port()) {
    if (h.alt_port().value() == 0 || h.alt_port().value() > 65535) {
      Error(path + ".alt_port", "must be within [1, 65535]");
    }
    c->alt_port = h.alt_port().value();
  }
  // reuse_connection: accepted either way; rpx opens a connection per probe (Envoy's
  // reuse_connection: false), which a probe every few seconds can afford.
  c->always_log_failures = h.always_log_health_check_failures();
  auto payload = [&](const HC::Payload& p, const std::string& where) -> std::string {
    if (p.payload_case() != HC::Payload::kText) return p.binary();
    const std::string& hex = p.text();
    std::string bytes;
    if (hex.size() % 2 != 0) {
      Error(where + ".text", "must be an even number of hex digits");
      return "";
    }
    auto digit = [](char ch) {
      if (ch >= '0' && ch <= '9') return ch - '0';
      if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
      if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
      return -1;
    };
    for (size_t i = 0; i < hex.size(); i += 2) {
      int hi = digit(hex[i]), lo = digit(hex[i + 1]);
      if (hi < 0 || lo < 0) {
        Error(where + ".text", absl::StrCat("'", hex, "' is not hex"));
        return "";
      }
      bytes.push_back(static_cast<char>(hi * 16 + lo));
    }
    return bytes;
  };
  switch (h.health_checker_case()) {
    case HC::kHttpHealthCheck: {
      const auto& http = h.http_health_check();
      std::string hp = path + ".http_health_check";
      c->kind = HealthCheckConfig::Kind::kHttp;
      c->host = http.host();
      c->path = http.path();
      if (c->path.empty() || c->path[0] != '/') Error(hp + ".path", "must start with '/'");
      if (http.codec_client_type() != envoy::type::v3::HTTP1) {
        Error(hp + ".codec_client_type", "only HTTP1 health checks are supported");
      }
      if (http.method() != envoy::config::core::v3::METHOD_UNSPECIFIED) {
        c->method = envoy::config::core::v3::RequestMethod_Name(http.method());
      }
      for (int i = 0; i < http.request_headers_to_add_size(); ++i) {
        const auto& o = http.request_headers_to_add(i);
        c->headers_to_add.emplace_back(o.header().key(), o.header().value());
      }
      for (const auto& r : http.request_headers_to_remove()) {
        if (absl::AsciiStrToLower(r) == "user-agent") c->send_user_agent = false;
      }
      auto ranges = [&](const auto& in, const char* field,
                        std::vector<std::pair<int64_t, int64_t>>* out) {
        if (in.empty()) return;
        out->clear();
        for (int i = 0; i < in.size(); ++i) {
          if (in[i].start() < 100 || in[i].end() > 600 || in[i].start() >= in[i].end()) {
            Error(absl::StrCat(hp, ".", field, "[", i, "]"),
                  "must be a range [start, end) within [100, 600)");
          }
          out->emplace_back(in[i].start(), in[i].end());
        }
      };
      ranges(http.expected_statuses(), "expected_statuses", &c->expected_statuses);
      ranges(http.retriable_statuses(), "retriable_statuses", &c->retriable_statuses);
      if (http.has_send() || http.receive_size() > 0) {
        Error(hp, "send and receive payloads are not supported for HTTP health checks");
      }
      break;
    }
    case HC::kTcpHealthCheck: {
      const auto& tcp = h.tcp_health_check();
      c->kind = HealthCheckConfig::Kind::kTcp;
      if (tcp.has_send()) c->send = payload(tcp.send(), path + ".tcp_health_check.send");
      for (int i = 0; i < tcp.receive_size(); ++i) {
        c->receive.push_back(
            payload(tcp.receive(i), absl::StrCat(path, ".tcp_health_check.receive[", i, "]")));
      }
      break;
    }
    case HC::kGrpcHealthCheck:
      Error(path + ".grpc_health_check", "gRPC health checks are not supported yet");
      break;
    case HC::kCustomHealthCheck:
      Error(path + ".custom_health_check", "custom health checks are not supported");
      break;
    default:
      Error(path, "one of http_health_check or tcp_health_check is required");
  }
  if (errors_->size() != before) return nullptr;
  return c;
}

std::string Builder::TransportType(const envoy::config::core::v3::TransportSocket& ts) {
  if (!ts.has_typed_config()) return "";
  const std::string& url = ts.typed_config().type_url();
  return url.substr(url.rfind('/') + 1);
}

bool Builder::UpstreamTransport(const envoy::config::core::v3::TransportSocket& ts,
                                const std::string& path, ClusterInfo* info,
                                ClusterInfo::Transport* out) {
  std::string type = TransportType(ts);
  if (type == kRawBufferType ||
      (type.empty() && ts.name() == "envoy.transport_sockets.raw_buffer")) {
    return true;  // cleartext
  }
  if (type != kUpstreamTlsType) {
    Error(path, absl::StrCat("transport socket '", ts.name(), "'",
                             type.empty() ? "" : absl::StrCat(" (", type, ")"),
                             " is not supported (envoy.transport_sockets.tls with an "
                             "UpstreamTlsContext, or raw_buffer)"));
    return false;
  }
  envoy::extensions::transport_sockets::tls::v3::UpstreamTlsContext ctx;
  if (!ts.typed_config().UnpackTo(&ctx)) {
    Error(path + ".typed_config", "cannot decode the UpstreamTlsContext");
    return false;
  }
  out->tls_required = true;
  TlsContextOptions o;
  std::vector<std::string> tls_errors;
  SecretSources secrets{&options_.secrets, &options_.sds_secrets, &info->sds_secrets};
  if (!UpstreamTlsOptions(ctx, path + ".typed_config", &secrets, &o, &out->sni, &tls_errors)) {
    ErrorLines(tls_errors);
    return false;
  }
  if (secrets.fetch_timeout_ms &&
      (!info->sds_fetch_timeout_ms || secrets.fetch_timeout_ms < info->sds_fetch_timeout_ms)) {
    info->sds_fetch_timeout_ms = secrets.fetch_timeout_ms;
  }
  if (secrets.sds_missing) return true;  // built once the secrets arrive
  KeepSpokenAlpn(&o);
  // What the cluster speaks decides what it offers (Envoy overrides the context's list too):
  // h2 alone, or h2 with HTTP/1.1 for auto_config, which then speaks what the server picked.
  if (info->protocol == ClusterInfo::Protocol::kHttp2) o.alpn = {"h2"};
  if (info->protocol == ClusterInfo::Protocol::kAuto) o.alpn = {"h2", "http/1.1"};
  auto context = TlsContext::Create(o);
  if (!context.ok()) {
    errors_->push_back(absl::StrCat(options_.source, ": ", context.status().message()));
    return false;
  }
  out->tls = *context;
  out->verifies = !o.validation.trusted_ca.empty();
  return true;
}

bool Builder::DownstreamTransport(const envoy::config::core::v3::TransportSocket& ts,
                                  const std::string& path, FilterChainConfig* chain) {
  std::string type = TransportType(ts);
  if (type == kRawBufferType ||
      (type.empty() && ts.name() == "envoy.transport_sockets.raw_buffer")) {
    return true;  // plaintext
  }
  if (type != kDownstreamTlsType) {
    Error(path, absl::StrCat("transport socket '", ts.name(), "'",
                             type.empty() ? "" : absl::StrCat(" (", type, ")"),
                             " is not supported (envoy.transport_sockets.tls with a "
                             "DownstreamTlsContext, or raw_buffer)"));
    return false;
  }
  auto ctx =
      std::make_shared<envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext>();
  if (!ts.typed_config().UnpackTo(ctx.get())) {
    Error(path + ".typed_config", "cannot decode the DownstreamTlsContext");
    return false;
  }
  chain->tls_required = true;
  chain->tls_config = std::move(ctx);
  chain->tls_path = path + ".typed_config";
  std::vector<std::string> tls_errors;
  bool missing = false;
  chain->tls = BuildDownstreamTls(*chain, options_, &chain->sds_secrets, &missing, &tls_errors,
                                  &chain->sds_fetch_timeout_ms);
  ErrorLines(tls_errors);
  return tls_errors.empty();
}

std::shared_ptr<const TcpProxyConfig> Builder::BuildTcpProxy(
    const envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy& t,
    const std::string& path) {
  size_t before = errors_->size();
  auto tc = std::make_shared<TcpProxyConfig>();
  tc->stat_prefix = t.stat_prefix();
  if (t.stat_prefix().empty()) Error(path + ".stat_prefix", "is required");
  using TcpProxy = envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy;
  switch (t.cluster_specifier_case()) {
    case TcpProxy::kCluster:
      if (t.cluster().empty()) Error(path + ".cluster", "must name a cluster");
      tc->clusters.push_back({t.cluster(), 1});
      tc->total_weight = 1;
      break;
    case TcpProxy::kWeightedClusters: {
      const auto& w = t.weighted_clusters();
      if (w.clusters_size() == 0) {
        Error(path + ".weighted_clusters.clusters", "at least one cluster is required");
      }
      for (int i = 0; i < w.clusters_size(); ++i) {
        std::string wp = absl::StrCat(path, ".weighted_clusters.clusters[", i, "]");
        if (w.clusters(i).name().empty()) Error(wp + ".name", "is required");
        if (w.clusters(i).weight() < 1) Error(wp + ".weight", "must be at least 1");
        tc->clusters.push_back({w.clusters(i).name(), w.clusters(i).weight()});
        tc->total_weight += w.clusters(i).weight();
      }
      break;
    }
    default:
      Error(path, "cluster or weighted_clusters is required");
  }
  if (t.has_idle_timeout()) tc->idle_timeout_ms = Ms(t.idle_timeout());
  if (t.has_max_connect_attempts()) {
    if (t.max_connect_attempts().value() < 1) {
      Error(path + ".max_connect_attempts", "must be at least 1");
    }
    tc->max_connect_attempts = t.max_connect_attempts().value();
  }
  PositiveMs(t.has_max_downstream_connection_duration(), t.max_downstream_connection_duration(),
             path + ".max_downstream_connection_duration", false,
             &tc->max_downstream_connection_duration_ms);
  tc->flush_access_log_on_connected = t.has_access_log_options()
                                          ? t.access_log_options().flush_access_log_on_connected()
                                          : t.flush_access_log_on_connected();
  if (t.has_access_log_options() && t.access_log_options().has_access_log_flush_interval()) {
    Error(path + ".access_log_options.access_log_flush_interval",
          "periodic access logs are not supported (rpx logs when the connection ends)");
  }
  {
    HttpConfig scratch;  // the access-log builder fills an HTTP config; only its logs are kept
    std::vector<std::string> log_errors;
    BuildAccessLogs(t.access_log(), path, options_.log_files, &scratch, &log_errors);
    ErrorLines(log_errors);
    tc->access_logs = std::move(scratch.access_logs);
  }
  if (errors_->size() != before) return nullptr;
  tc->stats_slots = std::max<uint32_t>(1, options_.stats_slots);
  tc->stats.reset(new TcpProxyStats[tc->stats_slots]);
  return tc;
}

std::shared_ptr<const FilterChainConfig> Builder::BuildChain(const FilterChain& chain,
                                                             const std::string& cp,
                                                             const ListenerConfig& lc) {
  size_t errors_before = errors_->size();
  auto fc = std::make_shared<FilterChainConfig>();
  fc->name = chain.name().empty() ? cp : chain.name();
  BuildMatch(chain.filter_chain_match(), cp + ".filter_chain_match", &fc->match);
  if (chain.filters_size() == 0) {
    Error(cp + ".filters", "an http_connection_manager or tcp_proxy filter is required");
    return nullptr;
  }
  // Network filters before the terminal one: only connection_limit, at most once.
  for (int i = 0; i + 1 < chain.filters_size(); ++i) {
    const auto& f = chain.filters(i);
    std::string fp = absl::StrCat(cp, ".filters[", i, "]");
    if (!f.has_typed_config() ||
        f.typed_config().type_url().find(kConnectionLimitType) == std::string::npos) {
      Error(fp, absl::StrCat("network filter '", f.name(),
                             "' is not supported here (before the http_connection_manager or "
                             "tcp_proxy only envoy.filters.network.connection_limit is)"));
      return nullptr;
    }
    ConnectionLimitProto cl;
    if (!f.typed_config().UnpackTo(&cl)) {
      Error(fp + ".typed_config", "cannot decode the ConnectionLimit");
      return nullptr;
    }
    auto limit = std::make_shared<ConnectionLimit>();
    limit->stat_prefix = cl.stat_prefix();
    if (cl.stat_prefix().empty()) Error(fp + ".typed_config.stat_prefix", "is required");
    if (!cl.has_max_connections() || cl.max_connections().value() < 1) {
      Error(fp + ".typed_config.max_connections", "must be at least 1");
    }
    limit->max_connections = cl.max_connections().value();
    if (cl.has_delay()) limit->delay_ms = Ms(cl.delay());
    if (i > 0) {
      Error(fp, "connection_limit is given twice");
      return nullptr;
    }
    // runtime_enabled without a runtime: its default_value decides.
    bool enabled = !cl.has_runtime_enabled() || !cl.runtime_enabled().has_default_value() ||
                   cl.runtime_enabled().default_value().value();
    if (enabled) fc->connection_limit = std::move(limit);
  }
  const auto& f = chain.filters(chain.filters_size() - 1);
  std::string fp = absl::StrCat(cp, ".filters[", chain.filters_size() - 1, "]");
  bool http_ok = true;
  if (f.has_typed_config() &&
      f.typed_config().type_url().find(kTcpProxyType) != std::string::npos) {
    envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy tp;
    if (!f.typed_config().UnpackTo(&tp)) {
      Error(fp + ".typed_config", "cannot decode the TcpProxy");
      return nullptr;
    }
    fc->tcp = BuildTcpProxy(tp, fp + ".typed_config");
    http_ok = fc->tcp != nullptr;
  } else {
    HttpConnectionManager hcm;
    if (!f.has_typed_config() || f.typed_config().type_url().find(kHcmType) == std::string::npos) {
      Error(fp, absl::StrCat("network filter '", f.name(),
                             "' is not supported (envoy.filters.network.http_connection_manager "
                             "and envoy.filters.network.tcp_proxy, with a typed_config, are)"));
      return nullptr;
    }
    if (!f.typed_config().UnpackTo(&hcm)) {
      Error(fp + ".typed_config", "cannot decode the HttpConnectionManager");
      return nullptr;
    }
    http_ok = BuildHttp(hcm, fp + ".typed_config", lc.buffer_limit, fc.get());
  }
  // After the connection manager: its codec_type decides whether ALPN may pick h2.
  if (chain.has_transport_socket()) {
    DownstreamTransport(chain.transport_socket(), cp + ".transport_socket", fc.get());
  }
  if (fc->tls) fc->handshake_timeout_ms = kDefaultHandshakeTimeoutMs;
  if (chain.has_transport_socket_connect_timeout()) {
    fc->handshake_timeout_ms = Ms(chain.transport_socket_connect_timeout());
  }
  if (!http_ok || errors_->size() != errors_before) return nullptr;
  return fc;
}

}  // namespace

std::shared_ptr<const FilterChainConfig> RebuildChainTls(const FilterChainConfig& chain,
                                                         const BuildOptions& options, bool* missing,
                                                         std::vector<std::string>* errors) {
  auto next = std::make_shared<FilterChainConfig>(chain);
  std::vector<std::string> names;
  size_t before = errors->size();
  next->tls = BuildDownstreamTls(chain, options, &names, missing, errors);
  for (size_t i = before; i < errors->size(); ++i) {
    (*errors)[i] = absl::StrCat(options.source, options.source.empty() ? "" : ": ", (*errors)[i]);
  }
  return next->tls ? next : nullptr;
}

int ListenerConfig::SelectChain(const ConnectionFacts& facts) const {
  size_t n = chains.size() - (has_default_chain ? 1 : 0);
  std::vector<const FilterChainMatch*> matches(n);
  for (size_t i = 0; i < n; ++i) matches[i] = &chains[i]->match;
  int chosen = SelectFilterChain(matches, facts);
  if (chosen < 0 && has_default_chain) chosen = static_cast<int>(n);
  return chosen;
}

std::shared_ptr<const ListenerConfig> BuildListener(const Listener& l, const std::string& path,
                                                    const BuildOptions& options,
                                                    std::vector<std::string>* errors) {
  ServerConfig tmp;
  Builder b(options, errors);
  size_t before = errors->size();
  b.BuildListener(l, path, &tmp);
  if (errors->size() != before || tmp.listeners.empty()) return nullptr;
  return tmp.listeners[0];
}

bool BuildCluster(const Cluster& c, const std::string& path, const BuildOptions& options,
                  ClusterEntry* out, std::optional<DnsCluster>* dns,
                  std::vector<std::string>* errors) {
  ServerConfig tmp;
  Builder b(options, errors);
  size_t before = errors->size();
  b.BuildCluster(c, path, &tmp);
  if (errors->size() != before || !tmp.clusters.contains(c.name())) return false;
  *out = tmp.clusters[c.name()];
  if (!tmp.dns_clusters.empty()) *dns = tmp.dns_clusters[0];
  return true;
}

std::shared_ptr<const HostSet> BuildHostSet(
    const envoy::config::endpoint::v3::ClusterLoadAssignment& cla, const std::string& path,
    uint32_t stats_slots, std::vector<std::string>* errors) {
  BuildOptions options;
  options.stats_slots = stats_slots;
  Builder b(options, errors);
  size_t before = errors->size();
  auto hosts = std::make_shared<HostSet>();
  b.BuildHosts(cla, path, nullptr, hosts.get());
  if (errors->size() != before) return nullptr;
  return hosts;
}

namespace {

// Flattens a runtime layer's Struct into dotted keys (Envoy's static_layer rules: nested objects
// are path components; values are scalars).
void FlattenRuntime(const google::protobuf::Struct& st, const std::string& prefix,
                    const std::string& path, std::map<std::string, std::string>* out,
                    std::vector<std::string>* errors) {
  for (const auto& [k, v] : st.fields()) {
    std::string key = prefix.empty() ? k : prefix + "." + k;
    switch (v.kind_case()) {
      case google::protobuf::Value::kStructValue:
        FlattenRuntime(v.struct_value(), key, path, out, errors);
        break;
      case google::protobuf::Value::kNumberValue: {
        double d = v.number_value();
        (*out)[key] = d == static_cast<double>(static_cast<int64_t>(d))
                          ? absl::StrCat(static_cast<int64_t>(d))
                          : absl::StrCat(d);
        break;
      }
      case google::protobuf::Value::kBoolValue:
        (*out)[key] = v.bool_value() ? "true" : "false";
        break;
      case google::protobuf::Value::kStringValue:
        (*out)[key] = v.string_value();
        break;
      default:
        errors->push_back(absl::StrCat(path, ".", key,
                                       ": a runtime value must be a number, a "
                                       "boolean or a string"));
    }
  }
}

// The runtime keys rpx reads.
constexpr char kGlobalMaxConnections[] = "overload.global_downstream_max_connections";

// Recomputes the final values and what rpx reads from them (`errors`: values it cannot use, each
// prefixed with `where`).
void ResolveRuntime(RuntimeConfig* rt, const std::string& where, std::vector<std::string>* errors) {
  rt->values.clear();
  for (const auto& layer : rt->layer_values) {
    for (const auto& [k, v] : layer) rt->values[k] = v;
  }
  rt->unused_keys.clear();
  rt->global_max_connections = 0;
  for (const auto& [key, value] : rt->values) {
    if (key == kGlobalMaxConnections) {
      uint64_t n = 0;
      if (!absl::SimpleAtoi(value, &n)) {
        errors->push_back(
            absl::StrCat(where, key, ": must be a whole number of connections, not '", value, "'"));
      }
      rt->global_max_connections = n;
    } else {
      rt->unused_keys.push_back(key);
    }
  }
}

void BuildRuntime(const envoy::config::bootstrap::v3::Bootstrap& b, const std::string& source,
                  RuntimeConfig* out, std::vector<std::string>* errors) {
  const auto& layers = b.layered_runtime().layers();
  std::vector<std::string> local;
  for (int i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    std::string p = absl::StrCat(source, ": layered_runtime.layers[", i, "]");
    if (l.name().empty()) local.push_back(p + ".name: is required");
    for (const auto& prev : out->layers) {
      if (prev == l.name() && !l.name().empty()) {
        local.push_back(absl::StrCat(p, ".name: duplicate layer name '", l.name(), "'"));
      }
    }
    out->layers.push_back(l.name());
    out->layer_values.emplace_back();
    if (l.has_static_layer()) {
      FlattenRuntime(l.static_layer(), "", p + ".static_layer", &out->layer_values.back(), &local);
    }
    // The admin layer starts empty; /runtime_modify writes to it (the last one, as Envoy).
    if (l.has_admin_layer()) out->admin_layer = i;
  }
  ResolveRuntime(out, absl::StrCat(source, ": layered_runtime: "), &local);
  errors->insert(errors->end(), local.begin(), local.end());
}

}  // namespace

bool ParseConfigSource(const envoy::config::core::v3::ConfigSource& cs, const std::string& path,
                       XdsSource* out, std::vector<std::string>* errors) {
  using CS = envoy::config::core::v3::ConfigSource;
  using ACS = envoy::config::core::v3::ApiConfigSource;
  auto err = [&](const std::string& field, const std::string& what) {
    errors->push_back(absl::StrCat(path, field, ": ", what));
    return false;
  };
  *out = XdsSource();
  switch (cs.config_source_specifier_case()) {
    case CS::CONFIG_SOURCE_SPECIFIER_NOT_SET:
      return true;
    case CS::kAds:
      out->kind = XdsSource::Kind::kAds;
      break;
    case CS::kApiConfigSource: {
      const ACS& api = cs.api_config_source();
      switch (api.api_type()) {
        case ACS::GRPC:
          break;
        case ACS::DELTA_GRPC:
          out->delta = true;
          break;
        case ACS::AGGREGATED_GRPC:
        case ACS::AGGREGATED_DELTA_GRPC:
          return err(".api_config_source.api_type",
                     "AGGREGATED_* belongs in dynamic_resources.ads_config; here use ads: {}");
        default:
          return err(".api_config_source.api_type",
                     absl::StrCat(ACS::ApiType_Name(api.api_type()),
                                  " is not supported (GRPC or DELTA_GRPC)"));
      }
      if (api.transport_api_version() != envoy::config::core::v3::V3) {
        return err(".api_config_source.transport_api_version", "must be V3");
      }
      if (api.grpc_services_size() != 1 || !api.grpc_services(0).has_envoy_grpc()) {
        return err(".api_config_source.grpc_services",
                   "exactly one envoy_grpc service is required");
      }
      out->kind = XdsSource::Kind::kGrpc;
      out->cluster = api.grpc_services(0).envoy_grpc().cluster_name();
      break;
    }
    case CS::kPathConfigSource:
      if (cs.path_config_source().path().empty()) {
        return err(".path_config_source.path", "is required");
      }
      out->kind = XdsSource::Kind::kPath;
      out->path = cs.path_config_source().path();
      out->watched_dir = cs.path_config_source().watched_directory().path();
      break;
    case CS::kPath:
      if (cs.path().empty()) return err(".path", "is required");
      out->kind = XdsSource::Kind::kPath;
      out->path = cs.path();
      break;
    default:
      return err("",
                 "only ads, api_config_source (GRPC, DELTA_GRPC) and path_config_source are "
                 "supported");
  }
  // AUTO (unset) means V3, the only version Envoy still speaks.
  if (cs.resource_api_version() == envoy::config::core::v3::V2) {
    *out = XdsSource();
    return err(".resource_api_version", "V2 is not supported: use V3");
  }
  return true;
}

namespace {

// The TLS of an xDS cluster's gRPC stream: gRPC takes PEM text, so the UpstreamTlsContext must
// name its certificate, key and CA directly (SDS would need the stream it secures).
bool XdsStreamTls(const envoy::config::bootstrap::v3::Bootstrap::StaticResources& sr,
                  const std::string& cluster_name, XdsTls* out, Builder* b) {
  int index = -1;
  for (int i = 0; i < sr.clusters_size(); ++i) {
    if (sr.clusters(i).name() == cluster_name) index = i;
  }
  RPX_ASSERT(index >= 0);
  const auto& c = sr.clusters(index);
  std::string path =
      absl::StrCat("static_resources.clusters[", index, "].transport_socket.typed_config");
  envoy::extensions::transport_sockets::tls::v3::UpstreamTlsContext ctx;
  if (!c.transport_socket().typed_config().UnpackTo(&ctx)) {
    b->Error(path, "cannot decode the UpstreamTlsContext");
    return false;
  }
  const auto& common = ctx.common_tls_context();
  if (common.tls_certificate_sds_secret_configs_size() > 0 ||
      common.has_validation_context_sds_secret_config() ||
      common.has_combined_validation_context()) {
    b->Error(path + ".common_tls_context",
             "the xDS stream's TLS must name its certificate, key and CA directly "
             "(tls_certificates, validation_context): SDS would need the stream it secures");
    return false;
  }
  if (common.tls_certificates_size() > 1) {
    b->Error(path + ".common_tls_context.tls_certificates",
             "the xDS stream takes one client certificate");
    return false;
  }
  const auto& vc = common.validation_context();
  if (vc.match_typed_subject_alt_names_size() > 0 || vc.match_subject_alt_names_size() > 0) {
    b->Error(path + ".common_tls_context.validation_context",
             "subject alt name matching is not supported for the xDS stream: gRPC checks the "
             "server's certificate against sni (or the target's host)");
    return false;
  }
  std::vector<std::string> errors;
  out->enabled = true;
  out->sni = ctx.sni();
  if (vc.has_trusted_ca()) {
    ReadDataSource(vc.trusted_ca(), path + ".common_tls_context.validation_context.trusted_ca",
                   &out->root_pem, &errors);
  }
  if (common.tls_certificates_size() == 1) {
    const auto& cert = common.tls_certificates(0);
    std::string cp = path + ".common_tls_context.tls_certificates[0]";
    ReadDataSource(cert.certificate_chain(), cp + ".certificate_chain", &out->cert_pem, &errors);
    ReadDataSource(cert.private_key(), cp + ".private_key", &out->key_pem, &errors);
  }
  b->ErrorLines(errors);
  return errors.empty();
}

}  // namespace

bool BuildServerConfig(const envoy::config::bootstrap::v3::Bootstrap& bootstrap,
                       const BuildOptions& options, ServerConfig* out,
                       std::vector<std::string>* errors) {
  size_t errors_before = errors->size();
  BuildRuntime(bootstrap, options.source, &out->runtime, errors);
  BuildOptions opts = options;
  const auto& secrets = bootstrap.static_resources().secrets();
  for (int i = 0; i < secrets.size(); ++i) {
    std::string sp = absl::StrCat("static_resources.secrets[", i, "]");
    if (secrets[i].name().empty()) {
      errors->push_back(absl::StrCat(options.source, ": ", sp, ".name: is required"));
    } else if (!opts.secrets.emplace(secrets[i].name(), secrets[i]).second) {
      errors->push_back(absl::StrCat(options.source, ": ", sp, ".name: duplicate secret name '",
                                     secrets[i].name(), "'"));
    }
  }
  Builder b(opts, errors);
  if (bootstrap.has_typed_dns_resolver_config()) {
    out->dns_resolver =
        b.TypedDnsResolver(bootstrap.typed_dns_resolver_config(), "typed_dns_resolver_config");
  }
  out->node_id = bootstrap.node().id();
  out->node_cluster = bootstrap.node().cluster();
  if (bootstrap.has_admin()) {
    const auto& admin = bootstrap.admin();
    google::protobuf::RepeatedPtrField<envoy::config::accesslog::v3::AccessLog> logs =
        admin.access_log();
    if (!admin.access_log_path().empty() && admin.access_log_path() != "/dev/null") {
      // The deprecated form: a file with Envoy's default format.
      envoy::extensions::access_loggers::file::v3::FileAccessLog file;
      file.set_path(admin.access_log_path());
      auto* l = logs.Add();
      l->set_name("envoy.access_loggers.file");
      l->mutable_typed_config()->PackFrom(file);
    }
    if (!logs.empty()) {
      auto http = std::make_shared<HttpConfig>();
      std::vector<std::string> log_errors;
      BuildAccessLogs(logs, "admin", options.log_files, http.get(), &log_errors);
      for (const auto& e : log_errors) errors->push_back(absl::StrCat(options.source, ": ", e));
      out->admin_logging = std::move(http);
    }
    if (admin.has_address()) {
      SocketAddress a;
      if (b.Address(admin.address(), "admin.address", &a)) out->admin_address = a;
    }
  }
  std::map<std::string, std::string> source_paths;  // type -> the config source's field path
  if (bootstrap.has_dynamic_resources()) {
    const auto& dr = bootstrap.dynamic_resources();
    using CS = envoy::config::core::v3::ConfigSource;
    using ACS = envoy::config::core::v3::ApiConfigSource;
    XdsConfig& x = out->xds;
    bool lds_cds_use_ads = false;
    auto check_source = [&](const CS& cs, const std::string& path, const char* type,
                            bool* ads_flag) {
      if (cs.config_source_specifier_case() == CS::CONFIG_SOURCE_SPECIFIER_NOT_SET) return;
      XdsSource src;
      if (!ParseConfigSource(cs, options.source + ": " + path, &src, errors)) return;
      if (cs.has_initial_fetch_timeout())
        x.initial_fetch_timeout_ms = Ms(cs.initial_fetch_timeout());
      x.sources[type] = src;
      source_paths[type] = path;
      *ads_flag = true;  // LDS / CDS are dynamic
      if (src.kind == XdsSource::Kind::kAds) lds_cds_use_ads = true;
    };
    check_source(dr.lds_config(), "dynamic_resources.lds_config", kListenerTypeUrl, &x.lds);
    check_source(dr.cds_config(), "dynamic_resources.cds_config", kClusterTypeUrl, &x.cds);
    if (dr.has_ads_config()) {
      const ACS& ads = dr.ads_config();
      std::string ap = "dynamic_resources.ads_config";
      switch (ads.api_type()) {
        case ACS::GRPC:
        case ACS::AGGREGATED_GRPC:
          x.delta = false;
          break;
        case ACS::DELTA_GRPC:
        case ACS::AGGREGATED_DELTA_GRPC:
          x.delta = true;
          break;
        default:
          b.Error(ap + ".api_type",
                  "must be GRPC, DELTA_GRPC, AGGREGATED_GRPC or "
                  "AGGREGATED_DELTA_GRPC");
      }
      if (ads.transport_api_version() != envoy::config::core::v3::V3) {
        b.Error(ap + ".transport_api_version", "must be V3");
      }
      if (ads.grpc_services_size() != 1 || !ads.grpc_services(0).has_envoy_grpc()) {
        b.Error(ap + ".grpc_services", "exactly one envoy_grpc service is required");
      } else {
        x.cluster = ads.grpc_services(0).envoy_grpc().cluster_name();
      }
      x.has_ads_config = true;
    } else if (lds_cds_use_ads) {
      b.Error("dynamic_resources.ads_config", "is required when lds_config or cds_config use ads");
    }
  }
  const auto& sr = bootstrap.static_resources();
  for (int i = 0; i < sr.clusters_size(); ++i) {
    b.BuildCluster(sr.clusters(i), absl::StrCat("static_resources.clusters[", i, "]"), out);
  }
  for (int i = 0; i < sr.listeners_size(); ++i) {
    b.BuildListener(sr.listeners(i), absl::StrCat("static_resources.listeners[", i, "]"), out);
  }
  // Where RDS and EDS come from for the static listeners and clusters: one source per type.
  auto add_source = [&](const char* type, const XdsSource& src, const std::string& path) {
    if (!src.set()) return;
    source_paths.emplace(type, path);
    auto [it, inserted] = out->xds.sources.emplace(type, src);
    if (!inserted && it->second.Key() != src.Key()) {
      errors->push_back(absl::StrCat(options.source, ": ", path, ": takes ", type, " from ",
                                     src.Key(),
                                     " but another config source of the same type "
                                     "uses ",
                                     it->second.Key(), "; rpx takes each type from one source"));
    }
  };
  // The ADS stream runs when something takes its configuration from it: LDS, CDS, a static
  // listener's RDS, a static cluster's EDS or SDS.
  std::vector<std::string> ads_users;  // "field path: what"
  for (const auto& l : out->listeners) {
    for (const auto& c : l->chains) {
      if (!c->rds_name.empty()) {
        add_source(kRouteTypeUrl, c->rds_source, c->route_config_path + ".rds.config_source");
        if (c->rds_source.kind == XdsSource::Kind::kAds) {
          ads_users.push_back(c->route_config_path + ".rds: RDS");
        }
      }
      if (!c->sds_secrets.empty()) ads_users.push_back(c->tls_path + ": SDS");
    }
  }
  for (const auto& [name, c] : out->clusters) {
    if (!c.info->sds_secrets.empty()) {
      ads_users.push_back(absl::StrCat("cluster '", name, "' transport_socket: SDS"));
    }
  }
  for (int i = 0; i < sr.clusters_size(); ++i) {
    if (sr.clusters(i).type() != envoy::config::cluster::v3::Cluster::EDS) continue;
    std::string p = absl::StrCat("static_resources.clusters[", i, "].eds_cluster_config");
    XdsSource src;
    src.kind = XdsSource::Kind::kAds;  // no eds_config: ADS, as before
    if (sr.clusters(i).eds_cluster_config().has_eds_config()) {
      std::vector<std::string> ignored;  // reported when the cluster was built
      ParseConfigSource(sr.clusters(i).eds_cluster_config().eds_config(), "", &src, &ignored);
    }
    add_source(kEndpointTypeUrl, src, p + ".eds_config");
    if (src.kind == XdsSource::Kind::kAds) ads_users.push_back(p + ": EDS");
  }
  if (!out->xds.has_ads_config) {
    for (const auto& user : ads_users) {
      errors->push_back(
          absl::StrCat(options.source, ": ", user, " needs dynamic_resources.ads_config"));
    }
  }
  for (const auto& [type, src] : out->xds.sources) {
    if (src.kind == XdsSource::Kind::kAds) ads_users.push_back(type);
  }
  out->xds.enabled = out->xds.has_ads_config && !ads_users.empty();
  // Every cluster that carries xDS: usable for gRPC, with a target.
  std::map<std::string, std::string> xds_clusters;  // cluster -> field path naming it
  if (out->xds.enabled) {
    xds_clusters[out->xds.cluster] = "dynamic_resources.ads_config";
  }
  for (const auto& [type, src] : out->xds.sources) {
    if (src.kind == XdsSource::Kind::kGrpc) {
      xds_clusters.emplace(src.cluster, source_paths[type] + ".api_config_source");
    }
  }
  for (const auto& [cluster_name, where] : xds_clusters) {
    auto it = out->clusters.find(cluster_name);
    if (it == out->clusters.end()) {
      if (!b.defined_clusters.contains(cluster_name)) {
        b.Error(where + ".grpc_services[0].envoy_grpc.cluster_name",
                absl::StrCat("no static cluster named '", cluster_name, "'"));
      }
    } else if (!it->second.info->http2()) {
      b.Error(where,
              absl::StrCat("cluster '", cluster_name,
                           "' must enable HTTP/2 (explicit_http_config.http2_protocol_options), "
                           "as Envoy requires for gRPC"));
    } else if (it->second.info->eds) {
      b.Error(where, absl::StrCat("cluster '", cluster_name,
                                  "' is an xDS cluster, so its endpoints cannot come from EDS"));
    } else if (!it->second.info->transport_matches.empty()) {
      b.Error(where, absl::StrCat("cluster '", cluster_name,
                                  "': transport_socket_matches on an xDS cluster is not supported "
                                  "(give it one transport_socket)"));
    } else if (it->second.info->transport.tls_required &&
               !XdsStreamTls(sr, cluster_name, &out->xds.grpc_tls[cluster_name], &b)) {
      // XdsStreamTls reported why.
    } else {
      const DnsCluster* dns = nullptr;
      for (const auto& d : out->dns_clusters) {
        if (d.cluster == cluster_name) dns = &d;
      }
      std::string target;
      if (dns && !dns->targets.empty()) {
        // Resolved by gRPC (not needed to validate, and a name that does not resolve yet only
        // delays the stream, as in Envoy).
        target = absl::StrCat("dns:///", dns->targets[0].hostname, ":", dns->targets[0].port);
      } else if (!it->second.hosts || it->second.hosts->empty()) {
        b.Error(where, absl::StrCat("cluster '", cluster_name, "' has no endpoints"));
      } else {
        // Every endpoint of the first one's family, in order: gRPC's pick_first connects to the
        // first that answers, so a second control-plane replica takes over when one dies.
        const SocketAddress& first = (*it->second.hosts)[0]->address;
        std::vector<std::string> addresses;
        for (const auto& h : *it->second.hosts) {
          if (h->address.family() == first.family()) addresses.push_back(h->address.ToString());
        }
        target = absl::StrCat(first.family() == AF_INET6 ? "ipv6:" : "ipv4:",
                              absl::StrJoin(addresses, ","));
      }
      out->xds.grpc_targets[cluster_name] = target;
      if (cluster_name == out->xds.cluster) out->xds.target = target;
    }
  }

  // Every cluster a route names must exist (Envoy's validate_clusters for static routes), unless
  // clusters may also come from CDS.
  for (size_t i = 0; i < out->listeners.size() && !out->xds.cds; ++i) {
    for (const auto& c : out->listeners[i]->chains) {
      if (!c->routes) continue;
      for (const auto& [name, path] : c->routes->ReferencedClusters()) {
        if (!out->clusters.contains(name) && !b.defined_clusters.contains(name)) {
          errors->push_back(absl::StrCat(options.source, ": ", c->route_config_path, ".", path,
                                         ": unknown cluster '", name, "'"));
        }
      }
    }
  }
  if (sr.listeners_size() == 0 && !out->xds.lds) {
    errors->push_back(absl::StrCat(options.source,
                                   ": static_resources.listeners: at least one listener is "
                                   "required (or listeners from LDS)"));
  }
  return errors->size() == errors_before;
}

std::string ModifyRuntime(const std::map<std::string, std::string>& changes, RuntimeConfig* rt) {
  if (rt->admin_layer < 0) {
    return "no admin layer: add one to layered_runtime.layers (admin_layer: {}) to modify the "
           "runtime";
  }
  if (changes.empty()) return "usage: POST /runtime_modify?key1=value1&key2=value2";
  RuntimeConfig next = *rt;
  auto& layer = next.layer_values[static_cast<size_t>(next.admin_layer)];
  for (const auto& [key, value] : changes) {
    if (key.empty()) return "a runtime key is empty";
    if (value.empty()) {
      layer.erase(key);  // as Envoy: an empty value removes the override
    } else {
      layer[key] = value;
    }
  }
  std::vector<std::string> errors;
  ResolveRuntime(&next, "", &errors);
  if (!errors.empty()) return absl::StrJoin(errors, "; ");  // nothing applied
  *rt = std::move(next);
  return "";
}

}  // namespace rpx
