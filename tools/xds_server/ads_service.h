// The ADS gRPC service of tools/xds_server (state of the world and delta) and XdsServer, which
// ties it to a gRPC server and a polled resource directory.
//
// Threads: gRPC's sync API runs each stream's handler on a gRPC thread. Each stream also has a
// reader thread that only calls Read() and queues requests; the handler thread alone decides and
// Write()s, woken by a new request, a change of what it is served (Notify, from any thread) or
// Shutdown(). So per-stream protocol state needs no lock, and Read and Write never race. Every
// event is one line to the LogFn (see DESIGN in ads_service.cc for the formats).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "envoy/service/cluster/v3/cds.grpc.pb.h"
#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "envoy/service/endpoint/v3/eds.grpc.pb.h"
#include "envoy/service/listener/v3/lds.grpc.pb.h"
#include "envoy/service/route/v3/rds.grpc.pb.h"
#include "envoy/service/secret/v3/sds.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tools/xds_server/fleet.h"
#include "tools/xds_server/snapshot.h"
#include "tools/xds_server/store.h"

namespace rpx {
namespace xds_server {

class AdsService final : public envoy::service::discovery::v3::AggregatedDiscoveryService::Service {
 public:
  // Picks the snapshot a node is served (null: none yet). Any thread.
  using Selector = std::function<std::shared_ptr<const Snapshot>(const NodeInfo& node)>;

  // `fleet` (may be null) is told about every stream's node, pushes, ACKs and NACKs; it must
  // outlive the service.
  explicit AdsService(LogFn log, Fleet* fleet = nullptr);
  ~AdsService() override;

  // Serves each node what `selector` picks for it, and wakes every stream. Streams that
  // subscribe before the first snapshot get their first response when it arrives.
  void SetSelector(Selector selector);
  // Wakes every stream to ask the selector again (after the snapshots it picks from changed).
  void Notify();

  // Ends every open stream promptly (cancelling its call) and refuses new ones, so that
  // grpc::Server::Shutdown does not wait on handlers blocked for the next event.
  void Shutdown();

  grpc::Status StreamAggregatedResources(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<envoy::service::discovery::v3::DiscoveryResponse,
                               envoy::service::discovery::v3::DiscoveryRequest>* stream) override;

  grpc::Status DeltaAggregatedResources(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<envoy::service::discovery::v3::DeltaDiscoveryResponse,
                               envoy::service::discovery::v3::DeltaDiscoveryRequest>* stream)
      override;

  // A stream of one type's own service (LDS, CDS, ... without ADS): `service` names it in the
  // stream-open line.
  grpc::Status Sotw(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<envoy::service::discovery::v3::DiscoveryResponse,
                               envoy::service::discovery::v3::DiscoveryRequest>* stream,
      const std::string& service);
  grpc::Status Delta(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<envoy::service::discovery::v3::DeltaDiscoveryResponse,
                               envoy::service::discovery::v3::DeltaDiscoveryRequest>* stream,
      const std::string& service);

  // Wake-up flags of one open stream; defined in the .cc.
  struct StreamSignals;

 private:
  template <typename Session, typename Request, typename Response>
  grpc::Status RunStream(grpc::ServerContext* context,
                         grpc::ServerReaderWriter<Response, Request>* stream,
                         const std::string& service);
  bool Register(StreamSignals* signals);
  void Unregister(StreamSignals* signals);
  std::shared_ptr<const Snapshot> SnapshotFor(const NodeInfo& node) const;

  LogFn log_;
  Fleet* const fleet_;
  mutable std::mutex mu_;  // Guards the fields below; taken before any StreamSignals::mu.
  Selector selector_;
  std::set<StreamSignals*> streams_;
  bool shutdown_ = false;
};

struct XdsServerOptions {
  std::string address = "127.0.0.1";
  int port = 0;  // 0: the kernel picks a free port; see XdsServer::port().
  std::string dir;
  std::chrono::milliseconds poll_interval{200};
  // The control API (rpx.control.v1.ControlService); -1: not served, 0: a free port.
  std::string control_address = "127.0.0.1";
  int control_port = -1;
  size_t history_limit = 100;
  bool check = true;
  std::set<std::string> static_clusters;
  std::chrono::milliseconds gone_ttl = std::chrono::minutes(10);
  // TLS on both ports (PEM text; empty cert: cleartext). With client_ca, clients must present a
  // certificate it signed (mTLS).
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_client_ca_pem;
  // Where versions are kept; null: DIR/.rpx. A shared one (etcd) makes `dir` optional: it only
  // seeds an empty store, and is not polled.
  std::shared_ptr<StoreBackend> backend;
};

// Loads the directory, listens, and pushes every change (of the directory or through the control
// API) to the open streams, each node getting the version its group is assigned.
// Start, RequestReload and Stop may be called from different threads, but Stop only once.
class XdsServer {
 public:
  XdsServer(XdsServerOptions options, LogFn log);
  ~XdsServer();  // Stops if running.

  // Loads the history and the directory (a failure is logged, and streams wait for the first good
  // version), starts listening and logs "xds_server listening on ADDR:PORT dir=DIR" (and
  // "control API listening on ADDR:PORT"). False if it cannot listen.
  bool Start(std::string* error);
  int port() const { return port_; }
  int control_port() const { return control_port_; }
  // Reloads now even if the directory looks unchanged (SIGHUP).
  void RequestReload();
  // Ends the streams and stops the gRPC servers, cancelling what is left after `grace`.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(1000));

 private:
  XdsServerOptions options_;
  LogFn log_;
  Fleet fleet_;
  Store store_;
  AdsService service_;
  std::vector<std::unique_ptr<grpc::Service>> type_services_;  // LDS, CDS, RDS, EDS, SDS
  std::unique_ptr<grpc::Service> control_service_;
  DirectoryPoller poller_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> control_server_;
  int port_ = 0;
  int control_port_ = 0;
  bool stopped_ = false;
};

}  // namespace xds_server
}  // namespace rpx
