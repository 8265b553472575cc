#include "tools/xds_server/fleet.h"

#include "gtest/gtest.h"

namespace rpx {
namespace xds_server {
namespace {

TEST(FleetTest, TracksPushesAcksAndNacksPerType) {
  Fleet fleet;
  NodeInfo node{"n1", "canary", {{"zone", "b"}}};
  fleet.StreamOpened(node, "ipv4:127.0.0.1:5000");
  fleet.Pushed("n1", ResourceType::kListener, "3");
  fleet.Pushed("n1", ResourceType::kRoute, "3");
  fleet.Evaluated("n1", "3");
  auto nodes = fleet.Nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].info.cluster, "canary");
  EXPECT_EQ(nodes[0].address, "ipv4:127.0.0.1:5000");
  EXPECT_TRUE(nodes[0].connected);
  EXPECT_EQ(Fleet::CurrentVersion(nodes[0]), "");  // pushes outstanding

  fleet.Acked("n1", ResourceType::kListener, "3");
  fleet.Acked("n1", ResourceType::kRoute, "3");
  EXPECT_EQ(Fleet::CurrentVersion(fleet.Nodes()[0]), "3");

  // Version 4 changes only the routes, and the node refuses them.
  fleet.Pushed("n1", ResourceType::kRoute, "4");
  fleet.Evaluated("n1", "4");
  fleet.Nacked("n1", ResourceType::kRoute, "3", "bad regex");
  NodeState n = fleet.Nodes()[0];
  EXPECT_EQ(Fleet::CurrentVersion(n), "");
  const NodeTypeState& rds = n.types[static_cast<int>(ResourceType::kRoute)];
  EXPECT_EQ(rds.acked_version, "3");
  EXPECT_EQ(rds.nack_error, "bad regex");
  EXPECT_GT(rds.nack_ms, 0);
}

TEST(FleetTest, NodeWithSeveralStreamsIsGoneWhenTheLastCloses) {
  Fleet fleet;
  NodeInfo node{"n1", "c", {}};
  fleet.StreamOpened(node, "a");
  fleet.StreamOpened(node, "a");
  EXPECT_EQ(fleet.Nodes()[0].streams, 2u);
  fleet.StreamClosed("n1");
  EXPECT_TRUE(fleet.Nodes()[0].connected);
  fleet.StreamClosed("n1");
  NodeState n = fleet.Nodes()[0];
  EXPECT_FALSE(n.connected);
  EXPECT_GT(n.gone_since_ms, 0);

  // Back: a fresh entry (its old ACKs say nothing about the new process).
  fleet.Acked("n1", ResourceType::kRoute, "1");
  fleet.StreamOpened(node, "b");
  n = fleet.Nodes()[0];
  EXPECT_TRUE(n.connected);
  EXPECT_EQ(n.address, "b");
  EXPECT_EQ(n.types[static_cast<int>(ResourceType::kRoute)].acked_version, "");
}

TEST(FleetTest, GoneNodesAreForgottenAfterTheirTime) {
  Fleet fleet(std::chrono::milliseconds(-1));
  fleet.StreamOpened(NodeInfo{"gone", "", {}}, "a");
  fleet.StreamOpened(NodeInfo{"here", "", {}}, "b");
  fleet.StreamClosed("gone");
  auto nodes = fleet.Nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].info.id, "here");
}

TEST(FleetTest, ConnectedNodesAreListedFirst) {
  Fleet fleet;
  fleet.StreamOpened(NodeInfo{"a", "", {}}, "x");
  fleet.StreamOpened(NodeInfo{"b", "", {}}, "x");
  fleet.StreamClosed("a");
  auto nodes = fleet.Nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].info.id, "b");
  EXPECT_EQ(nodes[1].info.id, "a");
}

}  // namespace
}  // namespace xds_server
}  // namespace rpx
