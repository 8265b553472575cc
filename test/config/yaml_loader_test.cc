#include "source/config/yaml_loader.h"

#include "envoy/config/bootstrap/v3/bootstrap.pb.h"
#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rpx {
namespace {

using envoy::config::bootstrap::v3::Bootstrap;
using envoy::config::cluster::v3::Cluster;
using ::testing::HasSubstr;

TEST(YamlLoaderTest, LoadsScalarsEnumsDurationsWrappersAndAny) {
  Bootstrap b;
  std::vector<std::string> errors;
  ASSERT_TRUE(LoadYamlIntoMessage(R"(
node: {id: n1, cluster: c1}
static_resources:
  clusters:
  - name: up
    type: STRICT_DNS
    lbPolicy: LEAST_REQUEST
    connect_timeout: 0.25s
    per_connection_buffer_limit_bytes: 32768
    circuit_breakers: {thresholds: [{max_connections: 7}]}
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        common_http_protocol_options: {idle_timeout: 30s}
        explicit_http_config: {http_protocol_options: {}}
)",
                                  "b.yaml", &b, &errors))
      << errors[0];
  EXPECT_EQ(b.node().id(), "n1");
  const Cluster& c = b.static_resources().clusters(0);
  EXPECT_EQ(c.type(), Cluster::STRICT_DNS);
  EXPECT_EQ(c.lb_policy(), Cluster::LEAST_REQUEST);  // camelCase keys work too
  EXPECT_EQ(c.connect_timeout().seconds(), 0);
  EXPECT_EQ(c.connect_timeout().nanos(), 250000000);
  EXPECT_EQ(c.per_connection_buffer_limit_bytes().value(), 32768u);
  EXPECT_EQ(c.circuit_breakers().thresholds(0).max_connections().value(), 7u);
  EXPECT_EQ(c.typed_extension_protocol_options().size(), 1u);
}

TEST(YamlLoaderTest, EnumNamesAreCaseInsensitiveAsInEnvoy) {
  Cluster c;
  std::vector<std::string> errors;
  ASSERT_TRUE(LoadYamlIntoMessage("{name: up, type: strict_dns, lb_policy: Least_Request}",
                                  "c.yaml", &c, &errors))
      << errors[0];
  EXPECT_EQ(c.type(), Cluster::STRICT_DNS);
  EXPECT_EQ(c.lb_policy(), Cluster::LEAST_REQUEST);
}

TEST(YamlLoaderTest, ReportsEveryErrorWithLineAndPath) {
  Bootstrap b;
  std::vector<std::string> errors;
  EXPECT_FALSE(LoadYamlIntoMessage(R"(static_resources:
  clusters:
  - name: up
    lb_policy: FASTEST
    connect_timeout: five
    bogus_field: 1
)",
                                   "bad.yaml", &b, &errors));
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_THAT(errors[0], HasSubstr("bad.yaml:4:16: static_resources.clusters[0].lb_policy: "
                                   "unknown value 'FASTEST'"));
  EXPECT_THAT(errors[0], HasSubstr("ROUND_ROBIN"));
  EXPECT_THAT(errors[1], HasSubstr("bad.yaml:5:22: static_resources.clusters[0].connect_timeout"));
  EXPECT_THAT(errors[2], HasSubstr("bad.yaml:6:5: static_resources.clusters[0].bogus_field: "
                                   "unknown field 'bogus_field'"));
}

TEST(YamlLoaderTest, TypeMismatches) {
  Bootstrap b;
  std::vector<std::string> errors;
  EXPECT_FALSE(LoadYamlIntoMessage(R"(
static_resources:
  clusters: x
  listeners:
  - name: l
    per_connection_buffer_limit_bytes: -5
)",
                                   "t.yaml", &b, &errors));
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_THAT(errors[0], HasSubstr("static_resources.clusters: expected a list, got a scalar"));
  EXPECT_THAT(errors[1], HasSubstr("per_connection_buffer_limit_bytes: expected a non-negative"));
}

// As Envoy's loader (protobuf's JSON parser): one value where a list belongs is a list of one.
// Envoy's dynamic-config-fs example writes a listener's `filters:` this way.
TEST(YamlLoaderTest, OneValueForAListIsAListOfOne) {
  Bootstrap b;
  std::vector<std::string> errors;
  ASSERT_TRUE(LoadYamlIntoMessage(R"(
static_resources:
  clusters: {name: x}
  listeners:
  - name: l
    filter_chains:
    - filters: {name: envoy.filters.network.http_connection_manager}
)",
                                  "t.yaml", &b, &errors))
      << ::testing::PrintToString(errors);
  ASSERT_EQ(b.static_resources().clusters_size(), 1);
  EXPECT_EQ(b.static_resources().clusters(0).name(), "x");
  ASSERT_EQ(b.static_resources().listeners(0).filter_chains(0).filters_size(), 1);
}

TEST(YamlLoaderTest, OneofConflictIsAnError) {
  envoy::config::route::v3::RouteConfiguration rc;
  std::vector<std::string> errors;
  EXPECT_FALSE(LoadYamlIntoMessage(R"(
virtual_hosts:
- name: v
  domains: ["*"]
  routes: [{match: {prefix: "/", path: "/x"}, route: {cluster: c}}]
)",
                                   "r.yaml", &rc, &errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr("virtual_hosts[0].routes[0].match.path: only one of"));
}

TEST(YamlLoaderTest, UnknownAnyTypeIsNamed) {
  envoy::config::listener::v3::Filter f;
  std::vector<std::string> errors;
  EXPECT_FALSE(LoadYamlIntoMessage(R"(
name: x
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
)",
                                   "f.yaml", &f, &errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr("typed_config.@type: unknown or unsupported type"));
  EXPECT_THAT(errors[0], HasSubstr("RedisProxy"));
}

TEST(YamlLoaderTest, InvalidYamlAndEmptyInput) {
  Bootstrap b;
  std::vector<std::string> errors;
  EXPECT_FALSE(LoadYamlIntoMessage("a: [1, 2", "x.yaml", &b, &errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr("x.yaml:"));
  EXPECT_THAT(errors[0], HasSubstr("invalid YAML"));
  errors.clear();
  EXPECT_FALSE(LoadYamlIntoMessage("", "e.yaml", &b, &errors));
  EXPECT_THAT(errors[0], HasSubstr("empty"));
}

TEST(YamlLoaderTest, MissingFileIsNamed) {
  Bootstrap b;
  std::vector<std::string> errors;
  EXPECT_FALSE(LoadYamlFile("/nonexistent/rpx.yaml", &b, &errors));
  EXPECT_THAT(errors[0], HasSubstr("/nonexistent/rpx.yaml: cannot open"));
}

TEST(YamlLoaderTest, JsonIsYaml) {
  Bootstrap b;
  std::vector<std::string> errors;
  ASSERT_TRUE(LoadYamlIntoMessage(R"({"node": {"id": "j"}, "admin": {"address": {"socket_address":
      {"address": "127.0.0.1", "port_value": 9901}}}})",
                                  "j.json", &b, &errors));
  EXPECT_EQ(b.admin().address().socket_address().port_value(), 9901u);
}

}  // namespace
}  // namespace rpx
