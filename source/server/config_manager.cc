#include "source/server/config_manager.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "envoy/admin/v3/config_dump.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "source/common/json.h"
#include "source/common/logger.h"
#include "source/config/supported_fields.h"
#include "source/network/listener.h"

namespace rpx {
namespace {

// Bytes the heap has handed out (glibc).
size_t HeapInUse() { return mallinfo2().uordblks; }

// Keeps `bytes` of heap resident and free for the next large update. Memory new to the process
// is slow on this VM (each 4 KiB page faults in, ~3 us, and is slow again on its first writes);
// memory the process freed and reuses is not. A route update builds its new table while the old
// one still serves, so the heap's high-water mark is reached by the first replacement of a large
// table: run it now, off the update path, by touching the memory once and freeing it into
// glibc's free lists (rpx keeps freed memory: M_TRIM_THRESHOLD in main.cc).
void WarmHeap(size_t bytes) {
  constexpr size_t kChunk = 64 * 1024;  // below the mmap threshold: from the heap itself
  std::vector<char*> chunks;
  chunks.reserve(bytes / kChunk + 1);
  for (size_t done = 0; done < bytes; done += kChunk) {
    char* p = static_cast<char*>(malloc(kChunk));
    if (!p) break;
    memset(p, 0, kChunk);
    chunks.push_back(p);
  }
  for (char* p : chunks) free(p);
}

// Updates that took less heap than this are quick whatever the heap does.
constexpr size_t kWarmHeapMinBytes = 4 << 20;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(m, &out, o).ok()) return "null";
  return out;
}

std::string Errors(const std::vector<std::string>& errors) { return absl::StrJoin(errors, "; "); }

}  // namespace

ConfigManager::ConfigManager(Dispatcher& main, std::vector<std::unique_ptr<Worker>>& workers,
                             const envoy::config::bootstrap::v3::Bootstrap& bootstrap,
                             ServerConfig& config, uint32_t concurrency, uint64_t drain_ms)
    : main_(main),
      workers_(workers),
      bootstrap_(bootstrap),
      config_(config),
      concurrency_(concurrency),
      drain_ms_(drain_ms) {
  start_unix_ms_ = WallMs();
  static_clusters_ = config_.clusters;
  for (const auto& secret : bootstrap_.static_resources().secrets()) {
    static_secrets_[secret.name()] = secret;
  }
  for (const auto& [name, c] : static_clusters_) {
    if (c.info->eds) static_eds_waiting_.insert(name);
  }
  health_checkers_.Sync(config_.clusters);
  // Static DNS clusters start resolving now, before any listener accepts; /ready waits for
  // each one's first round (bounded).
  for (const auto& dns : config_.dns_clusters) {
    const std::string name = dns.cluster;
    static_dns_waiting_.insert(name);
    auto r = StartDns(
        dns, [this, name](std::shared_ptr<const HostSet> hosts) { UpdateStaticHosts(name, hosts); },
        [this, name] { static_dns_waiting_.erase(name); });
    if (r) {
      static_dns_[name] = std::move(r);
    } else {
      static_dns_waiting_.erase(name);
    }
  }
  if (!static_dns_waiting_.empty()) {
    static_dns_timer_ = main_.CreateTimer([this] {
      for (const auto& name : static_dns_waiting_) {
        RPX_LOG(kWarn, "cluster '%s': no DNS answer within %llu ms; ready without it", name,
                static_cast<unsigned long long>(kStaticDnsWaitMs));
      }
      static_dns_waiting_.clear();
    });
    static_dns_timer_->Enable(kStaticDnsWaitMs);
  }
  if (config_.xds.dynamic()) {
    init_timer_ = main_.CreateTimer([this] {
      if (!initialized()) RPX_LOG(kWarn, "xDS: initial fetch timed out; serving what has arrived");
      init_timed_out_ = true;
    });
    init_timer_->Enable(config_.xds.initial_fetch_timeout_ms);
  }
}

ConfigManager::~ConfigManager() {
  for (auto& [name, l] : listeners_) {
    for (int fd : l.pending_fds) close(fd);
  }
}

BuildOptions ConfigManager::Options(const std::string& source) const {
  BuildOptions o;
  o.stats_slots = concurrency_;
  o.log_files = log_files_;
  o.source = source;
  o.secrets = static_secrets_;
  for (const auto& [name, secret] : secrets_) o.sds_secrets[name] = secret.proto;
  return o;
}

std::unique_ptr<DnsRefresher> ConfigManager::StartDns(
    const DnsCluster& dns, std::function<void(std::shared_ptr<const HostSet>)> publish,
    std::function<void()> first_round_done) {
  auto make = [this](const DnsResolverConfig& rc) -> std::shared_ptr<DnsResolver> {
    DnsResolverOptions o;
    o.servers = rc.resolvers;
    o.use_tcp = rc.use_tcp;
    o.no_search = rc.no_search;
    auto r = CaresDnsResolver::Create(main_, o);
    if (!r.ok()) {
      RPX_LOG(kError, "DNS resolver: %s", r.status().message());
      return nullptr;
    }
    return std::shared_ptr<DnsResolver>(std::move(*r));
  };
  std::shared_ptr<DnsResolver> resolver;
  if (dns.resolver) {
    resolver = make(*dns.resolver);
  } else {
    if (!default_resolver_) {
      default_resolver_ = make(config_.dns_resolver.value_or(DnsResolverConfig{}));
    }
    resolver = default_resolver_;
  }
  if (!resolver) {
    RPX_LOG(kError, "cluster '%s': no DNS resolver; it gets no hosts", dns.cluster);
    return nullptr;
  }
  auto r = std::make_unique<DnsRefresher>(main_, std::move(resolver), dns, std::move(publish),
                                          std::move(first_round_done));
  r->Start();
  return r;
}

void ConfigManager::DnsStats(std::map<std::string, int64_t>* out) const {
  auto add = [out](const std::string& name, const DnsRefresher& r) {
    std::string p = absl::StrCat("cluster.", name, ".");
    const DnsRefresher::Stats& s = r.stats();
    (*out)[p + "update_attempt"] = static_cast<int64_t>(s.update_attempt);
    (*out)[p + "update_success"] = static_cast<int64_t>(s.update_success);
    (*out)[p + "update_failure"] = static_cast<int64_t>(s.update_failure);
    (*out)[p + "update_no_rebuild"] = static_cast<int64_t>(s.update_no_rebuild);
  };
  for (const auto& [name, r] : static_dns_) add(name, *r);
  for (const auto& [name, d] : clusters_) {
    if (d.dns) add(name, *d.dns);
  }
}

bool ConfigManager::OpenSockets(const ListenerConfig& l, std::vector<int>* fds, std::string* error,
                                bool replacing) {
  if (!l.bind_to_port) {
    fds->clear();  // a virtual listener: connections come to it from use_original_dst ones
    return true;
  }
  auto r = OpenWorkerSockets(l.address, l.reuse_port, concurrency_, l.socket_options, replacing,
                             inherited_);
  if (!r.ok()) {
    *error = std::string(r.status().message());
    return false;
  }
  *fds = *r;
  return true;
}

bool ConfigManager::StartStatic(std::string* error) {
  std::vector<std::pair<std::shared_ptr<const ListenerConfig>, std::vector<int>>> opened;
  for (const auto& l : config_.listeners) {
    std::vector<int> fds;
    std::string err;
    if (!OpenSockets(*l, &fds, &err)) {
      *error = absl::StrCat("listener '", l->name, "': ", err);
      for (auto& [c, f] : opened) {
        for (int fd : f) close(fd);
      }
      return false;
    }
    opened.emplace_back(l, std::move(fds));
  }
  for (auto& [l, fds] : opened) {
    bool uses_sds = false;
    for (const auto& c : l->chains) uses_sds |= !c->sds_secrets.empty();
    if (l->uses_rds() || uses_sds) {
      // A static listener with RDS or SDS warms (and takes updates) like a dynamic one.
      DynListener& d = listeners_[l->name];
      d.is_static = true;
      d.pending = l;
      d.pending_fds = std::move(fds);
      std::string name = l->name;
      d.warm_timer = main_.CreateTimer([this, name] { TryActivate(name, true); });
      d.warm_timer->Enable(InitialFetchTimeoutMs(*l));
      continue;
    }
    static_listeners_.push_back(l);
    for (size_t w = 0; w < workers_.size(); ++w) {
      workers_[w]->AddListener(l, w < fds.size() ? fds[w] : -1);
    }
  }
  RebuildListenerList();
  RefreshRdsNames();
  return true;
}

void ConfigManager::AttachXds(XdsSources* xds) {
  xds_ = xds;
  RefreshSdsNames();
  RefreshEdsNames();
  RefreshRdsNames();
}

std::string ConfigManager::Apply(const std::string& type_url, const XdsResourceMap& resources,
                                 const std::string& version) {
  if (type_url == kClusterType) return ApplyClusters(resources, version);
  if (type_url == kEndpointType) return ApplyEndpoints(resources, version);
  if (type_url == kListenerType) return ApplyListeners(resources, version);
  if (type_url == kRouteType) return ApplyRoutes(resources, version);
  if (type_url == kSecretType) return ApplySecrets(resources, version);
  return absl::StrCat("unsupported type ", type_url);
}

std::string ConfigManager::ApplyClusters(const XdsResourceMap& resources,
                                         const std::string& version) {
  std::vector<std::string> errors;
  std::map<std::string, ClusterEntry> built;    // new or changed clusters
  std::map<std::string, DnsCluster> built_dns;  // those of them that resolve names
  uint64_t ignored = 0;
  for (const auto& [name, res] : resources) {
    std::string path = absl::StrCat("Cluster '", name, "'");
    auto old = clusters_.find(name);
    if (old != clusters_.end() && old->second.bytes == res.resource.value()) continue;
    if (static_clusters_.contains(name)) {
      errors.push_back(absl::StrCat(path, ": a static cluster has this name"));
      continue;
    }
    envoy::config::cluster::v3::Cluster c;
    if (!res.resource.UnpackTo(&c)) {
      errors.push_back(absl::StrCat(path, ": cannot decode"));
      continue;
    }
    size_t before = errors.size();
    CheckDynamicFields(c, "", path, &errors, &ignored);
    if (errors.size() != before) continue;
    ClusterEntry e;
    std::optional<DnsCluster> dns;
    std::vector<std::string> build_errors;
    if (!BuildCluster(c, path, Options(""), &e, &dns, &build_errors)) {
      for (auto& m : build_errors) errors.push_back(m.substr(m.find(path)));
      continue;
    }
    if (c.type() == envoy::config::cluster::v3::Cluster::EDS && xds_) {
      // Its endpoints come from EDS: that source must be (or become) EDS's one source.
      XdsSource src;
      std::vector<std::string> parse_errors;  // reported by BuildCluster
      ParseConfigSource(c.eds_cluster_config().eds_config(), "", &src, &parse_errors);
      std::string error;
      if (!xds_->Ensure(kEndpointType, src, &error)) {
        errors.push_back(absl::StrCat(path, ".eds_cluster_config.eds_config: ", error));
        continue;
      }
    }
    if (dns) built_dns[name] = std::move(*dns);  // resolved once accepted, by its refresher
    built[name] = std::move(e);
  }
  if (!errors.empty()) return Errors(errors);
  ignored_fields_ += ignored;

  std::map<std::string, DynCluster> next;
  for (const auto& [name, res] : resources) {
    auto old = clusters_.find(name);
    auto b = built.find(name);
    if (b == built.end()) {
      next[name] = std::move(old->second);  // unchanged
      continue;
    }
    DynCluster d;
    d.bytes = res.resource.value();
    res.resource.UnpackTo(&d.proto);
    d.version = version;
    d.updated_ms = WallMs();
    d.entry = std::move(b->second);
    if (old != clusters_.end() && old->second.has_serving) {
      // Until the new form is warm, the old one keeps serving.
      d.serving = old->second.serving;
      d.has_serving = true;
      d.active_form = old->second.active_form;
    }
    if (d.entry.info->eds) {
      auto ep = endpoints_.find(d.entry.info->eds_service_name);
      if (ep != endpoints_.end()) {
        d.entry.hosts = ep->second.hosts;
        d.endpoints_arrived = true;
      }
    }
    auto bd = built_dns.find(name);
    if (bd != built_dns.end()) {
      // Warms until its first round of DNS finished; the form it replaces (if any) serves until
      // then. Its answers land in entry.hosts (and serving, once warm). Replacing or removing
      // the cluster destroys this refresher, which cancels its queries.
      d.dns = StartDns(
          bd->second,
          [this, name](std::shared_ptr<const HostSet> hosts) {
            auto it = clusters_.find(name);
            if (it == clusters_.end()) return;
            it->second.entry.hosts = std::move(hosts);
            if (!it->second.warm) return;
            UpdateWarmth(it->second);
            PublishClusters();
          },
          [this, name] {
            auto it = clusters_.find(name);
            if (it == clusters_.end()) return;
            it->second.dns_resolved = true;
            UpdateWarmth(it->second);
            PublishClusters();
          });
      if (!d.dns) d.dns_resolved = true;  // logged; serves with no hosts rather than warming
    }
    UpdateWarmth(d);
    if (!d.warm) {
      d.warm_timer = main_.CreateTimer([this, name] {
        auto it = clusters_.find(name);
        if (it == clusters_.end() || it->second.warm) return;
        RPX_LOG(kWarn, "cluster '%s': %s within initial_fetch_timeout", name,
                it->second.dns && !it->second.dns_resolved                    ? "no DNS answer"
                : it->second.endpoints_arrived || !it->second.entry.info->eds ? "no TLS secrets"
                                                                              : "no endpoints");
        it->second.warm = true;
        it->second.serving = it->second.entry;
        it->second.has_serving = true;
        it->second.active_form =
            ActiveForm{it->second.bytes, it->second.version, it->second.updated_ms};
        PublishClusters();
      });
      // An EDS cluster waits as long as the bootstrap says; one waiting only for secrets as
      // long as their sds_config says, if it says.
      uint64_t wait = config_.xds.initial_fetch_timeout_ms;
      if (d.endpoints_arrived || !d.entry.info->eds) {
        if (d.entry.info->sds_fetch_timeout_ms) wait = d.entry.info->sds_fetch_timeout_ms;
      }
      d.warm_timer->Enable(wait);
    }
    next[name] = std::move(d);
  }
  clusters_ = std::move(next);
  cds_applied_ = true;
  RefreshSdsNames();
  RefreshEdsNames();
  PublishClusters();
  return "";
}

std::string ConfigManager::ApplyEndpoints(const XdsResourceMap& resources,
                                          const std::string& version) {
  std::vector<std::string> errors;
  std::map<std::string, Endpoints> next;
  uint64_t ignored = 0;
  for (const auto& [name, res] : resources) {
    auto old = endpoints_.find(name);
    if (old != endpoints_.end() && old->second.bytes == res.resource.value()) {
      next[name] = old->second;
      continue;
    }
    std::string path = absl::StrCat("ClusterLoadAssignment '", name, "'");
    Endpoints e;
    if (!res.resource.UnpackTo(&e.proto)) {
      errors.push_back(absl::StrCat(path, ": cannot decode"));
      continue;
    }
    size_t before = errors.size();
    CheckDynamicFields(e.proto, "", path, &errors, &ignored);
    if (errors.size() != before) continue;
    std::vector<std::string> build_errors;
    e.hosts = BuildHostSet(e.proto, path, concurrency_, &build_errors);
    if (!e.hosts) {
      for (auto& m : build_errors) errors.push_back(m.substr(m.find(path)));
      continue;
    }
    CarryHostStats(old != endpoints_.end() ? old->second.hosts.get() : nullptr, *e.hosts);
    e.bytes = res.resource.value();
    e.version = version;
    e.updated_ms = WallMs();
    next[name] = std::move(e);
  }
  if (!errors.empty()) return Errors(errors);
  ignored_fields_ += ignored;
  endpoints_ = std::move(next);
  for (auto& [name, d] : clusters_) {
    if (!d.entry.info->eds) continue;
    auto ep = endpoints_.find(d.entry.info->eds_service_name);
    std::shared_ptr<const HostSet> hosts =
        ep != endpoints_.end() ? ep->second.hosts : std::make_shared<const HostSet>();
    if (ep == endpoints_.end() && !d.warm) continue;  // still waiting for its first assignment
    d.entry.hosts = hosts;  // same ClusterInfo: workers keep pools of hosts that stay
    d.endpoints_arrived = true;
    UpdateWarmth(d);
  }
  for (auto& [name, c] : static_clusters_) {
    if (!c.info->eds) continue;
    auto ep = endpoints_.find(c.info->eds_service_name);
    if (ep != endpoints_.end()) {
      c.hosts = ep->second.hosts;  // same ClusterInfo: workers keep pools of hosts that stay
      static_eds_waiting_.erase(name);
    } else if (!static_eds_waiting_.count(name)) {
      c.hosts = std::make_shared<const HostSet>();  // removed (delta)
    }
  }
  PublishClusters();
  return "";
}

bool ConfigManager::ClusterReady(const DynCluster& d) {
  const ClusterInfo& info = *d.entry.info;
  return (!info.eds || d.endpoints_arrived) && !info.tls_pending() && (!d.dns || d.dns_resolved);
}

void ConfigManager::UpdateWarmth(DynCluster& d) {
  if (!d.warm) {
    if (!ClusterReady(d)) return;
    d.warm = true;
    if (d.warm_timer) d.warm_timer->Disable();
  }
  d.serving = d.entry;
  d.has_serving = true;
  d.active_form = ActiveForm{d.bytes, d.version, d.updated_ms};
}

std::string ConfigManager::ApplySecrets(const XdsResourceMap& resources,
                                        const std::string& version) {
  std::vector<std::string> errors;
  std::map<std::string, SdsSecret> next;
  std::set<std::string> changed;
  uint64_t ignored = 0;
  for (const auto& [name, res] : resources) {
    auto old = secrets_.find(name);
    if (old != secrets_.end() && old->second.bytes == res.resource.value()) {
      next[name] = old->second;
      continue;
    }
    std::string path = absl::StrCat("Secret '", name, "'");
    SdsSecret sec;
    if (!res.resource.UnpackTo(&sec.proto)) {
      errors.push_back(absl::StrCat(path, ": cannot decode"));
      continue;
    }
    size_t before = errors.size();
    CheckDynamicFields(sec.proto, "", path, &errors, &ignored);
    if (errors.size() != before) continue;
    std::string why = CheckSecret(sec.proto, path);
    if (!why.empty()) {
      errors.push_back(why);
      continue;
    }
    sec.bytes = res.resource.value();
    sec.version = version;
    sec.updated_ms = WallMs();
    next[name] = std::move(sec);
    changed.insert(name);
  }
  if (!errors.empty()) return Errors(errors);
  ignored_fields_ += ignored;
  for (const auto& [name, s] : secrets_) {
    if (!next.count(name)) changed.insert(name);  // removed (delta)
  }
  secrets_ = std::move(next);
  if (!changed.empty()) ApplySecretChanges(changed);
  return "";
}

std::shared_ptr<const ListenerConfig> ConfigManager::WithTlsContexts(
    const ListenerConfig& l, const std::set<std::string>* changed,
    std::vector<std::string>* missing) const {
  std::shared_ptr<ListenerConfig> copy;
  BuildOptions options = Options("");
  for (size_t i = 0; i < l.chains.size(); ++i) {
    const FilterChainConfig& c = *l.chains[i];
    if (!c.tls_required || c.sds_secrets.empty()) continue;
    bool uses_changed = false;
    for (const auto& n : c.sds_secrets) uses_changed |= changed && changed->count(n) > 0;
    if (c.tls && !uses_changed) continue;
    bool secrets_missing = false;
    std::vector<std::string> errors;
    auto rebuilt = RebuildChainTls(c, options, &secrets_missing, &errors);
    if (secrets_missing) {
      for (const auto& n : c.sds_secrets) {
        if (!secrets_.count(n)) missing->push_back(absl::StrCat("'", n, "'"));
      }
    }
    for (const auto& e : errors) {
      // Each secret was checked on arrival, so this is rare: the context in use stays.
      RPX_LOG(kError, "listener '%s': %s; the previous TLS context stays", l.name, e);
    }
    if (!rebuilt) continue;
    if (!copy) copy = std::make_shared<ListenerConfig>(l);
    copy->chains[i] = std::move(rebuilt);
  }
  if (copy) return copy;
  return std::make_shared<ListenerConfig>(l);
}

void ConfigManager::ApplySecretChanges(const std::set<std::string>& changed) {
  // Listeners that use secrets live in listeners_ (static ones too: see StartStatic).
  for (auto& [name, d] : listeners_) {
    if (d.pending) {
      TryActivate(name, false);
      continue;
    }
    if (!d.active) continue;
    std::vector<std::string> missing;
    auto cfg = WithTlsContexts(*d.active, &changed, &missing);
    bool differs = false;
    for (size_t i = 0; i < cfg->chains.size(); ++i) {
      differs |= cfg->chains[i] != d.active->chains[i];
    }
    if (!differs) continue;
    RPX_LOG(kInfo, "listener '%s': TLS context updated from SDS", name);
    for (auto& w : workers_) w->UpdateListener(cfg);
    d.active = cfg;
  }
  // Clusters: their ClusterInfo is built again (new pools; the old ones drain), hosts kept.
  auto uses = [&](const ClusterInfo& info) {
    if (info.sds_secrets.empty()) return false;
    if (info.tls_pending()) return true;
    for (const auto& n : info.sds_secrets) {
      if (changed.count(n)) return true;
    }
    return false;
  };
  BuildOptions options = Options("");
  auto rebuild = [&](const envoy::config::cluster::v3::Cluster& proto, ClusterEntry* entry) {
    ClusterEntry e;
    std::optional<DnsCluster> dns;
    std::vector<std::string> errors;
    if (!BuildCluster(proto, absl::StrCat("Cluster '", proto.name(), "'"), options, &e, &dns,
                      &errors)) {
      for (const auto& m : errors) RPX_LOG(kError, "%s; the previous TLS context stays", m);
      return;
    }
    e.hosts = entry->hosts;
    *entry = std::move(e);
    RPX_LOG(kInfo, "cluster '%s': TLS context %s from SDS", proto.name(),
            entry->info->tls_pending() ? "still waiting for secrets" : "updated");
  };
  for (auto& [name, d] : clusters_) {
    if (!uses(*d.entry.info)) continue;
    rebuild(d.proto, &d.entry);
    UpdateWarmth(d);
  }
  for (const auto& proto : bootstrap_.static_resources().clusters()) {
    auto it = static_clusters_.find(proto.name());
    if (it == static_clusters_.end() || !uses(*it->second.info)) continue;
    rebuild(proto, &it->second);
  }
  PublishClusters();
  RebuildListenerList();
}

void ConfigManager::RefreshSdsNames() {
  if (!xds_) return;
  std::set<std::string> names;
  for (const auto& [name, d] : listeners_) {
    for (const auto* l : {d.pending.get(), d.active.get()}) {
      if (!l) continue;
      for (const auto& c : l->chains) names.insert(c->sds_secrets.begin(), c->sds_secrets.end());
    }
  }
  for (const auto& [name, c] : static_clusters_) {
    names.insert(c.info->sds_secrets.begin(), c.info->sds_secrets.end());
  }
  for (const auto& [name, d] : clusters_) {
    names.insert(d.entry.info->sds_secrets.begin(), d.entry.info->sds_secrets.end());
  }
  xds_->SetNames(kSecretType, names);
  for (auto it = secrets_.begin(); it != secrets_.end();) {
    it = names.count(it->first) ? std::next(it) : secrets_.erase(it);
  }
}

void ConfigManager::PublishClusters() {
  ClusterMap m = static_clusters_;
  for (const auto& [name, d] : clusters_) {
    if (d.has_serving) m[name] = d.serving;
  }
  config_.clusters = m;
  health_checkers_.Sync(m);  // hosts carry their verdicts before any worker sees them
  auto snapshot = std::make_shared<const ClusterMap>(std::move(m));
  for (auto& w : workers_) w->UpdateClusters(snapshot);
}

void ConfigManager::UpdateStaticHosts(const std::string& cluster,
                                      std::shared_ptr<const HostSet> hosts) {
  auto it = static_clusters_.find(cluster);
  if (it == static_clusters_.end()) return;
  const HostSet& old = *it->second.hosts;
  bool changed = old.size() != hosts->size();
  for (size_t i = 0; !changed && i < old.size(); ++i) {
    changed = !(old[i]->address == (*hosts)[i]->address);
  }
  if (!changed) return;
  CarryHostStats(&old, *hosts);
  RPX_LOG(kInfo, "cluster '%s': %zu hosts after DNS refresh", cluster, hosts->size());
  it->second.hosts = std::move(hosts);
  PublishClusters();
}

void ConfigManager::RefreshEdsNames() {
  if (!xds_) return;
  std::set<std::string> names;
  for (const auto& [name, c] : static_clusters_) {
    if (c.info->eds) names.insert(c.info->eds_service_name);
  }
  for (const auto& [name, d] : clusters_) {
    if (d.entry.info->eds) names.insert(d.entry.info->eds_service_name);
  }
  xds_->SetNames(kEndpointType, names);
  // Assignments nobody asks for any more are dropped.
  for (auto it = endpoints_.begin(); it != endpoints_.end();) {
    it = names.count(it->first) ? std::next(it) : endpoints_.erase(it);
  }
}

std::string ConfigManager::ApplyListeners(const XdsResourceMap& resources,
                                          const std::string& version) {
  std::vector<std::string> errors;
  struct Built {
    std::shared_ptr<const ListenerConfig> config;
    std::vector<int> fds;  // new sockets, when the address or the socket options are new
    bool reuse_pending_fds = false;
  };
  std::map<std::string, Built> built;
  uint64_t ignored = 0;
  std::map<std::string, std::string> addresses;  // address -> listener, within this update
  for (const auto& l : static_listeners_) addresses[l->address.ToString()] = l->name;
  auto close_built = [&] {
    for (auto& [n, b] : built) {
      for (int fd : b.fds) close(fd);
    }
  };
  for (const auto& [name, res] : resources) {
    std::string path = absl::StrCat("Listener '", name, "'");
    auto old = listeners_.find(name);
    bool is_static_name = old != listeners_.end() && old->second.is_static;
    for (const auto& l : static_listeners_) is_static_name |= l->name == name;
    if (is_static_name) {
      errors.push_back(absl::StrCat(path, ": a static listener has this name"));
      continue;
    }
    if (old != listeners_.end() && old->second.bytes == res.resource.value()) {
      const auto& cur = old->second.pending ? old->second.pending : old->second.active;
      if (cur) addresses[cur->address.ToString()] = name;
      continue;
    }
    envoy::config::listener::v3::Listener l;
    if (!res.resource.UnpackTo(&l)) {
      errors.push_back(absl::StrCat(path, ": cannot decode"));
      continue;
    }
    size_t before = errors.size();
    CheckDynamicFields(l, "", path, &errors, &ignored);
    if (errors.size() != before) continue;
    std::vector<std::string> build_errors;
    auto cfg = BuildListener(l, path, Options(""), &build_errors);
    if (!cfg) {
      for (auto& m : build_errors) errors.push_back(m.substr(m.find(path)));
      continue;
    }
    bool sources_ok = true;
    for (const auto& chain : cfg->chains) {
      std::string error;
      if (!chain->rds_name.empty() && xds_ &&
          !xds_->Ensure(kRouteType, chain->rds_source, &error)) {
        errors.push_back(absl::StrCat(chain->route_config_path, ".rds.config_source: ", error));
        sources_ok = false;
      }
    }
    if (!sources_ok) continue;
    std::string addr = cfg->address.ToString();
    auto [pos, fresh] = addresses.emplace(addr, name);
    if (!fresh && cfg->address.port() != 0) {
      errors.push_back(absl::StrCat(path, ": address ", addr, " is already used by listener '",
                                    pos->second, "'"));
      continue;
    }
    const DynListener* o = old != listeners_.end() ? &old->second : nullptr;
    if (o) {
      // The connections open under the previous version keep counting against each chain's
      // cap (chains are matched by name).
      const auto& prev = o->pending ? o->pending : o->active;
      if (prev) cfg = CarryConnectionLimits(*prev, std::move(cfg));
    }
    Built b;
    b.config = cfg;
    // The sockets stay when the address and their options do; new options need new sockets.
    auto same_sockets = [&](const std::shared_ptr<const ListenerConfig>& prev) {
      return prev && prev->address == cfg->address && prev->socket_options == cfg->socket_options &&
             prev->bind_to_port == cfg->bind_to_port;
    };
    if (o && !o->pending_fds.empty() && same_sockets(o->pending)) {
      b.reuse_pending_fds = true;
    } else if (!(o && same_sockets(o->active))) {
      // Same address, other options: the new sockets join the old ones' SO_REUSEPORT group until
      // the old listener closes. Without SO_REUSEPORT the port cannot be held twice.
      const ListenerConfig* holder = nullptr;  // ours already on this address, if any
      if (o && o->active && o->active->address == cfg->address) {
        holder = o->active.get();
      } else if (o && o->pending && !o->pending_fds.empty() &&
                 o->pending->address == cfg->address) {
        holder = o->pending.get();
      }
      bool replacing = holder != nullptr;
      if (replacing && !(holder->reuse_port && cfg->reuse_port)) {
        errors.push_back(absl::StrCat(
            path, ": socket_options cannot change on ", addr,
            " with enable_reuse_port false (the new sockets would need the port while the old "
            "ones hold it); change the address too, or remove the listener first"));
        continue;
      }
      std::string err;
      if (!OpenSockets(*cfg, &b.fds, &err, replacing)) {
        errors.push_back(absl::StrCat(path, ": ", err));
        continue;
      }
    }
    built[name] = std::move(b);
  }
  if (!errors.empty()) {
    close_built();
    return Errors(errors);
  }
  ignored_fields_ += ignored;

  std::map<std::string, DynListener> next;
  // Listeners that disappear stop accepting and drain (static ones stay).
  for (auto& [name, d] : listeners_) {
    if (resources.count(name) || d.is_static) continue;
    if (d.active) {
      RPX_LOG(kInfo, "listener '%s' removed: draining", name);
      for (auto& w : workers_) w->RemoveListener(name, drain_ms_);
    }
    for (int fd : d.pending_fds) close(fd);
    d.pending_fds.clear();
  }
  for (auto& [name, d] : listeners_) {
    if (d.is_static) next[name] = std::move(d);
  }
  for (const auto& [name, res] : resources) {
    auto old = listeners_.find(name);
    auto b = built.find(name);
    if (b == built.end()) {
      next[name] = std::move(old->second);
      continue;
    }
    DynListener d;
    d.bytes = res.resource.value();
    res.resource.UnpackTo(&d.proto);
    d.version = version;
    d.updated_ms = WallMs();
    if (old != listeners_.end()) {
      d.active = old->second.active;  // keeps serving until the new form is ready
      d.active_form = old->second.active_form;
      if (b->second.reuse_pending_fds) {
        d.pending_fds = std::move(old->second.pending_fds);
      } else {
        for (int fd : old->second.pending_fds) close(fd);
      }
      old->second.pending_fds.clear();
    }
    d.pending = b->second.config;
    if (!b->second.reuse_pending_fds) d.pending_fds = std::move(b->second.fds);
    next[name] = std::move(d);
  }
  listeners_ = std::move(next);
  lds_applied_ = true;
  for (auto& [name, d] : listeners_) {
    if (!d.pending) continue;
    if (!d.warm_timer) {
      std::string n = name;
      d.warm_timer = main_.CreateTimer([this, n] { TryActivate(n, true); });
    }
    bool missing = d.pending->tls_pending();
    for (const auto& c : d.pending->chains) {
      missing |= !c->rds_name.empty() && !routes_.count(c->rds_name);
    }
    if (missing) d.warm_timer->Enable(InitialFetchTimeoutMs(*d.pending));
    TryActivate(name, false);
  }
  RefreshSdsNames();
  RefreshRdsNames();
  RebuildListenerList();
  return "";
}

void ConfigManager::TryActivate(const std::string& name, bool timed_out) {
  auto it = listeners_.find(name);
  if (it == listeners_.end() || !it->second.pending) return;
  DynListener& d = it->second;
  std::vector<std::string> missing;
  auto cfg = WithRouteTables(*d.pending, /*empty_if_missing=*/timed_out, &missing);
  std::vector<std::string> missing_secrets;
  cfg = WithTlsContexts(*cfg, nullptr, &missing_secrets);
  if (!missing.empty() || !missing_secrets.empty()) {
    if (!timed_out) return;  // warming: waits for its RouteConfigurations and secrets
    if (!missing.empty()) {
      RPX_LOG(kWarn, "listener '%s': route config %s did not arrive in time; serving 404s", name,
              absl::StrJoin(missing, ", "));
    }
    if (!missing_secrets.empty()) {
      RPX_LOG(kWarn,
              "listener '%s': secret %s did not arrive in time; its TLS chains refuse "
              "connections until it does",
              name, absl::StrJoin(missing_secrets, ", "));
    }
  }
  for (int fd : d.pending_fds) {
    auto st = StartListening(fd, cfg->address, kListenBacklog, cfg->socket_options);
    if (!st.ok()) {
      // Checked on a scratch socket when the version was accepted, so this is rare; the
      // version in service stays.
      RPX_LOG(kError, "listener '%s': %s; the previous version keeps serving", name, st.message());
      for (int f : d.pending_fds) close(f);
      d.pending_fds.clear();
      d.pending = nullptr;
      if (d.warm_timer) d.warm_timer->Disable();
      RebuildListenerList();
      return;
    }
  }
  ActivateListener(d, cfg, std::move(d.pending_fds));
  RebuildListenerList();
}

void ConfigManager::ActivateListener(DynListener& d, std::shared_ptr<const ListenerConfig> config,
                                     std::vector<int> fds) {
  if (fds.empty() && d.active && d.active->address == config->address &&
      d.active->bind_to_port == config->bind_to_port) {
    for (auto& w : workers_) w->UpdateListener(config);
  } else {
    for (size_t w = 0; w < workers_.size(); ++w) {
      workers_[w]->AddListener(config, w < fds.size() ? fds[w] : -1);
    }
    if (!fds.empty())
      RPX_LOG(kInfo, "listener '%s' on %s", config->name, config->address.ToString());
  }
  d.active = config;
  d.active_form = ActiveForm{d.bytes, d.version, d.updated_ms};
  d.pending = nullptr;
  d.pending_fds.clear();
  if (d.warm_timer) d.warm_timer->Disable();
}

std::string ConfigManager::ApplyRoutes(const XdsResourceMap& resources,
                                       const std::string& version) {
  size_t heap_before = HeapInUse();
  std::vector<std::string> errors;
  std::map<std::string, Routes> next;
  uint64_t ignored = 0;
  for (const auto& [name, res] : resources) {
    auto old = routes_.find(name);
    if (old != routes_.end() && old->second.bytes == res.resource.value()) {
      next[name] = old->second;
      continue;
    }
    std::string path = absl::StrCat("RouteConfiguration '", name, "'");
    Routes r;
    int64_t t0 = NowNs();
    // Decoded into one reused message: its sub-objects and strings are recycled, so a large
    // update allocates (almost) only its new table. /config_dump decodes `bytes` again.
    envoy::config::route::v3::RouteConfiguration* proto = &route_scratch_;
    if (!res.resource.UnpackTo(proto)) {
      errors.push_back(absl::StrCat(path, ": cannot decode"));
      continue;
    }
    int64_t t1 = NowNs();
    size_t before = errors.size();
    CheckDynamicFields(*proto, "", path, &errors, &ignored);
    if (errors.size() != before) continue;
    int64_t t2 = NowNs();
    auto table = RouteTable::Create(*proto, path);
    RPX_LOG(kDebug, "%s: decoded in %d us, checked in %d us, built in %d us", path,
            (t1 - t0) / 1000, (t2 - t1) / 1000, (NowNs() - t2) / 1000);
    if (!table.ok()) {
      errors.push_back(std::string(table.status().message()));
      continue;
    }
    r.table = *table;
    r.bytes = res.resource.value();
    r.version = version;
    r.updated_ms = WallMs();
    next[name] = std::move(r);
  }
  if (!errors.empty()) return Errors(errors);
  ignored_fields_ += ignored;
  size_t heap_after = HeapInUse();  // mallinfo2 walks every arena: read it once
  size_t heap_grew = heap_after > heap_before ? heap_after - heap_before : 0;

  // What the old map alone holds (tables, decoded protos) is freed only once every worker runs
  // the new tables: freeing 10,000 virtual hosts takes milliseconds the update should not wait.
  for (auto& [name, r] : routes_) {
    if (r.table) retired_tables_.push_back(r.table);
  }
  routes_ = std::move(next);
  // Measure how long until every worker runs the new tables (reported in /stats).
  int64_t received_ns = xds_ ? xds_->current_response_received_ns() : 0;
  auto pending = std::make_shared<std::atomic<int>>(0);
  propagation_pending_ = pending;
  std::function<void()> applied;
  if (received_ns) {
    Dispatcher* main = &main_;
    applied = [this, main, pending, received_ns, heap_grew] {
      if (pending->fetch_sub(1) != 1) return;
      int64_t done_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
      main->Post([this, pending, received_ns, done_ns, heap_grew] {
        if (propagation_pending_ != pending) return;  // a newer update superseded this one
        last_route_propagation_us_ = (done_ns - received_ns) / 1000;
        ++route_updates_;
        retired_tables_.clear();  // every worker runs the new tables now
        // Room for the next update of this size, in resident pages.
        if (heap_grew >= kWarmHeapMinBytes) WarmHeap(heap_grew);
      });
    };
  }
  for (auto& [name, d] : listeners_) {
    if (d.pending) {
      TryActivate(name, false);
      continue;
    }
    if (!d.active || !d.active->uses_rds()) continue;
    std::vector<std::string> missing;
    auto cfg = WithRouteTables(*d.active, /*empty_if_missing=*/false, &missing);
    bool changed = false;
    for (size_t i = 0; i < cfg->chains.size(); ++i) {
      changed |= cfg->chains[i]->routes != d.active->chains[i]->routes;
    }
    if (!changed) continue;
    // Immutable tables swapped on every worker; requests in flight keep the old ones.
    pending->fetch_add(static_cast<int>(workers_.size()));
    for (auto& w : workers_) w->UpdateListener(cfg, applied);
    d.active = cfg;
  }
  if (!applied || pending->load() == 0) retired_tables_.clear();
  RebuildListenerList();
  return "";
}

std::shared_ptr<const ListenerConfig> ConfigManager::WithRouteTables(
    const ListenerConfig& l, bool empty_if_missing, std::vector<std::string>* missing) const {
  auto cfg = std::make_shared<ListenerConfig>(l);
  for (auto& chain : cfg->chains) {
    if (chain->rds_name.empty()) continue;
    auto r = routes_.find(chain->rds_name);
    std::shared_ptr<const RouteTable> table;
    if (r != routes_.end()) {
      table = r->second.table;
    } else {
      missing->push_back(absl::StrCat("'", chain->rds_name, "'"));
      if (!empty_if_missing) continue;
      envoy::config::route::v3::RouteConfiguration empty;
      empty.set_name(chain->rds_name);
      table = *RouteTable::Create(empty, "route_config");
    }
    if (table == chain->routes) continue;
    auto c = std::make_shared<FilterChainConfig>(*chain);
    c->routes = std::move(table);
    chain = std::move(c);
  }
  return cfg;
}

std::shared_ptr<const ListenerConfig> ConfigManager::CarryConnectionLimits(
    const ListenerConfig& prev, std::shared_ptr<const ListenerConfig> next) {
  std::shared_ptr<ListenerConfig> copy;
  for (size_t i = 0; i < next->chains.size(); ++i) {
    const auto& chain = next->chains[i];
    if (!chain->connection_limit) continue;
    for (const auto& p : prev.chains) {
      if (p->name != chain->name || !p->connection_limit) continue;
      if (!copy) copy = std::make_shared<ListenerConfig>(*next);
      auto limit = std::make_shared<ConnectionLimit>(*chain->connection_limit);
      limit->state = p->connection_limit->state;
      auto c = std::make_shared<FilterChainConfig>(*chain);
      c->connection_limit = std::move(limit);
      copy->chains[i] = std::move(c);
      break;
    }
  }
  return copy ? copy : next;
}

uint64_t ConfigManager::InitialFetchTimeoutMs(const ListenerConfig& l) const {
  // The shortest wait any of its config sources asks for: each RDS config_source and each
  // secret's sds_config (the bootstrap's when an sds_config gives none).
  uint64_t ms = 0;
  auto take = [&ms](uint64_t t) {
    if (ms == 0 || t < ms) ms = t;
  };
  for (const auto& c : l.chains) {
    if (!c->rds_name.empty()) take(c->initial_fetch_timeout_ms);
    if (!c->sds_secrets.empty()) {
      take(c->sds_fetch_timeout_ms ? c->sds_fetch_timeout_ms
                                   : config_.xds.initial_fetch_timeout_ms);
    }
  }
  return ms ? ms : config_.xds.initial_fetch_timeout_ms;
}

void ConfigManager::RefreshRdsNames() {
  if (!xds_) return;
  std::set<std::string> names;
  for (const auto& [name, d] : listeners_) {
    const auto& l = d.pending ? d.pending : d.active;
    if (!l) continue;
    for (const auto& c : l->chains) {
      if (!c->rds_name.empty()) names.insert(c->rds_name);
    }
  }
  xds_->SetNames(kRouteType, names);
  for (auto it = routes_.begin(); it != routes_.end();) {
    it = names.count(it->first) ? std::next(it) : routes_.erase(it);
  }
}

void ConfigManager::RebuildListenerList() {
  config_.listeners = static_listeners_;
  for (const auto& [name, d] : listeners_) {
    if (d.active) config_.listeners.push_back(d.active);
  }
}

bool ConfigManager::initialized() const {
  if (!static_dns_waiting_.empty()) return false;  // a static DNS cluster's first answer
  if (!config_.xds.dynamic()) return true;
  if (init_timed_out_) return true;
  if (config_.xds.cds && !cds_applied_) return false;
  if (config_.xds.lds && !lds_applied_) return false;
  if (!static_eds_waiting_.empty()) return false;
  for (const auto& [name, c] : static_clusters_) {
    if (c.info->tls_pending()) return false;  // waits for its SDS secrets
  }
  for (const auto& [name, d] : clusters_) {
    if (!d.warm) return false;
  }
  for (const auto& [name, d] : listeners_) {
    if (d.pending) return false;
  }
  return true;
}

std::string ConfigManager::ConfigSummaryJson() const {
  std::string out = "{\n";
  auto item = [](const std::string& name, const std::string& version, int64_t updated,
                 const std::string& state, const std::string& config) {
    return absl::StrCat("    {\"name\": ", JsonQuote(name), ", \"version\": ", JsonQuote(version),
                        ", \"last_updated_ms\": ", updated, ", \"state\": ", JsonQuote(state),
                        ", \"config\": ", config, "}");
  };
  std::vector<std::string> items;
  for (const auto& l : bootstrap_.static_resources().listeners()) {
    // A static listener waiting for its routes or secrets warms like a dynamic one.
    auto d = listeners_.find(l.name());
    bool warming = d != listeners_.end() && d->second.pending;
    items.push_back(item(l.name(), "static", 0, warming ? "warming" : "static", Json(l)));
  }
  for (const auto& [name, d] : listeners_) {
    if (d.is_static) continue;
    items.push_back(item(name, d.version, d.updated_ms,
                         d.pending ? (d.active ? "updating" : "warming") : "active",
                         Json(d.proto)));
  }
  absl::StrAppend(&out, "  \"listeners\": [\n", absl::StrJoin(items, ",\n"), "\n  ],\n");
  items.clear();
  for (const auto& [name, r] : routes_) {
    envoy::config::route::v3::RouteConfiguration rc;
    rc.ParseFromString(r.bytes);
    items.push_back(item(name, r.version, r.updated_ms, "active", Json(rc)));
  }
  absl::StrAppend(&out, "  \"routes\": [\n", absl::StrJoin(items, ",\n"), "\n  ],\n");
  items.clear();
  for (const auto& c : bootstrap_.static_resources().clusters()) {
    items.push_back(item(c.name(), "static", 0, "static", Json(c)));
  }
  for (const auto& [name, d] : clusters_) {
    items.push_back(
        item(name, d.version, d.updated_ms, d.warm ? "active" : "warming", Json(d.proto)));
  }
  absl::StrAppend(&out, "  \"clusters\": [\n", absl::StrJoin(items, ",\n"), "\n  ],\n");
  items.clear();
  for (const auto& [name, e] : endpoints_) {
    items.push_back(item(name, e.version, e.updated_ms, "active", Json(e.proto)));
  }
  absl::StrAppend(&out, "  \"endpoints\": [\n", absl::StrJoin(items, ",\n"), "\n  ],\n");
  items.clear();
  for (const auto& [name, sec] : secrets_) {
    // Never the secret itself: its kind only.
    std::string kind = sec.proto.has_tls_certificate()       ? "tls_certificate"
                       : sec.proto.has_validation_context()  ? "validation_context"
                       : sec.proto.has_session_ticket_keys() ? "session_ticket_keys"
                                                             : "generic_secret";
    items.push_back(item(name, sec.version, sec.updated_ms, "active",
                         absl::StrCat("{\"type\": ", JsonQuote(kind), "}")));
  }
  absl::StrAppend(&out, "  \"secrets\": [\n", absl::StrJoin(items, ",\n"), "\n  ],\n");
  std::string last_nack = "null";
  if (xds_) {
    std::vector<std::string> status;
    for (const auto& [type, s] : xds_->status()) {
      status.push_back(absl::StrCat(
          "    ", JsonQuote(type), ": {\"version\": ", JsonQuote(s.version),
          ", \"updates\": ", s.updates, ", \"nacks\": ", s.nacks,
          ", \"last_nack\": ", s.last_nack.empty() ? "null" : JsonQuote(s.last_nack), "}"));
    }
    absl::StrAppend(&out, "  \"xds\": {\"connected\": ", connected_ ? "true" : "false",
                    ", \"ignored_fields\": ", ignored_fields_, ", \"types\": {\n",
                    absl::StrJoin(status, ",\n"), "\n  }}\n");
  } else {
    absl::StrAppend(&out, "  \"xds\": null\n");
  }
  out += "}\n";
  return out;
}

std::vector<std::unique_ptr<google::protobuf::Message>> ConfigManager::ConfigDumps(
    bool include_eds) const {
  namespace admin = envoy::admin::v3;
  using google::protobuf::util::TimeUtil;
  auto ts = [](int64_t ms) { return TimeUtil::MillisecondsToTimestamp(ms); };
  auto packed = [](const char* type_url, const std::string& bytes) {
    google::protobuf::Any any;
    any.set_type_url(type_url);
    any.set_value(bytes);
    return any;
  };
  auto type_version = [this](const char* type) -> std::string {
    if (!xds_) return "";
    auto status = xds_->status();
    auto it = status.find(type);
    return it == status.end() ? "" : it->second.version;
  };
  std::vector<std::unique_ptr<google::protobuf::Message>> out;

  auto boot = std::make_unique<admin::BootstrapConfigDump>();
  *boot->mutable_bootstrap() = bootstrap_;
  *boot->mutable_last_updated() = ts(start_unix_ms_);
  out.push_back(std::move(boot));

  auto clusters = std::make_unique<admin::ClustersConfigDump>();
  clusters->set_version_info(type_version(kClusterType));
  for (const auto& c : bootstrap_.static_resources().clusters()) {
    auto* s = clusters->add_static_clusters();
    s->mutable_cluster()->PackFrom(c);
    *s->mutable_last_updated() = ts(start_unix_ms_);
  }
  for (const auto& [name, d] : clusters_) {
    auto add = [&](admin::ClustersConfigDump::DynamicCluster* c, const ActiveForm& f) {
      c->set_version_info(f.version);
      *c->mutable_cluster() = packed(kClusterType, f.bytes);
      *c->mutable_last_updated() = ts(f.updated_ms);
    };
    if (!d.active_form.bytes.empty()) add(clusters->add_dynamic_active_clusters(), d.active_form);
    if (!d.warm) {
      add(clusters->add_dynamic_warming_clusters(), ActiveForm{d.bytes, d.version, d.updated_ms});
    }
  }
  out.push_back(std::move(clusters));

  auto listeners = std::make_unique<admin::ListenersConfigDump>();
  listeners->set_version_info(type_version(kListenerType));
  for (const auto& l : bootstrap_.static_resources().listeners()) {
    auto* s = listeners->add_static_listeners();
    s->mutable_listener()->PackFrom(l);
    *s->mutable_last_updated() = ts(start_unix_ms_);
  }
  for (const auto& [name, d] : listeners_) {
    if (d.is_static) continue;
    auto* l = listeners->add_dynamic_listeners();
    l->set_name(name);
    auto fill = [&](admin::ListenersConfigDump::DynamicListenerState* st, const ActiveForm& f) {
      st->set_version_info(f.version);
      *st->mutable_listener() = packed(kListenerType, f.bytes);
      *st->mutable_last_updated() = ts(f.updated_ms);
    };
    if (d.active && !d.active_form.bytes.empty()) fill(l->mutable_active_state(), d.active_form);
    if (d.pending) fill(l->mutable_warming_state(), ActiveForm{d.bytes, d.version, d.updated_ms});
  }
  out.push_back(std::move(listeners));

  auto routes = std::make_unique<admin::RoutesConfigDump>();
  // Static: the route_config written inline in the static listeners' connection managers.
  for (const auto& l : bootstrap_.static_resources().listeners()) {
    std::vector<const envoy::config::listener::v3::FilterChain*> chains;
    for (const auto& c : l.filter_chains()) chains.push_back(&c);
    if (l.has_default_filter_chain()) chains.push_back(&l.default_filter_chain());
    for (const auto* chain : chains) {
      for (const auto& f : chain->filters()) {
        envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager hcm;
        if (!f.has_typed_config() || !f.typed_config().UnpackTo(&hcm) || !hcm.has_route_config()) {
          continue;
        }
        auto* s = routes->add_static_route_configs();
        s->mutable_route_config()->PackFrom(hcm.route_config());
        *s->mutable_last_updated() = ts(start_unix_ms_);
      }
    }
  }
  for (const auto& [name, r] : routes_) {
    auto* d = routes->add_dynamic_route_configs();
    d->set_version_info(r.version);
    *d->mutable_route_config() = packed(kRouteType, r.bytes);
    *d->mutable_last_updated() = ts(r.updated_ms);
  }
  out.push_back(std::move(routes));

  auto secrets = std::make_unique<admin::SecretsConfigDump>();
  for (const auto& secret : bootstrap_.static_resources().secrets()) {
    auto* s = secrets->add_static_secrets();
    s->set_name(secret.name());
    s->mutable_secret()->PackFrom(secret);  // redacted by RenderConfigDump
    *s->mutable_last_updated() = ts(start_unix_ms_);
  }
  for (const auto& [name, sec] : secrets_) {
    auto* d = secrets->add_dynamic_active_secrets();
    d->set_name(name);
    d->set_version_info(sec.version);
    d->mutable_secret()->PackFrom(sec.proto);
    *d->mutable_last_updated() = ts(sec.updated_ms);
  }
  out.push_back(std::move(secrets));

  if (include_eds) {
    auto endpoints = std::make_unique<admin::EndpointsConfigDump>();
    for (const auto& c : bootstrap_.static_resources().clusters()) {
      if (!c.has_load_assignment()) continue;
      auto* s = endpoints->add_static_endpoint_configs();
      envoy::config::endpoint::v3::ClusterLoadAssignment la = c.load_assignment();
      if (la.cluster_name().empty()) la.set_cluster_name(c.name());
      s->mutable_endpoint_config()->PackFrom(la);
      *s->mutable_last_updated() = ts(start_unix_ms_);
    }
    for (const auto& [name, e] : endpoints_) {
      auto* d = endpoints->add_dynamic_endpoint_configs();
      d->set_version_info(e.version);
      d->mutable_endpoint_config()->PackFrom(e.proto);
      *d->mutable_last_updated() = ts(e.updated_ms);
    }
    out.push_back(std::move(endpoints));
  }
  return out;
}

}  // namespace rpx
