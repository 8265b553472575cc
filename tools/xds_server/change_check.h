// Checks a proposed snapshot the way rpx nodes would check it, before any node receives it: each
// resource that differs from the base goes through rpx's own supported-field check and config
// builder (the code a node runs on an xDS update, so what passes here is not NACKed for its
// content), and the references between resources of the whole snapshot are checked as well (a
// route naming a cluster that does not exist, a listener naming a route configuration that does
// not exist). Pure functions of their inputs; any thread.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "tools/xds_server/snapshot.h"

namespace rpx {
namespace xds_server {

struct CheckOptions {
  // Clusters the nodes define themselves (in their bootstrap): routes may name them.
  std::set<std::string> external_clusters;
};

struct Problem {
  std::string resource;  // "routes/local_route"
  std::string field;     // "virtual_hosts[0].routes[1].match.safe_regex.regex", or ""
  std::string reason;
  std::string message;  // the whole line, as rpx would put it in a NACK
};

// Problems of `proposed`: resources that differ from `base` (every resource when `base` is null)
// are checked one by one; references are checked over the whole snapshot, but one that was
// already broken in `base` is not reported again (a change is judged on what it breaks).
std::vector<Problem> CheckSnapshot(const Snapshot& proposed, const Snapshot* base,
                                   const CheckOptions& options);

// Splits "RouteConfiguration 'r': virtual_hosts[0].domains: duplicate ..." into a Problem.
Problem ParseProblem(ResourceType type, const std::string& name, const std::string& message);

}  // namespace xds_server
}  // namespace rpx
