#include "tools/xds_server/ads_service.h"

#include <array>
#include <condition_variable>
#include <deque>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "tools/xds_server/control_service.h"

// DESIGN
//
// Log lines (one event each; fields are key=value, lists are comma-separated):
//   stream open node=<id> mode=sotw|delta            (on the stream's first request)
//     ... service=LDS|CDS|RDS|EDS|SDS                (a type's own service, not ADS)
//   push node=<id> type=LDS version=<v> nonce=<n> resources=<names>[ removed=<names>]
//   ACK node=<id> type=LDS version=<v> nonce=<n>
//   NACK node=<id> type=LDS version=<v> nonce=<n> error=<message>
//   stale node=<id> type=LDS nonce=<n> expected=<n>  (SotW request for an older response)
//   request node=<id> type=LDS nonce=<n> names=<names>             (every SotW request, as sent)
//   request node=<id> type=LDS nonce=<n> subscribe=<names> unsubscribe=<names>   (every delta one)
//   subscribe node=<id> type=LDS names=<names>      (names the stream's subscription gained; "*":
//   unsubscribe node=<id> type=LDS names=<names>     wildcard) and lost, after each request
//   ignored node=<id> type_url=<url>                 (a type this server does not serve; once)
//   stream closed node=<id>
// In SotW, ACK/NACK's version is the request's version_info (for a NACK: the version the client
// kept). Delta requests carry no version, so there it is the system_version_info of the response
// the nonce answers ("?" if that nonce is too old to remember).
//
// Nonces count per stream ("1", "2", ...): they only need to be unique within a stream, and a
// counter keeps runs reproducible.
//
// Wildcard (LDS and CDS only): "*" among the names, or the legacy form, an empty list in the
// type's first request (SotW: and in later ones while it stays wildcard). After a SotW stream
// named resources without "*", an empty list unsubscribes from all of them (it is not a
// wildcard). An empty first request for RDS or EDS subscribes to nothing.
//
// SotW, per type:
// - Requests that answer an older nonce than the last one sent for the type are ignored whole,
//   as Envoy's server does: the client will send a fresh request once it sees the newer response,
//   and acting on the old one could push a response it has already superseded.
// - A response is sent when its resources (names and bytes) differ from the last ones sent for
//   the type: first request, a snapshot change or a change of the requested names. Nothing else
//   causes a push, so an unchanged type is never re-sent after a reload or a NACK.
// - LDS/CDS responses are full sets (absence deletes), so they may be empty. RDS/EDS responses
//   never are: absence deletes nothing there, and an empty response would only end the client's
//   warm-up wait with nothing. When no requested name exists, the client simply waits (its
//   initial_fetch_timeout) until one does. Unlike go-control-plane's snapshot cache, a response
//   carries whatever requested names exist, not only when all of them do.
//
// Delta, per type:
// - Subscribe/unsubscribe and initial_resource_versions are applied from every request, whatever
//   its nonce: each request carries changes, not the full state, so none may be dropped.
// - The server tracks the version of each resource the client has (what it sent, or what the
//   client declared in initial_resource_versions) and sends only resources whose version differs,
//   plus removed_resources for names the client has that left the snapshot. A NACKed resource is
//   counted as sent: it is not re-sent until it changes.
// - A first wildcard request gets a response even if it is empty, so the client's
//   initialization does not wait for a timeout (as go-control-plane does).

namespace rpx {
namespace xds_server {

using envoy::service::discovery::v3::DeltaDiscoveryRequest;
using envoy::service::discovery::v3::DeltaDiscoveryResponse;
using envoy::service::discovery::v3::DiscoveryRequest;
using envoy::service::discovery::v3::DiscoveryResponse;

struct AdsService::StreamSignals {
  std::mutex mu;
  std::condition_variable cv;
  bool snapshot_changed = false;
  bool shutdown = false;
  bool reader_done = false;
};

namespace {

// Keeps one event on one line, whatever a client put in its node id or error message.
std::string OneLine(const std::string& s) {
  return absl::StrReplaceAll(s, {{"\r\n", " "}, {"\n", " "}, {"\r", " "}});
}

std::string Names(const google::protobuf::RepeatedPtrField<std::string>& names) {
  return OneLine(absl::StrJoin(names, ","));
}

// Logs what a stream's subscription to `type` gained and lost ("*" standing for wildcard).
void LogSubscriptionChange(const LogFn& log, const std::string& node_id, ResourceType type,
                           bool was_wildcard, const std::set<std::string>& was, bool wildcard,
                           const std::set<std::string>& now) {
  std::vector<std::string> gained, lost;
  if (wildcard && !was_wildcard) gained.push_back("*");
  if (was_wildcard && !wildcard) lost.push_back("*");
  for (const std::string& n : now) {
    if (was.count(n) == 0) gained.push_back(n);
  }
  for (const std::string& n : was) {
    if (now.count(n) == 0) lost.push_back(n);
  }
  std::string common = absl::StrCat(" node=", node_id, " type=", ShortTypeName(type), " names=");
  if (!gained.empty()) log(absl::StrCat("subscribe", common, OneLine(absl::StrJoin(gained, ","))));
  if (!lost.empty()) log(absl::StrCat("unsubscribe", common, OneLine(absl::StrJoin(lost, ","))));
}

void PackResource(ResourceType type, const Resource& r, google::protobuf::Any* any) {
  any->set_type_url(TypeUrl(type));
  any->set_value(r.bytes);
}

// What both session kinds share: who the node is, the log and the fleet.
class SessionBase {
 public:
  SessionBase(const LogFn& log, std::string service, Fleet* fleet)
      : log_(log), service_(std::move(service)), fleet_(fleet) {}

  const std::string& node_id() const { return node_.id; }
  const NodeInfo& node() const { return node_; }
  bool opened() const { return opened_; }

  // The stream's first request names the node.
  void Open(const envoy::config::core::v3::Node& node, const std::string& peer, const char* mode) {
    opened_ = true;
    node_.id = OneLine(node.id());
    node_.cluster = OneLine(node.cluster());
    node_.region = OneLine(node.locality().region());
    node_.zone = OneLine(node.locality().zone());
    node_.sub_zone = OneLine(node.locality().sub_zone());
    for (const auto& [key, value] : node.metadata().fields()) {
      if (value.kind_case() == google::protobuf::Value::kStringValue) {
        node_.metadata[key] = value.string_value();
      }
    }
    log_(absl::StrCat("stream open node=", node_.id, " mode=", mode,
                      service_.empty() ? "" : " service=", service_));
    if (fleet_) fleet_->StreamOpened(node_, peer);
  }

  void Close() {
    if (!opened_) return;
    log_(absl::StrCat("stream closed node=", node_.id));
    if (fleet_) fleet_->StreamClosed(node_.id);
  }

 protected:
  void Ack(ResourceType type, const std::string& common, const std::string& version) {
    log_(absl::StrCat("ACK", common));
    if (fleet_) fleet_->Acked(node_.id, type, version);
  }
  void Nack(ResourceType type, const std::string& common, const std::string& version,
            const std::string& error) {
    log_(absl::StrCat("NACK", common, " error=", OneLine(error)));
    if (fleet_) fleet_->Nacked(node_.id, type, version, error);
  }
  void Pushed(ResourceType type, const std::string& version) {
    if (fleet_) fleet_->Pushed(node_.id, type, version);
  }
  void Heard() {
    if (fleet_) fleet_->Heard(node_.id);
  }

  const LogFn& log_;
  const std::string service_;  // a type's own service; empty: ADS
  Fleet* const fleet_;
  bool opened_ = false;
  NodeInfo node_;
};

class SotwSession : public SessionBase {
 public:
  using Request = DiscoveryRequest;
  using Response = DiscoveryResponse;
  static constexpr const char* kMode = "sotw";

  SotwSession(const LogFn& log, std::string service, Fleet* fleet)
      : SessionBase(log, std::move(service), fleet) {}

  void OnRequest(const DiscoveryRequest& req, const std::shared_ptr<const Snapshot>& snapshot,
                 std::vector<DiscoveryResponse>* out) {
    Heard();
    ResourceType type;
    if (!ParseTypeUrl(req.type_url(), &type)) {
      if (ignored_.insert(req.type_url()).second) {
        log_(absl::StrCat("ignored node=", node_.id, " type_url=", OneLine(req.type_url())));
      }
      return;
    }
    TypeState& st = types_[static_cast<int>(type)];
    log_(absl::StrCat("request node=", node_.id, " type=", ShortTypeName(type), " nonce=",
                      OneLine(req.response_nonce()), " names=", Names(req.resource_names())));
    // Nothing sent yet: any nonce is accepted (it may answer a previous server instance).
    if (!st.last_nonce.empty()) {
      if (req.response_nonce() != st.last_nonce) {
        log_(absl::StrCat("stale node=", node_.id, " type=", ShortTypeName(type),
                          " nonce=", OneLine(req.response_nonce()), " expected=", st.last_nonce));
        return;
      }
      std::string common =
          absl::StrCat(" node=", node_.id, " type=", ShortTypeName(type),
                       " version=", OneLine(req.version_info()), " nonce=", st.last_nonce);
      if (req.has_error_detail()) {
        Nack(type, common, req.version_info(), req.error_detail().message());
      } else {
        Ack(type, common, req.version_info());
      }
    }
    std::set<std::string> names(req.resource_names().begin(), req.resource_names().end());
    bool wildcard = false;
    if (IsWildcardCapable(type)) {
      // The legacy wildcard (an empty list) lasts while the lists stay empty.
      wildcard = names.erase("*") > 0 || (names.empty() && (!st.subscribed || st.wildcard));
    }
    LogSubscriptionChange(log_, node_.id, type, st.wildcard, st.names, wildcard, names);
    st.subscribed = true;
    st.names = std::move(names);
    st.wildcard = wildcard;
    Respond(type, snapshot, out);
  }

  void OnSnapshot(const std::shared_ptr<const Snapshot>& snapshot,
                  std::vector<DiscoveryResponse>* out) {
    for (ResourceType type : kAllResourceTypes) Respond(type, snapshot, out);
  }

 private:
  struct TypeState {
    bool subscribed = false;
    bool wildcard = false;
    std::set<std::string> names;
    std::string last_nonce;
    // What the client was last given (or, for RDS/EDS, an empty set we chose not to send),
    // as names into last_snapshot. has_last is false until then.
    bool has_last = false;
    std::shared_ptr<const Snapshot> last_snapshot;
    std::vector<std::string> last_names;
  };

  void Respond(ResourceType type, const std::shared_ptr<const Snapshot>& snapshot,
               std::vector<DiscoveryResponse>* out) {
    TypeState& st = types_[static_cast<int>(type)];
    if (!st.subscribed || snapshot == nullptr) return;
    const auto& all = snapshot->of(type);
    std::vector<std::string> names;
    for (const auto& [name, r] : all) {
      if (st.wildcard || st.names.count(name) > 0) names.push_back(name);
    }
    if (st.has_last && SameAsLast(st, *snapshot, type, names)) return;
    st.has_last = true;
    st.last_snapshot = snapshot;
    st.last_names = names;
    if (names.empty() && !IsWildcardCapable(type)) return;

    DiscoveryResponse& resp = out->emplace_back();
    resp.set_version_info(snapshot->version);
    resp.set_type_url(TypeUrl(type));
    resp.set_nonce(absl::StrCat(++nonce_counter_));
    for (const std::string& name : names) PackResource(type, all.at(name), resp.add_resources());
    st.last_nonce = resp.nonce();
    Pushed(type, resp.version_info());
    log_(absl::StrCat("push node=", node_.id, " type=", ShortTypeName(type),
                      " version=", resp.version_info(), " nonce=", resp.nonce(),
                      " resources=", absl::StrJoin(names, ",")));
  }

  static bool SameAsLast(const TypeState& st, const Snapshot& snapshot, ResourceType type,
                         const std::vector<std::string>& names) {
    if (names != st.last_names) return false;
    for (const std::string& name : names) {
      if (snapshot.of(type).at(name).bytes != st.last_snapshot->of(type).at(name).bytes) {
        return false;
      }
    }
    return true;
  }

  uint64_t nonce_counter_ = 0;
  std::array<TypeState, kNumResourceTypes> types_;
  std::set<std::string> ignored_;
};

class DeltaSession : public SessionBase {
 public:
  using Request = DeltaDiscoveryRequest;
  using Response = DeltaDiscoveryResponse;
  static constexpr const char* kMode = "delta";

  DeltaSession(const LogFn& log, std::string service, Fleet* fleet)
      : SessionBase(log, std::move(service), fleet) {}

  void OnRequest(const DeltaDiscoveryRequest& req, const std::shared_ptr<const Snapshot>& snapshot,
                 std::vector<DeltaDiscoveryResponse>* out) {
    Heard();
    ResourceType type;
    if (!ParseTypeUrl(req.type_url(), &type)) {
      if (ignored_.insert(req.type_url()).second) {
        log_(absl::StrCat("ignored node=", node_.id, " type_url=", OneLine(req.type_url())));
      }
      return;
    }
    TypeState& st = types_[static_cast<int>(type)];
    if (!req.response_nonce().empty()) {
      uint64_t nonce = 0;
      auto it = absl::SimpleAtoi(req.response_nonce(), &nonce) ? st.nonce_versions.find(nonce)
                                                               : st.nonce_versions.end();
      std::string version = it == st.nonce_versions.end() ? "?" : it->second;
      std::string common =
          absl::StrCat(" node=", node_.id, " type=", ShortTypeName(type), " version=", version,
                       " nonce=", OneLine(req.response_nonce()));
      if (req.has_error_detail()) {
        Nack(type, common, version, req.error_detail().message());
      } else {
        Ack(type, common, version);
      }
    }

    log_(absl::StrCat("request node=", node_.id, " type=", ShortTypeName(type),
                      " nonce=", OneLine(req.response_nonce()),
                      " subscribe=", Names(req.resource_names_subscribe()),
                      " unsubscribe=", Names(req.resource_names_unsubscribe())));
    bool was_wildcard = st.wildcard;
    std::set<std::string> was = st.names;
    bool wildcard_capable = IsWildcardCapable(type);
    if (!st.subscribed && wildcard_capable && req.resource_names_subscribe().empty()) {
      st.wildcard = true;  // Legacy wildcard: an empty first subscription.
    }
    st.subscribed = true;
    for (const std::string& name : req.resource_names_subscribe()) {
      if (name == "*" && wildcard_capable) {
        st.wildcard = true;
      } else {
        st.names.insert(name);
      }
    }
    for (const std::string& name : req.resource_names_unsubscribe()) {
      if (name == "*" && wildcard_capable) {
        st.wildcard = false;
        continue;
      }
      st.names.erase(name);
      // The client drops what it unsubscribed from, so a later subscription must resend it; under
      // a wildcard it keeps the resource.
      if (!st.wildcard) st.known.erase(name);
    }
    LogSubscriptionChange(log_, node_.id, type, was_wildcard, was, st.wildcard, st.names);
    for (const auto& [name, version] : req.initial_resource_versions()) st.known[name] = version;
    Respond(type, snapshot, out);
  }

  void OnSnapshot(const std::shared_ptr<const Snapshot>& snapshot,
                  std::vector<DeltaDiscoveryResponse>* out) {
    for (ResourceType type : kAllResourceTypes) Respond(type, snapshot, out);
  }

 private:
  static constexpr size_t kRememberedNonces = 16;

  struct TypeState {
    bool subscribed = false;
    bool wildcard = false;
    bool responded = false;
    std::set<std::string> names;
    // Name -> version of each resource the client is believed to hold.
    std::map<std::string, std::string> known;
    // Recent nonces -> system_version_info, only to log ACK/NACK with a version.
    std::map<uint64_t, std::string> nonce_versions;
  };

  void Respond(ResourceType type, const std::shared_ptr<const Snapshot>& snapshot,
               std::vector<DeltaDiscoveryResponse>* out) {
    TypeState& st = types_[static_cast<int>(type)];
    if (!st.subscribed || snapshot == nullptr) return;
    const auto& all = snapshot->of(type);
    auto in_scope = [&](const std::string& name) {
      return st.wildcard || st.names.count(name) > 0;
    };
    DeltaDiscoveryResponse resp;
    std::vector<std::string> sent;
    for (const auto& [name, r] : all) {
      if (!in_scope(name)) continue;
      auto known = st.known.find(name);
      if (known != st.known.end() && known->second == r.version) continue;
      auto* res = resp.add_resources();
      res->set_name(name);
      res->set_version(r.version);
      PackResource(type, r, res->mutable_resource());
      sent.push_back(name);
    }
    for (const auto& [name, version] : st.known) {
      if (in_scope(name) && all.count(name) == 0) resp.add_removed_resources(name);
    }
    bool first_wildcard = st.wildcard && !st.responded;
    if (resp.resources().empty() && resp.removed_resources().empty() && !first_wildcard) return;

    for (const std::string& name : sent) st.known[name] = all.at(name).version;
    for (const std::string& name : resp.removed_resources()) st.known.erase(name);
    st.responded = true;
    uint64_t nonce = ++nonce_counter_;
    st.nonce_versions[nonce] = snapshot->version;
    if (st.nonce_versions.size() > kRememberedNonces) {
      st.nonce_versions.erase(st.nonce_versions.begin());
    }
    resp.set_system_version_info(snapshot->version);
    resp.set_type_url(TypeUrl(type));
    resp.set_nonce(absl::StrCat(nonce));
    Pushed(type, snapshot->version);
    log_(absl::StrCat("push node=", node_.id, " type=", ShortTypeName(type), " version=",
                      snapshot->version, " nonce=", nonce, " resources=", absl::StrJoin(sent, ","),
                      " removed=", absl::StrJoin(resp.removed_resources(), ",")));
    out->push_back(std::move(resp));
  }

  uint64_t nonce_counter_ = 0;
  std::array<TypeState, kNumResourceTypes> types_;
  std::set<std::string> ignored_;
};

}  // namespace

AdsService::AdsService(LogFn log, Fleet* fleet) : log_(std::move(log)), fleet_(fleet) {}

AdsService::~AdsService() { Shutdown(); }

void AdsService::SetSelector(Selector selector) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    selector_ = std::move(selector);
  }
  Notify();
}

void AdsService::Notify() {
  std::lock_guard<std::mutex> lock(mu_);
  for (StreamSignals* s : streams_) {
    std::lock_guard<std::mutex> stream_lock(s->mu);
    s->snapshot_changed = true;
    s->cv.notify_one();
  }
}

void AdsService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  for (StreamSignals* s : streams_) {
    std::lock_guard<std::mutex> stream_lock(s->mu);
    s->shutdown = true;
    s->cv.notify_one();
  }
}

bool AdsService::Register(StreamSignals* signals) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return false;
  streams_.insert(signals);
  return true;
}

void AdsService::Unregister(StreamSignals* signals) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.erase(signals);
}

std::shared_ptr<const Snapshot> AdsService::SnapshotFor(const NodeInfo& node) const {
  Selector selector;
  {
    std::lock_guard<std::mutex> lock(mu_);
    selector = selector_;
  }
  return selector ? selector(node) : nullptr;
}

template <typename Session, typename Request, typename Response>
grpc::Status AdsService::RunStream(grpc::ServerContext* context,
                                   grpc::ServerReaderWriter<Response, Request>* stream,
                                   const std::string& service) {
  StreamSignals signals;
  if (!Register(&signals)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "xds_server is shutting down");
  }
  std::deque<Request> inbox;  // Guarded by signals.mu.
  std::thread reader([&] {
    while (true) {
      Request req;
      if (!stream->Read(&req)) break;
      std::lock_guard<std::mutex> lock(signals.mu);
      inbox.push_back(std::move(req));
      signals.cv.notify_one();
    }
    std::lock_guard<std::mutex> lock(signals.mu);
    signals.reader_done = true;
    signals.cv.notify_one();
  });

  Session session(log_, service, fleet_);
  bool reader_done = false;
  while (true) {
    std::deque<Request> requests;
    bool snapshot_changed = false;
    {
      std::unique_lock<std::mutex> lock(signals.mu);
      signals.cv.wait(lock, [&] {
        return !inbox.empty() || signals.snapshot_changed || signals.reader_done ||
               signals.shutdown;
      });
      // After the client is gone or on shutdown, nothing more is worth sending.
      if (signals.shutdown || signals.reader_done) {
        reader_done = signals.reader_done;
        break;
      }
      requests.swap(inbox);
      std::swap(snapshot_changed, signals.snapshot_changed);
    }
    std::vector<Response> out;
    std::shared_ptr<const Snapshot> current;
    for (const Request& req : requests) {
      if (!session.opened()) session.Open(req.node(), context->peer(), Session::kMode);
      // Taken after the wake-up, so a change that lands meanwhile is seen now or flagged again.
      current = SnapshotFor(session.node());
      session.OnRequest(req, current, &out);
    }
    if (snapshot_changed && session.opened()) {
      current = SnapshotFor(session.node());
      session.OnSnapshot(current, &out);
    }
    if (fleet_ != nullptr && current != nullptr)
      fleet_->Evaluated(session.node_id(), current->version);
    bool write_failed = false;
    for (const Response& resp : out) {
      if (!stream->Write(resp)) {
        write_failed = true;
        break;
      }
    }
    if (write_failed) break;
  }
  // The reader may still be blocked in Read(); cancelling the call is what releases it.
  if (!reader_done) context->TryCancel();
  reader.join();
  Unregister(&signals);
  session.Close();
  return grpc::Status::OK;
}

grpc::Status AdsService::StreamAggregatedResources(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<DiscoveryResponse, DiscoveryRequest>* stream) {
  return RunStream<SotwSession>(context, stream, "");
}

grpc::Status AdsService::DeltaAggregatedResources(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<DeltaDiscoveryResponse, DeltaDiscoveryRequest>* stream) {
  return RunStream<DeltaSession>(context, stream, "");
}

grpc::Status AdsService::Sotw(grpc::ServerContext* context,
                              grpc::ServerReaderWriter<DiscoveryResponse, DiscoveryRequest>* stream,
                              const std::string& service) {
  return RunStream<SotwSession>(context, stream, service);
}

grpc::Status AdsService::Delta(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<DeltaDiscoveryResponse, DeltaDiscoveryRequest>* stream,
    const std::string& service) {
  return RunStream<DeltaSession>(context, stream, service);
}

namespace {

// Each type's own service (Envoy's api_config_source without ADS), served by the same sessions:
// every request names its type_url. `Name` is the service as the stream-open line shows it.
#define RPX_TYPE_SERVICE(Class, Base, Stream, DeltaM, Name)                                    \
  class Class final : public Base::Service {                                                   \
   public:                                                                                     \
    explicit Class(AdsService* ads) : ads_(ads) {}                                             \
    grpc::Status Stream(                                                                       \
        grpc::ServerContext* c,                                                                \
        grpc::ServerReaderWriter<DiscoveryResponse, DiscoveryRequest>* s) override {           \
      return ads_->Sotw(c, s, Name);                                                           \
    }                                                                                          \
    grpc::Status DeltaM(                                                                       \
        grpc::ServerContext* c,                                                                \
        grpc::ServerReaderWriter<DeltaDiscoveryResponse, DeltaDiscoveryRequest>* s) override { \
      return ads_->Delta(c, s, Name);                                                          \
    }                                                                                          \
                                                                                               \
   private:                                                                                    \
    AdsService* ads_;                                                                          \
  };

RPX_TYPE_SERVICE(LdsService, envoy::service::listener::v3::ListenerDiscoveryService,
                 StreamListeners, DeltaListeners, "LDS")
RPX_TYPE_SERVICE(CdsService, envoy::service::cluster::v3::ClusterDiscoveryService, StreamClusters,
                 DeltaClusters, "CDS")
RPX_TYPE_SERVICE(RdsService, envoy::service::route::v3::RouteDiscoveryService, StreamRoutes,
                 DeltaRoutes, "RDS")
RPX_TYPE_SERVICE(EdsService, envoy::service::endpoint::v3::EndpointDiscoveryService,
                 StreamEndpoints, DeltaEndpoints, "EDS")
RPX_TYPE_SERVICE(SdsService, envoy::service::secret::v3::SecretDiscoveryService, StreamSecrets,
                 DeltaSecrets, "SDS")
#undef RPX_TYPE_SERVICE

std::vector<std::unique_ptr<grpc::Service>> TypeServices(AdsService* ads) {
  std::vector<std::unique_ptr<grpc::Service>> out;
  out.push_back(std::make_unique<LdsService>(ads));
  out.push_back(std::make_unique<CdsService>(ads));
  out.push_back(std::make_unique<RdsService>(ads));
  out.push_back(std::make_unique<EdsService>(ads));
  out.push_back(std::make_unique<SdsService>(ads));
  return out;
}

}  // namespace

namespace {

StoreOptions MakeStoreOptions(const XdsServerOptions& o) {
  StoreOptions s;
  s.dir = o.dir;
  s.history_limit = o.history_limit;
  s.check = o.check;
  s.check_options.external_clusters = o.static_clusters;
  s.backend = o.backend;
  return s;
}

std::string HostPort(std::string host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  return absl::StrCat(host, ":", port);
}

}  // namespace

XdsServer::XdsServer(XdsServerOptions options, LogFn log)
    : options_(std::move(options)),
      log_(std::move(log)),
      fleet_(options_.gone_ttl),
      store_(MakeStoreOptions(options_), log_),
      service_(log_, &fleet_),
      type_services_(TypeServices(&service_)),
      poller_([this](bool force) { store_.ReloadDirectory(force); }, options_.poll_interval) {}

XdsServer::~XdsServer() { Stop(); }

bool XdsServer::Start(std::string* error) {
  store_.SetOnChange([this] { service_.Notify(); });
  store_.Open();
  service_.SetSelector([this](const NodeInfo& node) {
    uint64_t version = 0;
    return store_.ForNode(node, &version);
  });

  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options_.tls_cert_pem.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        options_.tls_client_ca_pem.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = options_.tls_client_ca_pem;
    ssl.pem_key_cert_pairs.push_back({options_.tls_key_pem, options_.tls_cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  // gRPC turns SO_REUSEPORT on by default: a second server on a fixed port would then share it
  // silently instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  std::string where = HostPort(options_.address, options_.port);
  builder.AddListeningPort(where, credentials, &port_);
  builder.RegisterService(&service_);
  for (auto& s : type_services_) builder.RegisterService(s.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    *error = absl::StrCat("cannot listen on ", where);
    server_.reset();
    return false;
  }
  if (options_.control_port >= 0) {
    control_service_ = std::make_unique<ControlService>(&store_, &fleet_, log_);
    grpc::ServerBuilder control;
    control.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    std::string control_where = HostPort(options_.control_address, options_.control_port);
    control.AddListeningPort(control_where, credentials, &control_port_);
    control.RegisterService(control_service_.get());
    control_server_ = control.BuildAndStart();
    if (control_server_ == nullptr || control_port_ == 0) {
      *error = absl::StrCat("cannot listen on ", control_where, " (control API)");
      control_server_.reset();
      server_->Shutdown();
      server_->Wait();
      server_.reset();
      return false;
    }
  }
  log_(absl::StrCat("xds_server listening on ", HostPort(options_.address, port_),
                    " dir=", options_.dir,
                    options_.tls_cert_pem.empty()        ? ""
                    : options_.tls_client_ca_pem.empty() ? " tls=on"
                                                         : " tls=mutual",
                    options_.backend ? " store=" + options_.backend->Describe() : ""));
  if (control_server_) {
    log_(absl::StrCat("control API listening on ",
                      HostPort(options_.control_address, control_port_)));
  }
  if (!options_.dir.empty() && !(options_.backend && options_.backend->shared())) poller_.Start();
  return true;
}

void XdsServer::RequestReload() { poller_.RequestReload(); }

void XdsServer::Stop(std::chrono::milliseconds grace) {
  if (stopped_) return;
  stopped_ = true;
  poller_.Stop();
  service_.Shutdown();
  auto deadline = std::chrono::system_clock::now() + grace;
  if (control_server_ != nullptr) control_server_->Shutdown(deadline);
  if (server_ != nullptr) {
    server_->Shutdown(deadline);
    server_->Wait();
  }
  if (control_server_ != nullptr) control_server_->Wait();
}

}  // namespace xds_server
}  // namespace rpx
