// route_matcher_fuzz: RouteTable over generated route configurations. The input is a small
// line-oriented description (see ParseSpec below; the corpus files are examples) of virtual hosts
// with domains (exact, *.suffix, prefix.*, *), routes (prefix, path, safe_regex,
// path_separated_prefix; case-insensitive; header, query-parameter and gRPC matchers; cluster,
// weighted, redirect and direct-response actions; header operations) and requests. It proves that
// RouteTable::Create rejects a bad configuration with an error that names the field, never a
// crash; and that for a good one, every request gets the virtual host and route that a plain
// reference model of Envoy's rules picks (exact domain, then the longest *.suffix, the longest
// prefix.*, then *; ignoring case and port; the first matching route), the route belongs to that
// virtual host, and redirects, weighted picks and header operations behave.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "re2/re2.h"
#include "source/router/route_table.h"
#include "test/fuzz/fuzz_common.h"

namespace rpx {
namespace fuzz {
namespace {

using envoy::config::route::v3::HeaderMatcher;
using envoy::config::route::v3::Route;
using envoy::config::route::v3::RouteConfiguration;
using envoy::config::route::v3::VirtualHost;

absl::string_view A(std::string_view v) { return absl::string_view(v.data(), v.size()); }
std::string Lower(std::string_view s) { return absl::AsciiStrToLower(A(s)); }

// ---- The description ----
//
//   vhost NAME                  starts a virtual host
//   domain DOMAIN               adds a domain to it
//   route KIND VALUE            starts a route; KIND: prefix, path, regex, sep (separated prefix)
//   nocase | grpc               the route's path match ignores case | the route needs gRPC
//   header NAME OP [VALUE]      OP: exact prefix suffix contains regex present absent range (VALUE
//                               "a-b"), after optional flags ! (invert) ~ (ignore case) ? (missing
//                               header counts as empty)
//   query NAME [VALUE]          a query parameter, present or with exactly VALUE
//   cluster NAME | weighted NAME:W ... | redirect CODE [HOST [PATH]] | direct STATUS [BODY]
//   add KEY VALUE | remove NAME header operation on the route, else the vhost, else the table
//   request METHOD HOST PATH    a request to route; rh NAME VALUE adds a header to it
// Fields are separated by one space; the last field of a line takes the rest of it. Lines that
// do not parse are ignored. Without any request line, requests are made up from the domains and
// route values.

struct SpecHeader {
  std::string name, op, value;
  bool invert = false, icase = false, missing_empty = false;
};

struct SpecRoute {
  std::string kind, value;
  bool nocase = false, grpc = false;
  std::vector<SpecHeader> headers;
  std::vector<std::pair<std::string, std::optional<std::string>>> query;
  Route proto;  // action and header operations, filled as lines come
};

struct SpecVhost {
  std::string name;
  std::vector<std::string> domains;
  std::vector<SpecRoute> routes;
  VirtualHost proto;  // header operations
};

struct SpecRequest {
  std::string method, host, path;
  std::vector<std::pair<std::string, std::string>> headers;
};

struct Spec {
  std::vector<SpecVhost> vhosts;
  std::vector<SpecRequest> requests;
  RouteConfiguration table;  // header operations
};

// Splits `line` into at most `n` fields at single spaces; the last takes the rest.
std::vector<std::string> Fields(std::string_view line, size_t n) {
  std::vector<std::string> out;
  while (out.size() + 1 < n) {
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos) break;
    out.emplace_back(line.substr(0, sp));
    line.remove_prefix(sp + 1);
  }
  out.emplace_back(line);
  return out;
}

template <typename Msg>
void AddHeaderOp(Msg* m, const std::vector<std::string>& f) {
  if (f[0] == "add" && f.size() == 3) {
    auto* o = m->add_request_headers_to_add();
    o->mutable_header()->set_key(f[1]);
    o->mutable_header()->set_value(f[2]);
    size_t h = f[2].size() % 6;
    if (h < 4)
      o->set_append_action(
          static_cast<envoy::config::core::v3::HeaderValueOption_HeaderAppendAction>(h));
    if (h == 4) o->mutable_append()->set_value(true);
    o->set_keep_empty_value(f[1].size() % 2 == 0);
  } else if (f[0] == "remove" && f.size() == 2) {
    m->add_request_headers_to_remove(f[1]);
  }
}

Spec ParseSpec(std::string_view input) {
  Spec spec;
  while (!input.empty()) {
    size_t nl = input.find('\n');
    std::string_view line = input.substr(0, nl);
    input = nl == std::string_view::npos ? std::string_view() : input.substr(nl + 1);
    std::vector<std::string> f = Fields(line, 2);
    const std::string& kw = f[0];
    SpecVhost* vh = spec.vhosts.empty() ? nullptr : &spec.vhosts.back();
    SpecRoute* rt = vh && !vh->routes.empty() ? &vh->routes.back() : nullptr;
    if (kw == "vhost" && f.size() == 2) {
      spec.vhosts.emplace_back();
      spec.vhosts.back().name = f[1];
    } else if (kw == "domain" && f.size() == 2 && vh) {
      vh->domains.push_back(f[1]);
    } else if (kw == "route" && vh) {
      f = Fields(line, 3);
      if (f.size() != 3) continue;
      vh->routes.emplace_back();
      vh->routes.back().kind = f[1];
      vh->routes.back().value = f[2];
    } else if (kw == "nocase" && rt) {
      rt->nocase = true;
    } else if (kw == "grpc" && rt) {
      rt->grpc = true;
    } else if (kw == "header" && rt) {
      f = Fields(line, 4);
      if (f.size() < 3) continue;
      SpecHeader h;
      h.name = f[1];
      std::string op = f[2];
      while (!op.empty() && (op[0] == '!' || op[0] == '~' || op[0] == '?')) {
        if (op[0] == '!') h.invert = true;
        if (op[0] == '~') h.icase = true;
        if (op[0] == '?') h.missing_empty = true;
        op.erase(0, 1);
      }
      h.op = op;
      if (f.size() == 4) h.value = f[3];
      rt->headers.push_back(std::move(h));
    } else if (kw == "query" && rt) {
      f = Fields(line, 3);
      if (f.size() < 2) continue;
      rt->query.emplace_back(f[1], f.size() == 3 ? std::optional<std::string>(f[2]) : std::nullopt);
    } else if (kw == "cluster" && rt && f.size() == 2) {
      rt->proto.mutable_route()->set_cluster(f[1]);
    } else if (kw == "weighted" && rt) {
      f = Fields(line, 64);
      auto* wc = rt->proto.mutable_route()->mutable_weighted_clusters();
      for (size_t i = 1; i < f.size(); ++i) {
        auto* c = wc->add_clusters();
        size_t colon = f[i].rfind(':');
        c->set_name(f[i].substr(0, colon));
        uint32_t w;
        if (colon != std::string::npos && absl::SimpleAtoi(A(f[i]).substr(colon + 1), &w)) {
          c->mutable_weight()->set_value(w);
        }
      }
    } else if (kw == "redirect" && rt) {
      f = Fields(line, 4);
      auto* r = rt->proto.mutable_redirect();
      int code = 0;
      if (f.size() > 1 && absl::SimpleAtoi(A(f[1]), &code)) {
        r->set_response_code(
            static_cast<envoy::config::route::v3::RedirectAction_RedirectResponseCode>(code));
      }
      if (f.size() > 2) r->set_host_redirect(f[2]);
      if (f.size() > 3) {
        if (f[3][0] == '/' || f[3].empty()) {
          r->set_path_redirect(f[3]);
        } else {
          r->set_prefix_rewrite(f[3]);
        }
      }
      r->set_https_redirect(code % 2 == 1);
      r->set_strip_query(code % 3 == 1);
      r->set_port_redirect(code % 5 == 4 ? 8443 : 0);
    } else if (kw == "direct" && rt) {
      f = Fields(line, 3);
      auto* d = rt->proto.mutable_direct_response();
      uint32_t status = 0;
      if (f.size() > 1 && absl::SimpleAtoi(A(f[1]), &status)) d->set_status(status);
      if (f.size() > 2) d->mutable_body()->set_inline_string(f[2]);
    } else if (kw == "add" || kw == "remove") {
      f = Fields(line, 3);
      if (rt) {
        AddHeaderOp(&rt->proto, f);
      } else if (vh) {
        AddHeaderOp(&vh->proto, f);
      } else {
        AddHeaderOp(&spec.table, f);
      }
    } else if (kw == "request") {
      f = Fields(line, 4);
      if (f.size() != 4) continue;
      spec.requests.push_back(SpecRequest{f[1], f[2], f[3], {}});
    } else if (kw == "rh" && !spec.requests.empty()) {
      f = Fields(line, 3);
      if (f.size() != 3) continue;
      spec.requests.back().headers.emplace_back(Lower(f[1]), f[2]);  // the parser lower-cases
    }
  }
  return spec;
}

void FillHeaderMatcher(const SpecHeader& h, HeaderMatcher* m) {
  m->set_name(h.name);
  m->set_invert_match(h.invert);
  m->set_treat_missing_header_as_empty(h.missing_empty);
  if (h.op == "present" || h.op == "absent") {
    m->set_present_match(h.op == "present");
  } else if (h.op == "range") {
    size_t dash = h.value.find('-', 1);
    int64_t a = 0, b = 0;
    if (dash != std::string::npos) {
      (void)absl::SimpleAtoi(A(h.value).substr(0, dash), &a);
      (void)absl::SimpleAtoi(A(h.value).substr(dash + 1), &b);
    }
    m->mutable_range_match()->set_start(a);
    m->mutable_range_match()->set_end(b);
  } else if (h.icase || h.op == "regex") {
    auto* sm = m->mutable_string_match();
    sm->set_ignore_case(h.icase);
    if (h.op == "exact") sm->set_exact(h.value);
    if (h.op == "prefix") sm->set_prefix(h.value);
    if (h.op == "suffix") sm->set_suffix(h.value);
    if (h.op == "contains") sm->set_contains(h.value);
    if (h.op == "regex") sm->mutable_safe_regex()->set_regex(h.value);
  } else if (h.op == "exact") {
    m->set_exact_match(h.value);
  } else if (h.op == "prefix") {
    m->set_prefix_match(h.value);
  } else if (h.op == "suffix") {
    m->set_suffix_match(h.value);
  } else if (h.op == "contains") {
    m->set_contains_match(h.value);
  }
  // Anything else: no specifier, which Envoy reads as "present".
}

RouteConfiguration BuildConfig(const Spec& spec) {
  RouteConfiguration rc = spec.table;
  rc.set_name("fuzz");
  for (const SpecVhost& sv : spec.vhosts) {
    VirtualHost* vh = rc.add_virtual_hosts();
    *vh = sv.proto;
    vh->set_name(sv.name);
    for (const auto& d : sv.domains) vh->add_domains(d);
    for (size_t i = 0; i < sv.routes.size(); ++i) {
      const SpecRoute& sr = sv.routes[i];
      Route* r = vh->add_routes();
      *r = sr.proto;
      if (r->action_case() == Route::ACTION_NOT_SET) {
        r->mutable_route()->set_cluster(sv.name + "_" + std::to_string(i));
      }
      auto* m = r->mutable_match();
      if (sr.kind == "prefix") m->set_prefix(sr.value);
      if (sr.kind == "path") m->set_path(sr.value);
      if (sr.kind == "regex") m->mutable_safe_regex()->set_regex(sr.value);
      if (sr.kind == "sep") m->set_path_separated_prefix(sr.value);
      if (sr.nocase) m->mutable_case_sensitive()->set_value(false);
      if (sr.grpc) m->mutable_grpc();
      for (const auto& h : sr.headers) FillHeaderMatcher(h, m->add_headers());
      for (const auto& [name, value] : sr.query) {
        auto* q = m->add_query_parameters();
        q->set_name(name);
        if (value) {
          q->mutable_string_match()->set_exact(*value);
        } else {
          q->set_present_match(true);
        }
      }
    }
  }
  return rc;
}

// ---- The reference model (for configurations RouteTable accepted) ----

std::string RefStripPort(const std::string& host) {
  if (!host.empty() && host[0] == '[') {
    size_t close = host.rfind(']');
    size_t colon = host.rfind(':');
    bool port = close != std::string::npos && colon != std::string::npos && colon > close;
    return port ? host.substr(0, colon) : host;
  }
  size_t first = host.find(':');
  if (first != std::string::npos && first == host.rfind(':')) return host.substr(0, first);
  return host;
}

const SpecVhost* RefVirtualHost(const Spec& spec, const std::string& host_in) {
  std::string host = Lower(host_in);
  std::string bare = RefStripPort(host);
  const SpecVhost* exact_port = nullptr;
  const SpecVhost* exact = nullptr;
  const SpecVhost* suffix = nullptr;
  const SpecVhost* prefix = nullptr;
  const SpecVhost* any = nullptr;
  size_t suffix_len = 0, prefix_len = 0;
  for (const SpecVhost& vh : spec.vhosts) {
    for (const auto& d_in : vh.domains) {
      std::string d = Lower(d_in);
      if (d == "*") {
        any = &vh;
      } else if (d[0] == '*') {
        std::string lit = d.substr(1);
        if (bare.size() > lit.size() && absl::EndsWith(bare, lit) &&
            (!suffix || lit.size() > suffix_len)) {
          suffix = &vh;
          suffix_len = lit.size();
        }
      } else if (d.back() == '*') {
        std::string lit = d.substr(0, d.size() - 1);
        if (bare.size() > lit.size() && absl::StartsWith(bare, lit) &&
            (!prefix || lit.size() > prefix_len)) {
          prefix = &vh;
          prefix_len = lit.size();
        }
      } else {
        if (bare != host && d == host) exact_port = &vh;
        if (d == bare) exact = &vh;
      }
    }
  }
  if (exact_port) return exact_port;
  if (exact) return exact;
  if (suffix) return suffix;
  if (prefix) return prefix;
  return any;
}

bool RefHeaderMatches(const SpecHeader& h, const RequestHead& req) {
  std::string name = Lower(h.name);
  std::string value;
  int count = 0;
  // Envoy's pseudo-headers come from the request line and Host.
  if (name == ":method" || name == ":path" || name == ":authority" || name == "host" ||
      name == ":scheme") {
    value = name == ":method"   ? req.method
            : name == ":path"   ? req.path
            : name == ":scheme" ? std::string("http")
                                : req.host;
    count = 1;
  } else if (name.empty() || name[0] != ':') {
    for (const HeaderMap::Field f : req.headers) {
      if (f.name != name) continue;
      if (count++) value += ',';
      value += f.value;
    }
  }
  bool found = count > 0;
  bool result = false;
  if (h.op == "present" || h.op == "absent") {
    result = found == (h.op == "present");
  } else if (h.op == "range") {
    if (!found && h.missing_empty) found = true;
    size_t dash = h.value.find('-', 1);
    int64_t a = 0, b = 0, n = 0;
    if (dash != std::string::npos) {
      (void)absl::SimpleAtoi(A(h.value).substr(0, dash), &a);
      (void)absl::SimpleAtoi(A(h.value).substr(dash + 1), &b);
    }
    result = found && absl::SimpleAtoi(value, &n) && n >= a && n < b;
  } else if (h.op == "exact" || h.op == "prefix" || h.op == "suffix" || h.op == "contains" ||
             h.op == "regex") {
    if (!found && h.missing_empty) found = true;
    std::string v = h.icase ? Lower(value) : value;
    std::string want = h.icase ? Lower(h.value) : h.value;
    if (h.op == "exact") result = found && v == want;
    if (h.op == "prefix") result = found && absl::StartsWith(v, want);
    if (h.op == "suffix") result = found && absl::EndsWith(v, want);
    if (h.op == "contains") result = found && absl::StrContains(v, want);
    if (h.op == "regex") result = found && RE2::FullMatch(v, RE2(h.value, RE2::Quiet));
  } else {
    result = found;  // no specifier: present
  }
  return result != h.invert;
}

bool RefRouteMatches(const SpecRoute& r, const RequestHead& req) {
  std::string full = req.path;
  size_t q = full.find('?');
  std::string path = full.substr(0, q);
  std::string query = q == std::string::npos ? "" : full.substr(q + 1);
  if (r.kind == "regex") {
    if (!RE2::FullMatch(path, RE2(r.value, RE2::Quiet))) return false;
  } else {
    std::string p = r.kind == "prefix" ? full : path;
    std::string v = r.value;
    if (r.nocase) {
      p = Lower(p);
      v = Lower(v);
    }
    if (r.kind == "prefix" && !absl::StartsWith(p, v)) return false;
    if (r.kind == "path" && p != v) return false;
    if (r.kind == "sep" &&
        !(absl::StartsWith(p, v) && (p.size() == v.size() || p[v.size()] == '/'))) {
      return false;
    }
  }
  if (r.grpc) {
    auto ct = req.headers.Get("content-type");
    if (!ct || !absl::StartsWith(absl::string_view(ct->data(), ct->size()), "application/grpc")) {
      return false;
    }
  }
  for (const auto& h : r.headers) {
    if (!RefHeaderMatches(h, req)) return false;
  }
  for (const auto& [name, want] : r.query) {
    bool matched = false;
    for (std::string_view rest = query; !rest.empty() && !matched;) {
      size_t amp = rest.find('&');
      std::string_view kv = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
      size_t eq = kv.find('=');
      if (kv.substr(0, eq) != name) continue;
      std::string_view v = eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1);
      matched = !want || v == *want;
    }
    if (!matched) return false;
  }
  return true;
}

// Requests made up from the configuration when the input names none.
std::vector<SpecRequest> MadeUpRequests(const Spec& spec) {
  std::vector<SpecRequest> out;
  for (const SpecVhost& vh : spec.vhosts) {
    for (const auto& d : vh.domains) {
      std::string host = d;
      for (char& c : host) {
        if (c == '*') c = 'w';
      }
      out.push_back(SpecRequest{"GET", host, "/", {}});
      out.push_back(SpecRequest{"GET", host + ":8080", "/", {}});
      for (const SpecRoute& r : vh.routes) {
        out.push_back(SpecRequest{"GET", host, r.value, {}});
        out.push_back(
            SpecRequest{"POST", host, r.value + "/x?a=b", {{"content-type", "application/grpc"}}});
        if (out.size() > 64) return out;
      }
    }
  }
  out.push_back(SpecRequest{"GET", "unknown.example", "/", {}});
  return out;
}

void CheckRequest(const Spec& spec, const RouteTable& table, const SpecRequest& sr,
                  uint64_t random) {
  RequestHead req;
  req.method = sr.method;
  req.host = sr.host;
  req.path = sr.path;
  for (const auto& [k, v] : sr.headers) req.headers.Add(k, v);

  const SpecVhost* ref_vh = RefVirtualHost(spec, sr.host);
  const VirtualHostEntry* vh = table.FindVirtualHost(sr.host);
  FUZZ_CHECK((vh == nullptr) == (ref_vh == nullptr));
  if (vh) FUZZ_CHECK(vh->name == ref_vh->name);

  const VirtualHostEntry* route_vh = reinterpret_cast<const VirtualHostEntry*>(1);
  const RouteEntry* route = table.Route(req, &route_vh);
  FUZZ_CHECK(route_vh == vh);
  if (!vh) {
    FUZZ_CHECK(route == nullptr);
    return;
  }
  // The first route of the reference model's choice.
  const RouteEntry* expected = nullptr;
  for (size_t i = 0; i < ref_vh->routes.size(); ++i) {
    if (RefRouteMatches(ref_vh->routes[i], req)) {
      expected = &vh->routes[i];
      break;
    }
  }
  FUZZ_CHECK(route == expected);
  if (!route) return;
  FUZZ_CHECK(route >= vh->routes.data() && route < vh->routes.data() + vh->routes.size());

  switch (route->action) {
    case RouteEntry::Action::kRedirect: {
      std::string loc = route->RedirectLocation(req, random & 1);
      FUZZ_CHECK(loc.find("://") != std::string::npos);
      break;
    }
    case RouteEntry::Action::kWeightedClusters: {
      const WeightedTarget& t = route->PickWeighted(random);
      FUZZ_CHECK(&t >= route->weighted.data() &&
                 &t < route->weighted.data() + route->weighted.size());
      FUZZ_CHECK(t.weight > 0);
      break;
    }
    case RouteEntry::Action::kCluster:
      FUZZ_CHECK(!route->cluster.empty());
      break;
    case RouteEntry::Action::kDirectResponse:
      FUZZ_CHECK(route->direct_status >= 100 && route->direct_status <= 599);
      break;
  }
  // Header operations: removed names are gone unless the same scope adds them back.
  HeaderMap headers = req.headers;
  for (const HeaderOps* ops : {&route->request_ops, &vh->request_ops, &table.request_ops()}) {
    FormatContext ctx;  // value formatters (%REQ(...)%) read the request
    ctx.request = &req;
    ops->Apply(headers, ctx);
    for (const auto& name : ops->remove) {
      bool readded = false;
      for (const auto& h : ops->add) readded |= h.key == name;
      if (!readded) FUZZ_CHECK(!headers.Get(name));
    }
    for (const auto& h : ops->add) {
      std::string value = h.formatter ? h.formatter->Format(ctx) : h.value;
      if (value.empty() && !h.keep_empty) continue;
      if (h.action == HeaderToAdd::Action::kOverwriteIfExists) continue;
      FUZZ_CHECK(headers.Get(h.key).has_value());
    }
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace rpx

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rpx::fuzz;
  if (size > 16384) return 0;  // configurations, not bulk data
  Spec spec = ParseSpec(std::string_view(reinterpret_cast<const char*>(data), size));
  RouteConfiguration rc = BuildConfig(spec);
  auto table = rpx::RouteTable::Create(rc, "route_config");
  if (!table.ok()) {
    // Rejected with a message that names the field, e.g. "route_config.virtual_hosts[1]...".
    std::string msg(table.status().message());
    FUZZ_CHECK(absl::StartsWith(msg, "route_config"));
    FUZZ_CHECK(msg.size() > std::strlen("route_config"));
    return 0;
  }
  const rpx::RouteTable& t = **table;
  FUZZ_CHECK(t.virtual_host_count() == spec.vhosts.size());
  size_t clusters = 0;
  for (const auto& vh : rc.virtual_hosts()) {
    for (const auto& r : vh.routes()) {
      if (r.route().has_weighted_clusters())
        clusters += r.route().weighted_clusters().clusters_size();
      if (!r.route().cluster().empty()) ++clusters;
    }
  }
  FUZZ_CHECK(t.ReferencedClusters().size() == clusters);
  Choices choices(HashInput(data, size));
  const std::vector<SpecRequest>& requests =
      spec.requests.empty() ? MadeUpRequests(spec) : spec.requests;
  for (const auto& r : requests) CheckRequest(spec, t, r, choices.Next());
  return 0;
}
