// RouteTable: an immutable, validated form of one envoy.config.route.v3.RouteConfiguration.
// Built on the main thread (Create), then shared read-only by every worker through
// shared_ptr<const RouteTable>; a request keeps the table it started with alive until it ends.
//
// Virtual host selection follows Envoy: exact domain, then `*.suffix` wildcards longest first,
// then `prefix.*` longest first, then `*`. Matching ignores case and the port. Within a virtual
// host the first route whose match succeeds wins.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "envoy/config/route/v3/route.pb.h"
#include "re2/re2.h"
#include "source/http/formatter.h"
#include "source/http/header_ops.h"
#include "source/http/headers.h"

namespace rpx {

// envoy.type.matcher.v3.StringMatcher.
class StringMatch {
 public:
  static absl::StatusOr<StringMatch> Create(const envoy::type::matcher::v3::StringMatcher& m,
                                            const std::string& path);
  bool Matches(std::string_view value) const;

 private:
  enum class Kind { kExact, kPrefix, kSuffix, kContains, kRegex };
  Kind kind_ = Kind::kExact;
  std::string value_;
  bool ignore_case_ = false;
  std::shared_ptr<const RE2> regex_;
};

// envoy.config.route.v3.HeaderMatcher.
struct HeaderMatch {
  enum class Kind { kPresent, kString, kRange };
  std::string name;
  Kind kind = Kind::kPresent;
  bool present = true;
  StringMatch string_match;
  int64_t range_start = 0, range_end = 0;
  bool invert = false;
  bool treat_missing_as_empty = false;
  bool Matches(const HeaderMap& headers) const;
  // With Envoy's pseudo-headers: ":method", ":path", ":authority" (also "host") read the
  // request line and Host, ":scheme" is `scheme`; other names the headers.
  bool Matches(const RequestHead& req, std::string_view scheme = "http") const;
  // The rule applied to the header's value (`found`: the header is there).
  bool MatchesValue(bool found, std::string_view value) const;
};

// A HeaderMatcher outside a route (access log header filters); errors name `path`.
absl::StatusOr<HeaderMatch> BuildHeaderMatcher(const envoy::config::route::v3::HeaderMatcher& m,
                                               const std::string& path);

struct QueryParamMatch {
  std::string name;
  bool present_only = false;
  StringMatch string_match;
};

// envoy.config.core.v3.HeaderValueOption.
// Reads a HeaderValueOption's value (a formatter when it has command operators), append /
// append_action and keep_empty_value into `*h`; the key is the caller's to check and set. An
// error is a bad value format, to be reported at the option's ".header.value".
absl::Status ReadHeaderValueOption(const envoy::config::core::v3::HeaderValueOption& o,
                                   HeaderToAdd* h);

struct WeightedTarget {
  std::string cluster;
  uint32_t weight;
  HeaderOps request_ops, response_ops;
};

// The client's certificate on the request's connection, for routes with a tls_context match.
struct RetryPolicy;

// A Duration in whole milliseconds (the route table's and retry policy's timeouts).
uint64_t DurationMs(const google::protobuf::Duration& d);

// Calls `fn(name, value)` for each "name=value" of a query string (the part after '?'; a name
// without '=' has an empty value) until `fn` returns true; returns whether it did. The route
// matcher's query_parameters and the hash policy's query_parameter read queries this way.
template <typename Fn>
bool ForEachQueryParam(std::string_view query, Fn&& fn) {
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    size_t eq = kv.find('=');
    if (fn(kv.substr(0, eq),
           eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1))) {
      return true;
    }
  }
  return false;
}

struct DownstreamTlsFacts {
  bool presented = false;  // the client sent a certificate
  bool validated = false;  // and it passed the listener's validation context
};

// RouteAction.hash_policy: what a consistent-hashing cluster (RING_HASH, MAGLEV) hashes.
struct HashPolicyEntry {
  enum class Kind { kHeader, kCookie, kSourceIp, kQueryParameter };
  Kind kind = Kind::kHeader;
  std::string name;    // header (lower case), cookie or query parameter name
  uint64_t ttl_s = 0;  // cookie: with has_ttl, one is made when the request has none
  bool has_ttl = false;
  std::string path;       // cookie: the Path of a made cookie
  bool terminal = false;  // stop at this policy when it yields a hash
};

struct RouteEntry {
  // Match.
  enum class PathKind { kPrefix, kPath, kRegex, kSeparatedPrefix };
  PathKind path_kind = PathKind::kPrefix;
  std::string path_value;
  bool case_sensitive = true;
  std::shared_ptr<const RE2> path_regex;
  std::vector<HeaderMatch> headers;
  std::vector<QueryParamMatch> query_params;
  bool grpc_only = false;
  // tls_context: what the client's certificate must (true) or must not (false) be.
  std::optional<bool> tls_presented, tls_validated;

  // Action.
  enum class Action { kCluster, kWeightedClusters, kRedirect, kDirectResponse };
  Action action = Action::kCluster;
  std::string name;
  std::string cluster;
  std::vector<WeightedTarget> weighted;
  uint64_t total_weight = 0;
  std::string prefix_rewrite;
  std::string host_rewrite_literal;
  bool auto_host_rewrite = false;
  uint64_t timeout_ms = 15000;  // 0 disables the route timeout
  // idle_timeout: overrides the listener's stream_idle_timeout for this route (0: disabled).
  bool has_idle_timeout = false;
  uint64_t idle_timeout_ms = 0;
  // max_stream_duration: the stream's limit from its request head (0 disables the connection
  // manager's), and for gRPC requests the grpc-timeout header's value capped at
  // grpc_timeout_header_max (0: uncapped) less grpc_timeout_header_offset.
  std::optional<uint64_t> max_stream_duration_ms;
  std::optional<uint64_t> grpc_timeout_header_max_ms;
  uint64_t grpc_timeout_header_offset_ms = 0;
  std::vector<HashPolicyEntry> hash_policies;
  // retry_policy: the route's, else its virtual host's (Envoy: the route's replaces it whole).
  std::shared_ptr<const RetryPolicy> retry;
  // per_request_buffer_limit_bytes (the route's, else the virtual host's; 0: the listener's):
  // how much of a request body is held to send again on a retry.
  uint32_t buffer_limit = 0;
  // upgrade_configs: per-route on/off for upgrade types the listener lists (lower case).
  std::vector<std::pair<std::string, bool>> upgrade_overrides;

  // Redirect.
  std::string redirect_scheme, redirect_host, redirect_path, redirect_prefix;
  uint32_t redirect_port = 0;
  int redirect_code = 301;
  bool strip_query = false;

  // Direct response.
  int direct_status = 200;
  std::string direct_body;
  bool has_direct_body = false;

  HeaderOps request_ops, response_ops;

  bool Matches(const RequestHead& req, std::string_view path_no_query, std::string_view query,
               const DownstreamTlsFacts& tls = {}) const;
  // Picks a weighted target with `random` (any 64-bit value).
  const WeightedTarget& PickWeighted(uint64_t random) const;
  // The Location header for a redirect route.
  std::string RedirectLocation(const RequestHead& req, bool downstream_tls) const;
};

struct VirtualHostEntry {
  std::string name;
  std::vector<RouteEntry> routes;
  HeaderOps request_ops, response_ops;
  bool include_request_attempt_count = false;      // x-envoy-attempt-count upstream
  bool include_attempt_count_in_response = false;  // and downstream
};

class RouteTable {
 public:
  // `path` names where the RouteConfiguration came from, for error messages (e.g.
  // "static_resources.listeners[0]...route_config").
  static absl::StatusOr<std::shared_ptr<const RouteTable>> Create(
      const envoy::config::route::v3::RouteConfiguration& config, const std::string& path);

  const std::string& name() const { return name_; }
  const VirtualHostEntry* FindVirtualHost(std::string_view host) const;
  // Returns the route for `req` (nullptr: no virtual host or no route; *vhost set if found).
  // `tls` matters only to routes with a tls_context match (matches_tls()).
  const RouteEntry* Route(const RequestHead& req, const VirtualHostEntry** vhost,
                          const DownstreamTlsFacts& tls = {}) const;
  // Some route matches on the client's certificate: the caller fills DownstreamTlsFacts.
  bool matches_tls() const { return matches_tls_; }
  // Every cluster name any route may send to, with the field path that names it (for validation
  // against the cluster set).
  // (Computed on demand: the paths are only needed to report an error.)
  std::vector<std::pair<std::string, std::string>> ReferencedClusters() const;
  size_t virtual_host_count() const { return vhosts_.size(); }
  const HeaderOps& request_ops() const { return request_ops_; }
  const HeaderOps& response_ops() const { return response_ops_; }

 private:
  RouteTable() = default;
  const VirtualHostEntry* FindNoPort(std::string_view host) const;
  std::string name_;
  std::vector<std::unique_ptr<VirtualHostEntry>> vhosts_;
  absl::flat_hash_map<std::string, const VirtualHostEntry*> exact_;
  bool matches_tls_ = false;
  bool exact_with_port_ = false;  // some exact domain has a ':' (a port): worth a lookup with it
  // Wildcards keyed by length of the literal part, longest first.
  std::map<size_t, absl::flat_hash_map<std::string, const VirtualHostEntry*>, std::greater<size_t>>
      suffix_, prefix_;
  const VirtualHostEntry* default_ = nullptr;
  HeaderOps request_ops_, response_ops_;
  std::string path_;
};

}  // namespace rpx
