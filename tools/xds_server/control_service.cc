#include "tools/xds_server/control_service.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rpx {
namespace xds_server {
namespace {

namespace pb = rpx::control::v1;

std::string CheckTarget(const pb::Target& t) {
  if (!t.node_cluster().empty() && !t.metadata_key().empty()) {
    return "target: give node_cluster or metadata_key, not both";
  }
  if (t.metadata_key().empty() && !t.metadata_value().empty()) {
    return "target: metadata_value needs a metadata_key";
  }
  return "";
}

void FillProblems(const std::vector<Problem>& problems,
                  google::protobuf::RepeatedPtrField<pb::Problem>* out) {
  for (const Problem& p : problems) {
    pb::Problem* q = out->Add();
    q->set_resource(p.resource);
    q->set_field(p.field);
    q->set_reason(p.reason);
    q->set_message(p.message);
  }
}

void FillChanges(const std::vector<ResourceDelta>& changes,
                 google::protobuf::RepeatedPtrField<pb::ResourceChange>* out) {
  for (const ResourceDelta& d : changes) {
    pb::ResourceChange* c = out->Add();
    c->set_type(PluralTypeName(d.type));
    c->set_name(d.name);
    c->set_kind(d.kind == ResourceDelta::Kind::kAdded     ? pb::ResourceChange::ADDED
                : d.kind == ResourceDelta::Kind::kChanged ? pb::ResourceChange::CHANGED
                                                          : pb::ResourceChange::REMOVED);
    c->set_diff(d.diff);
  }
}

}  // namespace

grpc::Status ControlService::RunChange(ChangeRequest change, const pb::ChangeOptions& options,
                                       pb::ChangeResponse* response) {
  std::string bad_target = CheckTarget(options.target());
  if (!bad_target.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, bad_target);
  change.author = options.author();
  change.description = options.description();
  change.target = TargetFromProto(options.target());
  change.dry_run = options.dry_run();
  change.with_diff = options.with_diff();
  ChangeResult result = store_->Change(change);
  if (!result.request_error.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, result.request_error);
  }
  if (!result.store_error.empty()) {
    log_(absl::StrCat("change failed: cannot store it: ", result.store_error));
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("the change was not stored: ", result.store_error));
  }
  response->set_accepted(result.accepted);
  response->set_version(result.version);
  response->set_base_version(result.base_version);
  response->set_dry_run(change.dry_run);
  FillProblems(result.problems, response->mutable_problems());
  FillChanges(result.changes, response->mutable_changes());
  if (!result.accepted) {
    std::vector<std::string> lines;
    for (const Problem& p : result.problems) lines.push_back(p.message);
    log_(absl::StrCat("change refused author=", change.author, " target=", change.target.ToString(),
                      ": ", absl::StrJoin(lines, "; ")));
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::Apply(grpc::ServerContext*, const pb::ApplyRequest* request,
                                   pb::ChangeResponse* response) {
  ChangeRequest change;
  change.kind = ChangeRequest::Kind::kApply;
  change.upserts = request->resources();
  return RunChange(std::move(change), request->options(), response);
}

grpc::Status ControlService::Delete(grpc::ServerContext*, const pb::DeleteRequest* request,
                                    pb::ChangeResponse* response) {
  ChangeRequest change;
  change.kind = ChangeRequest::Kind::kDelete;
  for (const pb::ResourceRef& ref : request->resources()) {
    ResourceType type;
    if (!ParsePluralTypeName(ref.type(), &type)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("unknown resource type '", ref.type(),
                                       "' (listeners, routes, clusters, endpoints, secrets)"));
    }
    change.deletes.emplace_back(type, ref.name());
  }
  return RunChange(std::move(change), request->options(), response);
}

grpc::Status ControlService::UpdateVirtualHost(grpc::ServerContext*,
                                               const pb::UpdateVirtualHostRequest* request,
                                               pb::ChangeResponse* response) {
  ChangeRequest change;
  change.kind = ChangeRequest::Kind::kVirtualHost;
  change.route_configuration = request->route_configuration();
  change.virtual_host = request->virtual_host();
  change.remove_virtual_host = request->remove();
  return RunChange(std::move(change), request->options(), response);
}

grpc::Status ControlService::Rollback(grpc::ServerContext*, const pb::RollbackRequest* request,
                                      pb::ChangeResponse* response) {
  ChangeRequest change;
  change.kind = ChangeRequest::Kind::kRollback;
  change.rollback_to = request->version();
  return RunChange(std::move(change), request->options(), response);
}

grpc::Status ControlService::GetSnapshot(grpc::ServerContext*,
                                         const pb::GetSnapshotRequest* request,
                                         pb::GetSnapshotResponse* response) {
  std::string bad_target = CheckTarget(request->target());
  if (!bad_target.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, bad_target);
  ResourceType only = ResourceType::kListener;
  bool filter = !request->type().empty();
  if (filter && !ParsePluralTypeName(request->type(), &only)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("unknown resource type '", request->type(),
                                     "' (listeners, routes, clusters, endpoints, secrets)"));
  }
  uint64_t version = request->version();
  std::shared_ptr<const Snapshot> snapshot;
  if (version == 0) {
    snapshot = store_->ForTarget(TargetFromProto(request->target()), &version);
  } else {
    snapshot = store_->Get(version);
    if (!snapshot) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("version ", version, " is not kept"));
    }
  }
  response->set_version(version);
  if (!snapshot) return grpc::Status::OK;
  bool found = false;
  for (ResourceType t : kAllResourceTypes) {
    if (filter && t != only) continue;
    for (const auto& [name, r] : snapshot->of(t)) {
      if (!request->name().empty() && name != request->name()) continue;
      AppendResource(t, r, response->mutable_resources());
      found = true;
    }
  }
  if (!request->name().empty() && !found) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat(filter ? request->type() : "resource", " '", request->name(),
                                     "' does not exist in version ", version));
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::ListVersions(grpc::ServerContext*, const pb::ListVersionsRequest*,
                                          pb::ListVersionsResponse* response) {
  for (const VersionRecord& r : store_->History()) {
    pb::VersionInfo* v = response->add_versions();
    v->set_version(r.version);
    v->set_parent(r.parent);
    v->set_author(r.author);
    v->set_description(r.description);
    v->set_created_ms(r.created_ms);
    *v->mutable_target() = TargetToProto(r.target);
    v->set_origin(r.origin);
    v->set_added(r.added);
    v->set_changed(r.changed);
    v->set_removed(r.removed);
  }
  for (const auto& [target, version] : store_->Assignments()) {
    pb::Assignment* a = response->add_assignments();
    *a->mutable_target() = TargetToProto(target);
    a->set_version(version);
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::Diff(grpc::ServerContext*, const pb::DiffRequest* request,
                                  pb::DiffResponse* response) {
  if (request->has_proposed()) {
    std::string bad_target = CheckTarget(request->target());
    if (!bad_target.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, bad_target);
    ChangeRequest change;
    change.kind = ChangeRequest::Kind::kApply;
    change.upserts = request->proposed();
    change.target = TargetFromProto(request->target());
    change.dry_run = true;
    change.with_diff = true;
    ChangeResult result = store_->Change(change);
    if (!result.request_error.empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, result.request_error);
    }
    FillProblems(result.problems, response->mutable_problems());
    FillChanges(result.changes, response->mutable_changes());
    response->set_from_version(result.base_version);
    return grpc::Status::OK;
  }
  std::vector<ResourceDelta> changes;
  if (!store_->Diff(request->from_version(), request->to_version(), &changes)) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("version ", request->from_version(), " or ",
                                     request->to_version(), " is not kept"));
  }
  FillChanges(changes, response->mutable_changes());
  response->set_from_version(request->from_version());
  response->set_to_version(request->to_version());
  return grpc::Status::OK;
}

grpc::Status ControlService::GetFleetStatus(grpc::ServerContext*, const pb::FleetStatusRequest*,
                                            pb::FleetStatusResponse* response) {
  response->set_now_ms(Fleet::NowMs());
  for (const NodeState& n : fleet_->Nodes()) {
    pb::NodeStatus* s = response->add_nodes();
    s->set_id(n.info.id);
    s->set_cluster(n.info.cluster);
    s->set_address(n.address);
    s->set_state(n.connected ? pb::NodeStatus::CONNECTED : pb::NodeStatus::GONE);
    uint64_t assigned = 0;
    store_->ForNode(n.info, &assigned);
    s->set_assigned_version(assigned);
    s->set_connected_since_ms(n.connected_since_ms);
    s->set_last_heard_ms(n.last_heard_ms);
    s->set_gone_since_ms(n.gone_since_ms);
    s->set_streams(n.streams);
    s->set_current_version(Fleet::CurrentVersion(n));
    for (const auto& [k, v] : n.info.metadata) (*s->mutable_metadata())[k] = v;
    s->set_region(n.info.region);
    s->set_zone(n.info.zone);
    s->set_sub_zone(n.info.sub_zone);
    // Listed in the order people read a config in.
    for (ResourceType t : {ResourceType::kListener, ResourceType::kRoute, ResourceType::kCluster,
                           ResourceType::kEndpoint, ResourceType::kSecret}) {
      const NodeTypeState& ts = n.types[static_cast<int>(t)];
      if (ts.sent_version.empty() && ts.acked_version.empty() && ts.nack_version.empty()) {
        continue;
      }
      pb::NodeStatus::TypeStatus* out = s->add_types();
      out->set_type(ShortTypeName(t));
      out->set_acked_version(ts.acked_version);
      out->set_sent_version(ts.sent_version);
      out->set_nack_version(ts.nack_version);
      out->set_nack_error(ts.nack_error);
      out->set_nack_ms(ts.nack_ms);
    }
  }
  return grpc::Status::OK;
}

}  // namespace xds_server
}  // namespace rpx
