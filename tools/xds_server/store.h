// The control plane's versioned state: every accepted change (through the control API or by
// editing the resource directory by hand) becomes a numbered version with its author, time and
// description; which version each group of nodes is served (the assignments: a default, and
// targeted ones for canaries); and the persistence of both.
//
// Persistence: the default version's resources are the directory's YAML files (the API writes
// them, each file replaced atomically by rename, only files whose resources changed); the history
// and the assignments are kept by a StoreBackend: DIR/.rpx/ (hidden, so never read as
// resources), or etcd shared by several replicas (then the directory only seeds an empty store).
// A directory edited by hand is reloaded by the poller and checked like an API change.
//
// Threads: every public method may be called from any thread; one mutex serializes them (a change
// is checked and written under it, so the poller never reads a half-applied change). The
// on_change callback runs after the mutex is released, on the thread that made the change.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "envoy/config/route/v3/route_components.pb.h"
#include "rpx/control/v1/control.pb.h"
#include "rpx/tools/v1/resource_file.pb.h"
#include "tools/xds_server/change_check.h"
#include "tools/xds_server/snapshot.h"
#include "tools/xds_server/store_backend.h"

namespace rpx {
namespace xds_server {

// Who a node is, from the first request of its stream.
struct NodeInfo {
  std::string id;
  std::string cluster;
  std::map<std::string, std::string> metadata;  // node.metadata's string values
  std::string region, zone, sub_zone;           // node.locality
};

// Which nodes a version is for. Empty: every node.
struct Target {
  std::string node_cluster;
  std::string metadata_key;
  std::string metadata_value;

  bool all() const { return node_cluster.empty() && metadata_key.empty(); }
  bool Matches(const NodeInfo& node) const;
  // "all", "cluster=canary", "metadata.zone=b"
  std::string ToString() const;
  bool operator==(const Target& o) const {
    return node_cluster == o.node_cluster && metadata_key == o.metadata_key &&
           metadata_value == o.metadata_value;
  }
};

rpx::control::v1::Target TargetToProto(const Target& target);
Target TargetFromProto(const rpx::control::v1::Target& proto);

struct VersionRecord {
  uint64_t version = 0;
  uint64_t parent = 0;
  std::string author;
  std::string description;
  std::string origin;  // "apply", "delete", "update-virtual-host", "rollback to N", "directory"
  int64_t created_ms = 0;
  Target target;
  uint32_t added = 0, changed = 0, removed = 0;
  std::shared_ptr<const Snapshot> snapshot;
};

struct ResourceDelta {
  enum class Kind { kAdded, kChanged, kRemoved };
  ResourceType type;
  std::string name;
  Kind kind;
  std::string diff;  // unified diff of the YAML
};

struct ChangeRequest {
  enum class Kind { kApply, kDelete, kVirtualHost, kRollback };
  Kind kind = Kind::kApply;
  rpx::tools::v1::ResourceFile upserts;                       // kApply
  std::vector<std::pair<ResourceType, std::string>> deletes;  // kDelete
  std::string route_configuration;                            // kVirtualHost
  envoy::config::route::v3::VirtualHost virtual_host;         // kVirtualHost
  bool remove_virtual_host = false;                           // kVirtualHost
  uint64_t rollback_to = 0;                                   // kRollback
  std::string author;
  std::string description;
  Target target;
  bool dry_run = false;
  bool with_diff = false;  // fill ResourceDelta::diff (costly on large resources)
};

struct ChangeResult {
  // A malformed request (unknown version, missing route configuration, ...): nothing checked.
  std::string request_error;
  // The change was good but could not be stored; nothing changed.
  std::string store_error;
  bool accepted = false;
  std::vector<Problem> problems;
  std::vector<ResourceDelta> changes;
  uint64_t version = 0;  // the new version; 0 if refused, a dry run, or no change
  uint64_t base_version = 0;
};

struct StoreOptions {
  std::string dir;
  // Versions kept (those assigned to a target are kept beyond it).
  size_t history_limit = 100;
  // False: files and changes are served as they are (to see how nodes handle bad resources).
  bool check = true;
  CheckOptions check_options;
  // Where versions are kept; null: DIR/.rpx (MakeDirectoryBackend). With a shared backend
  // (etcd) the directory, if given, only seeds an empty store and is never written.
  std::shared_ptr<StoreBackend> backend;
};

class Store {
 public:
  enum class Result { kUnchanged, kUpdated, kError };

  Store(StoreOptions options, LogFn log);
  ~Store();  // Stops the backend's watch.

  // Reads DIR/.rpx (history and assignments), then the directory (a version when it differs from
  // the stored default). Logs the version served by default ("snapshot version=N ...").
  void Open();

  // The poller: loads the directory again if its files changed since the last look (or `force`).
  // A good, different set of resources becomes the new default version ("directory"); a bad one
  // is logged ("reload error: ...") and changes nothing, once per change of the files.
  Result ReloadDirectory(bool force);

  // Checks and (unless a dry run, refused, or a no-op) stores a change, then calls on_change.
  ChangeResult Change(const ChangeRequest& request);

  // What changes from version `from` to `to` (0: the default). False if either is not kept.
  bool Diff(uint64_t from, uint64_t to, std::vector<ResourceDelta>* out) const;

  // The snapshot a node is served (null before any version exists), and its version number.
  std::shared_ptr<const Snapshot> ForNode(const NodeInfo& node, uint64_t* version) const;
  // What a target is served: its own assignment, else the default.
  std::shared_ptr<const Snapshot> ForTarget(const Target& target, uint64_t* version) const;
  // A kept version; null if it is not (or no longer) kept.
  std::shared_ptr<const Snapshot> Get(uint64_t version) const;

  std::vector<VersionRecord> History() const;  // newest first
  // The default (target all) first, then targeted assignments, newest first.
  std::vector<std::pair<Target, uint64_t>> Assignments() const;

  void SetOnChange(std::function<void()> fn) { on_change_ = std::move(fn); }

 private:
  using Lock = std::unique_lock<std::mutex>;
  std::shared_ptr<const Snapshot> ForTargetLocked(const Target& target, uint64_t* version) const;
  // Records `snapshot` as a new version for `target` and persists; false (with `error`) if the
  // store cannot be written, leaving everything as it was.
  bool CommitLocked(std::shared_ptr<Snapshot> snapshot, VersionRecord record, std::string* error);
  bool WriteDirectoryLocked(const Snapshot& before, Snapshot* next, std::string* error);
  // Takes in what the backend holds (at Open, or changed by another replica). True if anything
  // served changed.
  bool ApplyStoredLocked(const StoredData& data, bool full, const std::vector<uint64_t>& removed);

  StoreOptions options_;
  LogFn log_;
  std::shared_ptr<StoreBackend> backend_;
  std::function<void()> on_change_;
  mutable std::mutex mu_;
  std::map<uint64_t, VersionRecord> history_;
  uint64_t counter_ = 0;
  uint64_t default_version_ = 0;
  // Newest first; a node gets the first one it matches.
  std::vector<std::pair<Target, uint64_t>> targeted_;
  std::string last_fingerprint_;
  bool attempted_ = false;
  bool last_failed_ = false;
};

// Writes `data` to `path` atomically (a temporary file in the same directory, fsync, rename).
bool WriteFileAtomically(const std::string& path, const std::string& data, std::string* error);

}  // namespace xds_server
}  // namespace rpx
