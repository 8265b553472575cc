#include "tools/xds_server/fleet.h"

#include <algorithm>

namespace rpx {
namespace xds_server {

int64_t Fleet::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Fleet::StreamOpened(const NodeInfo& node, const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t now = NowMs();
  NodeState& n = nodes_[node.id];
  if (!n.connected) {
    n = NodeState();
    n.connected = true;
    n.connected_since_ms = now;
  }
  n.info = node;
  n.address = address;
  ++n.streams;
  n.last_heard_ms = now;
}

void Fleet::StreamClosed(const std::string& node_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.streams == 0) return;
  if (--it->second.streams == 0) {
    it->second.connected = false;
    it->second.gone_since_ms = NowMs();
  }
}

void Fleet::Heard(const std::string& node_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) it->second.last_heard_ms = NowMs();
}

void Fleet::Pushed(const std::string& node_id, ResourceType type, const std::string& version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) it->second.types[static_cast<int>(type)].sent_version = version;
}

void Fleet::Acked(const std::string& node_id, ResourceType type, const std::string& version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) it->second.types[static_cast<int>(type)].acked_version = version;
}

void Fleet::Nacked(const std::string& node_id, ResourceType type, const std::string& version,
                   const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return;
  NodeTypeState& t = it->second.types[static_cast<int>(type)];
  t.nack_version = version;
  t.nack_error = error;
  t.nack_ms = NowMs();
}

void Fleet::Evaluated(const std::string& node_id, const std::string& version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) it->second.evaluated_version = version;
}

std::string Fleet::CurrentVersion(const NodeState& node) {
  for (const NodeTypeState& t : node.types) {
    if (t.sent_version != t.acked_version) return "";
  }
  return node.evaluated_version;
}

std::vector<NodeState> Fleet::Nodes() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t now = NowMs();
  std::vector<NodeState> out;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (!it->second.connected && now - it->second.gone_since_ms > gone_ttl_ms_) {
      it = nodes_.erase(it);
      continue;
    }
    out.push_back(it->second);
    ++it;
  }
  std::stable_sort(out.begin(), out.end(), [](const NodeState& a, const NodeState& b) {
    return a.connected > b.connected;
  });
  return out;
}

}  // namespace xds_server
}  // namespace rpx
