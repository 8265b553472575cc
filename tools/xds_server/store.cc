#include "tools/xds_server/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "envoy/config/route/v3/route.pb.h"
#include "rpx/control/v1/control.pb.h"
#include "tools/xds_server/render.h"

namespace rpx {
namespace xds_server {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return absl::StrCat(dir, "/", name);
}

bool MakeDir(const std::string& path, std::string* error) {
  if (mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return true;
  *error = absl::StrCat(path, ": ", strerror(errno));
  return false;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

rpx::tools::v1::ResourceFile ToResourceFile(const Snapshot& s) {
  rpx::tools::v1::ResourceFile out;
  for (ResourceType t : kAllResourceTypes) {
    for (const auto& [name, r] : s.of(t)) AppendResource(t, r, &out);
  }
  return out;
}

std::string ResourceYaml(ResourceType type, const Resource& r) {
  auto m = DecodeResource(type, r.bytes);
  return m ? ToYaml(*m) : "# cannot decode\n";
}

// What changes from `a` (null: nothing) to `b`, in push order.
std::vector<ResourceDelta> Deltas(const Snapshot* a, const Snapshot& b, bool with_diff) {
  std::vector<ResourceDelta> out;
  static const Snapshot kEmpty;
  if (a == nullptr) a = &kEmpty;
  for (ResourceType t : kAllResourceTypes) {
    std::string plural = PluralTypeName(t);
    for (const auto& [name, r] : b.of(t)) {
      auto old = a->of(t).find(name);
      if (old != a->of(t).end() && old->second.bytes == r.bytes) continue;
      ResourceDelta d{
          t, name,
          old == a->of(t).end() ? ResourceDelta::Kind::kAdded : ResourceDelta::Kind::kChanged, ""};
      if (with_diff) {
        std::string label = absl::StrCat(plural, "/", name);
        d.diff = UnifiedDiff(old == a->of(t).end() ? "" : ResourceYaml(t, old->second),
                             ResourceYaml(t, r), "a/" + label, "b/" + label);
      }
      out.push_back(std::move(d));
    }
    for (const auto& [name, r] : a->of(t)) {
      if (b.of(t).count(name)) continue;
      ResourceDelta d{t, name, ResourceDelta::Kind::kRemoved, ""};
      if (with_diff) {
        std::string label = absl::StrCat(plural, "/", name);
        d.diff = UnifiedDiff(ResourceYaml(t, r), "", "a/" + label, "b/" + label);
      }
      out.push_back(std::move(d));
    }
  }
  return out;
}

void Count(const std::vector<ResourceDelta>& deltas, VersionRecord* r) {
  for (const auto& d : deltas) {
    if (d.kind == ResourceDelta::Kind::kAdded) ++r->added;
    if (d.kind == ResourceDelta::Kind::kChanged) ++r->changed;
    if (d.kind == ResourceDelta::Kind::kRemoved) ++r->removed;
  }
}

std::string FileHeader(uint64_t version) {
  return absl::StrCat("# Written by xds_server's control API (version ", version,
                      "). Hand edits are picked up and checked like API changes.\n");
}

}  // namespace

rpx::control::v1::Target TargetToProto(const Target& t) {
  rpx::control::v1::Target p;
  p.set_node_cluster(t.node_cluster);
  p.set_metadata_key(t.metadata_key);
  p.set_metadata_value(t.metadata_value);
  return p;
}

Target TargetFromProto(const rpx::control::v1::Target& p) {
  return Target{p.node_cluster(), p.metadata_key(), p.metadata_value()};
}

bool Target::Matches(const NodeInfo& node) const {
  if (all()) return true;
  if (!node_cluster.empty()) return node.cluster == node_cluster;
  auto it = node.metadata.find(metadata_key);
  return it != node.metadata.end() && it->second == metadata_value;
}

std::string Target::ToString() const {
  if (all()) return "all";
  if (!node_cluster.empty()) return absl::StrCat("cluster=", node_cluster);
  return absl::StrCat("metadata.", metadata_key, "=", metadata_value);
}

bool WriteFileAtomically(const std::string& path, const std::string& data, std::string* error) {
  std::string dir = ".", base = path;
  size_t slash = path.rfind('/');
  if (slash != std::string::npos) {
    dir = path.substr(0, slash);
    base = path.substr(slash + 1);
  }
  // A hidden name: the poller never reads it as a resource file, even half written.
  std::string tmp = JoinPath(dir, absl::StrCat(".", base, ".tmp.", getpid()));
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = absl::StrCat(tmp, ": ", strerror(errno));
    return false;
  }
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = absl::StrCat(tmp, ": ", strerror(errno));
      close(fd);
      unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    *error = absl::StrCat(tmp, ": ", strerror(errno));
    unlink(tmp.c_str());
    return false;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    *error = absl::StrCat(path, ": ", strerror(errno));
    unlink(tmp.c_str());
    return false;
  }
  // The rename itself reaches the disk with the directory.
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return true;
}

namespace {

VersionRecord FromStored(const rpx::control::v1::StoredVersion& stored) {
  VersionRecord r;
  const auto& info = stored.info();
  auto snapshot = std::make_shared<Snapshot>();
  std::map<std::string, std::string> origin;
  std::vector<std::string> errors;
  AddResourceFile(stored.resources(), "stored version", "", snapshot.get(), &origin, &errors);
  snapshot->version = absl::StrCat(info.version());
  r.version = info.version();
  r.parent = info.parent();
  r.author = info.author();
  r.description = info.description();
  r.origin = info.origin();
  r.created_ms = info.created_ms();
  r.target = TargetFromProto(info.target());
  r.added = info.added();
  r.changed = info.changed();
  r.removed = info.removed();
  r.snapshot = std::move(snapshot);
  return r;
}

rpx::control::v1::StoredVersion ToStored(const VersionRecord& record) {
  rpx::control::v1::StoredVersion stored;
  auto* info = stored.mutable_info();
  info->set_version(record.version);
  info->set_parent(record.parent);
  info->set_author(record.author);
  info->set_description(record.description);
  info->set_created_ms(record.created_ms);
  *info->mutable_target() = TargetToProto(record.target);
  info->set_origin(record.origin);
  info->set_added(record.added);
  info->set_changed(record.changed);
  info->set_removed(record.removed);
  *stored.mutable_resources() = ToResourceFile(*record.snapshot);
  return stored;
}

rpx::control::v1::StoredState ToState(uint64_t default_version,
                                      const std::vector<std::pair<Target, uint64_t>>& targeted) {
  rpx::control::v1::StoredState state;
  state.add_assignments()->set_version(default_version);
  for (const auto& [target, version] : targeted) {
    auto* a = state.add_assignments();
    *a->mutable_target() = TargetToProto(target);
    a->set_version(version);
  }
  return state;
}

class DirectoryBackend : public StoreBackend {
 public:
  explicit DirectoryBackend(std::string dir) : dir_(std::move(dir)) {}

  std::string Describe() const override { return "directory " + JoinPath(dir_, ".rpx"); }

  bool Load(StoredData* out, std::string* error) override {
    (void)error;  // a directory without .rpx simply has no history yet
    std::string history_dir = JoinPath(dir_, ".rpx/history");
    if (DIR* d = opendir(history_dir.c_str())) {
      while (struct dirent* e = readdir(d)) {
        std::string name = e->d_name;
        uint64_t v = 0;
        if (name.size() < 4 || name.substr(name.size() - 3) != ".pb" ||
            !absl::SimpleAtoi(name.substr(0, name.size() - 3), &v)) {
          continue;
        }
        std::string bytes;
        rpx::control::v1::StoredVersion stored;
        if (ReadFile(JoinPath(history_dir, name), &bytes) && stored.ParseFromString(bytes) &&
            stored.info().version() == v) {
          out->versions.push_back(std::move(stored));
        }
      }
      closedir(d);
    }
    std::string bytes;
    out->has_state =
        ReadFile(JoinPath(dir_, ".rpx/state.pb"), &bytes) && out->state.ParseFromString(bytes);
    return true;
  }

  bool Commit(const rpx::control::v1::StoredVersion& version,
              const rpx::control::v1::StoredState& state, const std::vector<uint64_t>& pruned,
              std::string* error) override {
    std::string rpx_dir = JoinPath(dir_, ".rpx");
    std::string history_dir = JoinPath(rpx_dir, "history");
    if (!MakeDir(rpx_dir, error) || !MakeDir(history_dir, error)) return false;
    if (!WriteFileAtomically(JoinPath(history_dir, absl::StrCat(version.info().version(), ".pb")),
                             version.SerializeAsString(), error) ||
        !WriteFileAtomically(JoinPath(rpx_dir, "state.pb"), state.SerializeAsString(), error)) {
      return false;
    }
    for (uint64_t v : pruned) unlink(JoinPath(history_dir, absl::StrCat(v, ".pb")).c_str());
    return true;
  }

 private:
  std::string dir_;
};

}  // namespace

std::unique_ptr<StoreBackend> MakeDirectoryBackend(const std::string& dir) {
  return std::make_unique<DirectoryBackend>(dir);
}

Store::Store(StoreOptions options, LogFn log)
    : options_(std::move(options)),
      log_(std::move(log)),
      backend_(options_.backend ? options_.backend : MakeDirectoryBackend(options_.dir)) {}

Store::~Store() { backend_->Stop(); }

bool Store::ApplyStoredLocked(const StoredData& data, bool full,
                              const std::vector<uint64_t>& removed) {
  bool changed = false;
  std::set<uint64_t> present;
  for (const auto& stored : data.versions) {
    uint64_t v = stored.info().version();
    present.insert(v);
    if (history_.count(v)) continue;
    history_[v] = FromStored(stored);
    counter_ = std::max(counter_, v);
    changed = true;
  }
  std::vector<uint64_t> gone = removed;
  if (full && !data.versions.empty()) {
    for (const auto& [v, r] : history_) {
      if (!present.count(v)) gone.push_back(v);
    }
  }
  if (data.has_state) {
    uint64_t default_version = 0;
    std::vector<std::pair<Target, uint64_t>> targeted;
    for (const auto& a : data.state.assignments()) {
      if (!history_.count(a.version())) continue;
      Target t = TargetFromProto(a.target());
      if (t.all()) {
        default_version = a.version();
      } else {
        targeted.emplace_back(t, a.version());
      }
    }
    if (default_version != default_version_ || !(targeted == targeted_)) {
      default_version_ = default_version;
      targeted_ = std::move(targeted);
      changed = true;
    }
  }
  std::set<uint64_t> assigned = {default_version_};
  for (const auto& [t, v] : targeted_) assigned.insert(v);
  for (uint64_t v : gone) {
    if (!assigned.count(v)) changed = history_.erase(v) > 0 || changed;
  }
  if (default_version_ == 0 && !history_.empty() && !data.has_state) {
    // No state stored: the newest version made for every node.
    for (auto it = history_.rbegin(); it != history_.rend(); ++it) {
      if (it->second.target.all()) {
        default_version_ = it->first;
        break;
      }
    }
  }
  return changed;
}

void Store::Open() {
  {
    Lock lock(mu_);
    StoredData data;
    std::string error;
    if (!backend_->Load(&data, &error)) {
      log_(absl::StrCat("store: ", error, "; serving nothing until it can be read"));
    } else {
      ApplyStoredLocked(data, /*full=*/true, {});
    }
    if (!history_.empty()) {
      log_(absl::StrCat("history: ", history_.size(),
                        " versions restored, default version=", default_version_));
    }
  }
  if (backend_->shared()) {
    backend_->Watch(
        [this](const StoredData& data, bool full, const std::vector<uint64_t>& removed) {
          Lock lock(mu_);
          // An empty store (its first load racing the seed, or etcd wiped) takes nothing away.
          if (full && data.versions.empty() && !history_.empty()) return;
          uint64_t before = default_version_;
          if (!ApplyStoredLocked(data, full, removed)) return;
          log_(absl::StrCat("store: changed by another replica, default version=", default_version_,
                            before != default_version_ ? absl::StrCat(" (was ", before, ")") : ""));
          auto it = history_.find(default_version_);
          if (it != history_.end()) log_(DescribeSnapshot(*it->second.snapshot));
          lock.unlock();
          if (on_change_) on_change_();
        });
  }
  // A shared store is the truth once it holds anything; the directory only seeds an empty one.
  bool seed =
      !options_.dir.empty() &&
      (!backend_->shared() || (History().empty() && !DirectoryFingerprint(options_.dir).empty()));
  if (!seed || ReloadDirectory(/*force=*/true) != Result::kUpdated) {
    Lock lock(mu_);
    auto it = history_.find(default_version_);
    if (it != history_.end()) log_(DescribeSnapshot(*it->second.snapshot));
  }
}

Store::Result Store::ReloadDirectory(bool force) {
  Lock lock(mu_);
  std::string fingerprint = DirectoryFingerprint(options_.dir);
  if (attempted_ && !force && fingerprint == last_fingerprint_) return Result::kUnchanged;
  attempted_ = true;
  last_fingerprint_ = fingerprint;

  uint64_t base_version = 0;
  std::shared_ptr<const Snapshot> base = ForTargetLocked(Target{}, &base_version);
  auto next = std::make_shared<Snapshot>();
  std::vector<std::string> errors;
  if (LoadResourceDirectory(options_.dir, next.get(), &errors) && options_.check) {
    for (const Problem& p : CheckSnapshot(*next, base.get(), options_.check_options)) {
      errors.push_back(p.message);
    }
  }
  if (!errors.empty()) {
    for (const std::string& e : errors) log_(absl::StrCat("reload error: ", e));
    log_(absl::StrCat("reload error: keeping snapshot version=", base ? base->version : "none"));
    last_failed_ = true;
    return Result::kError;
  }
  bool recovered = std::exchange(last_failed_, false);
  if (base && base->SameResources(*next)) {
    // Restored from the history, the default does not know which file holds what.
    bool same_files = true;
    for (ResourceType t : kAllResourceTypes) {
      for (const auto& [name, r] : next->of(t)) {
        same_files = same_files && base->of(t).at(name).file == r.file;
      }
    }
    if (!same_files) {
      next->version = base->version;
      history_[base_version].snapshot = next;
    }
    // Otherwise the last word in the log would still be the error.
    if (recovered)
      log_(absl::StrCat("reload ok: resources unchanged, still version=", base->version));
    return Result::kUnchanged;
  }
  VersionRecord record;
  record.origin = "directory";
  record.author = "directory";
  record.description = "files changed in the resource directory";
  record.parent = base_version;
  Count(Deltas(base.get(), *next, false), &record);
  std::string error;
  if (!CommitLocked(next, record, &error)) {
    log_(absl::StrCat("reload error: ", error));
    return Result::kError;
  }
  lock.unlock();
  if (on_change_) on_change_();
  return Result::kUpdated;
}

ChangeResult Store::Change(const ChangeRequest& req) {
  ChangeResult result;
  Lock lock(mu_);
  std::shared_ptr<const Snapshot> base = ForTargetLocked(req.target, &result.base_version);
  auto next = std::make_shared<Snapshot>();
  if (base) *next = *base;
  std::string origin;
  switch (req.kind) {
    case ChangeRequest::Kind::kApply: {
      origin = "apply";
      Snapshot incoming;
      std::map<std::string, std::string> seen;
      std::vector<std::string> errors;
      AddResourceFile(req.upserts, "request", "", &incoming, &seen, &errors);
      if (!errors.empty()) {
        result.request_error = absl::StrJoin(errors, "; ");
        return result;
      }
      if (seen.empty()) {
        result.request_error = "the change names no resources";
        return result;
      }
      for (ResourceType t : kAllResourceTypes) {
        auto& to = next->resources[static_cast<int>(t)];
        for (auto& [name, r] : incoming.resources[static_cast<int>(t)]) {
          auto old = to.find(name);
          if (old != to.end()) r.file = old->second.file;
          to[name] = std::move(r);
        }
      }
      break;
    }
    case ChangeRequest::Kind::kDelete: {
      origin = "delete";
      if (req.deletes.empty()) {
        result.request_error = "the change names no resources";
        return result;
      }
      std::vector<std::string> missing;
      for (const auto& [type, name] : req.deletes) {
        if (next->resources[static_cast<int>(type)].erase(name) == 0) {
          missing.push_back(absl::StrCat(PluralTypeName(type), "/", name));
        }
      }
      if (!missing.empty()) {
        result.request_error = absl::StrCat("no such resource: ", absl::StrJoin(missing, ", "));
        return result;
      }
      break;
    }
    case ChangeRequest::Kind::kVirtualHost: {
      origin = "update-virtual-host";
      auto& routes = next->resources[static_cast<int>(ResourceType::kRoute)];
      auto it = routes.find(req.route_configuration);
      if (it == routes.end()) {
        result.request_error =
            absl::StrCat("no such route configuration: '", req.route_configuration, "'");
        return result;
      }
      const std::string& vh_name = req.virtual_host.name();
      if (vh_name.empty()) {
        result.request_error = "virtual_host.name is required";
        return result;
      }
      envoy::config::route::v3::RouteConfiguration rc;
      rc.ParseFromString(it->second.bytes);
      int found = -1;
      for (int i = 0; i < rc.virtual_hosts_size(); ++i) {
        if (rc.virtual_hosts(i).name() == vh_name) found = i;
      }
      if (req.remove_virtual_host) {
        if (found < 0) {
          result.request_error = absl::StrCat("route configuration '", req.route_configuration,
                                              "' has no virtual host '", vh_name, "'");
          return result;
        }
        rc.mutable_virtual_hosts()->DeleteSubrange(found, 1);
      } else if (found >= 0) {
        *rc.mutable_virtual_hosts(found) = req.virtual_host;
      } else {
        *rc.add_virtual_hosts() = req.virtual_host;
      }
      it->second.bytes = DeterministicBytes(rc);
      it->second.version = ResourceVersion(it->second.bytes);
      break;
    }
    case ChangeRequest::Kind::kRollback: {
      origin = absl::StrCat("rollback to ", req.rollback_to);
      auto old = history_.find(req.rollback_to);
      if (old == history_.end()) {
        result.request_error =
            history_.empty()
                ? absl::StrCat("version ", req.rollback_to, " is not kept (no history)")
                : absl::StrCat("version ", req.rollback_to,
                               " is not kept (kept: ", history_.begin()->first, " to ",
                               history_.rbegin()->first, ")");
        return result;
      }
      Snapshot restored = *old->second.snapshot;
      for (ResourceType t : kAllResourceTypes) {
        for (auto& [name, r] : restored.resources[static_cast<int>(t)]) {
          auto cur = next->of(t).find(name);
          r.file = cur != next->of(t).end() ? cur->second.file : "";
        }
      }
      *next = std::move(restored);
      break;
    }
  }
  result.changes = Deltas(base.get(), *next, req.with_diff);
  if (options_.check) {
    result.problems = CheckSnapshot(*next, base.get(), options_.check_options);
    if (!result.problems.empty()) return result;
  }
  result.accepted = true;
  if (req.dry_run || result.changes.empty()) return result;

  VersionRecord record;
  record.origin = origin;
  record.author = req.author;
  record.description = req.description;
  record.target = req.target;
  record.parent = result.base_version;
  Count(result.changes, &record);
  std::string error;
  if (!CommitLocked(next, record, &error)) {
    result.accepted = false;
    result.store_error = error;
    return result;
  }
  result.version = counter_;
  lock.unlock();
  if (on_change_) on_change_();
  return result;
}

bool Store::CommitLocked(std::shared_ptr<Snapshot> snapshot, VersionRecord record,
                         std::string* error) {
  uint64_t version = counter_ + 1;
  record.version = version;
  record.created_ms = NowMs();
  snapshot->version = absl::StrCat(version);
  record.snapshot = snapshot;
  // With a shared store, the directory's files are not the truth (each replica has its own).
  if (record.target.all() && record.origin != "directory" && !backend_->shared() &&
      !options_.dir.empty()) {
    auto def = history_.find(default_version_);
    static const Snapshot kEmpty;
    if (!WriteDirectoryLocked(def != history_.end() ? *def->second.snapshot : kEmpty,
                              snapshot.get(), error)) {
      return false;
    }
  }
  // The state stored is the state after this version.
  auto targeted = targeted_;
  uint64_t default_version = default_version_;
  if (record.target.all()) {
    default_version = version;
    targeted.clear();
  } else {
    for (auto it = targeted.begin(); it != targeted.end(); ++it) {
      if (it->first == record.target) {
        targeted.erase(it);
        break;
      }
    }
    targeted.insert(targeted.begin(), {record.target, version});
  }
  // The oldest versions beyond the limit go, except those still assigned.
  std::set<uint64_t> assigned = {default_version};
  for (const auto& [t, v] : targeted) assigned.insert(v);
  std::vector<uint64_t> pruned;
  size_t kept = history_.size() + 1;
  for (auto it = history_.begin(); kept > options_.history_limit && it != history_.end(); ++it) {
    if (assigned.count(it->first)) continue;
    pruned.push_back(it->first);
    --kept;
  }
  if (!backend_->Commit(ToStored(record), ToState(default_version, targeted), pruned, error)) {
    // Files already written stay: the poller takes them in as a hand edit would be.
    last_fingerprint_.clear();
    return false;
  }
  default_version_ = default_version;
  targeted_ = std::move(targeted);
  counter_ = version;
  history_[version] = record;
  for (uint64_t v : pruned) history_.erase(v);
  log_(absl::StrCat("version ", version, " origin=", record.origin, " target=",
                    record.target.ToString(), " author=", record.author, " added=", record.added,
                    " changed=", record.changed, " removed=", record.removed));
  if (record.target.all()) {
    log_(DescribeSnapshot(*snapshot));
  } else {
    log_(absl::StrCat("targeted ", DescribeSnapshot(*snapshot),
                      " target=", record.target.ToString()));
  }
  return true;
}

bool Store::WriteDirectoryLocked(const Snapshot& before, Snapshot* next, std::string* error) {
  // Each resource goes back to the file it came from; new ones to "<type>.yaml".
  std::map<std::string, rpx::tools::v1::ResourceFile> files;
  std::map<std::string, std::string> contents_before, contents_after;  // file -> resource keys
  for (ResourceType t : kAllResourceTypes) {
    for (const auto& [name, r] : before.of(t)) {
      if (r.file.empty()) continue;
      absl::StrAppend(&contents_before[r.file], PluralTypeName(t), "/", name, "/", r.version, "\n");
    }
    for (auto& [name, r] : next->resources[static_cast<int>(t)]) {
      if (r.file.empty()) r.file = absl::StrCat(PluralTypeName(t), ".yaml");
      AppendResource(t, r, &files[r.file]);
      absl::StrAppend(&contents_after[r.file], PluralTypeName(t), "/", name, "/", r.version, "\n");
    }
  }
  for (const auto& [file, content] : contents_after) {
    auto old = contents_before.find(file);
    if (old != contents_before.end() && old->second == content) continue;  // untouched: verbatim
    std::string text = absl::StrCat(FileHeader(counter_ + 1), ToYaml(files[file]));
    if (!WriteFileAtomically(JoinPath(options_.dir, file), text, error)) return false;
  }
  for (const auto& [file, content] : contents_before) {
    if (contents_after.count(file)) continue;
    if (unlink(JoinPath(options_.dir, file).c_str()) != 0 && errno != ENOENT) {
      *error = absl::StrCat(JoinPath(options_.dir, file), ": ", strerror(errno));
      return false;
    }
  }
  // Our own writes are not a hand edit.
  last_fingerprint_ = DirectoryFingerprint(options_.dir);
  attempted_ = true;
  return true;
}

std::shared_ptr<const Snapshot> Store::ForTargetLocked(const Target& target,
                                                       uint64_t* version) const {
  uint64_t v = default_version_;
  for (const auto& [t, tv] : targeted_) {
    if (t == target) {
      v = tv;
      break;
    }
  }
  *version = 0;
  auto it = history_.find(v);
  if (it == history_.end()) return nullptr;
  *version = v;
  return it->second.snapshot;
}

std::shared_ptr<const Snapshot> Store::ForTarget(const Target& target, uint64_t* version) const {
  Lock lock(mu_);
  return ForTargetLocked(target, version);
}

std::shared_ptr<const Snapshot> Store::ForNode(const NodeInfo& node, uint64_t* version) const {
  Lock lock(mu_);
  uint64_t v = default_version_;
  for (const auto& [t, tv] : targeted_) {
    if (t.Matches(node)) {
      v = tv;
      break;
    }
  }
  *version = 0;
  auto it = history_.find(v);
  if (it == history_.end()) return nullptr;
  *version = v;
  return it->second.snapshot;
}

std::shared_ptr<const Snapshot> Store::Get(uint64_t version) const {
  Lock lock(mu_);
  if (version == 0) version = default_version_;
  auto it = history_.find(version);
  return it == history_.end() ? nullptr : it->second.snapshot;
}

bool Store::Diff(uint64_t from, uint64_t to, std::vector<ResourceDelta>* out) const {
  auto a = Get(from);
  auto b = Get(to);
  if (!a || !b) return false;
  *out = Deltas(a.get(), *b, true);
  return true;
}

std::vector<VersionRecord> Store::History() const {
  Lock lock(mu_);
  std::vector<VersionRecord> out;
  for (auto it = history_.rbegin(); it != history_.rend(); ++it) out.push_back(it->second);
  return out;
}

std::vector<std::pair<Target, uint64_t>> Store::Assignments() const {
  Lock lock(mu_);
  std::vector<std::pair<Target, uint64_t>> out;
  out.emplace_back(Target{}, default_version_);
  for (const auto& a : targeted_) out.push_back(a);
  return out;
}

}  // namespace xds_server
}  // namespace rpx
