// XdsClient: one xDS stream to a control plane (ADS, or one type's own service), state of the
// world or delta, as Envoy speaks it.
//
// Subscriptions, as Envoy makes them: Listener and Cluster are wildcard when Start() asks for
// them; RouteConfiguration, ClusterLoadAssignment and Secret ask for exactly the names
// SetNames() gives.
// A type nobody names is never requested: an empty first request would be a (legacy) wildcard
// subscription, and a control plane that honours it sends every route table or endpoint set it
// has. When the last name of a type goes, SotW sends an empty list (after names were sent on the
// stream, the protocol reads it as "unsubscribe from all") and delta sends the unsubscribes.
//
// Threads: a stream thread owns the gRPC stream and blocks in Read(); everything it receives is
// posted to the main dispatcher, where all protocol state lives and where the Applier runs.
// Requests are written from the main thread under a mutex (gRPC allows one reader and one writer
// at a time). When the stream breaks, the client keeps the resources it has (the server keeps
// serving them) and reconnects with jittered exponential backoff (500 ms doubling to 30 s, back
// to 500 ms once a response arrives), then resubscribes (delta: with initial_resource_versions).
//
// For each type the Applier sees a complete candidate state (name -> resource): for Listener and
// Cluster in SotW exactly what the response holds; for RouteConfiguration and
// ClusterLoadAssignment the current ones updated by the response (SotW never deletes them by
// absence); in delta the current ones plus changes minus removals. It returns "" to ACK or an error
// to NACK, in which case the client keeps the previous state for that type.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "envoy/config/core/v3/base.pb.h"
#include "envoy/service/cluster/v3/cds.grpc.pb.h"
#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "envoy/service/endpoint/v3/eds.grpc.pb.h"
#include "envoy/service/listener/v3/lds.grpc.pb.h"
#include "envoy/service/route/v3/rds.grpc.pb.h"
#include "envoy/service/secret/v3/sds.grpc.pb.h"
#include "google/protobuf/any.pb.h"
#include "source/config/xds_source.h"
#include "source/event/dispatcher.h"

namespace rpx {

constexpr char kListenerType[] = "type.googleapis.com/envoy.config.listener.v3.Listener";
constexpr char kRouteType[] = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
constexpr char kClusterType[] = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
constexpr char kEndpointType[] =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
constexpr char kSecretType[] =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

struct XdsResource {
  std::string version;
  google::protobuf::Any resource;
};
using XdsResourceMap = std::map<std::string, XdsResource>;

class XdsApplier {
 public:
  virtual ~XdsApplier() = default;
  // Main thread. `version` is the response's version (system_version_info for delta).
  virtual std::string Apply(const std::string& type_url, const XdsResourceMap& resources,
                            const std::string& version) = 0;
  // The stream connected (true) or broke (false). Informational.
  virtual void OnStreamState(bool connected) {}
};

struct XdsClientOptions {
  std::string target;  // gRPC target, e.g. "ipv4:127.0.0.1:18000"
  XdsTls tls;
  bool delta = false;
  // Empty: the aggregated service (ADS), for every type. A type URL: that type's own service
  // (ListenerDiscoveryService.StreamListeners, ...), for an api_config_source that is not ADS.
  std::string service;
  envoy::config::core::v3::Node node;
};

class XdsClient {
 public:
  XdsClient(Dispatcher& main, XdsClientOptions options, XdsApplier& applier);
  ~XdsClient();
  // Subscribes to Listener and Cluster (wildcard) as asked and starts the stream. Names set with
  // SetNames() before Start() go into the stream's first requests.
  void Start(bool lds, bool cds);
  void Stop();
  // Main thread. Sets the names wanted for RouteConfiguration or ClusterLoadAssignment; resources
  // no longer named are dropped (their state is forgotten). An empty set unsubscribes the type.
  void SetNames(const std::string& type_url, const std::set<std::string>& names);

  // Introspection for /config_dump and tests (main thread).
  struct TypeStatus {
    std::string version;
    std::string last_nack;
    uint64_t updates = 0, nacks = 0;
  };
  const std::map<std::string, TypeStatus>& status() const { return status_; }
  bool connected() const { return connected_; }
  // Monotonic time (ns) at which the response now being applied was read off the stream.
  int64_t current_response_received_ns() const { return current_received_ns_; }
  uint64_t reconnects() const { return reconnects_; }

 private:
  struct TypeState {
    bool wildcard = false;        // Listener / Cluster, when asked for
    std::set<std::string> names;  // RouteConfiguration / ClusterLoadAssignment
    std::string version;          // last accepted (SotW)
    std::string nonce;            // last received
    XdsResourceMap resources;
    std::set<std::string> sent_names;  // delta: names the server knows we want
    bool initial_sent = false;         // this stream already had a request of this type
    bool subscribed() const { return wildcard || !names.empty(); }
  };
  void StreamLoop();
  // The state of `type_url` if this response is current and the type is subscribed, else null
  // (the response is dropped; its nonce is kept for the type's next request).
  TypeState* StateFor(uint64_t generation, int64_t received_ns, const std::string& type_url,
                      const std::string& nonce);
  void OnConnected(uint64_t generation);
  void OnDisconnected(uint64_t generation);
  void OnSotwResponse(uint64_t generation, int64_t received_ns,
                      std::shared_ptr<envoy::service::discovery::v3::DiscoveryResponse> r);
  void OnDeltaResponse(uint64_t generation, int64_t received_ns,
                       std::shared_ptr<envoy::service::discovery::v3::DeltaDiscoveryResponse> r);
  void SendRequest(const std::string& type_url, const std::string& error);
  void Finish(const std::string& type_url, const std::string& version, const std::string& nonce,
              const XdsResourceMap& candidate, const std::string& error, TypeState& st);
  void Write(const envoy::service::discovery::v3::DiscoveryRequest& r);
  void WriteDelta(const envoy::service::discovery::v3::DeltaDiscoveryRequest& r);

  Dispatcher& main_;
  XdsClientOptions options_;
  XdsApplier& applier_;
  std::map<std::string, TypeState> types_;  // main thread
  std::map<std::string, TypeStatus> status_;
  bool connected_ = false;
  uint64_t reconnects_ = 0;
  uint64_t generation_ = 0;  // main thread's view of the live stream
  int64_t current_received_ns_ = 0;

  // Shared with the stream thread.
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::shared_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<envoy::service::discovery::v3::DiscoveryRequest,
                                           envoy::service::discovery::v3::DiscoveryResponse>>
      sotw_;
  std::unique_ptr<grpc::ClientReaderWriter<envoy::service::discovery::v3::DeltaDiscoveryRequest,
                                           envoy::service::discovery::v3::DeltaDiscoveryResponse>>
      delta_;
  uint64_t stream_generation_ = 0;
  std::thread thread_;
};

}  // namespace rpx
