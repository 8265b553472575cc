#include "source/config/server_config.h"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "source/config/supported_fields.h"
#include "source/config/yaml_loader.h"

namespace rpx {
namespace {

using ::testing::HasSubstr;

constexpr char kGood[] = R"(
admin: {address: {socket_address: {address: 127.0.0.1, port_value: 0}}}
static_resources:
  listeners:
  - name: main
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    per_connection_buffer_limit_bytes: 65536
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          stream_idle_timeout: 10s
          request_timeout: 20s
          max_request_headers_kb: 30
          common_http_protocol_options: {idle_timeout: 60s, max_headers_count: 50}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{match: {prefix: "/"}, route: {cluster: web}}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: web
    connect_timeout: 2s
    lb_policy: RANDOM
    circuit_breakers: {thresholds: [{max_connections: 10, max_pending_requests: 5, max_requests: 20}]}
    max_requests_per_connection: 100
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        common_http_protocol_options: {idle_timeout: 7s, max_headers_count: 64}
        explicit_http_config: {http_protocol_options: {}}
    load_assignment:
      cluster_name: web
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8081}}}
          load_balancing_weight: 3
        - endpoint: {address: {socket_address: {address: "::1", port_value: 8082}}}
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8083}}}
          health_status: UNHEALTHY
)";

// Loads, checks supported fields and builds, as the server does.
bool Build(const std::string& yaml, ServerConfig* out, std::vector<std::string>* errors) {
  envoy::config::bootstrap::v3::Bootstrap b;
  if (!LoadYamlIntoMessage(yaml, "t.yaml", &b, errors)) return false;
  CheckSupportedFields(b, "t.yaml: ", "", errors);
  if (!errors->empty()) return false;
  BuildOptions o;
  o.stats_slots = 2;
  o.source = "t.yaml";
  return BuildServerConfig(b, o, out, errors);
}

std::string OnlyError(const std::string& yaml) {
  ServerConfig c;
  std::vector<std::string> errors;
  EXPECT_FALSE(Build(yaml, &c, &errors));
  EXPECT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  return errors.empty() ? "" : errors[0];
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  if (p != std::string::npos) s.replace(p, from.size(), to);
  return s;
}

TEST(ServerConfigTest, BuildsEverySetting) {
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(kGood, &c, &errors)) << ::testing::PrintToString(errors);
  ASSERT_EQ(c.listeners.size(), 1u);
  const ListenerConfig& l = *c.listeners[0];
  EXPECT_EQ(l.buffer_limit, 65536u);
  EXPECT_EQ(l.chains[0]->http->stat_prefix, "ingress");
  EXPECT_EQ(l.chains[0]->http->stream_idle_timeout_ms, 10000u);
  EXPECT_EQ(l.chains[0]->http->request_timeout_ms, 20000u);
  EXPECT_EQ(l.chains[0]->http->max_request_headers_kb, 30u);
  EXPECT_EQ(l.chains[0]->http->idle_timeout_ms, 60000u);
  EXPECT_EQ(l.chains[0]->http->max_headers_count, 50u);
  ASSERT_TRUE(c.admin_address.has_value());
  const ClusterEntry& web = c.clusters.at("web");
  EXPECT_EQ(web.info->connect_timeout_ms, 2000u);
  EXPECT_EQ(web.info->lb_policy, LbPolicy::kRandom);
  EXPECT_EQ(web.info->resources->max_connections(), 10u);
  EXPECT_EQ(web.info->idle_timeout_ms, 7000u);
  EXPECT_EQ(web.info->max_response_headers_count, 64u);
  EXPECT_EQ(web.info->max_requests_per_connection, 100u);
  // The UNHEALTHY endpoint counts in its priority level but takes no traffic.
  ASSERT_EQ(web.hosts->size(), 3u);
  EXPECT_EQ((*web.hosts)[0]->weight, 3u);
  EXPECT_EQ((*web.hosts)[1]->address.ToString(), "[::1]:8082");
  EXPECT_FALSE((*web.hosts)[1]->eds_unhealthy);
  EXPECT_TRUE((*web.hosts)[2]->eds_unhealthy);
  EXPECT_FALSE((*web.hosts)[2]->available());
  EXPECT_EQ(web.hosts->overprovisioning_factor, 140u);
  EXPECT_FALSE(web.info->locality_weighted);
}

TEST(ServerConfigTest, SlowStartAndLeastRequestSettings) {
  std::string yaml = Replace(kGood, "    lb_policy: RANDOM",
                             "    lb_policy: LEAST_REQUEST\n"
                             "    least_request_lb_config:\n"
                             "      choice_count: 3\n"
                             "      active_request_bias: {default_value: 1.0}\n"
                             "      slow_start_config:\n"
                             "        slow_start_window: 30s\n"
                             "        aggression: {default_value: 2.0}\n"
                             "        min_weight_percent: {value: 20}");
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(yaml, &c, &errors)) << ::testing::PrintToString(errors);
  const ClusterInfo& info = *c.clusters.at("web").info;
  EXPECT_EQ(info.choice_count, 3u);
  ASSERT_TRUE(info.slow_start.has_value());
  EXPECT_EQ(info.slow_start->window_ms, 30000u);
  EXPECT_DOUBLE_EQ(info.slow_start->aggression, 2.0);
  EXPECT_DOUBLE_EQ(info.slow_start->min_weight, 0.2);

  EXPECT_THAT(OnlyError(Replace(yaml, "choice_count: 3", "choice_count: 1")),
              HasSubstr("least_request_lb_config.choice_count: must be within [2, 100]"));
  EXPECT_THAT(OnlyError(Replace(yaml, "{default_value: 1.0}", "{default_value: 2.0}")),
              HasSubstr("least_request_lb_config.active_request_bias: only 1.0"));
  EXPECT_THAT(OnlyError(Replace(yaml, "{default_value: 2.0}", "{default_value: 0}")),
              HasSubstr("slow_start_config.aggression.default_value: must be positive"));
  EXPECT_THAT(
      OnlyError(Replace(yaml, "{default_value: 2.0}", "{default_value: 2.0, runtime_key: k}")),
      HasSubstr("slow_start_config.aggression.runtime_key: runtime overrides"));
  EXPECT_THAT(OnlyError(Replace(yaml, "        slow_start_window: 30s\n", "")),
              HasSubstr("slow_start_config.slow_start_window: is required"));
  EXPECT_THAT(OnlyError(Replace(yaml, "lb_policy: LEAST_REQUEST", "lb_policy: RANDOM")),
              HasSubstr("least_request_lb_config: needs lb_policy LEAST_REQUEST"));
  // ROUND_ROBIN's own.
  std::string rr = Replace(kGood, "    lb_policy: RANDOM",
                           "    lb_policy: ROUND_ROBIN\n"
                           "    round_robin_lb_config: {slow_start_config: "
                           "{slow_start_window: 5s}}");
  ServerConfig c2;
  ASSERT_TRUE(Build(rr, &c2, &errors)) << ::testing::PrintToString(errors);
  ASSERT_TRUE(c2.clusters.at("web").info->slow_start.has_value());
  EXPECT_DOUBLE_EQ(c2.clusters.at("web").info->slow_start->aggression, 1.0);
  EXPECT_DOUBLE_EQ(c2.clusters.at("web").info->slow_start->min_weight, 0.1);
}

TEST(ServerConfigTest, PrioritiesLocalitiesAndTheAssignmentPolicy) {
  std::string yaml =
      Replace(kGood, R"(      endpoints:
      - lb_endpoints:)",
              R"(      policy: {overprovisioning_factor: 200, weighted_priority_health: true}
      endpoints:
      - priority: 1
        locality: {region: eu, zone: eu-1a}
        load_balancing_weight: 7
        lb_endpoints:)");
  yaml = Replace(yaml, "    lb_policy: RANDOM",
                 "    lb_policy: RANDOM\n    common_lb_config: {locality_weighted_lb_config: {}}");
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(yaml, &c, &errors)) << ::testing::PrintToString(errors);
  const ClusterEntry& web = c.clusters.at("web");
  EXPECT_TRUE(web.info->locality_weighted);
  EXPECT_EQ(web.hosts->overprovisioning_factor, 200u);
  EXPECT_TRUE(web.hosts->weighted_priority_health);
  const Host& h = *(*web.hosts)[0];
  EXPECT_EQ(h.priority, 1u);
  EXPECT_EQ(h.locality, "eu/eu-1a/");
  EXPECT_EQ(h.locality_weight, 7u);

  EXPECT_THAT(OnlyError(Replace(yaml, "priority: 1", "priority: 129")),
              HasSubstr("load_assignment.endpoints[0].priority: must be at most 128"));
  EXPECT_THAT(OnlyError(Replace(yaml, "load_balancing_weight: 7", "load_balancing_weight: 0")),
              HasSubstr("load_assignment.endpoints[0].load_balancing_weight: must be at least 1"));
  EXPECT_THAT(
      OnlyError(Replace(yaml, "overprovisioning_factor: 200", "overprovisioning_factor: 0")),
      HasSubstr("load_assignment.policy.overprovisioning_factor: must be positive"));
  // Zone-aware routing and drop_overloads change where traffic goes and are not implemented.
  EXPECT_THAT(OnlyError(Replace(yaml, "locality_weighted_lb_config: {}",
                                "zone_aware_lb_config: {min_cluster_size: 3}")),
              HasSubstr("zone_aware_lb_config"));
  EXPECT_THAT(
      OnlyError(Replace(yaml, "weighted_priority_health: true", "drop_overloads: [{category: x}]")),
      HasSubstr("drop_overloads"));
}

TEST(ServerConfigTest, AnUnnamedStaticListenerIsNamedAfterItsAddress) {
  ServerConfig c;
  std::vector<std::string> errors;
  std::string yaml =
      Replace(kGood,
              "  - name: main\n    address: {socket_address: {address: 127.0.0.1, "
              "port_value: 0}}",
              "  - address: {socket_address: {address: 127.0.0.1, port_value: 8443}}");
  ASSERT_TRUE(Build(yaml, &c, &errors)) << ::testing::PrintToString(errors);
  EXPECT_EQ(c.listeners[0]->name, "127.0.0.1:8443");
}

TEST(ServerConfigTest, LogicalDnsTakesOneEndpoint) {
  std::string one =
      Replace(kGood, "lb_policy: RANDOM",
              "lb_policy: RANDOM\n    type: LOGICAL_DNS\n    dns_lookup_family: V4_ONLY");
  // kGood's cluster has three endpoints: too many for one logical host.
  EXPECT_THAT(OnlyError(one), HasSubstr("a LOGICAL_DNS cluster takes exactly one endpoint"));
}

TEST(ServerConfigTest, LayeredRuntime) {
  std::string yaml = std::string(kGood) + R"(
layered_runtime:
  layers:
  - name: base
    static_layer:
      overload: {global_downstream_max_connections: 50000}
      re2.max_program_size: {error_level: 1000}
      some_flag: true
  - name: override
    static_layer: {overload.global_downstream_max_connections: 100}
  - name: admin
    admin_layer: {}
)";
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(yaml, &c, &errors)) << ::testing::PrintToString(errors);
  EXPECT_EQ(c.runtime.global_max_connections, 100u);
  EXPECT_EQ(c.runtime.layers, (std::vector<std::string>{"base", "override", "admin"}));
  EXPECT_EQ(c.runtime.values.at("some_flag"), "true");
  EXPECT_EQ(c.runtime.unused_keys,
            (std::vector<std::string>{"re2.max_program_size.error_level", "some_flag"}));

  EXPECT_EQ(c.runtime.admin_layer, 2);

  // /runtime_modify: all or nothing; the admin layer wins; an empty value removes a key.
  EXPECT_THAT(
      ModifyRuntime({{"overload.global_downstream_max_connections", "x"}, {"k", "1"}}, &c.runtime),
      HasSubstr("overload.global_downstream_max_connections: must be a whole number"));
  EXPECT_EQ(c.runtime.values.count("k"), 0u);
  EXPECT_EQ(
      ModifyRuntime({{"overload.global_downstream_max_connections", "7"}, {"k", "1"}}, &c.runtime),
      "");
  EXPECT_EQ(c.runtime.global_max_connections, 7u);
  EXPECT_EQ(c.runtime.values.at("k"), "1");
  EXPECT_EQ(ModifyRuntime({{"overload.global_downstream_max_connections", ""}}, &c.runtime), "");
  EXPECT_EQ(c.runtime.global_max_connections, 100u);
  RuntimeConfig none;
  EXPECT_THAT(ModifyRuntime({{"a", "1"}}, &none), HasSubstr("no admin layer"));

  EXPECT_THAT(OnlyError(std::string(kGood) +
                        "layered_runtime: {layers: [{name: l, static_layer: {overload: "
                        "{global_downstream_max_connections: lots}}}]}\n"),
              HasSubstr("overload.global_downstream_max_connections: must be a whole number of "
                        "connections, not 'lots'"));
  EXPECT_THAT(OnlyError(std::string(kGood) +
                        "layered_runtime: {layers: [{name: l, static_layer: {a: [1, 2]}}]}\n"),
              HasSubstr("layered_runtime.layers[0].static_layer.a: a runtime value must be a "
                        "number, a boolean or a string"));
  EXPECT_THAT(OnlyError(std::string(kGood) +
                        "layered_runtime: {layers: [{name: d, disk_layer: {symlink_root: /x}}]}\n"),
              HasSubstr("field 'disk_layer' of envoy.config.bootstrap.v3.RuntimeLayer is not "
                        "supported by rpx"));
}

TEST(ServerConfigTest, UnknownClusterInRoute) {
  std::string e = OnlyError(Replace(kGood, "route: {cluster: web}", "route: {cluster: nope}"));
  EXPECT_THAT(e, HasSubstr("t.yaml: static_resources.listeners[0].filter_chains[0].filters[0]."
                           "typed_config.route_config.virtual_hosts[0].routes[0].route.cluster: "
                           "unknown cluster 'nope'"));
}

TEST(ServerConfigTest, DuplicateClusterName) {
  std::string yaml = kGood;
  yaml += R"(
  - name: web
    load_assignment: {cluster_name: web}
)";
  std::string e = OnlyError(yaml);
  EXPECT_THAT(e, HasSubstr("static_resources.clusters[1].name: duplicate cluster name 'web'"));
}

TEST(ServerConfigTest, UnsupportedLbPolicyAndOriginalDstRules) {
  std::string e =
      OnlyError(Replace(kGood, "lb_policy: RANDOM", "lb_policy: LOAD_BALANCING_POLICY_CONFIG"));
  EXPECT_THAT(e, HasSubstr("static_resources.clusters[0].lb_policy: lb_policy "
                           "LOAD_BALANCING_POLICY_CONFIG is not supported"));
  e = OnlyError(Replace(kGood, "lb_policy: RANDOM", "lb_policy: CLUSTER_PROVIDED"));
  EXPECT_THAT(e, HasSubstr("static_resources.clusters[0].lb_policy: CLUSTER_PROVIDED is for "
                           "ORIGINAL_DST clusters only"));
  // ORIGINAL_DST takes CLUSTER_PROVIDED and no endpoints.
  ServerConfig c;
  std::vector<std::string> errors;
  EXPECT_FALSE(
      Build(Replace(kGood, "lb_policy: RANDOM", "lb_policy: RANDOM\n    type: ORIGINAL_DST"), &c,
            &errors));
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_THAT(errors[0], HasSubstr("static_resources.clusters[0].lb_policy: an ORIGINAL_DST "
                                   "cluster needs lb_policy CLUSTER_PROVIDED, not RANDOM"));
  EXPECT_THAT(errors[1], HasSubstr("static_resources.clusters[0].load_assignment: an "
                                   "ORIGINAL_DST cluster has no endpoints"));
}

TEST(ServerConfigTest, OriginalDstCluster) {
  std::string yaml = kGood;
  size_t from = yaml.find("    load_assignment:\n      cluster_name: web");
  ASSERT_NE(from, std::string::npos);
  // The cluster's endpoints are the last lines of kGood.
  yaml.replace(from, std::string::npos,
               "    cleanup_interval: 2s\n"
               "    original_dst_lb_config:\n"
               "      use_http_header: true\n"
               "      http_header_name: X-Dst\n"
               "      upstream_port_override: 9090\n");
  yaml = Replace(yaml, "lb_policy: RANDOM", "lb_policy: CLUSTER_PROVIDED\n    type: ORIGINAL_DST");
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(yaml, &c, &errors)) << (errors.empty() ? "" : errors[0]);
  const auto& od = c.clusters.at("web").info->original_dst;
  ASSERT_TRUE(od.has_value());
  EXPECT_TRUE(od->use_http_header);
  EXPECT_EQ(od->http_header_name, "x-dst");
  EXPECT_EQ(od->port_override, 9090u);
  EXPECT_EQ(od->cleanup_interval_ms, 2000u);
  EXPECT_TRUE(c.clusters.at("web").hosts->empty());
}

TEST(ServerConfigTest, UnsupportedFieldsAreErrorsNotIgnored) {
  std::string e = OnlyError(
      Replace(kGood, "connect_timeout: 2s", "connect_timeout: 2s\n    lb_subset_config: {}"));
  // lb_subset_config is not in rpx's proto subset, so the loader reports it as unknown.
  EXPECT_THAT(e, HasSubstr("static_resources.clusters[0].lb_subset_config"));
  e = OnlyError(Replace(kGood, "          route_config:\n",
                        "          rds: {route_config_name: r}\n          route_config:\n"));
  EXPECT_THAT(e, HasSubstr("only one of the 'route_specifier' fields"));
  std::string rds_only = kGood;
  size_t from = rds_only.find("          route_config:");
  size_t to = rds_only.find("          http_filters:");
  rds_only.replace(from, to - from, "          rds: {route_config_name: r}\n");
  ServerConfig c;
  std::vector<std::string> errors;
  EXPECT_FALSE(Build(rds_only, &c, &errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr("typed_config.rds.config_source: is required"));
  errors.clear();
  std::string rds_ads = rds_only;
  rds_ads.replace(rds_ads.find("rds: {route_config_name: r}"), 27,
                  "rds: {route_config_name: r, config_source: {ads: {}}}");
  ServerConfig c2;
  EXPECT_FALSE(Build(rds_ads, &c2, &errors));
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  EXPECT_THAT(errors[0], HasSubstr("needs dynamic_resources.ads_config"));
  e = OnlyError(
      Replace(kGood, "    - filters:\n", "    - transport_socket: {name: tls}\n      filters:\n"));
  EXPECT_THAT(e, HasSubstr("filter_chains[0].transport_socket: transport socket 'tls' is not "
                           "supported (envoy.transport_sockets.tls with a DownstreamTlsContext"));
  // A cluster transport socket rpx cannot honour is refused, never replaced by cleartext.
  e = OnlyError(Replace(kGood, "    connect_timeout: 2s\n",
                        "    connect_timeout: 2s\n    transport_socket: {name: "
                        "envoy.transport_sockets.tls}\n"));
  EXPECT_THAT(e, HasSubstr("clusters[0].transport_socket: transport socket "
                           "'envoy.transport_sockets.tls' is not supported"));
  e = OnlyError(Replace(kGood, "    connect_timeout: 2s\n",
                        "    connect_timeout: 2s\n    transport_socket_matches: [{name: m}]\n"));
  EXPECT_THAT(e, HasSubstr("clusters[0].transport_socket_matches"));
}

TEST(ServerConfigTest, UpgradeConfigs) {
  std::string yaml = Replace(kGood, "stream_idle_timeout: 10s",
                             "stream_idle_timeout: 10s\n          upgrade_configs: [{upgrade_type: "
                             "WebSocket}, {upgrade_type: foo, enabled: false}]");
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(yaml, &c, &errors)) << ::testing::PrintToString(errors);
  const auto& u = c.listeners[0]->chains[0]->http->upgrades;
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].type, "websocket");
  EXPECT_TRUE(u[0].enabled);
  EXPECT_EQ(u[1].type, "foo");
  EXPECT_FALSE(u[1].enabled);
}

TEST(ServerConfigTest, BadUpgradeConfigs) {
  auto with = [](const std::string& configs) {
    return OnlyError(Replace(kGood, "stream_idle_timeout: 10s",
                             "stream_idle_timeout: 10s\n          upgrade_configs: " + configs));
  };
  EXPECT_THAT(with("[{upgrade_type: websocket}, {upgrade_type: WEBSOCKET}]"),
              HasSubstr("upgrade_configs[1].upgrade_type: is listed twice"));
  EXPECT_THAT(with("[{upgrade_type: CONNECT}]"),
              HasSubstr("upgrade_configs[0].upgrade_type: 'CONNECT' cannot be tunnelled"));
  EXPECT_THAT(with("[{enabled: true}]"), HasSubstr("upgrade_configs[0].upgrade_type: is required"));
  EXPECT_THAT(with("[{upgrade_type: websocket, filters: [{name: x}]}]"),
              HasSubstr("upgrade_configs[0].filters: field 'filters' of "
                        "envoy.extensions.filters.network.http_connection_manager.v3."
                        "HttpConnectionManager.UpgradeConfig is not supported by rpx"));
}

// The filter list of kGood with `before` put ahead of the http_connection_manager.
std::string WithNetworkFilter(const std::string& before) {
  return Replace(kGood, "      - name: envoy.filters.network.http_connection_manager\n",
                 before + "      - name: envoy.filters.network.http_connection_manager\n");
}

constexpr char kLimit[] =
    "      - name: envoy.filters.network.connection_limit\n"
    "        typed_config:\n"
    "          \"@type\": type.googleapis.com/"
    "envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit\n";

TEST(ServerConfigTest, ConnectionLimit) {
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(WithNetworkFilter(std::string(kLimit) + "          stat_prefix: cap\n"
                                                            "          max_connections: 500\n"
                                                            "          delay: 0.1s\n"),
                    &c, &errors))
      << ::testing::PrintToString(errors);
  const auto& limit = c.listeners[0]->chains[0]->connection_limit;
  ASSERT_TRUE(limit);
  EXPECT_EQ(limit->stat_prefix, "cap");
  EXPECT_EQ(limit->max_connections, 500u);
  EXPECT_EQ(limit->delay_ms, 100u);
  EXPECT_TRUE(limit->TryAcquire());
  EXPECT_EQ(limit->state->active.load(), 1u);

  // runtime_enabled has no runtime to read: its default_value decides.
  errors.clear();
  c = ServerConfig();
  ASSERT_TRUE(Build(
      WithNetworkFilter(std::string(kLimit) + "          stat_prefix: cap\n"
                                              "          max_connections: 5\n"
                                              "          runtime_enabled: {default_value: false, "
                                              "runtime_key: cap.enabled}\n"),
      &c, &errors))
      << ::testing::PrintToString(errors);
  EXPECT_FALSE(c.listeners[0]->chains[0]->connection_limit);
}

TEST(ServerConfigTest, BadConnectionLimit) {
  EXPECT_THAT(OnlyError(WithNetworkFilter(std::string(kLimit) + "          stat_prefix: cap\n")),
              HasSubstr("filters[0].typed_config.max_connections: must be at least 1"));
  EXPECT_THAT(OnlyError(WithNetworkFilter(std::string(kLimit) + "          max_connections: 1\n")),
              HasSubstr("filters[0].typed_config.stat_prefix: is required"));
  EXPECT_THAT(OnlyError(WithNetworkFilter(std::string(kLimit) +
                                          "          stat_prefix: a\n"
                                          "          max_connections: 1\n" +
                                          kLimit +
                                          "          stat_prefix: b\n"
                                          "          max_connections: 1\n")),
              HasSubstr("filters[1]: connection_limit is given twice"));
  EXPECT_THAT(OnlyError(WithNetworkFilter("      - name: envoy.filters.network.tcp_proxy\n")),
              HasSubstr("filters[0]: network filter 'envoy.filters.network.tcp_proxy' is not "
                        "supported here"));
}

TEST(ServerConfigTest, OnlyTheRouterHttpFilter) {
  std::string e = OnlyError(
      Replace(kGood, "- name: envoy.filters.http.router\n",
              "- name: envoy.filters.http.cors\n          - name: envoy.filters.http.router\n"));
  EXPECT_THAT(e, HasSubstr("http_filters[0]: http filter 'envoy.filters.http.cors'"));
}

TEST(ServerConfigTest, BadAddressAndPort) {
  std::string e = OnlyError(Replace(kGood, "address: 127.0.0.1, port_value: 8081",
                                    "address: not-an-ip, port_value: 8081"));
  EXPECT_THAT(e, HasSubstr("lb_endpoints[0].endpoint.address.socket_address.address"));
  e = OnlyError(Replace(kGood, "port_value: 8081", "port_value: 0"));
  EXPECT_THAT(e, HasSubstr("port_value: must be within [1, 65535]"));
}

TEST(ServerConfigTest, HeadersKbLimit) {
  std::string e =
      OnlyError(Replace(kGood, "max_request_headers_kb: 30", "max_request_headers_kb: 9000"));
  EXPECT_THAT(e, HasSubstr("max_request_headers_kb: must be within [1, 8192]"));
}

TEST(ServerConfigTest, AdsNeedsAnHttp2StaticCluster) {
  std::string yaml = Replace(kGood, "static_resources:", R"(dynamic_resources:
  lds_config: {ads: {}, resource_api_version: V3}
  cds_config: {ads: {}, resource_api_version: V3}
  ads_config:
    api_type: DELTA_GRPC
    transport_api_version: V3
    grpc_services: [{envoy_grpc: {cluster_name: web}}]
static_resources:)");
  std::string e = OnlyError(yaml);
  EXPECT_THAT(e, HasSubstr("cluster 'web' must enable HTTP/2"));
  yaml = Replace(yaml, "explicit_http_config: {http_protocol_options: {}}",
                 "explicit_http_config: {http2_protocol_options: {}}");
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(yaml, &c, &errors)) << ::testing::PrintToString(errors);
  EXPECT_TRUE(c.xds.enabled);
  EXPECT_TRUE(c.xds.delta);
  EXPECT_TRUE(c.xds.lds && c.xds.cds);
  EXPECT_EQ(c.xds.cluster, "web");
  // Every endpoint of the first one's family: gRPC fails over between control-plane replicas.
  EXPECT_EQ(c.xds.target, "ipv4:127.0.0.1:8081,127.0.0.1:8083");
}

TEST(ServerConfigTest, UpstreamProtocolFromHttpProtocolOptions) {
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(kGood, &c, &errors)) << ::testing::PrintToString(errors);
  EXPECT_EQ(c.clusters.at("web").info->protocol, ClusterInfo::Protocol::kHttp1);

  ServerConfig h2;
  ASSERT_TRUE(Build(Replace(kGood, "explicit_http_config: {http_protocol_options: {}}",
                            "explicit_http_config: {http2_protocol_options: "
                            "{max_concurrent_streams: 7, initial_stream_window_size: 70000}}"),
                    &h2, &errors))
      << ::testing::PrintToString(errors);
  const ClusterInfo& info = *h2.clusters.at("web").info;
  EXPECT_EQ(info.protocol, ClusterInfo::Protocol::kHttp2);
  EXPECT_EQ(info.http2_options.max_concurrent_streams, 7u);
  EXPECT_EQ(info.http2_options.initial_stream_window_size, 70000u);

  ServerConfig autoc;
  ASSERT_TRUE(Build(Replace(kGood, "explicit_http_config: {http_protocol_options: {}}",
                            "auto_config: {http2_protocol_options: {max_concurrent_streams: 3}}"),
                    &autoc, &errors))
      << ::testing::PrintToString(errors);
  EXPECT_EQ(autoc.clusters.at("web").info->protocol, ClusterInfo::Protocol::kAuto);
  EXPECT_EQ(autoc.clusters.at("web").info->http2_options.max_concurrent_streams, 3u);
}

TEST(ServerConfigTest, BadUpstreamHttp2OptionsNameTheField) {
  std::string e = OnlyError(Replace(kGood, "explicit_http_config: {http_protocol_options: {}}",
                                    "explicit_http_config: {http2_protocol_options: "
                                    "{initial_stream_window_size: 100}}"));
  EXPECT_THAT(e, HasSubstr("explicit_http_config.http2_protocol_options."
                           "initial_stream_window_size"));
  EXPECT_THAT(e, HasSubstr("must be within [65535, 2147483647]"));
  e = OnlyError(Replace(kGood, "explicit_http_config: {http_protocol_options: {}}",
                        "use_downstream_protocol_config: {}"));
  EXPECT_THAT(e, HasSubstr("use_downstream_protocol_config"));
}

TEST(ServerConfigTest, RdsListenerAndEdsCluster) {
  envoy::config::listener::v3::Listener l;
  std::vector<std::string> errors;
  ASSERT_TRUE(LoadYamlIntoMessage(R"(
name: dyn
address: {socket_address: {address: 127.0.0.1, port_value: 10000}}
filter_chains:
- filters:
  - name: hcm
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: dyn
      rds: {config_source: {ads: {}, resource_api_version: V3}, route_config_name: r1}
      http_filters: [{name: envoy.filters.http.router}]
)",
                                  "lds", &l, &errors));
  BuildOptions o;
  auto lc = BuildListener(l, "Listener 'dyn'", o, &errors);
  ASSERT_TRUE(lc) << ::testing::PrintToString(errors);
  EXPECT_EQ(lc->chains[0]->rds_name, "r1");
  EXPECT_EQ(lc->chains[0]->routes, nullptr);

  envoy::config::cluster::v3::Cluster c;
  ASSERT_TRUE(LoadYamlIntoMessage(R"(
name: svc
type: EDS
eds_cluster_config: {eds_config: {ads: {}, resource_api_version: V3}, service_name: svc-eds}
)",
                                  "cds", &c, &errors));
  ClusterEntry entry;
  std::optional<DnsCluster> dns;
  ASSERT_TRUE(BuildCluster(c, "Cluster 'svc'", o, &entry, &dns, &errors));
  EXPECT_TRUE(entry.info->eds);
  EXPECT_EQ(entry.info->eds_service_name, "svc-eds");
  EXPECT_TRUE(entry.hosts->empty());
}

// What makes the ADS stream run: LDS, CDS, or only a static listener's RDS or a static
// cluster's EDS; each of those without ads_config is an error naming the field.
TEST(ServerConfigTest, StaticRdsAndEdsUseTheAdsStream) {
  constexpr char kAdsConfig[] = R"(dynamic_resources:
  ads_config:
    api_type: GRPC
    transport_api_version: V3
    grpc_services: [{envoy_grpc: {cluster_name: xds}}]
static_resources:)";
  constexpr char kXdsCluster[] = R"(  clusters:
  - name: xds
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: xds
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 18000}}}}]}]
  - name: web)";
  auto with_rds = [](std::string yaml, const std::string& source) {
    size_t from = yaml.find("          route_config:");
    size_t to = yaml.find("          http_filters:");
    yaml.replace(from, to - from,
                 "          rds: {route_config_name: r, config_source: " + source + "}\n");
    return yaml;
  };
  auto with_eds = [](const std::string& yaml) {
    size_t from = yaml.find("    load_assignment:\n      cluster_name: web");
    return yaml.substr(0, from) +
           "    type: EDS\n    eds_cluster_config: {eds_config: {ads: {}, "
           "resource_api_version: V3}}\n";
  };
  // ads_config, with everything static and inline: nothing uses the stream.
  std::string inline_only = Replace(Replace(kGood, "static_resources:", kAdsConfig),
                                    "  clusters:\n  - name: web", kXdsCluster);
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(inline_only, &c, &errors)) << ::testing::PrintToString(errors);
  EXPECT_TRUE(c.xds.has_ads_config);
  EXPECT_FALSE(c.xds.enabled);

  // A static listener with RDS over ADS: the stream runs, with neither LDS nor CDS.
  ServerConfig c2;
  ASSERT_TRUE(Build(with_rds(inline_only, "{ads: {}, resource_api_version: V3}"), &c2, &errors))
      << ::testing::PrintToString(errors);
  EXPECT_TRUE(c2.xds.enabled);
  EXPECT_FALSE(c2.xds.lds || c2.xds.cds);
  EXPECT_EQ(c2.listeners[0]->chains[0]->rds_name, "r");

  // A static EDS cluster (the last one in kGood): the same.
  ServerConfig c3;
  ASSERT_TRUE(Build(with_eds(inline_only), &c3, &errors)) << ::testing::PrintToString(errors);
  EXPECT_TRUE(c3.xds.enabled);
  EXPECT_TRUE(c3.clusters.at("web").info->eds);
  EXPECT_TRUE(c3.clusters.at("web").hosts->empty());

  // Without ads_config, each user of ADS is named.
  ServerConfig c4;
  EXPECT_FALSE(Build(with_eds(with_rds(kGood, "{ads: {}}")), &c4, &errors));
  ASSERT_EQ(errors.size(), 2u) << ::testing::PrintToString(errors);
  EXPECT_THAT(errors[0],
              HasSubstr("static_resources.listeners[0].filter_chains[0].filters[0].typed_config"
                        ".rds: RDS needs dynamic_resources.ads_config"));
  EXPECT_THAT(errors[1], HasSubstr("static_resources.clusters[0].eds_cluster_config: EDS needs "
                                   "dynamic_resources.ads_config"));

  // The xDS cluster itself cannot wait for EDS.
  std::string self =
      Replace(Replace(kGood, "static_resources:", kAdsConfig), "name: web", "name: xds");
  self = Replace(self, "explicit_http_config: {http_protocol_options: {}}",
                 "explicit_http_config: {http2_protocol_options: {}}");
  self = Replace(self, "route: {cluster: web}", "route: {cluster: xds}");
  EXPECT_THAT(OnlyError(with_rds(with_eds(self), "{ads: {}}")),
              HasSubstr("cluster 'xds' is an xDS cluster, so its endpoints cannot come from "
                        "EDS"));
}

TEST(ServerConfigTest, NoListeners) {
  std::string e = OnlyError("static_resources: {clusters: []}\n");
  EXPECT_THAT(e, HasSubstr("at least one listener"));
}

// Deliberately changed with the asynchronous resolver: building a DNS cluster resolves nothing
// (nor does --mode validate); its targets go to dns_clusters, for the main thread's
// DnsRefresher, and the cluster starts with no hosts.
TEST(ServerConfigTest, StrictDnsTargetsAreResolvedLater) {
  std::string yaml = Replace(kGood, "lb_policy: RANDOM", "lb_policy: RANDOM\n    type: STRICT_DNS");
  yaml =
      Replace(yaml, "address: 127.0.0.1, port_value: 8081", "address: localhost, port_value: 8081");
  yaml =
      Replace(yaml, "address: \"::1\", port_value: 8082", "address: localhost, port_value: 8082");
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(yaml, &c, &errors)) << ::testing::PrintToString(errors);
  EXPECT_TRUE(c.clusters.at("web").hosts->empty());
  ASSERT_EQ(c.dns_clusters.size(), 1u);
  const DnsCluster& d = c.dns_clusters[0];
  ASSERT_GE(d.targets.size(), 2u);
  EXPECT_EQ(d.targets[0].hostname, "localhost");
  EXPECT_EQ(d.targets[0].port, 8081u);
  EXPECT_EQ(d.targets[0].weight, 3u);
  EXPECT_EQ(d.refresh_ms, 5000u);  // Envoy's default
  EXPECT_EQ(d.failure_base_ms, 0u);
  EXPECT_FALSE(d.respect_dns_ttl);
  EXPECT_FALSE(d.resolver.has_value());
}

TEST(ServerConfigTest, DnsRefreshSettingsAndResolver) {
  std::string yaml =
      Replace(kGood, "lb_policy: RANDOM",
              "lb_policy: RANDOM\n"
              "    type: STRICT_DNS\n"
              "    dns_refresh_rate: 2s\n"
              "    respect_dns_ttl: true\n"
              "    dns_failure_refresh_rate: {base_interval: 0.2s}\n"
              "    typed_dns_resolver_config:\n"
              "      name: envoy.network.dns_resolver.cares\n"
              "      typed_config:\n"
              "        \"@type\": type.googleapis.com/"
              "envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig\n"
              "        resolvers: [{socket_address: {address: 127.0.0.1, port_value: "
              "5353}}]\n"
              "        dns_resolver_options: {no_default_search_domain: true}");
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(yaml, &c, &errors)) << ::testing::PrintToString(errors);
  ASSERT_EQ(c.dns_clusters.size(), 1u);
  const DnsCluster& d = c.dns_clusters[0];
  EXPECT_EQ(d.refresh_ms, 2000u);
  EXPECT_TRUE(d.respect_dns_ttl);
  EXPECT_EQ(d.failure_base_ms, 200u);
  EXPECT_EQ(d.failure_max_ms, 2000u);  // 10 x base_interval, Envoy's default
  ASSERT_TRUE(d.resolver.has_value());
  ASSERT_EQ(d.resolver->resolvers.size(), 1u);
  EXPECT_EQ(d.resolver->resolvers[0].ToString(), "127.0.0.1:5353");
  EXPECT_TRUE(d.resolver->no_search);
  EXPECT_FALSE(d.resolver->use_tcp);

  // The deprecated dns_resolvers, and the bootstrap's resolver for clusters naming none.
  std::string old = Replace(kGood, "lb_policy: RANDOM",
                            "lb_policy: RANDOM\n"
                            "    type: STRICT_DNS\n"
                            "    dns_resolvers: [{socket_address: {address: \"::1\"}}]\n"
                            "    use_tcp_for_dns_lookups: true");
  old +=
      "typed_dns_resolver_config:\n"
      "  name: envoy.network.dns_resolver.cares\n"
      "  typed_config:\n"
      "    \"@type\": type.googleapis.com/"
      "envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig\n"
      "    resolvers: [{socket_address: {address: 127.0.0.2, port_value: 53}}]\n";
  ServerConfig c2;
  errors.clear();
  ASSERT_TRUE(Build(old, &c2, &errors)) << ::testing::PrintToString(errors);
  ASSERT_TRUE(c2.dns_clusters[0].resolver.has_value());
  EXPECT_EQ(c2.dns_clusters[0].resolver->resolvers[0].ToString(), "[::1]:0");
  EXPECT_TRUE(c2.dns_clusters[0].resolver->use_tcp);
  ASSERT_TRUE(c2.dns_resolver.has_value());
  EXPECT_EQ(c2.dns_resolver->resolvers[0].ToString(), "127.0.0.2:53");
}

TEST(ServerConfigTest, BadDnsSettingsNameTheField) {
  auto dns = [](const std::string& extra, const std::string& type = "STRICT_DNS") {
    return Replace(kGood, "lb_policy: RANDOM",
                   "lb_policy: RANDOM\n    type: " + type + "\n" + extra);
  };
  EXPECT_THAT(OnlyError(dns("    dns_refresh_rate: 0.0001s")),
              HasSubstr("clusters[0].dns_refresh_rate: must be at least 1ms"));
  EXPECT_THAT(OnlyError(dns("    dns_failure_refresh_rate: {max_interval: 1s}")),
              HasSubstr("dns_failure_refresh_rate.base_interval: is required"));
  EXPECT_THAT(
      OnlyError(dns("    dns_failure_refresh_rate: {base_interval: 2s, max_interval: 1s}")),
      HasSubstr("dns_failure_refresh_rate.max_interval: must not be shorter than base_interval"));
  EXPECT_THAT(OnlyError(dns("    dns_resolvers: [{socket_address: {address: dns.example.com}}]")),
              HasSubstr("dns_resolvers[0].socket_address.address: 'dns.example.com' is not an IP "
                        "address"));
  EXPECT_THAT(OnlyError(dns("    typed_dns_resolver_config:\n"
                            "      name: x\n"
                            "      typed_config: {\"@type\": type.googleapis.com/"
                            "envoy.extensions.network.dns_resolver.cares.v3."
                            "CaresDnsResolverConfig}")),
              HasSubstr("typed_dns_resolver_config.typed_config.resolvers: needs at least one"));
  EXPECT_THAT(
      OnlyError(dns("    typed_dns_resolver_config:\n"
                    "      name: x\n"
                    "      typed_config:\n"
                    "        \"@type\": type.googleapis.com/"
                    "envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig\n"
                    "        resolvers: [{socket_address: {address: 127.0.0.1}}]\n"
                    "        filter_unroutable_families: true")),
      HasSubstr("filter_unroutable_families"));
  // On a cluster that resolves nothing they mean nothing, and Envoy accepts them there.
  ServerConfig c;
  std::vector<std::string> errors;
  EXPECT_TRUE(
      Build(dns("    respect_dns_ttl: true\n    dns_refresh_rate: 3s", "STATIC"), &c, &errors))
      << ::testing::PrintToString(errors);
  EXPECT_TRUE(c.dns_clusters.empty());
}

// Envoy's socket options: raw setsockopt calls on the listener's sockets and, through
// upstream_bind_config, on every upstream connection (with its source address and freebind).
TEST(ServerConfigTest, SocketOptions) {
  std::string yaml = Replace(kGood, "    per_connection_buffer_limit_bytes: 65536\n",
                             "    per_connection_buffer_limit_bytes: 65536\n"
                             "    socket_options:\n"
                             "    - {description: cc, level: 6, name: 13, buf_value: cmVubw==}\n"
                             "    - {level: 1, name: 9, int_value: 1, state: STATE_LISTENING}\n");
  yaml = Replace(yaml, "    connect_timeout: 2s\n",
                 "    connect_timeout: 2s\n"
                 "    upstream_bind_config:\n"
                 "      source_address: {address: 127.0.0.2, port_value: 0}\n"
                 "      freebind: true\n"
                 "      socket_options: [{level: 6, name: 13, buf_value: cmVubw==}]\n");
  ServerConfig c;
  std::vector<std::string> errors;
  ASSERT_TRUE(Build(yaml, &c, &errors)) << ::testing::PrintToString(errors);
  const SocketOptions& all = c.listeners[0]->socket_options;
  ASSERT_EQ(all.size(), 3u);
  // An HTTP listener: rpx's TCP_QUICKACK 0 first, so the configured ones can override it.
  EXPECT_EQ(all[0].level, IPPROTO_TCP);
  EXPECT_EQ(all[0].name, TCP_QUICKACK);
  EXPECT_EQ(all[0].int_value, 0);
  EXPECT_EQ(all[0].state, SocketOption::State::kListening);
  const SocketOption* lo = &all[1];
  EXPECT_EQ(lo[0].description, "cc");
  EXPECT_FALSE(lo[0].is_int);
  EXPECT_EQ(lo[0].buf_value, "reno");
  EXPECT_EQ(lo[0].state, SocketOption::State::kPrebind);
  EXPECT_EQ(lo[1].level, 1);
  EXPECT_EQ(lo[1].name, 9);
  EXPECT_TRUE(lo[1].is_int);
  EXPECT_EQ(lo[1].int_value, 1);
  EXPECT_EQ(lo[1].state, SocketOption::State::kListening);

  const ClusterInfo& web = *c.clusters.at("web").info;
  ASSERT_TRUE(web.source_address.has_value());
  EXPECT_EQ(web.source_address->ToString(), "127.0.0.2:0");
  ASSERT_EQ(web.socket_options.size(), 2u);
  EXPECT_EQ(web.socket_options[0].level, IPPROTO_IP);  // freebind, as an option
  EXPECT_EQ(web.socket_options[0].name, IP_FREEBIND);
  EXPECT_EQ(web.socket_options[0].int_value, 1);
  EXPECT_EQ(web.socket_options[1].buf_value, "reno");
}

TEST(ServerConfigTest, BadSocketOptions) {
  std::string yaml = Replace(kGood, "    per_connection_buffer_limit_bytes: 65536\n",
                             "    per_connection_buffer_limit_bytes: 65536\n"
                             "    socket_options:\n"
                             "    - {level: 6, name: 13}\n"
                             "    - {level: 4294967296, name: 1, int_value: 1}\n"
                             "    - {level: 1, name: 9, int_value: 4294967296}\n");
  yaml = Replace(yaml, "    connect_timeout: 2s\n",
                 "    connect_timeout: 2s\n"
                 "    upstream_bind_config:\n"
                 "      socket_options:\n"
                 "      - {level: 1, name: 9, int_value: 1, state: STATE_BOUND}\n"
                 "      - {description: cc, level: 6, name: 13, buf_value: bm9wZQ==}\n");
  ServerConfig c;
  std::vector<std::string> errors;
  EXPECT_FALSE(Build(yaml, &c, &errors));
  std::string all = ::testing::PrintToString(errors);
  ASSERT_EQ(errors.size(), 5u) << all;
  const std::string l = "t.yaml: static_resources.listeners[0].socket_options";
  const std::string b = "t.yaml: static_resources.clusters[0].upstream_bind_config";
  EXPECT_THAT(all, HasSubstr(l + "[0]: int_value or buf_value is required"));
  EXPECT_THAT(all, HasSubstr(l + "[1].level: 4294967296 is not a setsockopt level"));
  EXPECT_THAT(all, HasSubstr(l + "[2].int_value: 4294967296 does not fit in a C int"));
  EXPECT_THAT(all, HasSubstr(b + ".socket_options[0].state: only STATE_PREBIND applies to "
                                 "upstream connections"));
  // The kernel judges the rest at load time: an unknown congestion control ("nope").
  EXPECT_THAT(all, HasSubstr(b + ": setting socket option 'cc' (level 6, name 13): No such file"));
}

}  // namespace
}  // namespace rpx
