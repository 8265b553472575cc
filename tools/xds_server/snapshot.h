// Snapshots of the xDS resources in a directory of YAML files (rpx.tools.v1.ResourceFile), for
// tools/xds_server. A Snapshot is immutable once published and shared by pointer between
// threads. DirectoryPoller runs its own thread and calls back from it. Nothing here knows about
// gRPC, so it is testable on its own.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "google/protobuf/message.h"
#include "rpx/tools/v1/resource_file.pb.h"

namespace rpx {
namespace xds_server {

// One line of output, without the newline. Called from several threads; the sink serializes.
using LogFn = std::function<void(const std::string& line)>;

// kAllResourceTypes lists them in the order a control plane should push them (make before
// break): secrets before the clusters and listeners that use them, clusters before their
// endpoints, listeners before their routes.
enum class ResourceType { kCluster = 0, kEndpoint = 1, kListener = 2, kRoute = 3, kSecret = 4 };
constexpr int kNumResourceTypes = 5;
constexpr std::array<ResourceType, kNumResourceTypes> kAllResourceTypes = {
    ResourceType::kSecret, ResourceType::kCluster, ResourceType::kEndpoint, ResourceType::kListener,
    ResourceType::kRoute};

// "type.googleapis.com/envoy.config.listener.v3.Listener" and so on.
const std::string& TypeUrl(ResourceType type);
// "LDS", "RDS", "CDS", "EDS", "SDS".
const char* ShortTypeName(ResourceType type);
// "listeners", "routes", "clusters", "endpoints", "secrets" (ResourceFile's field names).
const char* PluralTypeName(ResourceType type);
bool ParsePluralTypeName(const std::string& name, ResourceType* type);
// False for a type URL this server does not serve.
bool ParseTypeUrl(const std::string& type_url, ResourceType* type);
// Listener and Cluster: SotW responses carry the full set, and wildcard subscriptions exist.
bool IsWildcardCapable(ResourceType type);

struct Resource {
  std::string name;
  // Deterministic serialization of the resource (every nested Any re-packed deterministically
  // too), so equal YAML gives equal bytes on every load.
  std::string bytes;
  // Short hash of `bytes`: the per-resource version of the delta protocol.
  std::string version;
  // The directory file it is kept in ("routes.yaml"); "" until it is written to one.
  std::string file;
};

struct Snapshot {
  std::string version;
  // By ResourceType; sorted by name, so responses list resources in a stable order.
  std::array<std::map<std::string, Resource>, kNumResourceTypes> resources;

  const std::map<std::string, Resource>& of(ResourceType type) const {
    return resources[static_cast<int>(type)];
  }
  // True when both hold the same resources with the same bytes (versions aside).
  bool SameResources(const Snapshot& other) const;
};

// "snapshot version=3 listeners=a,b routes=r clusters=c endpoints=c" (and " secrets=s" when
// there are any).
std::string DescribeSnapshot(const Snapshot& snapshot);

// 16 hex digits of the 64-bit FNV-1a hash of `bytes`.
std::string ResourceVersion(const std::string& bytes);

// Serializes with deterministic map order after re-packing every nested Any the same way (the
// YAML loader packs typed_config with the default, non-deterministic, serialization).
std::string DeterministicBytes(const google::protobuf::Message& message);

// Adds the resources of one parsed file to `out`, each with `file` as its Resource::file.
// `origin` maps "routes/name" to the source that defined it, to report a name given twice (in
// `source` and where it was first seen); a resource without a name is an error too.
bool AddResourceFile(const rpx::tools::v1::ResourceFile& parsed, const std::string& source,
                     const std::string& file, Snapshot* out,
                     std::map<std::string, std::string>* origin, std::vector<std::string>* errors);

// Decodes one resource of `type` and appends it to the matching list of `out`.
void AppendResource(ResourceType type, const Resource& resource, rpx::tools::v1::ResourceFile* out);

// The message of one resource of `type`, decoded from `bytes` (null if it does not decode).
std::unique_ptr<google::protobuf::Message> DecodeResource(ResourceType type,
                                                          const std::string& bytes);

// Reads every *.yaml / *.yml regular file directly in `dir` (not hidden files: editors' lock and
// swap files) in name order, and fills `out` (whose version is left empty). On any problem
// returns false with every problem in `errors`: unreadable directory, a file that does not parse
// (file:line: field path), a resource without a name, a name given twice for one type.
bool LoadResourceDirectory(const std::string& dir, Snapshot* out, std::vector<std::string>* errors);

// A cheap summary of the directory (names, sizes, modification times of the files that
// LoadResourceDirectory would read) that changes whenever one of them does.
std::string DirectoryFingerprint(const std::string& dir);

// Calls reload(force) every `interval` (and at once, with force, after RequestReload(), e.g. on
// SIGHUP) on its own thread.
class DirectoryPoller {
 public:
  DirectoryPoller(std::function<void(bool force)> reload, std::chrono::milliseconds interval);
  ~DirectoryPoller();  // Stops.

  void Start();
  void Stop();
  // Any thread (not from a signal handler). Forces a reload even if the directory looks equal.
  void RequestReload();

 private:
  void Run();

  std::function<void(bool force)> reload_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool force_ = false;
  std::thread thread_;
};

}  // namespace xds_server
}  // namespace rpx
