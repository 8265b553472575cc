// The control plane's versions and assignments in etcd (its v3 gRPC API: KV and Watch), so that
// several control-plane replicas serve the same versions: a change through one replica is
// written with a transaction that fails if another replica wrote first, and every replica's
// watch delivers it to the others.
//
// Keys, under a prefix (default "/rpx/control/"): versions/<20-digit version> holds a
// StoredVersion, state a StoredState. etcd's request limit (--max-request-bytes, 1.5 MiB by
// default) bounds the size of one version.
//
// Threads: Load and Commit from the caller's thread (with deadlines); Watch runs its own
// thread, which reconnects with backoff and then delivers a full Load.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "tools/xds_server/store_backend.h"

namespace rpx {
namespace xds_server {

struct EtcdOptions {
  // "host:port" endpoints of one etcd cluster (tried in order).
  std::vector<std::string> endpoints;
  std::string prefix = "/rpx/control/";
  std::chrono::milliseconds timeout{2000};
};

// Parses "etcd://HOST:PORT[,HOST:PORT...]" into `out`; false with `error` if it is not one.
bool ParseEtcdUrl(const std::string& url, EtcdOptions* out, std::string* error);

std::unique_ptr<StoreBackend> MakeEtcdBackend(EtcdOptions options);

}  // namespace xds_server
}  // namespace rpx
