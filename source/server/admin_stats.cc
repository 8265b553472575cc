#include "source/server/admin_stats.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace rpx {
namespace {

bool IsGaugeName(const std::string& stat) {
  static const char* const kGauges[] = {"membership_total",
                                        "circuit_breakers.default.cx_open_count",
                                        "circuit_breakers.default.rq_pending_open_count",
                                        "concurrency",
                                        "live",
                                        "connected",
                                        "write_total_buffered",
                                        "last_route_propagation_us",
                                        "num_keys",
                                        "num_layers",
                                        "unused_keys"};
  if (absl::EndsWith(stat, "_active") || absl::EndsWith(stat, "active_connections")) return true;
  for (const char* g : kGauges) {
    if (absl::EndsWith(stat, g)) return true;
  }
  return false;
}

// Prometheus metric names: [a-zA-Z_:][a-zA-Z0-9_:]*; Envoy turns everything else into '_'.
std::string Sanitize(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != ':') c = '_';
  }
  return out;
}

const char* ScopeTag(const std::string& kind) {
  if (kind == "cluster") return "envoy_cluster_name";
  if (kind == "http") return "envoy_http_conn_manager_prefix";
  if (kind == "listener") return "envoy_listener_address";
  if (kind == "connection_limit") return "envoy_connection_limit_prefix";
  if (kind == "tcp") return "envoy_tcp_prefix";
  return nullptr;
}

std::string PromEscape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 &&
               HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

StatEntry MakeStat(const std::string& scope_kind, const std::string& scope, const std::string& stat,
                   int64_t value) {
  StatEntry e;
  e.name = scope_kind.empty() ? stat : absl::StrCat(scope_kind, ".", scope, ".", stat);
  e.value = value;
  e.gauge = IsGaugeName(stat);
  std::string metric = stat;
  // downstream_rq_2xx / upstream_rq_5xx: the class becomes a tag (Envoy's response code class).
  if (metric.size() >= 7 && absl::EndsWith(metric, "xx") && metric[metric.size() - 3] >= '1' &&
      metric[metric.size() - 3] <= '5' && metric[metric.size() - 4] == '_') {
    e.tags.emplace_back("envoy_response_code_class", std::string(1, metric[metric.size() - 3]));
    metric = metric.substr(0, metric.size() - 3) + "xx";
  }
  const char* tag = ScopeTag(scope_kind);
  if (tag) {
    e.tags.emplace_back(tag, scope);
    e.prom_name = Sanitize(absl::StrCat("envoy_", scope_kind, "_", metric));
  } else if (!scope_kind.empty()) {
    e.prom_name = Sanitize(absl::StrCat("envoy_", scope_kind, "_", scope, "_", metric));
  } else {
    e.prom_name = Sanitize("envoy_" + metric);
  }
  return e;
}

StatEntry MakeFlatStat(const std::string& name, int64_t value) {
  return MakeStat("", "", name, value);
}

bool StatsQuery::Keep(const StatEntry& e) const {
  if (used_only && e.value == 0) return false;
  if (filter && !RE2::PartialMatch(e.name, *filter)) return false;
  return true;
}

namespace {
constexpr double kQuantiles[] = {0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 1};
constexpr const char* kQuantileNames[] = {"0",  "25", "50",   "75",   "90",
                                          "95", "99", "99.5", "99.9", "100"};
}  // namespace

std::string RenderStatsText(const std::vector<StatEntry>& stats, const StatsQuery& q) {
  std::string out;
  // Counters and gauges first, then histograms in Envoy's quantile form.
  for (const auto& e : stats) {
    if (!e.histogram && q.Keep(e)) absl::StrAppend(&out, e.name, ": ", e.value, "\n");
  }
  for (const auto& e : stats) {
    if (!e.histogram || !q.Keep(e)) continue;
    absl::StrAppend(&out, e.name, ":");
    if (e.hist.count == 0) {
      out += " No recorded values\n";
      continue;
    }
    for (size_t i = 0; i < std::size(kQuantiles); ++i) {
      absl::StrAppend(&out, " P", kQuantileNames[i], "(nan,", e.hist.Quantile(kQuantiles[i]), ")");
    }
    out += "\n";
  }
  return out;
}

std::string RenderStatsJson(const std::vector<StatEntry>& stats, const StatsQuery& q) {
  std::string out = "{\"stats\":[";
  bool first = true;
  for (const auto& e : stats) {
    if (e.histogram || !q.Keep(e)) continue;
    absl::StrAppend(&out, first ? "" : ",", "{\"name\":", JsonQuote(e.name), ",\"value\":", e.value,
                    "}");
    first = false;
  }
  // Envoy's shape for histograms: one more element holding every histogram's quantiles.
  std::string hists;
  for (const auto& e : stats) {
    if (!e.histogram || !q.Keep(e)) continue;
    absl::StrAppend(&hists, hists.empty() ? "" : ",", "{\"name\":", JsonQuote(e.name),
                    ",\"values\":[");
    for (size_t i = 0; i < std::size(kQuantiles); ++i) {
      absl::StrAppend(&hists, i ? "," : "", "{\"interval\":null,\"cumulative\":");
      if (e.hist.count == 0) {
        hists += "null}";
      } else {
        absl::StrAppend(&hists, e.hist.Quantile(kQuantiles[i]), "}");
      }
    }
    hists += "]}";
  }
  if (!hists.empty()) {
    absl::StrAppend(&out, first ? "" : ",",
                    "{\"histograms\":{\"supported_quantiles\":[0,25,50,75,90,95,99,99.5,99.9,100],"
                    "\"computed_quantiles\":[",
                    hists, "]}}");
  }
  out += "]}\n";
  return out;
}

std::string RenderPrometheus(const std::vector<StatEntry>& stats, const StatsQuery& q) {
  // One "# TYPE" line per metric, its samples under it, metrics in name order (as Envoy).
  std::map<std::string, std::vector<const StatEntry*>> by_metric;
  for (const auto& e : stats) {
    if (q.Keep(e)) by_metric[e.prom_name].push_back(&e);
  }
  std::string out;
  auto labels = [](const StatEntry& e, const std::string& le) {
    std::string l;
    for (const auto& [k, v] : e.tags)
      absl::StrAppend(&l, l.empty() ? "" : ",", k, "=\"", PromEscape(v), "\"");
    if (!le.empty()) absl::StrAppend(&l, l.empty() ? "" : ",", "le=\"", le, "\"");
    return l.empty() ? l : "{" + l + "}";
  };
  for (const auto& [metric, entries] : by_metric) {
    if (entries[0]->histogram) {
      absl::StrAppend(&out, "# TYPE ", metric, " histogram\n");
      for (const StatEntry* e : entries) {
        uint64_t cumulative = 0;
        for (int i = 0; i < kHistogramBuckets; ++i) {
          cumulative += e->hist.buckets[i];
          absl::StrAppend(&out, metric, "_bucket", labels(*e, absl::StrCat(kHistogramBounds[i])),
                          " ", cumulative, "\n");
        }
        absl::StrAppend(&out, metric, "_bucket", labels(*e, "+Inf"), " ", e->hist.count, "\n");
        absl::StrAppend(&out, metric, "_sum", labels(*e, ""), " ", e->hist.sum, "\n");
        absl::StrAppend(&out, metric, "_count", labels(*e, ""), " ", e->hist.count, "\n");
      }
      continue;
    }
    absl::StrAppend(&out, "# TYPE ", metric, entries[0]->gauge ? " gauge\n" : " counter\n");
    for (const StatEntry* e : entries) {
      out += metric;
      if (!e->tags.empty()) {
        out += '{';
        for (size_t i = 0; i < e->tags.size(); ++i) {
          absl::StrAppend(&out, i ? "," : "", e->tags[i].first, "=\"",
                          PromEscape(e->tags[i].second), "\"");
        }
        out += '}';
      }
      absl::StrAppend(&out, " ", e->value, "\n");
    }
  }
  return out;
}

std::map<std::string, std::string> ParseQuery(const std::string& query) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i <= query.size()) {
    size_t amp = query.find('&', i);
    if (amp == std::string::npos) amp = query.size();
    std::string part = query.substr(i, amp - i);
    if (!part.empty()) {
      size_t eq = part.find('=');
      if (eq == std::string::npos) {
        out[PercentDecode(part)] = "";
      } else {
        out[PercentDecode(part.substr(0, eq))] = PercentDecode(part.substr(eq + 1));
      }
    }
    i = amp + 1;
  }
  return out;
}

}  // namespace rpx
