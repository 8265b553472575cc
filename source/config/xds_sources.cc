#include "source/config/xds_sources.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "envoy/service/discovery/v3/discovery.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "source/common/assert.h"
#include "source/common/logger.h"
#include "source/config/yaml_loader.h"

namespace rpx {
namespace {

// A resource's name, as xDS keys it: `name`, or `cluster_name` for a ClusterLoadAssignment.
bool ResourceName(const google::protobuf::Any& any, std::string* name, std::string* error) {
  std::string type = any.type_url().substr(any.type_url().rfind('/') + 1);
  const auto* d = google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type);
  const google::protobuf::Message* proto =
      d ? google::protobuf::MessageFactory::generated_factory()->GetPrototype(d) : nullptr;
  if (!proto) {
    *error = absl::StrCat("unknown resource type '", any.type_url(), "'");
    return false;
  }
  std::unique_ptr<google::protobuf::Message> m(proto->New());
  if (!any.UnpackTo(m.get())) {
    *error = absl::StrCat("a ", type, " resource does not parse");
    return false;
  }
  const auto* f = d->FindFieldByName("cluster_name");
  if (!f || f->type() != google::protobuf::FieldDescriptor::TYPE_STRING)
    f = d->FindFieldByName("name");
  if (!f || f->type() != google::protobuf::FieldDescriptor::TYPE_STRING) {
    *error = absl::StrCat("a ", type, " resource has no name");
    return false;
  }
  *name = m->GetReflection()->GetString(*m, f);
  if (name->empty()) {
    *error = absl::StrCat("a ", type, " resource has an empty ", f->name());
    return false;
  }
  return true;
}

}  // namespace

XdsFileSource::XdsFileSource(Dispatcher& main, std::string type_url, XdsSource source,
                             XdsApplier& applier)
    : main_(main), type_url_(std::move(type_url)), source_(std::move(source)), applier_(applier) {
  size_t slash = source_.path.rfind('/');
  dir_ = slash == std::string::npos ? "." : (slash == 0 ? "/" : source_.path.substr(0, slash));
  base_ = slash == std::string::npos ? source_.path : source_.path.substr(slash + 1);
}

XdsFileSource::~XdsFileSource() {
  event_.reset();
  if (inotify_fd_ >= 0) close(inotify_fd_);
}

bool XdsFileSource::Start(std::string* error) {
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) {
    *error = absl::StrCat("inotify: ", strerror(errno));
    return false;
  }
  // The directory, not the file: a file replaced by `mv` is a new inode.
  if (inotify_add_watch(inotify_fd_, dir_.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
    *error = absl::StrCat("cannot watch directory '", dir_, "' of ", source_.path, ": ",
                          strerror(errno));
    return false;
  }
  if (!source_.watched_dir.empty() &&
      inotify_add_watch(inotify_fd_, source_.watched_dir.c_str(), IN_MOVED_TO) < 0) {
    *error = absl::StrCat("cannot watch directory '", source_.watched_dir, "': ", strerror(errno));
    return false;
  }
  event_ = main_.CreateFileEvent(
      inotify_fd_, [this](uint32_t) { OnWatch(); }, FileEvent::kRead);
  // The first load runs from the loop, never inside the caller: a listener update that brings
  // an RDS file source is still being applied when the source starts.
  std::weak_ptr<bool> alive = alive_;
  main_.Post([this, alive] {
    if (alive.lock()) Load();
  });
  return true;
}

void XdsFileSource::OnWatch() {
  alignas(inotify_event) char buf[16384];
  bool reload = false;
  for (;;) {
    ssize_t n = read(inotify_fd_, buf, sizeof(buf));
    if (n <= 0) break;
    for (char* p = buf; p < buf + n;) {
      auto* e = reinterpret_cast<inotify_event*>(p);
      std::string name = e->len ? std::string(e->name) : "";
      if (name == base_ || ((e->mask & IN_MOVED_TO) && !source_.watched_dir.empty())) {
        reload = true;
      }
      p += sizeof(inotify_event) + e->len;
    }
  }
  if (reload) Load();
}

void XdsFileSource::Load() {
  auto fail = [&](const std::string& what) {
    status_.nacks++;
    status_.last_nack = what;
    RPX_LOG(kWarn, "xDS file %s: %s; keeping what was applied before", source_.path, what);
  };
  std::ifstream in(source_.path);
  if (!in) {
    fail(absl::StrCat("cannot read: ", strerror(errno)));
    return;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  envoy::service::discovery::v3::DiscoveryResponse response;
  std::vector<std::string> errors;
  if (!LoadYamlIntoMessage(ss.str(), source_.path, &response, &errors)) {
    fail(absl::StrJoin(errors, "; "));
    return;
  }
  XdsResourceMap resources;
  for (int i = 0; i < response.resources_size(); ++i) {
    const auto& any = response.resources(i);
    if (any.type_url() != type_url_) {
      fail(absl::StrCat("resources[", i, "]: a ", any.type_url(), " where ", type_url_,
                        " resources belong"));
      return;
    }
    std::string name, error;
    if (!ResourceName(any, &name, &error)) {
      fail(absl::StrCat("resources[", i, "]: ", error));
      return;
    }
    if (resources.count(name)) {
      fail(absl::StrCat("resources[", i, "]: a second resource named '", name, "'"));
      return;
    }
    resources[name] = XdsResource{response.version_info(), any};
  }
  std::string error = applier_.Apply(type_url_, resources, response.version_info());
  if (!error.empty()) {
    fail(error);
    return;
  }
  status_.updates++;
  status_.version = response.version_info();
  RPX_LOG(kInfo, "xDS file %s: applied %zu resource%s (version '%s')", source_.path,
          resources.size(), resources.size() == 1 ? "" : "s", response.version_info());
}

XdsSources::XdsSources(Dispatcher& main, const XdsConfig& config,
                       const envoy::config::core::v3::Node& node, XdsApplier& applier)
    : main_(main), config_(config), node_(node), applier_(applier) {
  if (config_.enabled) {
    XdsClientOptions o;
    o.target = config_.target;
    auto tls = config_.grpc_tls.find(config_.cluster);
    if (tls != config_.grpc_tls.end()) o.tls = tls->second;
    o.delta = config_.delta;
    o.node = node_;
    clients_["ads"] = std::make_unique<XdsClient>(main_, o, applier_);
  }
  for (const auto& [type, src] : config_.sources) {
    std::string error;
    bool ok = Ensure(type, src, &error);
    // The bootstrap was validated: its sources fit together.
    RPX_ASSERT(ok);
    (void)ok;
  }
}

XdsSources::~XdsSources() { Stop(); }

XdsClient* XdsSources::ClientFor(const std::string& type_url, const XdsSource& source,
                                 std::string* error) {
  if (source.kind == XdsSource::Kind::kAds) {
    auto it = clients_.find("ads");
    if (it == clients_.end()) {
      *error = "ads: {} needs dynamic_resources.ads_config in the bootstrap";
      return nullptr;
    }
    return it->second.get();
  }
  RPX_ASSERT(source.kind == XdsSource::Kind::kGrpc);
  auto target = config_.grpc_targets.find(source.cluster);
  if (target == config_.grpc_targets.end()) {
    *error = absl::StrCat("cluster '", source.cluster,
                          "' carries no xDS: name it in the bootstrap's ads_config or in its "
                          "lds_config / cds_config api_config_source");
    return nullptr;
  }
  XdsClientOptions o;
  o.target = target->second;
  auto tls = config_.grpc_tls.find(source.cluster);
  if (tls != config_.grpc_tls.end()) o.tls = tls->second;
  o.delta = source.delta;
  o.node = node_;
  o.service = type_url;
  auto& slot = clients_[type_url];
  RPX_ASSERT(!slot);
  slot = std::make_unique<XdsClient>(main_, o, applier_);
  return slot.get();
}

bool XdsSources::Ensure(const std::string& type_url, const XdsSource& requested,
                        std::string* error) {
  XdsSource source = requested;
  if (!source.set()) source.kind = XdsSource::Kind::kAds;
  auto have = sources_.find(type_url);
  if (have != sources_.end()) {
    if (have->second.Key() == source.Key()) return true;
    *error = absl::StrCat("takes ", type_url, " from ", source.Key(), ", but rpx takes it from ",
                          have->second.Key(), " (one source per type)");
    return false;
  }
  if (source.kind == XdsSource::Kind::kPath) {
    auto file = std::make_unique<XdsFileSource>(main_, type_url, source, applier_);
    if (started_ && !file->Start(error)) return false;
    files_[type_url] = std::move(file);
  } else {
    XdsClient* client = ClientFor(type_url, source, error);
    if (!client) return false;
    client_of_[type_url] = client;
    auto ads = clients_.find("ads");
    bool own = ads == clients_.end() || client != ads->second.get();
    if (started_ && own) client->Start(false, false);
    auto names = names_.find(type_url);
    if (names != names_.end()) client->SetNames(type_url, names->second);
  }
  sources_[type_url] = source;
  return true;
}

bool XdsSources::Start(std::string* error) {
  started_ = true;
  for (auto& [type, file] : files_) {
    if (!file->Start(error)) return false;
  }
  auto serves = [this](const char* type, const XdsClient* client) {
    auto it = client_of_.find(type);
    return it != client_of_.end() && it->second == client;
  };
  for (auto& [key, client] : clients_) {
    client->Start(serves(kListenerType, client.get()), serves(kClusterType, client.get()));
  }
  return true;
}

void XdsSources::Stop() {
  for (auto& [key, client] : clients_) client->Stop();
}

void XdsSources::SetNames(const std::string& type_url, const std::set<std::string>& names) {
  names_[type_url] = names;
  auto it = client_of_.find(type_url);
  if (it == client_of_.end()) {
    if (files_.count(type_url) || names.empty()) return;
    // Named before any resource said where from (SDS, or RDS/EDS in an ADS setup): ADS.
    std::string error;
    if (!Ensure(type_url, XdsSource(), &error)) {
      RPX_LOG(kWarn, "xDS: %s names wanted but %s", type_url, error);
    }
    return;
  }
  it->second->SetNames(type_url, names);
}

std::map<std::string, XdsClient::TypeStatus> XdsSources::status() const {
  std::map<std::string, XdsClient::TypeStatus> out;
  for (const auto& [type, client] : client_of_) {
    auto st = client->status().find(type);
    if (st != client->status().end()) out[type] = st->second;
  }
  for (const auto& [type, file] : files_) out[type] = file->status();
  return out;
}

bool XdsSources::connected() const {
  for (const auto& [key, client] : clients_) {
    if (!client->connected()) return false;
  }
  return true;
}

int64_t XdsSources::current_response_received_ns() const {
  int64_t latest = 0;
  for (const auto& [key, client] : clients_) {
    latest = std::max(latest, client->current_response_received_ns());
  }
  return latest;
}

std::string XdsSources::Describe() const {
  std::vector<std::string> parts;
  for (const auto& [type, src] : sources_) {
    parts.push_back(absl::StrCat(type.substr(type.rfind('.') + 1), " from ", src.Key()));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace rpx
