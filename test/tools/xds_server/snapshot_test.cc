#include "tools/xds_server/snapshot.h"

#include <stdlib.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>

#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/tools/xds_server/test_util.h"

namespace rpx {
namespace xds_server {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Names(const Snapshot& s, ResourceType type) {
  std::vector<std::string> names;
  for (const auto& [name, r] : s.of(type)) names.push_back(name);
  return names;
}

TEST(SnapshotTest, LoadsTheExampleDirectory) {
  Snapshot s;
  std::vector<std::string> errors;
  ASSERT_TRUE(LoadResourceDirectory("tools/xds_server/example", &s, &errors))
      << testing::PrintToString(errors);
  EXPECT_EQ(Names(s, ResourceType::kListener), std::vector<std::string>{"listener_0"});
  EXPECT_EQ(Names(s, ResourceType::kRoute), std::vector<std::string>{"local_route"});
  EXPECT_EQ(Names(s, ResourceType::kCluster), std::vector<std::string>{"service"});
  EXPECT_EQ(Names(s, ResourceType::kEndpoint), std::vector<std::string>{"service"});

  envoy::config::listener::v3::Listener listener;
  ASSERT_TRUE(listener.ParseFromString(s.of(ResourceType::kListener).at("listener_0").bytes));
  EXPECT_EQ(listener.address().socket_address().port_value(), 10000u);
  envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager hcm;
  ASSERT_TRUE(listener.filter_chains(0).filters(0).typed_config().UnpackTo(&hcm));
  EXPECT_EQ(hcm.rds().route_config_name(), "local_route");
  EXPECT_TRUE(hcm.rds().config_source().has_ads());

  envoy::config::cluster::v3::Cluster cluster;
  ASSERT_TRUE(cluster.ParseFromString(s.of(ResourceType::kCluster).at("service").bytes));
  EXPECT_EQ(cluster.type(), envoy::config::cluster::v3::Cluster::EDS);
}

TEST(SnapshotTest, ReadsYamlAndYmlOnly) {
  std::string dir = MakeTempDir();
  WriteFile(dir, "a.yaml", kClusters);
  WriteFile(dir, "r.yml", "routes:\n- name: r1\n");
  WriteFile(dir, "notes.txt", "clusters: [{name: ignored}]\n");
  WriteFile(dir, "a.yaml~", "clusters: [{name: backup}]\n");
  WriteFile(dir, ".#lock.yaml", "clusters: [{name: hidden}]\n");
  Snapshot s;
  std::vector<std::string> errors;
  ASSERT_TRUE(LoadResourceDirectory(dir, &s, &errors)) << testing::PrintToString(errors);
  EXPECT_EQ(Names(s, ResourceType::kCluster), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(Names(s, ResourceType::kRoute), std::vector<std::string>{"r1"});
}

TEST(SnapshotTest, SameNameInDifferentTypesIsFine) {
  std::string dir = MakeTempDir();
  WriteFile(dir, "a.yaml",
            "clusters: [{name: service}]\nendpoints: [{cluster_name: service}]\n"
            "routes: [{name: service}]\nlisteners: [{name: service}]\n");
  Snapshot s;
  std::vector<std::string> errors;
  EXPECT_TRUE(LoadResourceDirectory(dir, &s, &errors)) << testing::PrintToString(errors);
}

TEST(SnapshotTest, DuplicateInOneFileIsAnError) {
  std::string dir = MakeTempDir();
  WriteFile(dir, "a.yaml", "clusters: [{name: x}, {name: x}]\n");
  Snapshot s;
  std::vector<std::string> errors;
  EXPECT_FALSE(LoadResourceDirectory(dir, &s, &errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr("clusters[1]: duplicate clusters name 'x'"));
}

TEST(SnapshotTest, ResourceWithoutNameIsAnError) {
  std::string dir = MakeTempDir();
  WriteFile(dir, "a.yaml", "endpoints:\n- endpoints: []\n");
  Snapshot s;
  std::vector<std::string> errors;
  EXPECT_FALSE(LoadResourceDirectory(dir, &s, &errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], dir + "/a.yaml: endpoints[0]: cluster_name is required");
}

TEST(SnapshotTest, NestedAnysSerializeDeterministically) {
  // Maps inside an Any (here route metadata in an inline route_config) are serialized in hash
  // order by PackFrom; the snapshot must not depend on it, or every reload would be a "change".
  std::string yaml = R"(listeners:
- name: l
  filter_chains:
  - filters:
    - name: hcm
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.)"
                     R"(http_connection_manager.v3.HttpConnectionManager
        stat_prefix: s
        route_config:
          virtual_hosts:
          - name: v
            domains: ["*"]
            routes:
            - match: { prefix: "/" }
              route: { cluster: c }
              metadata:
                filter_metadata:
)";
  for (int i = 0; i < 40; ++i) {
    yaml += "                  f" + std::to_string(i) + ": {k" + std::to_string(i) +
            ": v, z: " + std::to_string(i) + ", a: [1, 2]}\n";
  }
  std::string dir = MakeTempDir();
  WriteFile(dir, "a.yaml", yaml);
  std::string first;
  for (int i = 0; i < 10; ++i) {
    Snapshot s;
    std::vector<std::string> errors;
    ASSERT_TRUE(LoadResourceDirectory(dir, &s, &errors)) << testing::PrintToString(errors);
    const std::string& bytes = s.of(ResourceType::kListener).at("l").bytes;
    if (i == 0) first = bytes;
    EXPECT_EQ(bytes, first) << "load " << i;
  }
}

TEST(SnapshotTest, ResourceVersionIsFnv1a) {
  EXPECT_EQ(ResourceVersion(""), "cbf29ce484222325");
  EXPECT_EQ(ResourceVersion("a"), "af63dc4c8601ec8c");
}

TEST(TypeNamesTest, PluralNamesRoundTrip) {
  for (ResourceType t : kAllResourceTypes) {
    ResourceType back;
    ASSERT_TRUE(ParsePluralTypeName(PluralTypeName(t), &back));
    EXPECT_EQ(back, t);
  }
  ResourceType unused;
  EXPECT_FALSE(ParsePluralTypeName("vhosts", &unused));
}

}  // namespace
}  // namespace xds_server
}  // namespace rpx
