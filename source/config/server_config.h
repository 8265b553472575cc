// ServerConfig: everything rpx runs from, built on the main thread from an Envoy v3 Bootstrap and
// then only read. Workers receive the listeners and clusters as shared_ptr<const ...> values.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "envoy/config/bootstrap/v3/bootstrap.pb.h"
#include "source/http/http_config.h"
#include "source/network/address.h"
#include "source/router/route_table.h"
#include "source/upstream/worker_cluster.h"

namespace rpx {

struct ListenerConfig {
  std::string name;
  SocketAddress address;
  uint32_t buffer_limit = 1024 * 1024;
  bool reuse_port = true;
  std::shared_ptr<const HttpConfig> http;
  std::shared_ptr<const RouteTable> routes;
};

// A STRICT_DNS cluster's names, re-resolved every refresh_ms by the main thread.
struct DnsCluster {
  struct Target {
    std::string hostname;
    uint32_t port;
    uint32_t weight;
  };
  std::string cluster;
  std::vector<Target> targets;
  uint64_t refresh_ms = 5000;
};

struct ServerConfig {
  std::string node_id;
  std::string node_cluster;
  std::vector<std::shared_ptr<const ListenerConfig>> listeners;
  ClusterMap clusters;
  std::vector<DnsCluster> dns_clusters;
  std::optional<SocketAddress> admin_address;
};

struct BuildOptions {
  uint32_t stats_slots = 1;  // number of workers: one stats block each
  bool resolve_dns = true;   // false in --mode validate
  std::string source;        // file name, for messages
};

// Builds `out` from `bootstrap`. Returns false after appending every problem to `errors`.
bool BuildServerConfig(const envoy::config::bootstrap::v3::Bootstrap& bootstrap,
                       const BuildOptions& options, ServerConfig* out,
                       std::vector<std::string>* errors);

// Resolves a STRICT_DNS cluster's targets into hosts (blocking; main thread).
std::shared_ptr<const HostSet> ResolveDnsCluster(const DnsCluster& dns,
                                                 std::vector<std::string>* errors);

}  // namespace rpx
