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

namespace rpx {
namespace xds_server {
namespace {

using ::testing::HasSubstr;

std::string MakeTempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string templ = std::string(base ? base : "/tmp") + "/xds_snapshot_XXXXXX";
  char* made = mkdtemp(templ.data());
  EXPECT_NE(made, nullptr);
  return templ;
}

// Written aside and renamed into place, as editors and deploy tools should, so a poll never sees
// half a file.
void WriteFile(const std::string& dir, const std::string& name, const std::string& content) {
  std::string tmp = dir + "/.tmp-" + name;
  {
    std::ofstream out(tmp);
    out << content;
  }
  ASSERT_EQ(rename(tmp.c_str(), (dir + "/" + name).c_str()), 0);
}

std::vector<std::string> Names(const Snapshot& s, ResourceType type) {
  std::vector<std::string> names;
  for (const auto& [name, r] : s.of(type)) names.push_back(name);
  return names;
}

struct LogCapture {
  LogFn fn() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(line);
    };
  }
  std::string All() {
    std::lock_guard<std::mutex> lock(mu);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
  std::mutex mu;
  std::vector<std::string> lines;
};

constexpr char kClusters[] = R"(clusters:
- name: a
  type: STATIC
  connect_timeout: 1s
- name: b
  connect_timeout: 2s
)";

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

TEST(SnapshotTest, EmptyDirectoryIsAnEmptySnapshot) {
  std::string dir = MakeTempDir();
  LogCapture log;
  SnapshotSource source(dir, log.fn());
  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kUpdated);
  ASSERT_NE(source.current(), nullptr);
  EXPECT_EQ(source.current()->version, "1");
  EXPECT_THAT(log.All(), HasSubstr("snapshot version=1 listeners= routes= clusters= endpoints=\n"));
}

TEST(SnapshotTest, MissingDirectoryIsAnErrorAndNoSnapshot) {
  LogCapture log;
  SnapshotSource source(MakeTempDir() + "/missing", log.fn());
  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kError);
  EXPECT_EQ(source.current(), nullptr);
  EXPECT_THAT(log.All(), HasSubstr("reload error: "));
  EXPECT_THAT(log.All(), HasSubstr("cannot read the directory"));
}

TEST(SnapshotTest, DuplicateNamesAcrossFilesKeepThePreviousSnapshot) {
  std::string dir = MakeTempDir();
  LogCapture log;
  SnapshotSource source(dir, log.fn());
  WriteFile(dir, "a.yaml", kClusters);
  ASSERT_EQ(source.Reload(), SnapshotSource::Result::kUpdated);
  auto before = source.current();

  WriteFile(dir, "b.yaml", "clusters:\n- name: b\n  connect_timeout: 3s\n");
  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kError);
  EXPECT_EQ(source.current(), before);
  EXPECT_EQ(source.current()->version, "1");
  std::string out = log.All();
  EXPECT_THAT(out, HasSubstr("reload error: " + dir + "/b.yaml: clusters[0]: duplicate " +
                             "clusters name 'b' (also in " + dir + "/a.yaml)"));
  EXPECT_THAT(out, HasSubstr("reload error: keeping snapshot version=1"));

  // Reported once, not at every poll.
  size_t lines = log.lines.size();
  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kUnchanged);
  EXPECT_EQ(log.lines.size(), lines);

  ASSERT_EQ(unlink((dir + "/b.yaml").c_str()), 0);
  // Back to exactly version 1's resources: nothing to push.
  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kUnchanged);
  EXPECT_EQ(source.current(), before);
  EXPECT_THAT(log.All(), HasSubstr("reload ok: resources unchanged, still version=1\n"));
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

TEST(SnapshotTest, ParseErrorKeepsThePreviousSnapshotAndSaysWhere) {
  std::string dir = MakeTempDir();
  LogCapture log;
  SnapshotSource source(dir, log.fn());
  WriteFile(dir, "a.yaml", kClusters);
  ASSERT_EQ(source.Reload(), SnapshotSource::Result::kUpdated);
  auto before = source.current();

  WriteFile(dir, "a.yaml", "clusters:\n- name: a\n  lb_policy: FASTEST\n  bogus: 1\n");
  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kError);
  EXPECT_EQ(source.current(), before);
  std::string out = log.All();
  EXPECT_THAT(out, HasSubstr("reload error: " + dir +
                             "/a.yaml:3:14: clusters[0].lb_policy: unknown value 'FASTEST'"));
  EXPECT_THAT(out, HasSubstr("reload error: " + dir +
                             "/a.yaml:4:3: clusters[0].bogus: unknown field 'bogus'"));

  WriteFile(dir, "a.yaml", "clusters: [{name: a, type: STATIC}]\n");
  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kUpdated);
  EXPECT_EQ(source.current()->version, "2");
  EXPECT_THAT(log.All(), HasSubstr("snapshot version=2 listeners= routes= clusters=a endpoints="));

  // Invalid YAML, too.
  WriteFile(dir, "a.yaml", "clusters: [{name: a\n");
  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kError);
  EXPECT_EQ(source.current()->version, "2");
  EXPECT_THAT(log.All(), HasSubstr("a.yaml:"));
  EXPECT_THAT(log.All(), HasSubstr(": invalid YAML"));
}

TEST(SnapshotTest, VersionChangesOnlyOnRealChange) {
  std::string dir = MakeTempDir();
  LogCapture log;
  SnapshotSource source(dir, log.fn());
  WriteFile(dir, "a.yaml", kClusters);
  ASSERT_EQ(source.Reload(), SnapshotSource::Result::kUpdated);
  auto v1 = source.current();
  EXPECT_EQ(v1->version, "1");

  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kUnchanged);
  // Rewritten with the same content: the files changed, the resources did not.
  WriteFile(dir, "a.yaml", kClusters);
  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kUnchanged);
  // Same resources, other layout, other order, other file split.
  WriteFile(dir, "a.yaml", "clusters: [{name: b, connect_timeout: 2s}]\n");
  WriteFile(dir, "z.yml", "clusters:\n- {connectTimeout: 1s, type: STATIC, name: a}\n");
  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kUnchanged);
  EXPECT_EQ(source.current(), v1);

  WriteFile(dir, "z.yml", "clusters:\n- {connectTimeout: 5s, type: STATIC, name: a}\n");
  EXPECT_EQ(source.Reload(), SnapshotSource::Result::kUpdated);
  auto v2 = source.current();
  EXPECT_EQ(v2->version, "2");
  const auto& c1 = v1->of(ResourceType::kCluster);
  const auto& c2 = v2->of(ResourceType::kCluster);
  EXPECT_NE(c1.at("a").version, c2.at("a").version);
  EXPECT_EQ(c1.at("b").version, c2.at("b").version);
  EXPECT_EQ(c2.at("a").version.size(), 16u);
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

TEST(SnapshotTest, PollerPublishesChanges) {
  std::string dir = MakeTempDir();
  LogCapture log;
  SnapshotSource source(dir, log.fn());
  WriteFile(dir, "a.yaml", kClusters);
  ASSERT_EQ(source.Reload(), SnapshotSource::Result::kUpdated);

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> versions;
  DirectoryPoller poller(&source, std::chrono::milliseconds(10),
                         [&](std::shared_ptr<const Snapshot> s) {
                           std::lock_guard<std::mutex> lock(mu);
                           versions.push_back(s->version);
                           cv.notify_all();
                         });
  poller.Start();
  WriteFile(dir, "b.yaml", "routes: [{name: r}]\n");
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return !versions.empty(); }));
    EXPECT_EQ(versions, std::vector<std::string>{"2"});
  }
  // A forced reload of unchanged files publishes nothing.
  poller.RequestReload();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  poller.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(versions, std::vector<std::string>{"2"});
}

}  // namespace
}  // namespace xds_server
}  // namespace rpx
