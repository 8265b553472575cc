#include "tools/xds_server/change_check.h"

#include <map>
#include <memory>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/endpoint/v3/endpoint.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/config/route/v3/route.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "envoy/extensions/transport_sockets/tls/v3/secret.pb.h"
#include "source/config/server_config.h"
#include "source/config/supported_fields.h"
#include "source/config/tls_config.h"
#include "source/router/route_table.h"

namespace rpx {
namespace xds_server {
namespace {

using envoy::config::route::v3::RouteConfiguration;
using envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;

// The names rpx's config manager gives each type in its messages ("Cluster 'x': ...").
constexpr const char* kKind[] = {"Cluster", "ClusterLoadAssignment", "Listener",
                                 "RouteConfiguration", "Secret"};

std::string ResourcePath(ResourceType type, const std::string& name) {
  return absl::StrCat(kKind[static_cast<int>(type)], " '", name, "'");
}

// The builders prefix their messages with BuildOptions::source and such; rpx's NACK starts at the
// resource (config_manager.cc does the same).
void AddFrom(const std::vector<std::string>& messages, const std::string& path,
             std::vector<std::string>* out) {
  for (const std::string& m : messages) {
    size_t at = m.find(path);
    out->push_back(at == std::string::npos ? m : m.substr(at));
  }
}

// rpx's checks of one resource, as its config manager runs them on an xDS update.
void CheckOne(ResourceType type, const Resource& r, const BuildOptions& build,
              std::vector<std::string>* errors) {
  std::string path = ResourcePath(type, r.name);
  uint64_t ignored = 0;
  std::vector<std::string> build_errors;
  auto decode = [&](google::protobuf::Message* m) {
    if (m->ParseFromString(r.bytes)) return true;
    errors->push_back(absl::StrCat(path, ": cannot decode"));
    return false;
  };
  switch (type) {
    case ResourceType::kListener: {
      envoy::config::listener::v3::Listener l;
      if (!decode(&l)) return;
      size_t before = errors->size();
      CheckDynamicFields(l, "", path, errors, &ignored);
      if (errors->size() != before) return;
      if (!BuildListener(l, path, build, &build_errors)) AddFrom(build_errors, path, errors);
      return;
    }
    case ResourceType::kCluster: {
      envoy::config::cluster::v3::Cluster c;
      if (!decode(&c)) return;
      size_t before = errors->size();
      CheckDynamicFields(c, "", path, errors, &ignored);
      if (errors->size() != before) return;
      ClusterEntry entry;
      std::optional<DnsCluster> dns;
      if (!BuildCluster(c, path, build, &entry, &dns, &build_errors)) {
        AddFrom(build_errors, path, errors);
      }
      return;
    }
    case ResourceType::kEndpoint: {
      envoy::config::endpoint::v3::ClusterLoadAssignment cla;
      if (!decode(&cla)) return;
      size_t before = errors->size();
      CheckDynamicFields(cla, "", path, errors, &ignored);
      if (errors->size() != before) return;
      if (!BuildHostSet(cla, path, build.stats_slots, &build_errors)) {
        AddFrom(build_errors, path, errors);
      }
      return;
    }
    case ResourceType::kRoute: {
      RouteConfiguration rc;
      if (!decode(&rc)) return;
      size_t before = errors->size();
      CheckDynamicFields(rc, "", path, errors, &ignored);
      if (errors->size() != before) return;
      auto table = RouteTable::Create(rc, path);
      if (!table.ok()) errors->push_back(std::string(table.status().message()));
      return;
    }
    case ResourceType::kSecret: {
      envoy::extensions::transport_sockets::tls::v3::Secret s;
      if (!decode(&s)) return;
      size_t before = errors->size();
      CheckDynamicFields(s, "", path, errors, &ignored);
      if (errors->size() != before) return;
      std::string why = CheckSecret(s, path);
      if (!why.empty()) errors->push_back(why);
      return;
    }
  }
}

// A reference from one resource to another: (field path inside the referring resource, name).
using Refs = std::vector<std::pair<std::string, std::string>>;

void RouteClusterRefs(const RouteConfiguration& rc, const std::string& prefix, Refs* out) {
  for (int v = 0; v < rc.virtual_hosts_size(); ++v) {
    const auto& vh = rc.virtual_hosts(v);
    for (int i = 0; i < vh.routes_size(); ++i) {
      const auto& route = vh.routes(i);
      if (!route.has_route()) continue;
      std::string p = absl::StrCat(prefix, "virtual_hosts[", v, "].routes[", i, "].route");
      const auto& action = route.route();
      if (!action.cluster().empty()) out->emplace_back(p + ".cluster", action.cluster());
      for (int w = 0; w < action.weighted_clusters().clusters_size(); ++w) {
        out->emplace_back(absl::StrCat(p, ".weighted_clusters.clusters[", w, "].name"),
                          action.weighted_clusters().clusters(w).name());
      }
    }
  }
}

// Route configurations (by RDS name) and clusters (through inline route configs) a listener's
// HTTP connection managers name.
void ListenerRefs(const envoy::config::listener::v3::Listener& l, Refs* routes, Refs* clusters) {
  auto chain = [&](const envoy::config::listener::v3::FilterChain& fc, const std::string& p) {
    for (int f = 0; f < fc.filters_size(); ++f) {
      HttpConnectionManager hcm;
      if (!fc.filters(f).has_typed_config() || !fc.filters(f).typed_config().UnpackTo(&hcm)) {
        continue;
      }
      std::string fp = absl::StrCat(p, ".filters[", f, "].typed_config");
      if (hcm.has_rds()) {
        routes->emplace_back(fp + ".rds.route_config_name", hcm.rds().route_config_name());
      }
      if (hcm.has_route_config())
        RouteClusterRefs(hcm.route_config(), fp + ".route_config.", clusters);
    }
  };
  for (int i = 0; i < l.filter_chains_size(); ++i) {
    chain(l.filter_chains(i), absl::StrCat("filter_chains[", i, "]"));
  }
  if (l.has_default_filter_chain()) chain(l.default_filter_chain(), "default_filter_chain");
}

struct Reference {
  ResourceType from_type;
  std::string from_name;
  std::string field;
  ResourceType to_type;
  std::string to_name;
};

std::vector<Reference> References(const Snapshot& s) {
  std::vector<Reference> out;
  for (const auto& [name, r] : s.of(ResourceType::kRoute)) {
    RouteConfiguration rc;
    if (!rc.ParseFromString(r.bytes)) continue;
    Refs clusters;
    RouteClusterRefs(rc, "", &clusters);
    for (auto& [field, to] : clusters) {
      out.push_back({ResourceType::kRoute, name, field, ResourceType::kCluster, to});
    }
  }
  for (const auto& [name, r] : s.of(ResourceType::kListener)) {
    envoy::config::listener::v3::Listener l;
    if (!l.ParseFromString(r.bytes)) continue;
    Refs routes, clusters;
    ListenerRefs(l, &routes, &clusters);
    for (auto& [field, to] : routes) {
      out.push_back({ResourceType::kListener, name, field, ResourceType::kRoute, to});
    }
    for (auto& [field, to] : clusters) {
      out.push_back({ResourceType::kListener, name, field, ResourceType::kCluster, to});
    }
  }
  return out;
}

bool Resolves(const Snapshot& s, const Reference& ref, const CheckOptions& options) {
  if (s.of(ref.to_type).count(ref.to_name)) return true;
  return ref.to_type == ResourceType::kCluster && options.external_clusters.count(ref.to_name);
}

}  // namespace

Problem ParseProblem(ResourceType type, const std::string& name, const std::string& message) {
  Problem p;
  p.resource = absl::StrCat(PluralTypeName(type), "/", name);
  p.message = message;
  std::string rest = message;
  std::string path = ResourcePath(type, name);
  if (absl::StartsWith(rest, path)) rest = rest.substr(path.size());
  if (absl::StartsWith(rest, ": ")) {
    rest = rest.substr(2);
  } else if (absl::StartsWith(rest, ".")) {
    rest = rest.substr(1);
  }
  // A field path is made of names, indexes and dots, then ": ".
  size_t colon = rest.find(": ");
  bool is_field = colon != std::string::npos && colon > 0;
  for (size_t i = 0; is_field && i < colon; ++i) {
    char c = rest[i];
    is_field = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '.' || c == '[' || c == ']';
  }
  if (is_field) {
    p.field = rest.substr(0, colon);
    p.reason = rest.substr(colon + 2);
  } else {
    p.reason = rest;
  }
  return p;
}

std::vector<Problem> CheckSnapshot(const Snapshot& proposed, const Snapshot* base,
                                   const CheckOptions& options) {
  std::vector<Problem> problems;
  BuildOptions build;  // log_files null: access logs are checked, not opened
  for (const auto& [name, r] : proposed.of(ResourceType::kSecret)) {
    envoy::extensions::transport_sockets::tls::v3::Secret s;
    if (s.ParseFromString(r.bytes)) build.sds_secrets[name] = s;
  }
  for (ResourceType type : kAllResourceTypes) {
    for (const auto& [name, r] : proposed.of(type)) {
      if (base != nullptr) {
        auto old = base->of(type).find(name);
        if (old != base->of(type).end() && old->second.bytes == r.bytes) continue;
      }
      std::vector<std::string> errors;
      CheckOne(type, r, build, &errors);
      for (const std::string& e : errors) problems.push_back(ParseProblem(type, name, e));
    }
  }
  std::set<std::string> broken_before;
  if (base != nullptr) {
    for (const Reference& ref : References(*base)) {
      if (!Resolves(*base, ref, options)) {
        broken_before.insert(absl::StrCat(static_cast<int>(ref.from_type), "/", ref.from_name, "/",
                                          ref.field, "/", ref.to_name));
      }
    }
  }
  for (const Reference& ref : References(proposed)) {
    if (Resolves(proposed, ref, options)) continue;
    if (broken_before.count(absl::StrCat(static_cast<int>(ref.from_type), "/", ref.from_name, "/",
                                         ref.field, "/", ref.to_name))) {
      continue;
    }
    Problem p;
    p.resource = absl::StrCat(PluralTypeName(ref.from_type), "/", ref.from_name);
    p.field = ref.field;
    p.reason =
        absl::StrCat(ref.to_type == ResourceType::kCluster ? "cluster '" : "route configuration '",
                     ref.to_name, "' does not exist (add it in the same change",
                     ref.to_type == ResourceType::kCluster
                         ? ", or list it in --static-clusters if the nodes define it)"
                         : ")");
    p.message =
        absl::StrCat(ResourcePath(ref.from_type, ref.from_name), ": ", p.field, ": ", p.reason);
    problems.push_back(std::move(p));
  }
  return problems;
}

}  // namespace xds_server
}  // namespace rpx
