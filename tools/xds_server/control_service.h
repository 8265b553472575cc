// rpx.control.v1.ControlService (api/rpx/control/v1/control.proto) over a Store and a Fleet:
// translates requests into Store changes and the Store's and Fleet's state into responses.
// gRPC's sync API calls each method on one of its threads; the Store and Fleet serialize.
#pragma once

#include "rpx/control/v1/control.grpc.pb.h"
#include "tools/xds_server/fleet.h"
#include "tools/xds_server/store.h"

namespace rpx {
namespace xds_server {

class ControlService final : public rpx::control::v1::ControlService::Service {
 public:
  // Both must outlive the service. `log` gets one line per accepted or refused change.
  ControlService(Store* store, Fleet* fleet, LogFn log)
      : store_(store), fleet_(fleet), log_(std::move(log)) {}

  grpc::Status Apply(grpc::ServerContext* context, const rpx::control::v1::ApplyRequest* request,
                     rpx::control::v1::ChangeResponse* response) override;
  grpc::Status Delete(grpc::ServerContext* context, const rpx::control::v1::DeleteRequest* request,
                      rpx::control::v1::ChangeResponse* response) override;
  grpc::Status UpdateVirtualHost(grpc::ServerContext* context,
                                 const rpx::control::v1::UpdateVirtualHostRequest* request,
                                 rpx::control::v1::ChangeResponse* response) override;
  grpc::Status Rollback(grpc::ServerContext* context,
                        const rpx::control::v1::RollbackRequest* request,
                        rpx::control::v1::ChangeResponse* response) override;
  grpc::Status GetSnapshot(grpc::ServerContext* context,
                           const rpx::control::v1::GetSnapshotRequest* request,
                           rpx::control::v1::GetSnapshotResponse* response) override;
  grpc::Status ListVersions(grpc::ServerContext* context,
                            const rpx::control::v1::ListVersionsRequest* request,
                            rpx::control::v1::ListVersionsResponse* response) override;
  grpc::Status Diff(grpc::ServerContext* context, const rpx::control::v1::DiffRequest* request,
                    rpx::control::v1::DiffResponse* response) override;
  grpc::Status GetFleetStatus(grpc::ServerContext* context,
                              const rpx::control::v1::FleetStatusRequest* request,
                              rpx::control::v1::FleetStatusResponse* response) override;

 private:
  grpc::Status RunChange(ChangeRequest change, const rpx::control::v1::ChangeOptions& options,
                         rpx::control::v1::ChangeResponse* response);

  Store* store_;
  Fleet* fleet_;
  LogFn log_;
};

}  // namespace xds_server
}  // namespace rpx
