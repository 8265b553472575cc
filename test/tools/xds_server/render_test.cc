#include "tools/xds_server/render.h"

#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/config/route/v3/route.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "rpx/tools/v1/resource_file.pb.h"
#include "source/config/yaml_loader.h"

namespace rpx {
namespace xds_server {
namespace {

using ::testing::HasSubstr;

constexpr char kFile[] = R"(listeners:
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
clusters:
- name: c
  type: STRICT_DNS
  lb_policy: LEAST_REQUEST
  connect_timeout: 0.25s
  max_requests_per_connection: 7
  circuit_breakers: { thresholds: [{ max_connections: 100 }] }
  load_assignment:
    cluster_name: c
    endpoints:
    - lb_endpoints:
      - endpoint: { address: { socket_address: { address: "123", port_value: 80 } } }
)";

TEST(RenderTest, YamlLoadsBackToTheSameResources) {
  rpx::tools::v1::ResourceFile in, out;
  std::vector<std::string> errors;
  ASSERT_TRUE(LoadYamlIntoMessage(kFile, "in", &in, &errors)) << testing::PrintToString(errors);
  std::string yaml = ToYaml(in);
  // Block style, snake_case, empty messages inline.
  EXPECT_THAT(yaml, HasSubstr("\n    filter_chains:\n"));
  EXPECT_THAT(yaml, HasSubstr("ads: {}"));
  EXPECT_THAT(yaml, HasSubstr("connect_timeout: 0.250s"));
  ASSERT_TRUE(LoadYamlIntoMessage(yaml, "out", &out, &errors))
      << testing::PrintToString(errors) << "\n"
      << yaml;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(in, out)) << yaml;
}

TEST(RenderTest, AwkwardStringsSurviveTheRoundTrip) {
  envoy::config::route::v3::RouteConfiguration rc;
  rc.set_name("true");
  auto* vh = rc.add_virtual_hosts();
  vh->set_name("123");
  for (const char* d : {"*", "-x", "a: b #c", "", "yes", "1e3", "tab\there", "\"q\"", "caf\xc3\xa9",
                        "@at", ".dot", "null"}) {
    vh->add_domains(d);
  }
  auto* route = vh->add_routes();
  route->mutable_match()->set_prefix("/");
  auto* wc = route->mutable_route()->mutable_weighted_clusters();
  wc->add_clusters()->set_name("a");
  wc->add_clusters()->set_name("b");
  wc->mutable_clusters(1)->mutable_weight()->set_value(7);
  std::string yaml = ToYaml(rc);
  envoy::config::route::v3::RouteConfiguration back;
  std::vector<std::string> errors;
  ASSERT_TRUE(LoadYamlIntoMessage(yaml, "out", &back, &errors))
      << testing::PrintToString(errors) << "\n"
      << yaml;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(rc, back)) << yaml;
  EXPECT_THAT(yaml, HasSubstr("name: \"true\"\n"));
  EXPECT_THAT(yaml, HasSubstr("      - match:\n          prefix: /\n"));
}

TEST(RenderTest, EmptyMessage) { EXPECT_EQ(ToYaml(rpx::tools::v1::ResourceFile()), "{}\n"); }

TEST(RenderTest, JsonUsesProtoFieldNames) {
  envoy::config::cluster::v3::Cluster c;
  c.set_name("x");
  c.mutable_connect_timeout()->set_seconds(2);
  std::string json = ToJson(c);
  EXPECT_THAT(json, HasSubstr("\"connect_timeout\": \"2s\""));
}

TEST(UnifiedDiffTest, EqualTextsHaveNoDiff) {
  EXPECT_EQ(UnifiedDiff("a\nb\n", "a\nb\n", "x", "y"), "");
}

TEST(UnifiedDiffTest, ShowsChangedLinesWithContext) {
  std::string a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
  std::string b = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
  EXPECT_EQ(UnifiedDiff(a, b, "a/r", "b/r"),
            "--- a/r\n+++ b/r\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n");
}

TEST(UnifiedDiffTest, AddedAndRemovedWholeTexts) {
  EXPECT_EQ(UnifiedDiff("", "x\ny\n", "a", "b"), "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+x\n+y\n");
  EXPECT_EQ(UnifiedDiff("x\n", "", "a", "b"), "--- a\n+++ b\n@@ -1,1 +0,0 @@\n-x\n");
}

TEST(UnifiedDiffTest, KeepsCommonLinesInsideTheChangedMiddle) {
  std::string d = UnifiedDiff("a\nb\nc\n", "x\nb\ny\n", "a", "b");
  EXPECT_EQ(d, "--- a\n+++ b\n@@ -1,3 +1,3 @@\n-a\n+x\n b\n-c\n+y\n");
}

}  // namespace
}  // namespace xds_server
}  // namespace rpx
