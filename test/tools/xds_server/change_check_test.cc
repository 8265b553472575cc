#include "tools/xds_server/change_check.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpx/tools/v1/resource_file.pb.h"
#include "source/config/yaml_loader.h"

namespace rpx {
namespace xds_server {
namespace {

using ::testing::HasSubstr;

Snapshot Load(const std::string& yaml) {
  rpx::tools::v1::ResourceFile f;
  std::vector<std::string> errors;
  EXPECT_TRUE(LoadYamlIntoMessage(yaml, "t", &f, &errors)) << testing::PrintToString(errors);
  Snapshot s;
  std::map<std::string, std::string> origin;
  EXPECT_TRUE(AddResourceFile(f, "t", "", &s, &origin, &errors));
  return s;
}

constexpr char kListener[] = R"(listeners:
- name: l
  address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
  filter_chains:
  - filters:
    - name: hcm
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: s
        rds: { route_config_name: r, config_source: { ads: {}, resource_api_version: V3 } }
        http_filters:
        - name: envoy.filters.http.router
          typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
)";

constexpr char kRoute[] = R"(routes:
- name: r
  virtual_hosts:
  - name: v
    domains: ["*"]
    routes:
    - match: { prefix: "/w" }
      route: { weighted_clusters: { clusters: [{ name: c, weight: 1 }, { name: d, weight: 1 }] } }
    - match: { prefix: "/" }
      route: { cluster: c }
)";

constexpr char kCluster[] = R"(clusters:
- name: c
  type: STATIC
  load_assignment: { cluster_name: c }
)";

TEST(ChangeCheckTest, ReferencesAcrossTheSnapshot) {
  std::vector<Problem> p = CheckSnapshot(Load(kRoute), nullptr, CheckOptions());
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].field, "virtual_hosts[0].routes[0].route.weighted_clusters.clusters[0].name");
  EXPECT_EQ(p[1].field, "virtual_hosts[0].routes[0].route.weighted_clusters.clusters[1].name");
  EXPECT_EQ(p[2].field, "virtual_hosts[0].routes[1].route.cluster");

  CheckOptions external;
  external.external_clusters = {"d"};
  p = CheckSnapshot(Load(std::string(kRoute) + kCluster), nullptr, external);
  EXPECT_TRUE(p.empty()) << p[0].message;

  p = CheckSnapshot(Load(kListener), nullptr, CheckOptions());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].resource, "listeners/l");
  EXPECT_EQ(p[0].field, "filter_chains[0].filters[0].typed_config.rds.route_config_name");
  EXPECT_THAT(p[0].reason, HasSubstr("route configuration 'r' does not exist"));
}

TEST(ChangeCheckTest, OnlyWhatTheChangeBreaksIsReported) {
  // The base already routes to a missing cluster "d"; a change elsewhere is not blamed for it.
  Snapshot base = Load(std::string(kRoute) + kCluster);
  Snapshot next = Load(std::string(kRoute) + kCluster + "endpoints: [{cluster_name: c}]\n");
  EXPECT_TRUE(CheckSnapshot(next, &base, CheckOptions()).empty());
  // Unchanged resources are not checked again either.
  EXPECT_TRUE(CheckSnapshot(base, &base, CheckOptions()).empty());
}

TEST(ChangeCheckTest, ResourcesGoThroughRpxsOwnChecks) {
  std::vector<Problem> p = CheckSnapshot(
      Load("clusters:\n- name: x\n  type: STATIC\n  lb_policy: MAGLEV\n  upstream_bind_config: "
           "{ source_address: { address: not-an-ip, port_value: 0 } }\n"),
      nullptr, CheckOptions());
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p[0].resource, "clusters/x");
  EXPECT_THAT(p[0].message, HasSubstr("Cluster 'x'"));
}

TEST(ParseProblemTest, SplitsResourceFieldAndReason) {
  Problem p = ParseProblem(ResourceType::kRoute, "r",
                           "RouteConfiguration 'r': virtual_hosts[0].domains: duplicate 'a'");
  EXPECT_EQ(p.resource, "routes/r");
  EXPECT_EQ(p.field, "virtual_hosts[0].domains");
  EXPECT_EQ(p.reason, "duplicate 'a'");
  p = ParseProblem(ResourceType::kRoute, "r",
                   "RouteConfiguration 'r'.virtual_hosts[0].routes[0].match.safe_regex.regex: "
                   "invalid regex '(': missing )");
  EXPECT_EQ(p.field, "virtual_hosts[0].routes[0].match.safe_regex.regex");
  EXPECT_EQ(p.reason, "invalid regex '(': missing )");
  p = ParseProblem(ResourceType::kCluster, "c", "Cluster 'c': cannot decode");
  EXPECT_EQ(p.field, "");
  EXPECT_EQ(p.reason, "cannot decode");
}

}  // namespace
}  // namespace xds_server
}  // namespace rpx
