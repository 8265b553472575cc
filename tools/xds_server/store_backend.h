// Where the control plane keeps its versions and assignments (rpx.control.v1.StoredVersion and
// StoredState): a directory (DIR/.rpx, one process) or etcd (several replicas sharing them).
// The Store calls Load and Commit with its own mutex held; Watch's callback runs on the
// backend's thread. Implementations serialize their own state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rpx/control/v1/control.pb.h"

namespace rpx {
namespace xds_server {

struct StoredData {
  std::vector<rpx::control::v1::StoredVersion> versions;
  bool has_state = false;
  rpx::control::v1::StoredState state;
};

class StoreBackend {
 public:
  virtual ~StoreBackend() = default;

  // "directory /x/.rpx", "etcd 127.0.0.1:2379 prefix /rpx/control/"
  virtual std::string Describe() const = 0;

  // Everything stored. False (with `error`) when the store cannot be read.
  virtual bool Load(StoredData* out, std::string* error) = 0;

  // Stores `version` and the state after it, and removes the `pruned` versions, all or nothing
  // where the store allows. False (nothing stored, as far as the store allows) with `error`; for
  // a shared store also when another writer changed the state since this one last saw it.
  virtual bool Commit(const rpx::control::v1::StoredVersion& version,
                      const rpx::control::v1::StoredState& state,
                      const std::vector<uint64_t>& pruned, std::string* error) = 0;

  // A shared store: calls `on_change` with what others stored, from its own thread: `full` (a
  // complete Load, after a reconnect) or only the new versions and state, with `removed`
  // versions. A private store never calls it.
  using ChangeFn =
      std::function<void(const StoredData& data, bool full, const std::vector<uint64_t>& removed)>;
  virtual void Watch(ChangeFn on_change) { (void)on_change; }
  virtual void Stop() {}

  // True if several processes share the store (the directory's files then are not the truth).
  virtual bool shared() const { return false; }
};

// DIR/.rpx/history/<version>.pb and DIR/.rpx/state.pb, each written atomically.
std::unique_ptr<StoreBackend> MakeDirectoryBackend(const std::string& dir);

}  // namespace xds_server
}  // namespace rpx
