#include "source/router/route_table.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "source/common/field_path.h"
#include "source/router/retry_state.h"

namespace rpx {
namespace {

absl::string_view A(std::string_view v) { return absl::string_view(v.data(), v.size()); }

using envoy::config::route::v3::HeaderMatcher;
using envoy::config::route::v3::Route;
using envoy::config::route::v3::RouteConfiguration;
using envoy::config::route::v3::RouteMatch;

absl::Status Err(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::Status Err(const FieldPath& path, const std::string& what) { return Err(path.str(), what); }

absl::StatusOr<std::shared_ptr<const RE2>> CompileRegex(const std::string& pattern,
                                                        const std::string& path) {
  RE2::Options opts;
  opts.set_log_errors(false);
  auto re = std::make_shared<const RE2>(pattern, opts);
  if (!re->ok()) return Err(path, absl::StrCat("invalid regex '", pattern, "': ", re->error()));
  return re;
}

absl::StatusOr<HeaderOps> BuildHeaderOps(
    const google::protobuf::RepeatedPtrField<envoy::config::core::v3::HeaderValueOption>& add,
    const google::protobuf::RepeatedPtrField<std::string>& remove, const FieldPath& parent,
    const char* add_name, const char* remove_name) {
  HeaderOps ops;
  for (int i = 0; i < add.size(); ++i) {
    const auto& o = add[i];
    std::string p = FieldPath(parent, add_name, i).str();
    HeaderToAdd h;
    h.key = absl::AsciiStrToLower(o.header().key());
    if (h.key.empty()) return Err(p, "header.key must not be empty");
    if (h.key[0] == ':' || h.key == "host") {
      return Err(p, absl::StrCat("header '", h.key, "' cannot be modified here"));
    }
    absl::Status read = ReadHeaderValueOption(o, &h);
    if (!read.ok()) return Err(p + ".header.value", std::string(read.message()));
    ops.add.push_back(std::move(h));
  }
  for (int i = 0; i < remove.size(); ++i) {
    std::string name = absl::AsciiStrToLower(remove[i]);
    if (name.empty() || name[0] == ':' || name == "host") {
      return Err(FieldPath(parent, remove_name, i),
                 absl::StrCat("header '", remove[i], "' cannot be removed"));
    }
    ops.remove.push_back(std::move(name));
  }
  return ops;
}

absl::StatusOr<HeaderMatch> BuildHeaderMatch(const HeaderMatcher& m, const FieldPath& path) {
  HeaderMatch h;
  h.name = absl::AsciiStrToLower(m.name());
  if (h.name.empty()) return Err(FieldPath(path, "name"), "must not be empty");
  h.invert = m.invert_match();
  h.treat_missing_as_empty = m.treat_missing_header_as_empty();
  envoy::type::matcher::v3::StringMatcher sm;
  switch (m.header_match_specifier_case()) {
    case HeaderMatcher::kPresentMatch:
      h.kind = HeaderMatch::Kind::kPresent;
      h.present = m.present_match();
      return h;
    case HeaderMatcher::kRangeMatch:
      h.kind = HeaderMatch::Kind::kRange;
      h.range_start = m.range_match().start();
      h.range_end = m.range_match().end();
      return h;
    case HeaderMatcher::kStringMatch:
      sm = m.string_match();
      break;
    case HeaderMatcher::kExactMatch:
      sm.set_exact(m.exact_match());
      break;
    case HeaderMatcher::kPrefixMatch:
      sm.set_prefix(m.prefix_match());
      break;
    case HeaderMatcher::kSuffixMatch:
      sm.set_suffix(m.suffix_match());
      break;
    case HeaderMatcher::kContainsMatch:
      sm.set_contains(m.contains_match());
      break;
    case HeaderMatcher::kSafeRegexMatch:
      *sm.mutable_safe_regex() = m.safe_regex_match();
      break;
    case HeaderMatcher::HEADER_MATCH_SPECIFIER_NOT_SET:
      // Envoy: no specifier means "header is present".
      h.kind = HeaderMatch::Kind::kPresent;
      return h;
  }
  h.kind = HeaderMatch::Kind::kString;
  auto s = StringMatch::Create(sm, path.str());
  if (!s.ok()) return s.status();
  h.string_match = std::move(*s);
  return h;
}

absl::Status BuildMatch(const RouteMatch& m, const FieldPath& path, RouteEntry* r) {
  switch (m.path_specifier_case()) {
    case RouteMatch::kPrefix:
      r->path_kind = RouteEntry::PathKind::kPrefix;
      r->path_value = m.prefix();
      break;
    case RouteMatch::kPath:
      r->path_kind = RouteEntry::PathKind::kPath;
      r->path_value = m.path();
      break;
    case RouteMatch::kSafeRegex: {
      r->path_kind = RouteEntry::PathKind::kRegex;
      auto re = CompileRegex(m.safe_regex().regex(), path.str() + ".safe_regex.regex");
      if (!re.ok()) return re.status();
      r->path_regex = *re;
      break;
    }
    case RouteMatch::kPathSeparatedPrefix:
      r->path_kind = RouteEntry::PathKind::kSeparatedPrefix;
      r->path_value = m.path_separated_prefix();
      if (r->path_value.empty() || r->path_value.back() == '/' ||
          r->path_value.find_first_of("?#") != std::string::npos) {
        return Err(FieldPath(path, "path_separated_prefix"),
                   "must not be empty, end with '/', or contain '?' or '#'");
      }
      break;
    default:
      return Err(path, "one of prefix, path, safe_regex or path_separated_prefix is required");
  }
  r->case_sensitive = !m.has_case_sensitive() || m.case_sensitive().value();
  if (!r->case_sensitive) r->path_value = absl::AsciiStrToLower(r->path_value);
  for (int i = 0; i < m.headers_size(); ++i) {
    auto h = BuildHeaderMatch(m.headers(i), FieldPath(path, "headers", i));
    if (!h.ok()) return h.status();
    r->headers.push_back(std::move(*h));
  }
  for (int i = 0; i < m.query_parameters_size(); ++i) {
    const auto& q = m.query_parameters(i);
    std::string p = FieldPath(path, "query_parameters", i).str();
    QueryParamMatch qm;
    qm.name = q.name();
    if (qm.name.empty()) return Err(p + ".name", "must not be empty");
    if (q.has_string_match()) {
      auto s = StringMatch::Create(q.string_match(), p + ".string_match");
      if (!s.ok()) return s.status();
      qm.string_match = std::move(*s);
    } else {
      qm.present_only = true;
    }
    r->query_params.push_back(std::move(qm));
  }
  r->grpc_only = m.has_grpc();
  if (m.has_tls_context()) {
    if (m.tls_context().has_presented()) r->tls_presented = m.tls_context().presented().value();
    if (m.tls_context().has_validated()) r->tls_validated = m.tls_context().validated().value();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadDataSource(const envoy::config::core::v3::DataSource& d,
                                           const std::string& path) {
  switch (d.specifier_case()) {
    case envoy::config::core::v3::DataSource::kInlineString:
      return d.inline_string();
    case envoy::config::core::v3::DataSource::kInlineBytes:
      return d.inline_bytes();
    case envoy::config::core::v3::DataSource::kFilename: {
      std::ifstream f(d.filename(), std::ios::binary);
      if (!f) return Err(path + ".filename", absl::StrCat("cannot read '", d.filename(), "'"));
      std::stringstream ss;
      ss << f.rdbuf();
      return ss.str();
    }
    case envoy::config::core::v3::DataSource::kEnvironmentVariable: {
      const char* v = getenv(d.environment_variable().c_str());
      if (!v) {
        return Err(path + ".environment_variable",
                   absl::StrCat("variable '", d.environment_variable(), "' is not set"));
      }
      return std::string(v);
    }
    default:
      return std::string();
  }
}

absl::Status BuildAction(const Route& route, const FieldPath& path, RouteEntry* r) {
  switch (route.action_case()) {
    case Route::kRoute: {
      const auto& a = route.route();
      FieldPath ap(path, "route");
      switch (a.cluster_specifier_case()) {
        case envoy::config::route::v3::RouteAction::kCluster:
          r->action = RouteEntry::Action::kCluster;
          r->cluster = a.cluster();
          if (r->cluster.empty()) return Err(FieldPath(ap, "cluster"), "must not be empty");
          break;
        case envoy::config::route::v3::RouteAction::kWeightedClusters: {
          r->action = RouteEntry::Action::kWeightedClusters;
          const auto& wc = a.weighted_clusters();
          for (int i = 0; i < wc.clusters_size(); ++i) {
            const auto& c = wc.clusters(i);
            FieldPath wcp(ap, "weighted_clusters");
            FieldPath cp(wcp, "clusters", i);
            if (c.name().empty()) return Err(FieldPath(cp, "name"), "must not be empty");
            WeightedTarget t;
            t.cluster = c.name();
            t.weight = c.has_weight() ? c.weight().value() : 0;
            auto req = BuildHeaderOps(c.request_headers_to_add(), c.request_headers_to_remove(), cp,
                                      "request_headers_to_add", "request_headers_to_remove");
            if (!req.ok()) return req.status();
            auto resp = BuildHeaderOps(c.response_headers_to_add(), c.response_headers_to_remove(),
                                       cp, "response_headers_to_add", "response_headers_to_remove");
            if (!resp.ok()) return resp.status();
            t.request_ops = std::move(*req);
            t.response_ops = std::move(*resp);
            r->total_weight += t.weight;
            r->weighted.push_back(std::move(t));
          }
          FieldPath wcp(ap, "weighted_clusters");
          if (r->weighted.empty()) return Err(wcp, "no clusters");
          if (r->total_weight == 0) return Err(wcp, "the sum of the weights must be positive");
          if (wc.has_total_weight() && wc.total_weight().value() != r->total_weight) {
            return Err(FieldPath(wcp, "total_weight"),
                       absl::StrCat("is ", wc.total_weight().value(), " but the weights sum to ",
                                    r->total_weight));
          }
          break;
        }
        default:
          return Err(ap, "one of cluster or weighted_clusters is required");
      }
      r->prefix_rewrite = a.prefix_rewrite();
      if (a.has_host_rewrite_literal() || a.host_rewrite_literal().size()) {
        r->host_rewrite_literal = a.host_rewrite_literal();
      }
      r->auto_host_rewrite = a.has_auto_host_rewrite() && a.auto_host_rewrite().value();
      if (a.has_timeout()) r->timeout_ms = DurationMs(a.timeout());
      if (a.has_idle_timeout()) {
        r->has_idle_timeout = true;
        r->idle_timeout_ms = DurationMs(a.idle_timeout());
      }
      if (a.has_max_stream_duration()) {
        const auto& m = a.max_stream_duration();
        if (m.has_max_stream_duration()) {
          r->max_stream_duration_ms = DurationMs(m.max_stream_duration());
        }
        if (m.has_grpc_timeout_header_max()) {
          r->grpc_timeout_header_max_ms = DurationMs(m.grpc_timeout_header_max());
        }
        if (m.has_grpc_timeout_header_offset()) {
          r->grpc_timeout_header_offset_ms = DurationMs(m.grpc_timeout_header_offset());
        }
      }
      for (int i = 0; i < a.hash_policy_size(); ++i) {
        const auto& hp = a.hash_policy(i);
        FieldPath hpp(ap, "hash_policy", i);
        HashPolicyEntry e;
        e.terminal = hp.terminal();
        using HP = envoy::config::route::v3::RouteAction::HashPolicy;
        switch (hp.policy_specifier_case()) {
          case HP::kHeader:
            e.kind = HashPolicyEntry::Kind::kHeader;
            e.name = absl::AsciiStrToLower(hp.header().header_name());
            if (e.name.empty()) return Err(FieldPath(hpp, "header.header_name"), "is required");
            break;
          case HP::kCookie:
            e.kind = HashPolicyEntry::Kind::kCookie;
            e.name = hp.cookie().name();
            if (e.name.empty()) return Err(FieldPath(hpp, "cookie.name"), "is required");
            e.has_ttl = hp.cookie().has_ttl();
            e.ttl_s = hp.cookie().ttl().seconds();
            e.path = hp.cookie().path();
            break;
          case HP::kConnectionProperties:
            if (!hp.connection_properties().source_ip()) continue;  // hashes nothing
            e.kind = HashPolicyEntry::Kind::kSourceIp;
            break;
          case HP::kQueryParameter:
            e.kind = HashPolicyEntry::Kind::kQueryParameter;
            e.name = hp.query_parameter().name();
            if (e.name.empty()) return Err(FieldPath(hpp, "query_parameter.name"), "is required");
            break;
          default:
            return Err(hpp,
                       "one of header, cookie, connection_properties or query_parameter "
                       "is required");
        }
        r->hash_policies.push_back(std::move(e));
      }
      for (int i = 0; i < a.upgrade_configs_size(); ++i) {
        const auto& u = a.upgrade_configs(i);
        FieldPath up(ap, "upgrade_configs", i);
        if (u.upgrade_type().empty()) return Err(FieldPath(up, "upgrade_type"), "is required");
        std::string type = absl::AsciiStrToLower(u.upgrade_type());
        for (const auto& prev : r->upgrade_overrides) {
          if (prev.first == type) return Err(FieldPath(up, "upgrade_type"), "is listed twice");
        }
        r->upgrade_overrides.emplace_back(std::move(type), !u.has_enabled() || u.enabled().value());
      }
      break;
    }
    case Route::kRedirect: {
      const auto& rd = route.redirect();
      r->action = RouteEntry::Action::kRedirect;
      if (rd.https_redirect()) r->redirect_scheme = "https";
      if (!rd.scheme_redirect().empty()) r->redirect_scheme = rd.scheme_redirect();
      r->redirect_host = rd.host_redirect();
      r->redirect_port = rd.port_redirect();
      r->redirect_path = rd.path_redirect();
      r->redirect_prefix = rd.prefix_rewrite();
      r->strip_query = rd.strip_query();
      static const int kCodes[] = {301, 302, 303, 307, 308};
      int code = rd.response_code();
      if (code < 0 || code > 4) return Err(path.str() + ".redirect.response_code", "unknown code");
      r->redirect_code = kCodes[code];
      break;
    }
    case Route::kDirectResponse: {
      const auto& d = route.direct_response();
      r->action = RouteEntry::Action::kDirectResponse;
      // Envoy's range: a 1xx is not a response, and a client would wait for the real one.
      if (d.status() < 200 || d.status() > 599) {
        return Err(path.str() + ".direct_response.status", "must be within [200, 599]");
      }
      r->direct_status = d.status();
      if (d.has_body()) {
        auto body = ReadDataSource(d.body(), path.str() + ".direct_response.body");
        if (!body.ok()) return body.status();
        r->direct_body = std::move(*body);
        r->has_direct_body = true;
      }
      break;
    }
    default:
      return Err(path, "one of route, redirect or direct_response is required");
  }
  return absl::OkStatus();
}

std::string_view StripPort(std::string_view host) {
  // "[::1]:80" -> "[::1]", "a.com:80" -> "a.com"; a bare IPv6 literal has several colons.
  // As Envoy's HeaderUtility::getPortStart: in a bracketed host the port starts at the last ':'
  // if it comes after the last ']'; "[::1]" and "[a-c]+" have none, and a malformed "[::1" (no
  // ']') is matched as written.
  if (!host.empty() && host[0] == '[') {
    size_t close = host.rfind(']');
    size_t colon = host.rfind(':');
    if (close != std::string_view::npos && colon != std::string_view::npos && colon > close) {
      return host.substr(0, colon);
    }
    return host;
  }
  size_t colon = host.rfind(':');
  if (colon != std::string_view::npos && host.find(':') == colon) return host.substr(0, colon);
  return host;
}

}  // namespace

absl::Status ReadHeaderValueOption(const envoy::config::core::v3::HeaderValueOption& o,
                                   HeaderToAdd* h) {
  h->value = o.header().value();
  // Envoy's command operators (%DOWNSTREAM_REMOTE_ADDRESS%, %REQ(x)%, ...); "%%" is a '%'.
  if (h->value.find('%') != std::string::npos) {
    auto f = Formatter::Text(h->value, Formatter::Options{.omit_empty_values = true});
    if (!f.ok()) return f.status();
    if ((*f)->has_operators()) {
      h->formatter = *f;
    } else {
      h->value = (*f)->Format(FormatContext());
    }
  }
  if (o.has_append()) {
    h->action = o.append().value() ? HeaderToAdd::Action::kAppendOrAdd
                                   : HeaderToAdd::Action::kOverwriteOrAdd;
  } else {
    switch (o.append_action()) {
      case envoy::config::core::v3::HeaderValueOption::ADD_IF_ABSENT:
        h->action = HeaderToAdd::Action::kAddIfAbsent;
        break;
      case envoy::config::core::v3::HeaderValueOption::OVERWRITE_IF_EXISTS_OR_ADD:
        h->action = HeaderToAdd::Action::kOverwriteOrAdd;
        break;
      case envoy::config::core::v3::HeaderValueOption::OVERWRITE_IF_EXISTS:
        h->action = HeaderToAdd::Action::kOverwriteIfExists;
        break;
      default:
        h->action = HeaderToAdd::Action::kAppendOrAdd;
    }
  }
  h->keep_empty = o.keep_empty_value();
  return absl::OkStatus();
}

absl::StatusOr<HeaderMatch> BuildHeaderMatcher(const envoy::config::route::v3::HeaderMatcher& m,
                                               const std::string& path) {
  return BuildHeaderMatch(m, FieldPath(path));
}

absl::StatusOr<StringMatch> StringMatch::Create(const envoy::type::matcher::v3::StringMatcher& m,
                                                const std::string& path) {
  using SM = envoy::type::matcher::v3::StringMatcher;
  StringMatch s;
  s.ignore_case_ = m.ignore_case();
  switch (m.match_pattern_case()) {
    case SM::kExact:
      s.kind_ = Kind::kExact;
      s.value_ = m.exact();
      break;
    case SM::kPrefix:
      s.kind_ = Kind::kPrefix;
      s.value_ = m.prefix();
      break;
    case SM::kSuffix:
      s.kind_ = Kind::kSuffix;
      s.value_ = m.suffix();
      break;
    case SM::kContains:
      s.kind_ = Kind::kContains;
      s.value_ = m.contains();
      break;
    case SM::kSafeRegex: {
      s.kind_ = Kind::kRegex;
      if (m.ignore_case()) return Err(path, "ignore_case has no effect on safe_regex");
      auto re = CompileRegex(m.safe_regex().regex(), path + ".safe_regex.regex");
      if (!re.ok()) return re.status();
      s.regex_ = *re;
      break;
    }
    default:
      return Err(path, "one of exact, prefix, suffix, contains or safe_regex is required");
  }
  if (s.ignore_case_) s.value_ = absl::AsciiStrToLower(s.value_);
  return s;
}

bool StringMatch::Matches(std::string_view v) const {
  std::string lowered;
  if (ignore_case_) {
    lowered = absl::AsciiStrToLower(A(v));
    v = lowered;
  }
  switch (kind_) {
    case Kind::kExact:
      return v == value_;
    case Kind::kPrefix:
      return absl::StartsWith(A(v), value_);
    case Kind::kSuffix:
      return absl::EndsWith(A(v), value_);
    case Kind::kContains:
      return v.find(value_) != std::string_view::npos;
    case Kind::kRegex:
      return RE2::FullMatch(re2::StringPiece(v.data(), v.size()), *regex_);
  }
  return false;
}

bool HeaderMatch::Matches(const RequestHead& req, std::string_view scheme) const {
  if (name.empty() || (name[0] != ':' && name != "host")) return Matches(req.headers);
  // Pseudo-headers come from the request line and Host, without building a header map.
  if (name == ":method") return MatchesValue(true, req.method);
  if (name == ":path") return MatchesValue(true, req.path);
  if (name == ":authority" || name == "host") return MatchesValue(true, req.host);
  if (name == ":scheme") return MatchesValue(true, scheme);
  return MatchesValue(false, {});  // an unknown pseudo-header is absent
}

bool HeaderMatch::Matches(const HeaderMap& headers) const {
  // Several values of one header are matched as one comma-joined value (as Envoy does).
  std::string_view first;
  std::string joined;
  int count = 0;
  for (const HeaderMap::Field f : headers) {
    if (f.name != name) continue;
    if (count == 0) {
      first = f.value;
    } else {
      if (count == 1) joined = std::string(first);
      joined += ',';
      joined += f.value;
    }
    ++count;
  }
  std::string_view value;
  bool found = count > 0;
  if (count == 1) value = first;
  if (count > 1) value = joined;
  return MatchesValue(found, value);
}

bool HeaderMatch::MatchesValue(bool found, std::string_view value) const {
  if (!found && treat_missing_as_empty && kind != Kind::kPresent) found = true;
  bool result;
  switch (kind) {
    case Kind::kPresent:
      result = found == present;
      break;
    case Kind::kRange: {
      int64_t n;
      result = found && absl::SimpleAtoi(A(value), &n) && n >= range_start && n < range_end;
      break;
    }
    default:
      result = found && string_match.Matches(value);
  }
  return result != invert;
}

bool RouteEntry::Matches(const RequestHead& req, std::string_view path, std::string_view query,
                         const DownstreamTlsFacts& tls) const {
  if (tls_presented && *tls_presented != tls.presented) return false;
  if (tls_validated && *tls_validated != tls.validated) return false;
  std::string lowered;
  std::string_view p = path;
  if (!case_sensitive && path_kind != PathKind::kRegex) {
    lowered = absl::AsciiStrToLower(A(path));
    p = lowered;
  }
  switch (path_kind) {
    case PathKind::kPrefix:
      if (!absl::StartsWith(A(p), path_value)) return false;
      break;
    case PathKind::kPath:
      if (p != path_value) return false;
      break;
    case PathKind::kRegex:
      if (!RE2::FullMatch(re2::StringPiece(path.data(), path.size()), *path_regex)) return false;
      break;
    case PathKind::kSeparatedPrefix:
      if (!absl::StartsWith(A(p), path_value)) return false;
      if (p.size() > path_value.size() && p[path_value.size()] != '/') return false;
      break;
  }
  if (grpc_only) {
    auto ct = req.headers.Get("content-type");
    if (!ct || !absl::StartsWith(A(*ct), "application/grpc")) return false;
  }
  for (const auto& h : headers) {
    if (!h.Matches(req)) return false;
  }
  for (const auto& q : query_params) {
    bool matched = ForEachQueryParam(query, [&q](std::string_view k, std::string_view v) {
      return k == q.name && (q.present_only || q.string_match.Matches(v));
    });
    if (!matched) return false;
  }
  return true;
}

const WeightedTarget& RouteEntry::PickWeighted(uint64_t random) const {
  uint64_t pick = random % total_weight;
  for (const auto& t : weighted) {
    if (pick < t.weight) return t;
    pick -= t.weight;
  }
  return weighted.back();
}

std::string RouteEntry::RedirectLocation(const RequestHead& req, bool downstream_tls) const {
  std::string scheme =
      redirect_scheme.empty() ? (downstream_tls ? "https" : "http") : redirect_scheme;
  std::string host = redirect_host.empty() ? std::string(StripPort(req.host)) : redirect_host;
  std::string port;
  if (redirect_port) {
    port = absl::StrCat(":", redirect_port);
  } else if (redirect_host.empty() && redirect_scheme.empty()) {
    size_t colon = req.host.rfind(':');
    if (colon != std::string::npos && req.host.find(']', colon) == std::string::npos) {
      port = req.host.substr(colon);
    }
  }
  std::string_view full(req.path);
  size_t q = full.find('?');
  std::string_view path = full.substr(0, q);
  std::string_view query = q == std::string_view::npos ? std::string_view() : full.substr(q);
  std::string new_path;
  if (!redirect_path.empty()) {
    new_path = redirect_path;
    // A path_redirect with its own query replaces the request's query.
    if (new_path.find('?') != std::string::npos) query = std::string_view();
  } else if (!redirect_prefix.empty() || path_kind == PathKind::kPrefix) {
    if (!redirect_prefix.empty() && path_kind == PathKind::kPrefix) {
      new_path =
          absl::StrCat(redirect_prefix, A(path.substr(std::min(path.size(), path_value.size()))));
    } else {
      new_path = std::string(path);
    }
  } else {
    new_path = std::string(path);
  }
  if (strip_query) query = std::string_view();
  return absl::StrCat(scheme, "://", host, port, new_path, A(query));
}

absl::StatusOr<std::shared_ptr<const RouteTable>> RouteTable::Create(
    const RouteConfiguration& config, const std::string& path) {
  std::shared_ptr<RouteTable> t(new RouteTable());
  t->name_ = config.name();
  t->path_ = path;
  FieldPath root(t->path_);
  auto req = BuildHeaderOps(config.request_headers_to_add(), config.request_headers_to_remove(),
                            root, "request_headers_to_add", "request_headers_to_remove");
  if (!req.ok()) return req.status();
  auto resp = BuildHeaderOps(config.response_headers_to_add(), config.response_headers_to_remove(),
                             root, "response_headers_to_add", "response_headers_to_remove");
  if (!resp.ok()) return resp.status();
  t->request_ops_ = std::move(*req);
  t->response_ops_ = std::move(*resp);
  absl::flat_hash_map<std::string, int> vhost_names;
  vhost_names.reserve(config.virtual_hosts_size());
  t->vhosts_.reserve(config.virtual_hosts_size());
  t->exact_.reserve(config.virtual_hosts_size());
  for (int v = 0; v < config.virtual_hosts_size(); ++v) {
    const auto& vh = config.virtual_hosts(v);
    FieldPath vp(root, "virtual_hosts", v);
    auto entry = std::make_unique<VirtualHostEntry>();
    entry->name = vh.name();
    if (entry->name.empty()) return Err(FieldPath(vp, "name"), "must not be empty");
    if (!vhost_names.emplace(vh.name(), v).second) {
      return Err(FieldPath(vp, "name"),
                 absl::StrCat("duplicate virtual host name '", vh.name(), "'"));
    }
    if (vh.domains_size() == 0)
      return Err(FieldPath(vp, "domains"), "at least one domain is required");
    auto vreq = BuildHeaderOps(vh.request_headers_to_add(), vh.request_headers_to_remove(), vp,
                               "request_headers_to_add", "request_headers_to_remove");
    if (!vreq.ok()) return vreq.status();
    auto vresp = BuildHeaderOps(vh.response_headers_to_add(), vh.response_headers_to_remove(), vp,
                                "response_headers_to_add", "response_headers_to_remove");
    if (!vresp.ok()) return vresp.status();
    entry->request_ops = std::move(*vreq);
    entry->response_ops = std::move(*vresp);
    entry->include_request_attempt_count = vh.include_request_attempt_count();
    entry->include_attempt_count_in_response = vh.include_attempt_count_in_response();
    std::shared_ptr<const RetryPolicy> vh_retry;
    if (vh.has_retry_policy()) {
      auto p = RetryPolicy::Create(vh.retry_policy(), FieldPath(vp, "retry_policy").str());
      if (!p.ok()) return p.status();
      vh_retry = std::move(*p);
    }
    uint32_t vh_buffer_limit =
        vh.has_per_request_buffer_limit_bytes() ? vh.per_request_buffer_limit_bytes().value() : 0;
    entry->routes.reserve(vh.routes_size());
    for (int r = 0; r < vh.routes_size(); ++r) {
      const auto& route = vh.routes(r);
      FieldPath rp(vp, "routes", r);
      RouteEntry re;
      re.name = route.name();
      if (!route.has_match()) return Err(FieldPath(rp, "match"), "is required");
      absl::Status st = BuildMatch(route.match(), FieldPath(rp, "match"), &re);
      if (!st.ok()) return st;
      st = BuildAction(route, rp, &re);
      if (!st.ok()) return st;
      auto rreq = BuildHeaderOps(route.request_headers_to_add(), route.request_headers_to_remove(),
                                 rp, "request_headers_to_add", "request_headers_to_remove");
      if (!rreq.ok()) return rreq.status();
      auto rresp =
          BuildHeaderOps(route.response_headers_to_add(), route.response_headers_to_remove(), rp,
                         "response_headers_to_add", "response_headers_to_remove");
      if (!rresp.ok()) return rresp.status();
      re.request_ops = std::move(*rreq);
      re.response_ops = std::move(*rresp);
      if (re.tls_presented || re.tls_validated) t->matches_tls_ = true;
      if (route.has_route() && route.route().has_retry_policy()) {
        auto p = RetryPolicy::Create(route.route().retry_policy(),
                                     FieldPath(FieldPath(rp, "route"), "retry_policy").str());
        if (!p.ok()) return p.status();
        re.retry = std::move(*p);
      } else if (route.has_route()) {
        re.retry = vh_retry;
      }
      re.buffer_limit = route.has_per_request_buffer_limit_bytes()
                            ? route.per_request_buffer_limit_bytes().value()
                            : vh_buffer_limit;
      entry->routes.push_back(std::move(re));
    }
    const VirtualHostEntry* raw = entry.get();
    for (int d = 0; d < vh.domains_size(); ++d) {
      std::string domain = absl::AsciiStrToLower(vh.domains(d));
      auto dup = [&]() {
        return Err(FieldPath(vp, "domains", d),
                   absl::StrCat("domain '", domain, "' is already used by another virtual host"));
      };
      if (domain.empty()) return Err(FieldPath(vp, "domains", d), "must not be empty");
      if (domain == "*") {
        if (t->default_) return dup();
        t->default_ = raw;
      } else if (domain[0] == '*') {
        if (!t->suffix_[domain.size() - 1].emplace(domain.substr(1), raw).second) return dup();
      } else if (domain.back() == '*') {
        if (!t->prefix_[domain.size() - 1]
                 .emplace(domain.substr(0, domain.size() - 1), raw)
                 .second) {
          return dup();
        }
      } else {
        if (domain.find('*') != std::string::npos) {
          return Err(FieldPath(vp, "domains", d),
                     "a wildcard '*' may only be the first or last character");
        }
        if (domain.find(':') != std::string::npos) t->exact_with_port_ = true;
        if (!t->exact_.emplace(std::move(domain), raw).second) return dup();
      }
    }
    t->vhosts_.push_back(std::move(entry));
  }
  return std::shared_ptr<const RouteTable>(std::move(t));
}

std::vector<std::pair<std::string, std::string>> RouteTable::ReferencedClusters() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t v = 0; v < vhosts_.size(); ++v) {
    for (size_t r = 0; r < vhosts_[v]->routes.size(); ++r) {
      const RouteEntry& re = vhosts_[v]->routes[r];
      std::string rp = absl::StrCat(path_, ".virtual_hosts[", v, "].routes[", r, "].route");
      if (re.action == RouteEntry::Action::kCluster) out.emplace_back(re.cluster, rp + ".cluster");
      for (size_t w = 0; w < re.weighted.size(); ++w) {
        out.emplace_back(re.weighted[w].cluster,
                         absl::StrCat(rp, ".weighted_clusters.clusters[", w, "].name"));
      }
    }
  }
  return out;
}

const VirtualHostEntry* RouteTable::FindNoPort(std::string_view host) const {
  auto it = exact_.find(A(host));
  if (it != exact_.end()) return it->second;
  for (const auto& [len, table] : suffix_) {
    if (host.size() <= len) continue;  // the '*' must match at least one character
    auto s = table.find(A(host.substr(host.size() - len)));
    if (s != table.end()) return s->second;
  }
  for (const auto& [len, table] : prefix_) {
    if (host.size() <= len) continue;
    auto s = table.find(A(host.substr(0, len)));
    if (s != table.end()) return s->second;
  }
  return nullptr;
}

const VirtualHostEntry* RouteTable::FindVirtualHost(std::string_view host_in) const {
  // Only a catch-all "*": nothing to look up (the common single-service table).
  if (exact_.empty() && suffix_.empty() && prefix_.empty()) return default_;
  // Lower-cased on the stack: a Host header is short (no allocation per request).
  char small[256];
  std::string large;
  char* lower = small;
  if (host_in.size() > sizeof(small)) {
    large.resize(host_in.size());
    lower = large.data();
  }
  for (size_t i = 0; i < host_in.size(); ++i) {
    char c = host_in[i];
    lower[i] = static_cast<unsigned char>(c - 'A') < 26 ? static_cast<char>(c + ('a' - 'A')) : c;
  }
  std::string_view host(lower, host_in.size());
  std::string_view stripped = StripPort(host);
  if (stripped.size() != host.size() && exact_with_port_) {
    // A domain written with its port ("a.com:8080") matches exactly; otherwise the port is ignored.
    // (Without such a domain the lookup is skipped: with a large table it is a cache miss.)
    auto it = exact_.find(A(host));
    if (it != exact_.end()) return it->second;
  }
  const VirtualHostEntry* vh = FindNoPort(stripped);
  return vh ? vh : default_;
}

const RouteEntry* RouteTable::Route(const RequestHead& req, const VirtualHostEntry** vhost,
                                    const DownstreamTlsFacts& tls) const {
  const VirtualHostEntry* vh = FindVirtualHost(req.host);
  *vhost = vh;
  if (!vh) return nullptr;
  std::string_view full(req.path);
  size_t q = full.find('?');
  std::string_view path = full.substr(0, q);
  std::string_view query = q == std::string_view::npos ? std::string_view() : full.substr(q + 1);
  for (const auto& r : vh->routes) {
    // Prefix matching sees the query string as Envoy does; other kinds see the path alone.
    std::string_view p = r.path_kind == RouteEntry::PathKind::kPrefix ? full : path;
    if (r.Matches(req, p, query, tls)) return &r;
  }
  return nullptr;
}

uint64_t DurationMs(const google::protobuf::Duration& d) {
  return static_cast<uint64_t>(d.seconds()) * 1000 + d.nanos() / 1000000;
}

}  // namespace rpx
