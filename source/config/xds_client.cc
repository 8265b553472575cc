#include "source/config/xds_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "source/common/assert.h"
#include "source/common/logger.h"

namespace rpx {
namespace {

using envoy::service::discovery::v3::AggregatedDiscoveryService;
using envoy::service::discovery::v3::DeltaDiscoveryRequest;
using envoy::service::discovery::v3::DeltaDiscoveryResponse;
using envoy::service::discovery::v3::DiscoveryRequest;
using envoy::service::discovery::v3::DiscoveryResponse;

// The stream for `service`: ADS (empty) or one type's own service, as Envoy opens for an
// api_config_source that is not aggregated.
std::unique_ptr<grpc::ClientReaderWriter<DiscoveryRequest, DiscoveryResponse>> OpenSotw(
    const std::shared_ptr<grpc::Channel>& ch, const std::string& service,
    grpc::ClientContext* ctx) {
  if (service == kListenerType) {
    return envoy::service::listener::v3::ListenerDiscoveryService::NewStub(ch)->StreamListeners(
        ctx);
  }
  if (service == kClusterType) {
    return envoy::service::cluster::v3::ClusterDiscoveryService::NewStub(ch)->StreamClusters(ctx);
  }
  if (service == kRouteType) {
    return envoy::service::route::v3::RouteDiscoveryService::NewStub(ch)->StreamRoutes(ctx);
  }
  if (service == kEndpointType) {
    return envoy::service::endpoint::v3::EndpointDiscoveryService::NewStub(ch)->StreamEndpoints(
        ctx);
  }
  if (service == kSecretType) {
    return envoy::service::secret::v3::SecretDiscoveryService::NewStub(ch)->StreamSecrets(ctx);
  }
  RPX_ASSERT(service.empty());
  return AggregatedDiscoveryService::NewStub(ch)->StreamAggregatedResources(ctx);
}

std::unique_ptr<grpc::ClientReaderWriter<DeltaDiscoveryRequest, DeltaDiscoveryResponse>> OpenDelta(
    const std::shared_ptr<grpc::Channel>& ch, const std::string& service,
    grpc::ClientContext* ctx) {
  if (service == kListenerType) {
    return envoy::service::listener::v3::ListenerDiscoveryService::NewStub(ch)->DeltaListeners(ctx);
  }
  if (service == kClusterType) {
    return envoy::service::cluster::v3::ClusterDiscoveryService::NewStub(ch)->DeltaClusters(ctx);
  }
  if (service == kRouteType) {
    return envoy::service::route::v3::RouteDiscoveryService::NewStub(ch)->DeltaRoutes(ctx);
  }
  if (service == kEndpointType) {
    return envoy::service::endpoint::v3::EndpointDiscoveryService::NewStub(ch)->DeltaEndpoints(ctx);
  }
  if (service == kSecretType) {
    return envoy::service::secret::v3::SecretDiscoveryService::NewStub(ch)->DeltaSecrets(ctx);
  }
  RPX_ASSERT(service.empty());
  return AggregatedDiscoveryService::NewStub(ch)->DeltaAggregatedResources(ctx);
}

int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr uint64_t kBackoffBaseMs = 500;
constexpr uint64_t kBackoffMaxMs = 30000;

bool IsWildcardType(const std::string& type_url) {
  return type_url == kListenerType || type_url == kClusterType;
}

std::string ShortType(const std::string& type_url) {
  if (type_url == kListenerType) return "LDS";
  if (type_url == kRouteType) return "RDS";
  if (type_url == kClusterType) return "CDS";
  if (type_url == kEndpointType) return "EDS";
  if (type_url == kSecretType) return "SDS";
  return type_url;
}

// Resource name from the packed message's `name` (or `cluster_name` for endpoints).
std::string NameOf(const std::string& type_url, const google::protobuf::Any& any) {
  // Avoid unpacking: the name is field 1 of all four types, a length-delimited string.
  const std::string& b = any.value();
  size_t pos = 0;
  while (pos < b.size()) {
    uint64_t key = 0;
    int shift = 0;
    while (pos < b.size()) {
      uint8_t c = b[pos++];
      key |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) break;
      shift += 7;
    }
    uint32_t field = key >> 3, wire = key & 7;
    uint64_t len = 0;
    if (wire == 2) {
      shift = 0;
      while (pos < b.size()) {
        uint8_t c = b[pos++];
        len |= static_cast<uint64_t>(c & 0x7f) << shift;
        if (!(c & 0x80)) break;
        shift += 7;
      }
      if (field == 1) return b.substr(pos, len);
      pos += len;
    } else if (wire == 0) {
      while (pos < b.size() && (b[pos++] & 0x80)) {
      }
    } else if (wire == 1) {
      pos += 8;
    } else if (wire == 5) {
      pos += 4;
    } else {
      break;
    }
  }
  return "";
}

}  // namespace

XdsClient::XdsClient(Dispatcher& main, XdsClientOptions options, XdsApplier& applier)
    : main_(main), options_(std::move(options)), applier_(applier) {}

XdsClient::~XdsClient() { Stop(); }

void XdsClient::Start(bool lds, bool cds) {
  if (cds) types_[kClusterType].wildcard = true;
  if (lds) types_[kListenerType].wildcard = true;
  thread_ = std::thread([this] { StreamLoop(); });
}

void XdsClient::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (context_) context_->TryCancel();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void XdsClient::StreamLoop() {
  // The channel's own reconnect backoff (1 s growing 1.6x to 120 s by default) would stack on
  // ours; keep it within Envoy's bounds so ours decides.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kBackoffBaseMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kBackoffBaseMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kBackoffMaxMs);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (options_.tls.enabled) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.tls.root_pem;
    ssl.pem_private_key = options_.tls.key_pem;
    ssl.pem_cert_chain = options_.tls.cert_pem;
    credentials = grpc::SslCredentials(ssl);
    // The server's certificate is checked against this name, not the target's address.
    if (!options_.tls.sni.empty()) args.SetSslTargetNameOverride(options_.tls.sni);
  }
  auto channel = grpc::CreateCustomChannel(options_.target, credentials, args);
  std::mt19937_64 rng(std::random_device{}());
  uint64_t backoff = kBackoffBaseMs;
  uint64_t generation = 0;
  while (true) {
    auto ctx = std::make_shared<grpc::ClientContext>();
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      context_ = ctx;
      ++generation;
      stream_generation_ = generation;
      if (options_.delta) {
        delta_ = OpenDelta(channel, options_.service, ctx.get());
      } else {
        sotw_ = OpenSotw(channel, options_.service, ctx.get());
      }
    }
    main_.Post([this, generation] { OnConnected(generation); });
    bool got_response = false;
    if (options_.delta) {
      auto r = std::make_shared<DeltaDiscoveryResponse>();
      while (delta_->Read(r.get())) {
        got_response = true;
        int64_t t = MonotonicNs();
        main_.Post([this, generation, t, r] { OnDeltaResponse(generation, t, r); });
        r = std::make_shared<DeltaDiscoveryResponse>();
      }
    } else {
      auto r = std::make_shared<DiscoveryResponse>();
      while (sotw_->Read(r.get())) {
        got_response = true;
        int64_t t = MonotonicNs();
        main_.Post([this, generation, t, r] { OnSotwResponse(generation, t, r); });
        r = std::make_shared<DiscoveryResponse>();
      }
    }
    grpc::Status status;
    {
      std::lock_guard<std::mutex> l(mu_);
      stream_generation_ = 0;  // no more writes to this stream
      status = options_.delta ? delta_->Finish() : sotw_->Finish();
      delta_.reset();
      sotw_.reset();
      context_.reset();
      if (stopping_) return;
    }
    RPX_LOG(kWarn, "xDS stream to %s closed: %s (%s)", options_.target,
            status.error_message().empty() ? "no message" : status.error_message(),
            got_response ? "had responses" : "no response");
    main_.Post([this, generation] { OnDisconnected(generation); });
    if (got_response) backoff = kBackoffBaseMs;  // Envoy resets the backoff after a response
    // Full jitter over [base/2, backoff].
    std::uniform_int_distribution<uint64_t> dist(backoff / 2, backoff);
    uint64_t wait = dist(rng);
    backoff = std::min(backoff * 2, kBackoffMaxMs);
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::milliseconds(wait), [this] { return stopping_; });
    if (stopping_) return;
  }
}

void XdsClient::OnConnected(uint64_t generation) {
  generation_ = generation;
  connected_ = true;
  ++reconnects_;
  applier_.OnStreamState(true);
  // (Re)subscribe in Envoy's order: secrets, clusters and their endpoints, then listeners and
  // their routes. Types with nothing to ask for send nothing (SendRequest).
  for (const char* t : {kSecretType, kClusterType, kEndpointType, kListenerType, kRouteType}) {
    auto it = types_.find(t);
    if (it == types_.end()) continue;
    it->second.nonce.clear();
    it->second.sent_names.clear();
    it->second.initial_sent = false;
    SendRequest(t, "");
  }
}

void XdsClient::OnDisconnected(uint64_t generation) {
  if (generation != generation_) return;
  connected_ = false;
  applier_.OnStreamState(false);
}

void XdsClient::SetNames(const std::string& type_url, const std::set<std::string>& names) {
  RPX_ASSERT(!IsWildcardType(type_url));
  TypeState& st = types_[type_url];
  if (st.names == names) return;
  st.names = names;
  // Resources no longer named are forgotten (Envoy drops RDS/EDS resources nobody references).
  for (auto it = st.resources.begin(); it != st.resources.end();) {
    if (!names.count(it->first)) {
      it = st.resources.erase(it);
    } else {
      ++it;
    }
  }
  if (connected_) SendRequest(type_url, "");
}

void XdsClient::Write(const DiscoveryRequest& r) {
  std::lock_guard<std::mutex> l(mu_);
  if (!sotw_ || stream_generation_ != generation_) return;
  sotw_->Write(r);
}

void XdsClient::WriteDelta(const DeltaDiscoveryRequest& r) {
  std::lock_guard<std::mutex> l(mu_);
  if (!delta_ || stream_generation_ != generation_) return;
  delta_->Write(r);
}

void XdsClient::SendRequest(const std::string& type_url, const std::string& error) {
  TypeState& st = types_[type_url];
  // Nothing named and nothing asked on this stream yet: an empty request now would be read as a
  // wildcard subscription.
  if (!st.subscribed() && !st.initial_sent) return;
  if (!options_.delta) {
    DiscoveryRequest r;
    r.set_version_info(st.version);
    *r.mutable_node() = options_.node;  // on every request, as Envoy does by default
    st.initial_sent = true;
    r.set_type_url(type_url);
    r.set_response_nonce(st.nonce);
    // Empty only after names were sent on this stream: then it unsubscribes from all of them.
    for (const auto& n : st.names) r.add_resource_names(n);
    if (!error.empty()) {
      r.mutable_error_detail()->set_code(3);  // INVALID_ARGUMENT
      r.mutable_error_detail()->set_message(error);
    }
    Write(r);
    return;
  }
  DeltaDiscoveryRequest r;
  *r.mutable_node() = options_.node;
  r.set_type_url(type_url);
  r.set_response_nonce(st.nonce);
  if (!st.initial_sent) {
    // First request of this type on this stream: the whole subscription, and what we have.
    st.initial_sent = true;
    for (const auto& n : st.names) r.add_resource_names_subscribe(n);
    for (const auto& [name, res] : st.resources) {
      (*r.mutable_initial_resource_versions())[name] = res.version;
    }
  } else {
    for (const auto& n : st.names) {
      if (!st.sent_names.count(n)) r.add_resource_names_subscribe(n);
    }
    for (const auto& n : st.sent_names) {
      if (!st.names.count(n)) r.add_resource_names_unsubscribe(n);
    }
  }
  st.sent_names = st.names;
  if (!error.empty()) {
    r.mutable_error_detail()->set_code(3);
    r.mutable_error_detail()->set_message(error);
  }
  WriteDelta(r);
}

void XdsClient::Finish(const std::string& type_url, const std::string& version,
                       const std::string& nonce, const XdsResourceMap& candidate,
                       const std::string& error, TypeState& st) {
  TypeStatus& status = status_[type_url];
  st.nonce = nonce;
  if (error.empty()) {
    st.resources = candidate;
    st.version = version;
    status.version = version;
    ++status.updates;
    RPX_LOG(kInfo, "xDS %s version %s applied (%zu resources)", ShortType(type_url), version,
            candidate.size());
  } else {
    ++status.nacks;
    status.last_nack = error;
    RPX_LOG(kWarn, "xDS %s version %s rejected: %s", ShortType(type_url), version, error);
  }
  SendRequest(type_url, error);
}

XdsClient::TypeState* XdsClient::StateFor(uint64_t generation, int64_t received_ns,
                                          const std::string& type_url, const std::string& nonce) {
  if (generation != generation_) return nullptr;  // from a stream that has since closed
  current_received_ns_ = received_ns;
  auto it = types_.find(type_url);
  if (it == types_.end() || !it->second.subscribed()) {
    // E.g. an answer that crossed our unsubscribe. Its nonce still answers it in the type's next
    // request, so a server that drops requests with stale nonces does not drop that one.
    if (it != types_.end()) it->second.nonce = nonce;
    RPX_LOG(kInfo, "xDS: ignoring a response for %s, which nothing names now", ShortType(type_url));
    return nullptr;
  }
  return &it->second;
}

// "" if `name` may be added to a response's resources, else why not.
static std::string CheckName(const std::string& name, std::set<std::string>* seen) {
  if (name.empty()) return "a resource has no name";
  if (!seen->insert(name).second) {
    return absl::StrCat("resource '", name, "' appears twice in the response");
  }
  return "";
}

void XdsClient::OnSotwResponse(uint64_t generation, int64_t received_ns,
                               std::shared_ptr<DiscoveryResponse> r) {
  const std::string& type_url = r->type_url();
  TypeState* state = StateFor(generation, received_ns, type_url, r->nonce());
  if (!state) return;
  TypeState& st = *state;
  XdsResourceMap candidate;
  if (!IsWildcardType(type_url)) candidate = st.resources;  // never deleted by absence
  std::string error;
  std::set<std::string> seen;
  for (const auto& any : r->resources()) {
    if (any.type_url() != type_url) {
      error = absl::StrCat("resource of type ", any.type_url(), " in a ", type_url, " response");
      break;
    }
    std::string name = NameOf(type_url, any);
    error = CheckName(name, &seen);
    if (!error.empty()) break;
    if (!IsWildcardType(type_url) && !st.names.count(name)) continue;  // not (or no longer) wanted
    candidate[name] = XdsResource{r->version_info(), any};
  }
  if (error.empty()) error = applier_.Apply(type_url, candidate, r->version_info());
  Finish(type_url, r->version_info(), r->nonce(), candidate, error, st);
}

void XdsClient::OnDeltaResponse(uint64_t generation, int64_t received_ns,
                                std::shared_ptr<DeltaDiscoveryResponse> r) {
  const std::string& type_url = r->type_url();
  TypeState* state = StateFor(generation, received_ns, type_url, r->nonce());
  if (!state) return;
  TypeState& st = *state;
  XdsResourceMap candidate = st.resources;
  std::string error;
  std::set<std::string> seen;
  for (const auto& res : r->resources()) {
    const std::string& name = res.name();
    error = CheckName(name, &seen);
    if (!error.empty()) break;
    if (!res.has_resource()) continue;  // a name-only entry (e.g. a TTL refresh)
    if (res.resource().type_url() != type_url) {
      error = absl::StrCat("resource '", name, "' has type ", res.resource().type_url());
      break;
    }
    candidate[name] = XdsResource{res.version(), res.resource()};
  }
  for (const auto& name : r->removed_resources()) candidate.erase(name);
  if (error.empty()) error = applier_.Apply(type_url, candidate, r->system_version_info());
  Finish(type_url, r->system_version_info(), r->nonce(), candidate, error, st);
}

}  // namespace rpx
