#include "source/config/xds_sources.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rpx {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class RecordingApplier : public XdsApplier {
 public:
  struct Call {
    std::string type;
    std::vector<std::string> names;
    std::string version;
  };
  std::string Apply(const std::string& type_url, const XdsResourceMap& resources,
                    const std::string& version) override {
    Call c{type_url, {}, version};
    for (const auto& [name, r] : resources) c.names.push_back(name);
    calls.push_back(c);
    return reply;
  }
  std::vector<Call> calls;
  std::string reply;
};

class XdsFileSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char d[] = "/tmp/rpx-xds-file-XXXXXX";
    ASSERT_NE(mkdtemp(d), nullptr);
    dir_ = d;
    path_ = dir_ + "/cds.yaml";
  }
  void TearDown() override {
    std::string cmd = "rm -rf " + dir_;
    ASSERT_EQ(system(cmd.c_str()), 0);
  }
  // Written elsewhere and moved into place, as Envoy's users update these files.
  void Move(const std::string& text) {
    std::string tmp = dir_ + "/.tmp";
    std::ofstream(tmp) << text;
    ASSERT_EQ(rename(tmp.c_str(), path_.c_str()), 0);
  }
  static std::string Clusters(const std::string& version, std::vector<std::string> names) {
    std::string out = "version_info: \"" + version + "\"\nresources:\n";
    for (const auto& n : names) {
      out +=
          "- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: " + n + "\n";
    }
    return out;
  }
  XdsSource Source() const {
    XdsSource s;
    s.kind = XdsSource::Kind::kPath;
    s.path = path_;
    return s;
  }
  std::string dir_, path_;
};

TEST_F(XdsFileSourceTest, LoadsThenReloadsWhenTheFileIsReplaced) {
  Move(Clusters("1", {"a", "b"}));
  Dispatcher d("t");
  RecordingApplier app;
  XdsFileSource f(d, kClusterType, Source(), app);
  std::string error;
  ASSERT_TRUE(f.Start(&error)) << error;
  EXPECT_TRUE(app.calls.empty());  // loaded from the loop, not inside Start
  ASSERT_TRUE(d.RunUntil([&] { return app.calls.size() == 1; }, 5000));
  EXPECT_EQ(app.calls[0].type, kClusterType);
  EXPECT_THAT(app.calls[0].names, ElementsAre("a", "b"));
  EXPECT_EQ(app.calls[0].version, "1");
  EXPECT_EQ(f.status().updates, 1u);

  Move(Clusters("2", {"c"}));
  ASSERT_TRUE(d.RunUntil([&] { return app.calls.size() == 2; }, 5000));
  EXPECT_THAT(app.calls[1].names, ElementsAre("c"));
  EXPECT_EQ(f.status().version, "2");

  // Rewritten in place: applied once it is closed.
  std::ofstream(path_) << Clusters("3", {"d"});
  ASSERT_TRUE(d.RunUntil([&] { return app.calls.size() == 3; }, 5000));
  EXPECT_THAT(app.calls[2].names, ElementsAre("d"));
}

TEST_F(XdsFileSourceTest, BadFilesChangeNothingAndSayWhy) {
  Move(Clusters("1", {"a"}));
  Dispatcher d("t");
  RecordingApplier app;
  XdsFileSource f(d, kClusterType, Source(), app);
  std::string error;
  ASSERT_TRUE(f.Start(&error)) << error;
  ASSERT_TRUE(d.RunUntil([&] { return app.calls.size() == 1; }, 5000));
  auto nacked = [&](uint64_t n) { return d.RunUntil([&] { return f.status().nacks == n; }, 5000); };

  Move(
      "resources: [{\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster, "
      "lb_policy: FASTEST}]\n");
  ASSERT_TRUE(nacked(1));
  EXPECT_THAT(f.status().last_nack, HasSubstr("FASTEST"));
  Move(
      "resources: [{\"@type\": type.googleapis.com/envoy.config.listener.v3.Listener, "
      "name: l}]\n");
  ASSERT_TRUE(nacked(2));
  EXPECT_THAT(f.status().last_nack,
              HasSubstr("resources[0]: a type.googleapis.com/envoy.config.listener.v3.Listener "
                        "where type.googleapis.com/envoy.config.cluster.v3.Cluster resources "
                        "belong"));
  Move(Clusters("x", {"a", "a"}));
  ASSERT_TRUE(nacked(3));
  EXPECT_THAT(f.status().last_nack, HasSubstr("a second resource named 'a'"));
  app.reply = "refused by the applier";
  Move(Clusters("y", {"b"}));
  ASSERT_TRUE(nacked(4));
  EXPECT_EQ(f.status().last_nack, "refused by the applier");
  EXPECT_EQ(f.status().version, "1");  // the last good one
  EXPECT_EQ(f.status().updates, 1u);
}

TEST_F(XdsFileSourceTest, AMissingFileIsCountedNotFatal) {
  Dispatcher d("t");
  RecordingApplier app;
  XdsFileSource f(d, kClusterType, Source(), app);
  std::string error;
  ASSERT_TRUE(f.Start(&error)) << error;
  ASSERT_TRUE(d.RunUntil([&] { return f.status().nacks == 1; }, 5000));
  EXPECT_THAT(f.status().last_nack, HasSubstr("cannot read"));
  Move(Clusters("1", {"a"}));
  ASSERT_TRUE(d.RunUntil([&] { return app.calls.size() == 1; }, 5000));

  XdsSource nowhere;
  nowhere.kind = XdsSource::Kind::kPath;
  nowhere.path = "/no/such/dir/cds.yaml";
  XdsFileSource g(d, kClusterType, nowhere, app);
  EXPECT_FALSE(g.Start(&error));
  EXPECT_THAT(error, HasSubstr("cannot watch directory '/no/such/dir'"));
}

TEST(XdsSourcesTest, EachTypeHasOneSource) {
  Dispatcher d("t");
  RecordingApplier app;
  XdsConfig config;  // no ads_config, no gRPC cluster
  XdsSources sources(d, config, envoy::config::core::v3::Node(), app);
  XdsSource file;
  file.kind = XdsSource::Kind::kPath;
  file.path = "/tmp/routes.yaml";
  std::string error;
  EXPECT_TRUE(sources.Ensure(kRouteType, file, &error)) << error;
  EXPECT_TRUE(sources.Ensure(kRouteType, file, &error)) << error;
  XdsSource other = file;
  other.path = "/tmp/other.yaml";
  EXPECT_FALSE(sources.Ensure(kRouteType, other, &error));
  EXPECT_THAT(error, HasSubstr("from file '/tmp/other.yaml', but rpx takes it from file "
                               "'/tmp/routes.yaml' (one source per type)"));
  EXPECT_FALSE(sources.Ensure(kEndpointType, XdsSource(), &error));  // unset: ADS
  EXPECT_THAT(error, HasSubstr("ads: {} needs dynamic_resources.ads_config"));
  XdsSource grpc;
  grpc.kind = XdsSource::Kind::kGrpc;
  grpc.cluster = "nope";
  EXPECT_FALSE(sources.Ensure(kEndpointType, grpc, &error));
  EXPECT_THAT(error, HasSubstr("cluster 'nope' carries no xDS"));
  EXPECT_TRUE(sources.connected());  // no stream to be down
}

}  // namespace
}  // namespace rpx
