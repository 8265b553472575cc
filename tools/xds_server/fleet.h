// What the control plane knows about the nodes it serves: one entry per node id, fed by the xDS
// streams (open, each push, ACK and NACK, close) and read by the control API's fleet status.
// A node whose streams all closed stays listed as gone for `gone_ttl`, then is forgotten.
// Every method may be called from any thread (one mutex).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tools/xds_server/snapshot.h"
#include "tools/xds_server/store.h"

namespace rpx {
namespace xds_server {

struct NodeTypeState {
  std::string sent_version;
  std::string acked_version;
  std::string nack_version;
  std::string nack_error;
  int64_t nack_ms = 0;
};

struct NodeState {
  NodeInfo info;
  std::string address;
  bool connected = false;
  uint32_t streams = 0;
  int64_t connected_since_ms = 0;
  int64_t last_heard_ms = 0;
  int64_t gone_since_ms = 0;
  // The snapshot version its stream last compared itself against (what it was sent covers it).
  std::string evaluated_version;
  std::array<NodeTypeState, kNumResourceTypes> types;
};

class Fleet {
 public:
  explicit Fleet(std::chrono::milliseconds gone_ttl = std::chrono::minutes(10))
      : gone_ttl_ms_(gone_ttl.count()) {}

  // A stream's first request. A node that was gone (or is new) starts afresh.
  void StreamOpened(const NodeInfo& node, const std::string& address);
  void StreamClosed(const std::string& node_id);
  // Any request.
  void Heard(const std::string& node_id);
  void Pushed(const std::string& node_id, ResourceType type, const std::string& version);
  void Acked(const std::string& node_id, ResourceType type, const std::string& version);
  void Nacked(const std::string& node_id, ResourceType type, const std::string& version,
              const std::string& error);

  void Evaluated(const std::string& node_id, const std::string& version);
  // The version a node runs: the one last evaluated for it when every push was ACKed, else "".
  static std::string CurrentVersion(const NodeState& node);

  // Every node, connected ones first, each group by id; forgets nodes gone for too long.
  std::vector<NodeState> Nodes();

  static int64_t NowMs();

 private:
  const int64_t gone_ttl_ms_;
  std::mutex mu_;
  std::map<std::string, NodeState> nodes_;
};

}  // namespace xds_server
}  // namespace rpx
