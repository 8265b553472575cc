// The admin's stats, rendered the ways Envoy's /stats renders them: "name: value" lines, JSON
// ({"stats": [{"name", "value"}]}) and the Prometheus text format (/stats/prometheus), where a
// stat's scope (a cluster, an HTTP connection manager, a listener) and its response code class
// become tags as Envoy's default tag extraction makes them:
//
//   cluster.web.upstream_rq_2xx: 7   -> envoy_cluster_upstream_rq_xx{envoy_response_code_class="2",
//                                                                      envoy_cluster_name="web"} 7
//
// Plain functions over values the admin collected on the main thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "re2/re2.h"
#include "source/common/histogram.h"
#include "source/common/json.h"

namespace rpx {

struct StatEntry {
  std::string name;  // Envoy's flat name, "cluster.web.upstream_rq_total"
  int64_t value = 0;
  bool gauge = false;
  // Prometheus: the name without the scope, and the tags (scope and response code class).
  std::string prom_name;
  std::vector<std::pair<std::string, std::string>> tags;
  // A histogram (value is then its count): its buckets summed over the workers.
  bool histogram = false;
  HistogramTotals hist;
};

// Builds an entry: `scope_kind` "cluster", "http", "listener", ... (empty: none), `scope` its
// name (a cluster name, a stat_prefix), `stat` the rest ("upstream_rq_2xx", "ssl.handshake").
StatEntry MakeStat(const std::string& scope_kind, const std::string& scope, const std::string& stat,
                   int64_t value);
// An entry from a flat name with no scope ("server.live", "filesystem.write_buffered").
StatEntry MakeFlatStat(const std::string& name, int64_t value);

// What /stats?filter=...&usedonly asks for. `filter` is RE2 syntax (Envoy's is std::regex
// ECMAScript, the same for the usual patterns); a bad one is an error for the caller to report.
struct StatsQuery {
  std::unique_ptr<RE2> filter;
  bool used_only = false;  // counters that were never incremented and gauges at 0 are left out
  bool Keep(const StatEntry& e) const;
};

std::string RenderStatsText(const std::vector<StatEntry>& stats, const StatsQuery& q);
std::string RenderStatsJson(const std::vector<StatEntry>& stats, const StatsQuery& q);
std::string RenderPrometheus(const std::vector<StatEntry>& stats, const StatsQuery& q);

// "a=1&b=x%20y&flag" -> {a: 1, b: "x y", flag: ""}.
std::map<std::string, std::string> ParseQuery(const std::string& query);

}  // namespace rpx
