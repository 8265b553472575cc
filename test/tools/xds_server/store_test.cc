#include "tools/xds_server/store.h"

#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "envoy/config/route/v3/route.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "source/config/yaml_loader.h"
#include "test/tools/xds_server/test_util.h"

namespace rpx {
namespace xds_server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

StoreOptions Unchecked(const std::string& dir) {
  StoreOptions o;
  o.dir = dir;
  o.check = false;
  return o;
}

StoreOptions Checked(const std::string& dir) {
  StoreOptions o;
  o.dir = dir;
  return o;
}

// A small valid configuration: route "r" sends / to cluster "svc".
constexpr char kHandClusters[] = R"(# written by hand
clusters:
- name: svc
  type: STATIC
  load_assignment:
    cluster_name: svc
    endpoints:
    - lb_endpoints:
      - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8080 } } }
)";
constexpr char kHandRoutes[] = R"(routes:
- name: r
  virtual_hosts:
  - name: all
    domains: ["*"]
    routes:
    - match: { prefix: "/" }
      route: { cluster: svc }
)";

rpx::tools::v1::ResourceFile Parse(const std::string& yaml) {
  rpx::tools::v1::ResourceFile f;
  std::vector<std::string> errors;
  EXPECT_TRUE(LoadYamlIntoMessage(yaml, "test", &f, &errors)) << testing::PrintToString(errors);
  return f;
}

ChangeRequest Apply(const std::string& yaml, const Target& target = Target{}) {
  ChangeRequest c;
  c.kind = ChangeRequest::Kind::kApply;
  c.upserts = Parse(yaml);
  c.author = "tester";
  c.description = "test change";
  c.target = target;
  return c;
}

// The route "r" sending / to `cluster`.
std::string RouteTo(const std::string& cluster, const std::string& extra_route = "") {
  return "routes:\n- name: r\n  virtual_hosts:\n  - name: all\n    domains: [\"*\"]\n"
         "    routes:\n" +
         extra_route + "    - match: { prefix: \"/\" }\n      route: { cluster: " + cluster +
         " }\n";
}

std::string ClusterYaml(const std::string& name) {
  return "clusters:\n- name: " + name +
         "\n  type: STATIC\n  load_assignment:\n    cluster_name: " + name +
         "\n    endpoints:\n    - lb_endpoints:\n      - endpoint: { address: { socket_address: "
         "{ address: 127.0.0.1, port_value: 9090 } } }\n";
}

std::string RouteCluster(const Snapshot& s) {
  envoy::config::route::v3::RouteConfiguration rc;
  EXPECT_TRUE(rc.ParseFromString(s.of(ResourceType::kRoute).at("r").bytes));
  const auto& routes = rc.virtual_hosts(0).routes();
  return routes[routes.size() - 1].route().cluster();
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    WriteFile(dir_, "clusters.yaml", kHandClusters);
    WriteFile(dir_, "routes.yaml", kHandRoutes);
    Open();
  }
  void Open(StoreOptions options = StoreOptions()) {
    options.dir = dir_;
    store_ = std::make_unique<Store>(options, log_.fn());
    store_->Open();
    ASSERT_NE(store_->Get(0), nullptr) << log_.All();
  }

  std::string dir_;
  LogCapture log_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, ApplyMakesAVersionAndRewritesOnlyTheFilesItChanges) {
  int changes = 0;
  store_->SetOnChange([&] { ++changes; });
  ChangeResult r = store_->Change(Apply(ClusterYaml("svc2") + RouteTo("svc2")));
  ASSERT_TRUE(r.accepted) << testing::PrintToString(r.problems.size());
  EXPECT_EQ(r.version, 2u);
  EXPECT_EQ(r.base_version, 1u);
  EXPECT_EQ(changes, 1);
  ASSERT_EQ(r.changes.size(), 2u);
  EXPECT_EQ(r.changes[0].name, "svc2");
  EXPECT_EQ(r.changes[0].kind, ResourceDelta::Kind::kAdded);
  EXPECT_EQ(r.changes[1].name, "r");
  EXPECT_EQ(r.changes[1].kind, ResourceDelta::Kind::kChanged);
  EXPECT_EQ(RouteCluster(*store_->Get(0)), "svc2");
  EXPECT_EQ(store_->Get(0)->version, "2");

  // The route went back to its own file; the new cluster joined clusters.yaml, which is
  // rewritten (the hand-written comment goes); nothing else was touched.
  std::string routes = ReadFileText(dir_ + "/routes.yaml");
  EXPECT_THAT(routes, HasSubstr("version 2"));
  EXPECT_THAT(routes, HasSubstr("cluster: svc2"));
  EXPECT_THAT(ReadFileText(dir_ + "/clusters.yaml"), HasSubstr("name: svc2"));
  // What was written loads back to the same resources: the poller sees no change.
  EXPECT_EQ(store_->ReloadDirectory(true), Store::Result::kUnchanged);
  EXPECT_EQ(store_->Get(0)->version, "2");

  std::vector<VersionRecord> history = store_->History();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].version, 2u);
  EXPECT_EQ(history[0].author, "tester");
  EXPECT_EQ(history[0].origin, "apply");
  EXPECT_EQ(history[0].added, 1u);
  EXPECT_EQ(history[0].changed, 1u);
  EXPECT_EQ(history[1].origin, "directory");
}

TEST_F(StoreTest, UntouchedHandFilesStayVerbatim) {
  ASSERT_TRUE(store_
                  ->Change(Apply(RouteTo("svc",
                                         "    - match: { prefix: \"/x\" }\n"
                                         "      direct_response: { status: 204 }\n")))
                  .accepted);
  EXPECT_EQ(ReadFileText(dir_ + "/clusters.yaml"), kHandClusters);
}

TEST_F(StoreTest, RefusedChangeNamesTheFieldAndChangesNothing) {
  int changes = 0;
  store_->SetOnChange([&] { ++changes; });
  ChangeResult r = store_->Change(Apply(RouteTo("svc",
                                                "    - match: { safe_regex: { regex: \"/a[\" } }\n"
                                                "      route: { cluster: svc }\n")));
  EXPECT_FALSE(r.accepted);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].resource, "routes/r");
  EXPECT_EQ(r.problems[0].field, "virtual_hosts[0].routes[0].match.safe_regex.regex");
  EXPECT_THAT(r.problems[0].reason, HasSubstr("invalid regex"));
  EXPECT_THAT(r.problems[0].message, HasSubstr("RouteConfiguration 'r'"));
  EXPECT_EQ(r.version, 0u);
  EXPECT_EQ(changes, 0);
  EXPECT_EQ(store_->Get(0)->version, "1");
  EXPECT_EQ(store_->History().size(), 1u);
  EXPECT_EQ(ReadFileText(dir_ + "/routes.yaml"), kHandRoutes);
}

TEST_F(StoreTest, UnsupportedFieldIsRefusedAsANodeWouldNackIt) {
  // A cluster whose lb_policy rpx does not implement.
  ChangeResult r = store_->Change(
      Apply("clusters:\n- name: x\n  type: STATIC\n  lb_policy: CLUSTER_PROVIDED\n"));
  EXPECT_FALSE(r.accepted);
  ASSERT_FALSE(r.problems.empty());
  EXPECT_EQ(r.problems[0].resource, "clusters/x");
  EXPECT_THAT(r.problems[0].message, HasSubstr("lb_policy"));
}

TEST_F(StoreTest, RouteToAMissingClusterIsRefusedUnlessTheChangeAddsIt) {
  ChangeResult r = store_->Change(Apply(RouteTo("nope")));
  EXPECT_FALSE(r.accepted);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].resource, "routes/r");
  EXPECT_EQ(r.problems[0].field, "virtual_hosts[0].routes[0].route.cluster");
  EXPECT_THAT(r.problems[0].reason, HasSubstr("cluster 'nope' does not exist"));

  EXPECT_TRUE(store_->Change(Apply(RouteTo("nope") + ClusterYaml("nope"))).accepted);
}

TEST_F(StoreTest, ClustersTheNodesDefineMayBeNamed) {
  StoreOptions o;
  o.check_options.external_clusters = {"bootstrap_cluster"};
  Open(o);
  EXPECT_TRUE(store_->Change(Apply(RouteTo("bootstrap_cluster"))).accepted);
}

TEST_F(StoreTest, DeletingAClusterARouteUsesIsRefused) {
  ChangeRequest del;
  del.kind = ChangeRequest::Kind::kDelete;
  del.deletes = {{ResourceType::kCluster, "svc"}};
  ChangeResult r = store_->Change(del);
  EXPECT_FALSE(r.accepted);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_THAT(r.problems[0].reason, HasSubstr("cluster 'svc' does not exist"));

  del.deletes = {{ResourceType::kCluster, "ghost"}};
  r = store_->Change(del);
  EXPECT_EQ(r.request_error, "no such resource: clusters/ghost");

  // Route and cluster together: fine, and the emptied files are removed.
  del.deletes = {{ResourceType::kRoute, "r"}, {ResourceType::kCluster, "svc"}};
  r = store_->Change(del);
  EXPECT_TRUE(r.accepted);
  EXPECT_EQ(access((dir_ + "/routes.yaml").c_str(), F_OK), -1);
  EXPECT_EQ(access((dir_ + "/clusters.yaml").c_str(), F_OK), -1);
  EXPECT_TRUE(store_->Get(0)->of(ResourceType::kRoute).empty());
}

TEST_F(StoreTest, DryRunReportsAndChangesNothing) {
  ChangeRequest c = Apply(ClusterYaml("svc2") + RouteTo("svc2"));
  c.dry_run = true;
  c.with_diff = true;
  ChangeResult r = store_->Change(c);
  EXPECT_TRUE(r.accepted);
  EXPECT_EQ(r.version, 0u);
  ASSERT_EQ(r.changes.size(), 2u);
  EXPECT_THAT(r.changes[1].diff, HasSubstr("-          cluster: svc\n+          cluster: svc2\n"));
  EXPECT_EQ(store_->Get(0)->version, "1");
  EXPECT_EQ(ReadFileText(dir_ + "/routes.yaml"), kHandRoutes);
  EXPECT_EQ(store_->History().size(), 1u);
}

TEST_F(StoreTest, SameResourcesAgainIsNotANewVersion) {
  ChangeResult r = store_->Change(Apply(kHandRoutes));
  EXPECT_TRUE(r.accepted);
  EXPECT_EQ(r.version, 0u);
  EXPECT_TRUE(r.changes.empty());
  EXPECT_EQ(store_->History().size(), 1u);
}

TEST_F(StoreTest, TargetedVersionReachesOnlyItsGroupUntilAChangeForAll) {
  ASSERT_TRUE(store_->Change(Apply(ClusterYaml("svc2"))).accepted);  // version 2
  Target canary{"canary", "", ""};
  ChangeResult r = store_->Change(Apply(RouteTo("svc2"), canary));
  ASSERT_TRUE(r.accepted);
  EXPECT_EQ(r.version, 3u);
  EXPECT_EQ(r.base_version, 2u);

  NodeInfo canary_node{"n1", "canary", {}};
  NodeInfo other_node{"n2", "prod", {}};
  NodeInfo by_metadata{"n3", "prod", {{"ring", "0"}}};
  uint64_t v = 0;
  EXPECT_EQ(RouteCluster(*store_->ForNode(canary_node, &v)), "svc2");
  EXPECT_EQ(v, 3u);
  EXPECT_EQ(RouteCluster(*store_->ForNode(other_node, &v)), "svc");
  EXPECT_EQ(v, 2u);
  // Only the default version is in the files.
  EXPECT_THAT(ReadFileText(dir_ + "/routes.yaml"), Not(HasSubstr("svc2")));

  Target ring0{"", "ring", "0"};
  ASSERT_TRUE(store_->Change(Apply(RouteTo("svc2"), ring0)).accepted);  // version 4
  store_->ForNode(by_metadata, &v);
  EXPECT_EQ(v, 4u);
  auto assignments = store_->Assignments();
  ASSERT_EQ(assignments.size(), 3u);
  EXPECT_TRUE(assignments[0].first.all());
  EXPECT_EQ(assignments[0].second, 2u);
  EXPECT_EQ(assignments[1].second, 4u);
  EXPECT_EQ(assignments[2].second, 3u);

  // A change for every node replaces every group's version.
  ASSERT_TRUE(store_->Change(Apply(RouteTo("svc2"))).accepted);  // version 5
  store_->ForNode(canary_node, &v);
  EXPECT_EQ(v, 5u);
  EXPECT_EQ(store_->Assignments().size(), 1u);
}

TEST_F(StoreTest, RollbackServesAnOldVersionAsANewOne) {
  ASSERT_TRUE(store_->Change(Apply(ClusterYaml("svc2") + RouteTo("svc2"))).accepted);  // 2
  ChangeRequest back;
  back.kind = ChangeRequest::Kind::kRollback;
  back.rollback_to = 1;
  ChangeResult r = store_->Change(back);
  ASSERT_TRUE(r.accepted);
  EXPECT_EQ(r.version, 3u);
  EXPECT_EQ(RouteCluster(*store_->Get(0)), "svc");
  EXPECT_TRUE(store_->Get(0)->of(ResourceType::kCluster).count("svc2") == 0);
  EXPECT_EQ(store_->History()[0].origin, "rollback to 1");
  EXPECT_EQ(store_->ReloadDirectory(true), Store::Result::kUnchanged);

  back.rollback_to = 99;
  EXPECT_EQ(store_->Change(back).request_error, "version 99 is not kept (kept: 1 to 3)");
}

TEST_F(StoreTest, VirtualHostUpdateTouchesOneVirtualHost) {
  ChangeRequest c;
  c.kind = ChangeRequest::Kind::kVirtualHost;
  c.route_configuration = "r";
  std::vector<std::string> errors;
  ASSERT_TRUE(LoadYamlIntoMessage(
      "name: api\ndomains: [api.example.com]\nroutes:\n- match: { prefix: \"/\" }\n"
      "  direct_response: { status: 200 }\n",
      "vh", &c.virtual_host, &errors));
  ASSERT_TRUE(store_->Change(c).accepted);
  envoy::config::route::v3::RouteConfiguration rc;
  rc.ParseFromString(store_->Get(0)->of(ResourceType::kRoute).at("r").bytes);
  ASSERT_EQ(rc.virtual_hosts_size(), 2);
  EXPECT_EQ(rc.virtual_hosts(1).name(), "api");

  // The same name again replaces it; a bad one is refused with the field path in the route.
  c.virtual_host.mutable_routes(0)->mutable_match()->mutable_safe_regex()->set_regex("(");
  ChangeResult r = store_->Change(c);
  EXPECT_FALSE(r.accepted);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].field, "virtual_hosts[1].routes[0].match.safe_regex.regex");

  c.remove_virtual_host = true;
  ASSERT_TRUE(store_->Change(c).accepted);
  rc.ParseFromString(store_->Get(0)->of(ResourceType::kRoute).at("r").bytes);
  EXPECT_EQ(rc.virtual_hosts_size(), 1);
  EXPECT_EQ(store_->Change(c).request_error, "route configuration 'r' has no virtual host 'api'");
  c.route_configuration = "nope";
  EXPECT_EQ(store_->Change(c).request_error, "no such route configuration: 'nope'");
}

TEST_F(StoreTest, HistoryAndAssignmentsSurviveARestart) {
  ASSERT_TRUE(store_->Change(Apply(ClusterYaml("svc2"))).accepted);                        // 2
  ASSERT_TRUE(store_->Change(Apply(RouteTo("svc2"), Target{"canary", "", ""})).accepted);  // 3
  Open();
  EXPECT_EQ(store_->History().size(), 3u);
  uint64_t v = 0;
  store_->ForNode(NodeInfo{"n", "canary", {}}, &v);
  EXPECT_EQ(v, 3u);
  EXPECT_EQ(store_->Get(0)->version, "2");
  EXPECT_THAT(log_.All(), HasSubstr("history: 3 versions restored, default version=2"));
  // Resources keep their files across the restart (no resource written twice).
  ASSERT_TRUE(store_->Change(Apply(RouteTo("svc2"))).accepted);  // 4
  EXPECT_EQ(store_->ReloadDirectory(true), Store::Result::kUnchanged);
  EXPECT_EQ(store_->Get(0)->version, "4");
  ChangeRequest back;
  back.kind = ChangeRequest::Kind::kRollback;
  back.rollback_to = 1;
  EXPECT_TRUE(store_->Change(back).accepted);
}

TEST_F(StoreTest, HistoryIsBoundedButAssignedVersionsStay) {
  StoreOptions o;
  o.history_limit = 2;
  Open(o);
  ASSERT_TRUE(store_->Change(Apply(ClusterYaml("c2"))).accepted);                       // 2
  ASSERT_TRUE(store_->Change(Apply(ClusterYaml("c3"), Target{"k", "", ""})).accepted);  // 3
  ASSERT_TRUE(store_->Change(Apply(ClusterYaml("c4"), Target{"j", "", ""})).accepted);  // 4
  std::vector<uint64_t> kept;
  for (const auto& r : store_->History()) kept.push_back(r.version);
  EXPECT_EQ(kept, (std::vector<uint64_t>{4, 3, 2}));               // all assigned
  ASSERT_TRUE(store_->Change(Apply(ClusterYaml("c5"))).accepted);  // 5: targets cleared
  kept.clear();
  for (const auto& r : store_->History()) kept.push_back(r.version);
  EXPECT_EQ(kept, (std::vector<uint64_t>{5, 4}));
  EXPECT_EQ(access((dir_ + "/.rpx/history/2.pb").c_str(), F_OK), -1);
}

TEST_F(StoreTest, HandEditsAreCheckedLikeApiChanges) {
  WriteFile(dir_, "routes.yaml", RouteTo("nope"));
  EXPECT_EQ(store_->ReloadDirectory(false), Store::Result::kError);
  EXPECT_THAT(log_.All(), HasSubstr("reload error: RouteConfiguration 'r': "
                                    "virtual_hosts[0].routes[0].route.cluster: cluster 'nope'"));
  EXPECT_EQ(store_->Get(0)->version, "1");
  WriteFile(dir_, "routes.yaml",
            RouteTo("svc",
                    "    - match: { prefix: \"/x\" }\n"
                    "      direct_response: { status: 204 }\n"));
  EXPECT_EQ(store_->ReloadDirectory(false), Store::Result::kUpdated);
  EXPECT_EQ(store_->History()[0].origin, "directory");
}

TEST(TargetTest, MatchesAndPrints) {
  NodeInfo node{"id", "canary", {{"zone", "b"}}};
  EXPECT_TRUE(Target{}.Matches(node));
  EXPECT_TRUE((Target{"canary", "", ""}.Matches(node)));
  EXPECT_FALSE((Target{"prod", "", ""}.Matches(node)));
  EXPECT_TRUE((Target{"", "zone", "b"}.Matches(node)));
  EXPECT_FALSE((Target{"", "zone", "a"}.Matches(node)));
  EXPECT_EQ(Target{}.ToString(), "all");
  EXPECT_EQ((Target{"canary", "", ""}.ToString()), "cluster=canary");
  EXPECT_EQ((Target{"", "zone", "b"}.ToString()), "metadata.zone=b");
}

TEST(WriteFileAtomicallyTest, ReplacesAndLeavesNoTemporaryFile) {
  std::string dir = MakeTempDir();
  std::string error;
  ASSERT_TRUE(WriteFileAtomically(dir + "/f.yaml", "one\n", &error)) << error;
  ASSERT_TRUE(WriteFileAtomically(dir + "/f.yaml", "two\n", &error)) << error;
  EXPECT_EQ(ReadFileText(dir + "/f.yaml"), "two\n");
  EXPECT_FALSE(WriteFileAtomically(dir + "/missing/f.yaml", "x", &error));
  EXPECT_THAT(error, HasSubstr("missing"));
}

TEST(StoreDirectoryTest, EmptyDirectoryIsAnEmptySnapshot) {
  std::string dir = MakeTempDir();
  LogCapture log;
  Store source(Unchecked(dir), log.fn());
  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kUpdated);
  ASSERT_NE(source.Get(0), nullptr);
  EXPECT_EQ(source.Get(0)->version, "1");
  EXPECT_THAT(log.All(), HasSubstr("snapshot version=1 listeners= routes= clusters= endpoints=\n"));
}

TEST(StoreDirectoryTest, MissingDirectoryIsAnErrorAndNoSnapshot) {
  LogCapture log;
  Store source(Unchecked(MakeTempDir() + "/missing"), log.fn());
  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kError);
  EXPECT_EQ(source.Get(0), nullptr);
  EXPECT_THAT(log.All(), HasSubstr("reload error: "));
  EXPECT_THAT(log.All(), HasSubstr("cannot read the directory"));
}

TEST(StoreDirectoryTest, DuplicateNamesAcrossFilesKeepThePreviousSnapshot) {
  std::string dir = MakeTempDir();
  LogCapture log;
  Store source(Unchecked(dir), log.fn());
  WriteFile(dir, "a.yaml", kClusters);
  ASSERT_EQ(source.ReloadDirectory(false), Store::Result::kUpdated);
  auto before = source.Get(0);

  WriteFile(dir, "b.yaml", "clusters:\n- name: b\n  connect_timeout: 3s\n");
  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kError);
  EXPECT_EQ(source.Get(0), before);
  EXPECT_EQ(source.Get(0)->version, "1");
  std::string out = log.All();
  EXPECT_THAT(out, HasSubstr("reload error: " + dir + "/b.yaml: clusters[0]: duplicate " +
                             "clusters name 'b' (also in " + dir + "/a.yaml)"));
  EXPECT_THAT(out, HasSubstr("reload error: keeping snapshot version=1"));

  // Reported once, not at every poll.
  size_t lines = log.size();
  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kUnchanged);
  EXPECT_EQ(log.size(), lines);

  ASSERT_EQ(unlink((dir + "/b.yaml").c_str()), 0);
  // Back to exactly version 1's resources: nothing to push.
  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kUnchanged);
  EXPECT_EQ(source.Get(0), before);
  EXPECT_THAT(log.All(), HasSubstr("reload ok: resources unchanged, still version=1\n"));
}

TEST(StoreDirectoryTest, ParseErrorKeepsThePreviousSnapshotAndSaysWhere) {
  std::string dir = MakeTempDir();
  LogCapture log;
  Store source(Unchecked(dir), log.fn());
  WriteFile(dir, "a.yaml", kClusters);
  ASSERT_EQ(source.ReloadDirectory(false), Store::Result::kUpdated);
  auto before = source.Get(0);

  WriteFile(dir, "a.yaml", "clusters:\n- name: a\n  lb_policy: FASTEST\n  bogus: 1\n");
  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kError);
  EXPECT_EQ(source.Get(0), before);
  std::string out = log.All();
  EXPECT_THAT(out, HasSubstr("reload error: " + dir +
                             "/a.yaml:3:14: clusters[0].lb_policy: unknown value 'FASTEST'"));
  EXPECT_THAT(out, HasSubstr("reload error: " + dir +
                             "/a.yaml:4:3: clusters[0].bogus: unknown field 'bogus'"));

  WriteFile(dir, "a.yaml", "clusters: [{name: a, type: STATIC}]\n");
  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kUpdated);
  EXPECT_EQ(source.Get(0)->version, "2");
  EXPECT_THAT(log.All(), HasSubstr("snapshot version=2 listeners= routes= clusters=a endpoints="));

  // Invalid YAML, too.
  WriteFile(dir, "a.yaml", "clusters: [{name: a\n");
  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kError);
  EXPECT_EQ(source.Get(0)->version, "2");
  EXPECT_THAT(log.All(), HasSubstr("a.yaml:"));
  EXPECT_THAT(log.All(), HasSubstr(": invalid YAML"));
}

TEST(StoreDirectoryTest, VersionChangesOnlyOnRealChange) {
  std::string dir = MakeTempDir();
  LogCapture log;
  Store source(Unchecked(dir), log.fn());
  WriteFile(dir, "a.yaml", kClusters);
  ASSERT_EQ(source.ReloadDirectory(false), Store::Result::kUpdated);
  auto v1 = source.Get(0);
  EXPECT_EQ(v1->version, "1");

  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kUnchanged);
  // Rewritten with the same content: the files changed, the resources did not.
  WriteFile(dir, "a.yaml", kClusters);
  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kUnchanged);
  // Same resources, other layout, other order, other file split.
  WriteFile(dir, "a.yaml", "clusters: [{name: b, connect_timeout: 2s}]\n");
  WriteFile(dir, "z.yml", "clusters:\n- {connectTimeout: 1s, type: STATIC, name: a}\n");
  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kUnchanged);
  EXPECT_EQ(source.Get(0)->version, "1");

  WriteFile(dir, "z.yml", "clusters:\n- {connectTimeout: 5s, type: STATIC, name: a}\n");
  EXPECT_EQ(source.ReloadDirectory(false), Store::Result::kUpdated);
  auto v2 = source.Get(0);
  EXPECT_EQ(v2->version, "2");
  const auto& c1 = v1->of(ResourceType::kCluster);
  const auto& c2 = v2->of(ResourceType::kCluster);
  EXPECT_NE(c1.at("a").version, c2.at("a").version);
  EXPECT_EQ(c1.at("b").version, c2.at("b").version);
  EXPECT_EQ(c2.at("a").version.size(), 16u);
}

TEST(StoreDirectoryTest, PollerPublishesChanges) {
  std::string dir = MakeTempDir();
  LogCapture log;
  Store source(Unchecked(dir), log.fn());
  WriteFile(dir, "a.yaml", kClusters);
  ASSERT_EQ(source.ReloadDirectory(false), Store::Result::kUpdated);

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> versions;
  source.SetOnChange([&] {
    std::lock_guard<std::mutex> lock(mu);
    versions.push_back(source.Get(0)->version);
    cv.notify_all();
  });
  DirectoryPoller poller([&](bool force) { source.ReloadDirectory(force); },
                         std::chrono::milliseconds(10));
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
