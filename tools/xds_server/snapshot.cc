#include "tools/xds_server/snapshot.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "rpx/tools/v1/resource_file.pb.h"
#include "source/config/yaml_loader.h"

namespace rpx {
namespace xds_server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr const char* kShortNames[] = {"CDS", "EDS", "LDS", "RDS", "SDS"};
constexpr const char* kPluralNames[] = {"clusters", "endpoints", "listeners", "routes", "secrets"};

std::string SerializeDeterministically(const Message& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

void CanonicalizeAnys(Message* message);

// Re-packs one google.protobuf.Any in place. Types this binary does not know stay as they are
// (the YAML loader only packs known types, so that does not happen for loaded files).
void CanonicalizeAny(Message* any) {
  const Descriptor* d = any->GetDescriptor();
  const Reflection* r = any->GetReflection();
  const FieldDescriptor* url_field = d->FindFieldByNumber(1);
  const FieldDescriptor* value_field = d->FindFieldByNumber(2);
  if (url_field == nullptr || value_field == nullptr) return;
  std::string url = r->GetString(*any, url_field);
  const Descriptor* inner_type =
      google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
          url.substr(url.rfind('/') + 1));
  if (inner_type == nullptr) return;
  std::unique_ptr<Message> inner(
      google::protobuf::MessageFactory::generated_factory()->GetPrototype(inner_type)->New());
  if (!inner->ParseFromString(r->GetString(*any, value_field))) return;
  CanonicalizeAnys(inner.get());
  r->SetString(any, value_field, SerializeDeterministically(*inner));
}

void CanonicalizeField(Message* sub) {
  if (sub->GetDescriptor()->full_name() == "google.protobuf.Any") {
    CanonicalizeAny(sub);
  } else {
    CanonicalizeAnys(sub);
  }
}

void CanonicalizeAnys(Message* message) {
  const Reflection* r = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(*message, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(*message, f); ++i) {
        CanonicalizeField(r->MutableRepeatedMessage(message, f, i));
      }
    } else {
      CanonicalizeField(r->MutableMessage(message, f));
    }
  }
}

bool IsResourceFileName(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  auto ends_with = [&](const std::string& suffix) {
    return name.size() > suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".yaml") || ends_with(".yml");
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return absl::StrCat(dir, "/", name);
}

// Names (sorted) and stat results of the resource files in `dir`; false if it cannot be listed.
struct FileInfo {
  std::string name;
  struct stat st;
};
bool ListResourceFiles(const std::string& dir, std::vector<FileInfo>* files) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (!IsResourceFileName(name)) continue;
    FileInfo info{name, {}};
    // stat, not lstat: follows symlinks such as Kubernetes' ConfigMap mounts.
    if (stat(JoinPath(dir, name).c_str(), &info.st) != 0 || !S_ISREG(info.st.st_mode)) continue;
    files->push_back(std::move(info));
  }
  closedir(d);
  std::sort(files->begin(), files->end(),
            [](const FileInfo& a, const FileInfo& b) { return a.name < b.name; });
  return true;
}

template <typename T>
void AddResources(const google::protobuf::RepeatedPtrField<T>& list, ResourceType type,
                  const std::string& path, const std::string& file,
                  std::string (*name_of)(const T&), Snapshot* out,
                  std::map<std::string, std::string>* origin, std::vector<std::string>* errors) {
  const char* plural = kPluralNames[static_cast<int>(type)];
  auto& resources = out->resources[static_cast<int>(type)];
  for (int i = 0; i < list.size(); ++i) {
    std::string name = name_of(list.Get(i));
    if (name.empty()) {
      errors->push_back(absl::StrCat(
          path, ": ", plural, "[", i,
          "]: ", type == ResourceType::kEndpoint ? "cluster_name" : "name", " is required"));
      continue;
    }
    auto [it, inserted] = origin->emplace(absl::StrCat(plural, "/", name), path);
    if (!inserted) {
      errors->push_back(absl::StrCat(path, ": ", plural, "[", i, "]: duplicate ", plural, " name '",
                                     name, "' (also in ", it->second, ")"));
      continue;
    }
    Resource& r = resources[name];
    r.name = name;
    r.bytes = DeterministicBytes(list.Get(i));
    r.version = ResourceVersion(r.bytes);
    r.file = file;
  }
}

std::string ListenerName(const envoy::config::listener::v3::Listener& m) { return m.name(); }
std::string RouteName(const envoy::config::route::v3::RouteConfiguration& m) { return m.name(); }
std::string SecretName(const envoy::extensions::transport_sockets::tls::v3::Secret& m) {
  return m.name();
}
std::string ClusterName(const envoy::config::cluster::v3::Cluster& m) { return m.name(); }
std::string EndpointName(const envoy::config::endpoint::v3::ClusterLoadAssignment& m) {
  return m.cluster_name();
}

}  // namespace

const std::string& TypeUrl(ResourceType type) {
  static const std::string* const kUrls = new std::string[kNumResourceTypes]{
      "type.googleapis.com/envoy.config.cluster.v3.Cluster",
      "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
      "type.googleapis.com/envoy.config.listener.v3.Listener",
      "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
      "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
  };
  return kUrls[static_cast<int>(type)];
}

const char* ShortTypeName(ResourceType type) { return kShortNames[static_cast<int>(type)]; }

const char* PluralTypeName(ResourceType type) { return kPluralNames[static_cast<int>(type)]; }

bool ParsePluralTypeName(const std::string& name, ResourceType* type) {
  for (ResourceType t : kAllResourceTypes) {
    if (name == kPluralNames[static_cast<int>(t)]) {
      *type = t;
      return true;
    }
  }
  return false;
}

bool ParseTypeUrl(const std::string& type_url, ResourceType* type) {
  for (ResourceType t : kAllResourceTypes) {
    if (TypeUrl(t) == type_url) {
      *type = t;
      return true;
    }
  }
  return false;
}

bool IsWildcardCapable(ResourceType type) {
  return type == ResourceType::kListener || type == ResourceType::kCluster;
}

bool Snapshot::SameResources(const Snapshot& other) const {
  for (int t = 0; t < kNumResourceTypes; ++t) {
    const auto& a = resources[t];
    const auto& b = other.resources[t];
    if (a.size() != b.size()) return false;
    for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
      if (ia->first != ib->first || ia->second.bytes != ib->second.bytes) return false;
    }
  }
  return true;
}

std::string DescribeSnapshot(const Snapshot& snapshot) {
  std::string line = absl::StrCat("snapshot version=", snapshot.version);
  // Listed in the order people read a config in, not the push order.
  for (ResourceType t : {ResourceType::kListener, ResourceType::kRoute, ResourceType::kCluster,
                         ResourceType::kEndpoint}) {
    std::vector<std::string> names;
    for (const auto& [name, r] : snapshot.of(t)) names.push_back(name);
    absl::StrAppend(&line, " ", kPluralNames[static_cast<int>(t)], "=", absl::StrJoin(names, ","));
  }
  if (!snapshot.of(ResourceType::kSecret).empty()) {
    std::vector<std::string> names;
    for (const auto& [name, r] : snapshot.of(ResourceType::kSecret)) names.push_back(name);
    absl::StrAppend(&line, " secrets=", absl::StrJoin(names, ","));
  }
  return line;
}

std::string ResourceVersion(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[i] = kHex[h & 0xf];
  return out;
}

std::string DeterministicBytes(const Message& message) {
  std::unique_ptr<Message> copy(message.New());
  copy->CopyFrom(message);
  CanonicalizeAnys(copy.get());
  return SerializeDeterministically(*copy);
}

bool AddResourceFile(const rpx::tools::v1::ResourceFile& parsed, const std::string& source,
                     const std::string& file, Snapshot* out,
                     std::map<std::string, std::string>* origin, std::vector<std::string>* errors) {
  size_t errors_before = errors->size();
  AddResources(parsed.listeners(), ResourceType::kListener, source, file, &ListenerName, out,
               origin, errors);
  AddResources(parsed.routes(), ResourceType::kRoute, source, file, &RouteName, out, origin,
               errors);
  AddResources(parsed.clusters(), ResourceType::kCluster, source, file, &ClusterName, out, origin,
               errors);
  AddResources(parsed.endpoints(), ResourceType::kEndpoint, source, file, &EndpointName, out,
               origin, errors);
  AddResources(parsed.secrets(), ResourceType::kSecret, source, file, &SecretName, out, origin,
               errors);
  return errors->size() == errors_before;
}

std::unique_ptr<google::protobuf::Message> DecodeResource(ResourceType type,
                                                          const std::string& bytes) {
  std::unique_ptr<google::protobuf::Message> m;
  switch (type) {
    case ResourceType::kListener:
      m = std::make_unique<envoy::config::listener::v3::Listener>();
      break;
    case ResourceType::kRoute:
      m = std::make_unique<envoy::config::route::v3::RouteConfiguration>();
      break;
    case ResourceType::kCluster:
      m = std::make_unique<envoy::config::cluster::v3::Cluster>();
      break;
    case ResourceType::kEndpoint:
      m = std::make_unique<envoy::config::endpoint::v3::ClusterLoadAssignment>();
      break;
    case ResourceType::kSecret:
      m = std::make_unique<envoy::extensions::transport_sockets::tls::v3::Secret>();
      break;
  }
  if (!m->ParseFromString(bytes)) return nullptr;
  return m;
}

void AppendResource(ResourceType type, const Resource& resource,
                    rpx::tools::v1::ResourceFile* out) {
  switch (type) {
    case ResourceType::kListener:
      out->add_listeners()->ParseFromString(resource.bytes);
      return;
    case ResourceType::kRoute:
      out->add_routes()->ParseFromString(resource.bytes);
      return;
    case ResourceType::kCluster:
      out->add_clusters()->ParseFromString(resource.bytes);
      return;
    case ResourceType::kEndpoint:
      out->add_endpoints()->ParseFromString(resource.bytes);
      return;
    case ResourceType::kSecret:
      out->add_secrets()->ParseFromString(resource.bytes);
      return;
  }
}

bool LoadResourceDirectory(const std::string& dir, Snapshot* out,
                           std::vector<std::string>* errors) {
  std::vector<FileInfo> files;
  if (!ListResourceFiles(dir, &files)) {
    errors->push_back(absl::StrCat(dir, ": cannot read the directory"));
    return false;
  }
  size_t errors_before = errors->size();
  // "clusters/service" -> the file that defined it, to name both files of a duplicate.
  std::map<std::string, std::string> origin;
  for (const FileInfo& file : files) {
    std::string path = JoinPath(dir, file.name);
    rpx::tools::v1::ResourceFile parsed;
    if (!LoadYamlFile(path, &parsed, errors)) continue;
    AddResourceFile(parsed, path, file.name, out, &origin, errors);
  }
  return errors->size() == errors_before;
}

std::string DirectoryFingerprint(const std::string& dir) {
  std::vector<FileInfo> files;
  if (!ListResourceFiles(dir, &files)) return "unreadable";
  std::string out;
  for (const FileInfo& f : files) {
    // Inode and ctime as well: a rename over a file within one mtime tick still changes them.
    absl::StrAppend(&out, f.name, " ", f.st.st_ino, " ", f.st.st_size, " ", f.st.st_mtim.tv_sec,
                    ".", f.st.st_mtim.tv_nsec, " ", f.st.st_ctim.tv_sec, ".", f.st.st_ctim.tv_nsec,
                    "\n");
  }
  return out;
}

DirectoryPoller::DirectoryPoller(std::function<void(bool force)> reload,
                                 std::chrono::milliseconds interval)
    : reload_(std::move(reload)), interval_(interval) {}

DirectoryPoller::~DirectoryPoller() { Stop(); }

void DirectoryPoller::Start() {
  thread_ = std::thread([this] { Run(); });
}

void DirectoryPoller::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DirectoryPoller::RequestReload() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    force_ = true;
  }
  cv_.notify_all();
}

void DirectoryPoller::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval_, [this] { return stop_ || force_; });
    if (stop_) break;
    bool force = force_;
    force_ = false;
    lock.unlock();
    reload_(force);
    lock.lock();
  }
}

}  // namespace xds_server
}  // namespace rpx
