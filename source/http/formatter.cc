#include "source/http/formatter.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "source/common/assert.h"
#include "source/common/json.h"
#include "source/network/address.h"

namespace rpx {

const char Formatter::kDefaultFormat[] =
    "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" "
    "%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% "
    "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" "
    "\"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\"\n";

namespace {

enum class Op {
  kLiteral,
  kReq,
  kResp,
  kTrailer,
  kStartTime,
  kResponseCode,
  kResponseFlags,
  kResponseCodeDetails,
  kBytesReceived,
  kBytesSent,
  kDuration,
  kRequestDuration,
  kResponseDuration,
  kResponseTxDuration,
  kUpstreamHost,
  kUpstreamCluster,
  kUpstreamLocalAddress,
  kUpstreamTransportFailureReason,
  kDownstreamRemoteAddress,
  kDownstreamRemoteAddressWithoutPort,
  kDownstreamRemotePort,
  kDownstreamLocalAddress,
  kDownstreamLocalAddressWithoutPort,
  kDownstreamLocalPort,
  kRouteName,
  kProtocol,
  kRequestedServerName,
  kHostname,
  kPeerSubject,
  kPeerUriSan,
  kPeerDnsSan,
  kPeerFingerprint256,
  kTlsVersion,
  kTlsCipher,
  kLocalReplyBody,
};

struct NamedOp {
  const char* name;
  Op op;
  bool numeric;
};

// Operators without an argument.
constexpr NamedOp kPlainOps[] = {
    {"RESPONSE_CODE", Op::kResponseCode, true},
    {"RESPONSE_FLAGS", Op::kResponseFlags, false},
    {"RESPONSE_CODE_DETAILS", Op::kResponseCodeDetails, false},
    {"BYTES_RECEIVED", Op::kBytesReceived, true},
    {"BYTES_SENT", Op::kBytesSent, true},
    {"DURATION", Op::kDuration, true},
    {"REQUEST_DURATION", Op::kRequestDuration, true},
    {"RESPONSE_DURATION", Op::kResponseDuration, true},
    {"RESPONSE_TX_DURATION", Op::kResponseTxDuration, true},
    {"UPSTREAM_HOST", Op::kUpstreamHost, false},
    {"UPSTREAM_REMOTE_ADDRESS", Op::kUpstreamHost, false},
    {"UPSTREAM_CLUSTER", Op::kUpstreamCluster, false},
    {"UPSTREAM_LOCAL_ADDRESS", Op::kUpstreamLocalAddress, false},
    {"UPSTREAM_TRANSPORT_FAILURE_REASON", Op::kUpstreamTransportFailureReason, false},
    {"DOWNSTREAM_REMOTE_ADDRESS", Op::kDownstreamRemoteAddress, false},
    {"DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT", Op::kDownstreamRemoteAddressWithoutPort, false},
    {"DOWNSTREAM_REMOTE_PORT", Op::kDownstreamRemotePort, true},
    {"DOWNSTREAM_DIRECT_REMOTE_ADDRESS", Op::kDownstreamRemoteAddress, false},
    {"DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT", Op::kDownstreamRemoteAddressWithoutPort,
     false},
    {"DOWNSTREAM_DIRECT_REMOTE_PORT", Op::kDownstreamRemotePort, true},
    {"DOWNSTREAM_LOCAL_ADDRESS", Op::kDownstreamLocalAddress, false},
    {"DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT", Op::kDownstreamLocalAddressWithoutPort, false},
    {"DOWNSTREAM_LOCAL_PORT", Op::kDownstreamLocalPort, true},
    {"ROUTE_NAME", Op::kRouteName, false},
    {"PROTOCOL", Op::kProtocol, false},
    {"REQUESTED_SERVER_NAME", Op::kRequestedServerName, false},
    {"HOSTNAME", Op::kHostname, false},
    {"DOWNSTREAM_PEER_SUBJECT", Op::kPeerSubject, false},
    {"DOWNSTREAM_PEER_URI_SAN", Op::kPeerUriSan, false},
    {"DOWNSTREAM_PEER_DNS_SAN", Op::kPeerDnsSan, false},
    {"DOWNSTREAM_PEER_FINGERPRINT_256", Op::kPeerFingerprint256, false},
    {"DOWNSTREAM_TLS_VERSION", Op::kTlsVersion, false},
    {"DOWNSTREAM_TLS_CIPHER", Op::kTlsCipher, false},
    {"LOCAL_REPLY_BODY", Op::kLocalReplyBody, false},
};

// A piece of a START_TIME format: strftime text, or one of Envoy's additions.
struct TimePart {
  enum Kind { kStrftime, kFraction, kEpochSeconds, kSecondsWithFraction } kind;
  std::string text;  // kStrftime
  int digits = 0;    // kFraction, kSecondsWithFraction
};

std::vector<TimePart> ParseTimeFormat(const std::string& f) {
  std::vector<TimePart> parts;
  std::string chunk;
  auto flush = [&] {
    if (!chunk.empty()) parts.push_back({TimePart::kStrftime, chunk, 0});
    chunk.clear();
  };
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%' || i + 1 >= f.size()) {
      chunk += f[i];
      continue;
    }
    char c = f[i + 1];
    if (c == '%') {
      chunk += "%%";
      ++i;
    } else if (c == 'f') {
      flush();
      parts.push_back({TimePart::kFraction, "", 9});
      ++i;
    } else if (c >= '1' && c <= '9' && i + 2 < f.size() && f[i + 2] == 'f') {
      flush();
      parts.push_back({TimePart::kFraction, "", c - '0'});
      i += 2;
    } else if (c == 's') {
      flush();
      parts.push_back({TimePart::kEpochSeconds, "", 0});
      ++i;
    } else if (c == 'E' && i + 3 < f.size() && f[i + 3] == 'S' &&
               ((f[i + 2] >= '1' && f[i + 2] <= '9') || f[i + 2] == '*')) {
      flush();
      parts.push_back({TimePart::kSecondsWithFraction, "", f[i + 2] == '*' ? 9 : f[i + 2] - '0'});
      i += 3;
    } else {
      chunk += f[i];
    }
  }
  flush();
  return parts;
}

void AppendFraction(int64_t nanos, int digits, std::string* out) {
  char buf[10];
  snprintf(buf, sizeof(buf), "%09lld", static_cast<long long>(nanos));
  out->append(buf, digits);
}

const std::string& Hostname() {
  static const std::string* name = [] {
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) != 0) buf[0] = 0;
    return new std::string(buf);
  }();
  return *name;
}

std::string SplitHostPort(const std::string& addr, bool want_port) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return want_port ? "" : addr;
  if (want_port) return addr.substr(colon + 1);
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

struct Formatter::Segment {
  Op op = Op::kLiteral;
  bool numeric = false;
  std::string text;  // the literal; the header name (lower case) for REQ/RESP/TRAILER
  std::string alt;   // REQ(X?Y): Y
  size_t max_len = 0;
  std::vector<TimePart> time;
  uint64_t time_id = 0;  // START_TIME: identifies this format in the per-thread cache
};

struct Formatter::JsonNode {
  // An object (children), or a value: a literal JSON text, or segments to format.
  std::vector<std::pair<std::string, std::unique_ptr<JsonNode>>> children;
  bool is_object = false;
  std::string literal;  // already JSON (number, bool, null)
  std::vector<Segment> segments;
  bool single_numeric = false;  // one numeric operator alone: printed as a JSON number
};

namespace {

enum class Value { kMissing, kString, kNumber };

uint64_t Ms(uint64_t from, uint64_t to) { return (to - from) / 1000000; }

Value AppendNumber(uint64_t v, std::string* out) {
  absl::StrAppend(out, v);
  return Value::kNumber;
}

// The value of a header (or pseudo-header) of the request.
bool RequestHeader(const FormatContext& ctx, const std::string& name, std::string_view* out,
                   std::string* scratch) {
  const RequestHead* r = ctx.request;
  if (!r) return false;
  if (!name.empty() && name[0] == ':') {
    if (name == ":method") {
      *out = r->method;
    } else if (name == ":path") {
      *out = r->path;
    } else if (name == ":authority" || name == ":host") {
      *out = r->host;
    } else if (name == ":scheme") {
      if (ctx.scheme) {
        *out = *ctx.scheme;
        return true;
      }
      *scratch = ctx.downstream && ctx.downstream->is_tls() ? "https" : "http";
      *out = *scratch;
    } else if (name == ":protocol") {
      if (r->upgrade.empty()) return false;
      *out = r->upgrade;
    } else {
      return false;
    }
    return !out->empty() || name != ":method";
  }
  auto v = r->headers.Get(name);
  if (!v) return false;
  *out = *v;
  return true;
}

Value Evaluate(const Formatter::Segment& s, const FormatContext& ctx, std::string* out) {
  const StreamInfo* info = ctx.info;
  switch (s.op) {
    case Op::kLiteral:
      out->append(s.text);
      return Value::kString;
    case Op::kReq:
    case Op::kResp:
    case Op::kTrailer: {
      std::string scratch;
      std::string_view v;
      bool found = false;
      for (const std::string* name : {&s.text, &s.alt}) {
        if (name->empty()) continue;
        if (s.op == Op::kReq) {
          found = RequestHeader(ctx, *name, &v, &scratch);
        } else {
          const HeaderMap* h = s.op == Op::kResp ? ctx.response_headers : ctx.response_trailers;
          if (s.op == Op::kResp && *name == ":status" && info && info->response_code) {
            scratch = std::to_string(info->response_code);
            v = scratch;
            found = true;
          } else if (h) {
            auto got = h->Get(*name);
            if (got) {
              v = *got;
              found = true;
            }
          }
        }
        if (found) break;
      }
      if (!found) return Value::kMissing;
      if (s.max_len && v.size() > s.max_len) v = v.substr(0, s.max_len);
      out->append(v);
      return Value::kString;
    }
    case Op::kStartTime: {
      // Without access logs no start time is recorded; a header formatter then uses the time it
      // runs at (while the request's headers are being forwarded).
      int64_t start = info && info->start_unix_ns ? info->start_unix_ns : UnixNowNs();
      int64_t secs = start / 1000000000;
      int64_t nanos = start % 1000000000;
      // strftime is the costly part; its output only changes once a second.
      struct Cache {
        uint64_t key = 0;
        int64_t secs = -1;
        std::vector<std::string> chunks;
      };
      thread_local Cache cache;
      if (cache.key != s.time_id || cache.secs != secs) {
        cache.key = s.time_id;
        cache.secs = secs;
        cache.chunks.clear();
        time_t t = secs;
        struct tm tm;
        gmtime_r(&t, &tm);
        for (const auto& p : s.time) {
          if (p.kind != TimePart::kStrftime && p.kind != TimePart::kSecondsWithFraction) continue;
          char buf[256];
          size_t n = strftime(buf, sizeof(buf),
                              p.kind == TimePart::kStrftime ? p.text.c_str() : "%S", &tm);
          cache.chunks.emplace_back(buf, n);
        }
      }
      size_t chunk = 0;
      for (const auto& p : s.time) {
        switch (p.kind) {
          case TimePart::kStrftime:
            out->append(cache.chunks[chunk++]);
            break;
          case TimePart::kSecondsWithFraction:
            out->append(cache.chunks[chunk++]);
            out->push_back('.');
            AppendFraction(nanos, p.digits, out);
            break;
          case TimePart::kFraction:
            AppendFraction(nanos, p.digits, out);
            break;
          case TimePart::kEpochSeconds:
            absl::StrAppend(out, secs);
            break;
        }
      }
      return Value::kString;
    }
    case Op::kResponseCode:
      return AppendNumber(info ? info->response_code : 0, out);
    case Op::kResponseFlags:
      if (!info) return Value::kMissing;
      AppendResponseFlags(info->response_flags, out);
      return Value::kString;
    case Op::kResponseCodeDetails:
      if (!info || info->response_code_details.empty()) return Value::kMissing;
      out->append(info->response_code_details);
      return Value::kString;
    case Op::kBytesReceived:
      return AppendNumber(info ? info->bytes_received : 0, out);
    case Op::kBytesSent:
      return AppendNumber(info ? info->bytes_sent : 0, out);
    case Op::kDuration:
      if (!info || !info->start_ns) return Value::kMissing;
      return AppendNumber(Ms(info->start_ns, info->end_ns ? info->end_ns : MonotonicNowNs()), out);
    case Op::kRequestDuration:
      if (!info || !info->start_ns || !info->request_end_ns) return Value::kMissing;
      return AppendNumber(Ms(info->start_ns, info->request_end_ns), out);
    case Op::kResponseDuration:
      if (!info || !info->start_ns || !info->upstream_first_byte_ns) return Value::kMissing;
      return AppendNumber(Ms(info->start_ns, info->upstream_first_byte_ns), out);
    case Op::kResponseTxDuration:
      if (!info || !info->upstream_first_byte_ns || !info->end_ns) return Value::kMissing;
      return AppendNumber(Ms(info->upstream_first_byte_ns, info->end_ns), out);
    case Op::kUpstreamHost:
      if (!info || !info->upstream_address) return Value::kMissing;
      out->append(info->upstream_address->ToString());
      return Value::kString;
    case Op::kUpstreamCluster:
      if (!info || !info->cluster_name) return Value::kMissing;
      out->append(*info->cluster_name);
      return Value::kString;
    case Op::kUpstreamLocalAddress:
      if (!info || info->upstream_local_address.empty()) return Value::kMissing;
      out->append(info->upstream_local_address);
      return Value::kString;
    case Op::kUpstreamTransportFailureReason:
      if (!info || info->upstream_transport_failure_reason.empty()) return Value::kMissing;
      out->append(info->upstream_transport_failure_reason);
      return Value::kString;
    case Op::kDownstreamRemoteAddress:
    case Op::kDownstreamRemoteAddressWithoutPort:
    case Op::kDownstreamRemotePort:
    case Op::kDownstreamLocalAddress:
    case Op::kDownstreamLocalAddressWithoutPort:
    case Op::kDownstreamLocalPort: {
      if (!ctx.downstream) return Value::kMissing;
      bool local = s.op == Op::kDownstreamLocalAddress ||
                   s.op == Op::kDownstreamLocalAddressWithoutPort ||
                   s.op == Op::kDownstreamLocalPort;
      std::string a = local ? ctx.downstream->local_address() : ctx.downstream->remote_address();
      if (a.empty()) return Value::kMissing;
      if (s.op == Op::kDownstreamRemoteAddress || s.op == Op::kDownstreamLocalAddress) {
        out->append(a);
        return Value::kString;
      }
      bool port = s.op == Op::kDownstreamRemotePort || s.op == Op::kDownstreamLocalPort;
      out->append(SplitHostPort(a, port));
      return port ? Value::kNumber : Value::kString;
    }
    case Op::kRouteName:
      if (!info || !info->route_name || info->route_name->empty()) return Value::kMissing;
      out->append(*info->route_name);
      return Value::kString;
    case Op::kProtocol:
      if (!ctx.request) return Value::kMissing;
      out->append(ctx.request->version_major == 2   ? "HTTP/2"
                  : ctx.request->version_minor == 0 ? "HTTP/1.0"
                                                    : "HTTP/1.1");
      return Value::kString;
    case Op::kRequestedServerName: {
      if (!ctx.downstream) return Value::kMissing;
      std::string sni = ctx.downstream->requested_server_name();
      if (sni.empty()) return Value::kMissing;
      out->append(sni);
      return Value::kString;
    }
    case Op::kHostname:
      out->append(Hostname());
      return Value::kString;
    case Op::kPeerSubject:
    case Op::kPeerUriSan:
    case Op::kPeerDnsSan:
    case Op::kPeerFingerprint256: {
      PeerCertificateInfo cert;
      if (!ctx.downstream || !ctx.downstream->PeerCertificate(&cert)) return Value::kMissing;
      std::string v;
      if (s.op == Op::kPeerSubject) v = cert.subject;
      if (s.op == Op::kPeerUriSan) v = absl::StrJoin(cert.uris, ",");
      if (s.op == Op::kPeerDnsSan) v = absl::StrJoin(cert.dns, ",");
      if (s.op == Op::kPeerFingerprint256) v = cert.hash;
      if (v.empty()) return Value::kMissing;
      out->append(v);
      return Value::kString;
    }
    case Op::kLocalReplyBody:
      if (!ctx.local_reply_body) return Value::kMissing;
      out->append(*ctx.local_reply_body);
      return Value::kString;
    case Op::kTlsVersion:
    case Op::kTlsCipher: {
      if (!ctx.downstream) return Value::kMissing;
      std::string v =
          s.op == Op::kTlsVersion ? ctx.downstream->tls_version() : ctx.downstream->tls_cipher();
      if (v.empty()) return Value::kMissing;
      out->append(v);
      return Value::kString;
    }
  }
  RPX_ASSERT(false);
  return Value::kMissing;
}

}  // namespace

class FormatParser {
 public:
  explicit FormatParser(Formatter* f) : f_(f) {}

  // Envoy's grammar: %NAME%, %NAME(arg)%, %NAME(arg):N%. A '%' that starts no operator is a
  // literal, and "%%" is one literal '%'.
  absl::Status Parse(const std::string& format, std::vector<Formatter::Segment>* out) {
    std::string literal;
    auto flush = [&] {
      if (literal.empty()) return;
      Formatter::Segment s;
      s.text = std::move(literal);
      literal.clear();
      out->push_back(std::move(s));
    };
    size_t i = 0;
    while (i < format.size()) {
      char c = format[i];
      if (c != '%') {
        literal += c;
        ++i;
        continue;
      }
      if (i + 1 < format.size() && format[i + 1] == '%') {
        literal += '%';
        i += 2;
        continue;
      }
      size_t j = i + 1;
      while (j < format.size() && (absl::ascii_isupper(format[j]) ||
                                   absl::ascii_isdigit(format[j]) || format[j] == '_')) {
        ++j;
      }
      if (j == i + 1 || j >= format.size()) {
        literal += c;
        ++i;
        continue;
      }
      std::string name = format.substr(i + 1, j - i - 1);
      std::string arg;
      bool has_arg = false;
      if (format[j] == '(') {
        size_t close = format.find(')', j);
        if (close == std::string::npos) {
          return absl::InvalidArgumentError(
              absl::StrCat("command operator %", name, "( has no closing ')'"));
        }
        arg = format.substr(j + 1, close - j - 1);
        has_arg = true;
        j = close + 1;
      }
      size_t max_len = 0;
      if (j < format.size() && format[j] == ':' && has_arg) {
        size_t k = j + 1;
        while (k < format.size() && absl::ascii_isdigit(format[k])) ++k;
        if (k == j + 1 || !absl::SimpleAtoi(format.substr(j + 1, k - j - 1), &max_len)) {
          return absl::InvalidArgumentError(
              absl::StrCat("command operator %", name, "(", arg, "): needs a length after ':'"));
        }
        j = k;
      }
      if (j >= format.size() || format[j] != '%') {
        return absl::InvalidArgumentError(absl::StrCat("command operator %", name,
                                                       has_arg ? "(...)" : "",
                                                       " is not closed by '%' at offset ", j));
      }
      flush();
      Formatter::Segment s;
      absl::Status st = Operator(name, arg, has_arg, max_len, &s);
      if (!st.ok()) return st;
      out->push_back(std::move(s));
      i = j + 1;
    }
    flush();
    return absl::OkStatus();
  }

  absl::Status Json(const google::protobuf::Struct& st, Formatter::JsonNode* node) {
    node->is_object = true;
    // Struct's fields are a map; Envoy writes them in key order.
    std::vector<std::string> keys;
    for (const auto& [k, v] : st.fields()) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    for (const auto& k : keys) {
      const auto& v = st.fields().at(k);
      auto child = std::make_unique<Formatter::JsonNode>();
      switch (v.kind_case()) {
        case google::protobuf::Value::kStructValue: {
          absl::Status s = Json(v.struct_value(), child.get());
          if (!s.ok()) return s;
          break;
        }
        case google::protobuf::Value::kStringValue: {
          absl::Status s = Parse(v.string_value(), &child->segments);
          if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(k, ": ", s.message()));
          child->single_numeric = child->segments.size() == 1 && child->segments[0].numeric;
          break;
        }
        case google::protobuf::Value::kNumberValue: {
          double d = v.number_value();
          child->literal = (d == std::floor(d) && std::fabs(d) < 1e15)
                               ? absl::StrCat(static_cast<int64_t>(d))
                               : absl::StrCat(d);
          break;
        }
        case google::protobuf::Value::kBoolValue:
          child->literal = v.bool_value() ? "true" : "false";
          break;
        case google::protobuf::Value::kNullValue:
          child->literal = "null";
          break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat(k, ": only strings, numbers, booleans and objects are supported"));
      }
      node->children.emplace_back(k, std::move(child));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Operator(const std::string& name, const std::string& arg, bool has_arg,
                        size_t max_len, Formatter::Segment* s) {
    if (name == "REQ" || name == "RESP" || name == "TRAILER") {
      if (!has_arg || arg.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("%", name, "% needs a header name: %", name,
                                                       "(X-NAME)% or %", name,
                                                       "(X-NAME?ALTERNATIVE):LENGTH%"));
      }
      s->op = name == "REQ" ? Op::kReq : name == "RESP" ? Op::kResp : Op::kTrailer;
      size_t q = arg.find('?');
      s->text = absl::AsciiStrToLower(arg.substr(0, q));
      if (q != std::string::npos) s->alt = absl::AsciiStrToLower(arg.substr(q + 1));
      if (s->text.empty() || (q != std::string::npos && s->alt.empty())) {
        return absl::InvalidArgumentError(absl::StrCat("%", name, "(", arg, ")%: empty name"));
      }
      s->max_len = max_len;
      if (s->op == Op::kResp) f_->uses_response_headers_ = true;
      return absl::OkStatus();
    }
    if (name == "START_TIME") {
      s->op = Op::kStartTime;
      f_->uses_start_time_ = true;
      s->time = ParseTimeFormat(has_arg && !arg.empty() ? arg : "%Y-%m-%dT%H:%M:%E3SZ");
      // Not the segment's address: a freed formatter's may be reused by the next one.
      static std::atomic<uint64_t> next_id{1};
      s->time_id = next_id.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    if (max_len) {
      return absl::InvalidArgumentError(absl::StrCat("%", name, "% takes no length"));
    }
    for (const auto& p : kPlainOps) {
      if (name == p.name) {
        if (has_arg) {
          return absl::InvalidArgumentError(absl::StrCat("%", name, "% takes no argument"));
        }
        s->op = p.op;
        s->numeric = p.numeric;
        if (p.op == Op::kUpstreamLocalAddress) f_->uses_upstream_local_address_ = true;
        if (p.op == Op::kDuration || p.op == Op::kRequestDuration ||
            p.op == Op::kResponseDuration || p.op == Op::kResponseTxDuration) {
          f_->uses_durations_ = true;
        }
        return absl::OkStatus();
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown command operator %", name,
        "% (rpx supports REQ, RESP, TRAILER, "
        "START_TIME, ",
        absl::StrJoin(kPlainOps, ", ", [](std::string* o, const NamedOp& n) { o->append(n.name); }),
        ")"));
  }

  Formatter* f_;
};

Formatter::~Formatter() = default;

bool Formatter::has_operators() const {
  if (json_) return true;
  for (const auto& s : text_) {
    if (s.op != Op::kLiteral) return true;
  }
  return false;
}

absl::StatusOr<std::shared_ptr<const Formatter>> Formatter::Text(const std::string& format,
                                                                 Options options) {
  std::shared_ptr<Formatter> f(new Formatter());
  f->options_ = options;
  FormatParser p(f.get());
  absl::Status s = p.Parse(format, &f->text_);
  if (!s.ok()) return s;
  return std::shared_ptr<const Formatter>(std::move(f));
}

absl::StatusOr<std::shared_ptr<const Formatter>> Formatter::Json(
    const google::protobuf::Struct& format, Options options) {
  std::shared_ptr<Formatter> f(new Formatter());
  f->options_ = options;
  f->json_ = std::make_unique<JsonNode>();
  FormatParser p(f.get());
  absl::Status s = p.Json(format, f->json_.get());
  if (!s.ok()) return s;
  return std::shared_ptr<const Formatter>(std::move(f));
}

namespace {

// Appends `node`'s value as JSON; false (and nothing appended) when it is missing.
bool AppendJson(const Formatter::JsonNode& node, const FormatContext& ctx, bool omit_empty,
                std::string* out) {
  if (node.is_object) {
    out->push_back('{');
    bool first = true;
    for (const auto& [key, child] : node.children) {
      size_t mark = out->size();
      if (!first) out->push_back(',');
      AppendJsonString(key, out);
      out->push_back(':');
      if (!AppendJson(*child, ctx, omit_empty, out)) {
        if (omit_empty) {
          out->resize(mark);
          continue;
        }
        out->append("null");
      }
      first = false;
    }
    out->push_back('}');
    return true;
  }
  if (!node.literal.empty()) {
    out->append(node.literal);
    return true;
  }
  // One operator alone that has no value is null; within a longer string it reads "-".
  std::string v;
  for (const auto& s : node.segments) {
    size_t mark = v.size();
    if (Evaluate(s, ctx, &v) == Value::kMissing) {
      if (node.segments.size() == 1) return false;
      v.resize(mark);
      v.push_back('-');
    }
  }
  if (node.single_numeric && !v.empty()) {
    out->append(v);
  } else {
    if (omit_empty && v.empty()) return false;
    AppendJsonString(v, out);
  }
  return true;
}

}  // namespace

void Formatter::Format(const FormatContext& ctx, std::string* out) const {
  if (json_) {
    AppendJson(*json_, ctx, options_.omit_empty_values, out);
    out->push_back('\n');
    return;
  }
  for (const auto& s : text_) {
    size_t mark = out->size();
    if (Evaluate(s, ctx, out) == Value::kMissing) {
      out->resize(mark);
      if (!options_.omit_empty_values) out->push_back('-');
    }
  }
}

// StreamInfo helpers live here with their only users.
namespace {
constexpr const char* kFlagNames[kResponseFlagCount] = {
    "LH",   "UH",   "UT",   "LR",   "UR", "UF",  "UC", "UO", "NR",  "DI",
    "FI",   "RL",   "UAEX", "RLSE", "DC", "URX", "SI", "IH", "DPE", "UMSDR",
    "RFCF", "NFCF", "DT",   "UPE",  "NC", "OM",  "DF", "DO", "DR"};
}  // namespace

const char* ResponseFlagShortName(int bit) {
  RPX_ASSERT(bit >= 0 && bit < kResponseFlagCount);
  return kFlagNames[bit];
}

uint32_t ResponseFlagFromShortName(std::string_view name) {
  for (int i = 0; i < kResponseFlagCount; ++i) {
    if (name == kFlagNames[i]) return 1u << i;
  }
  return 0;
}

void AppendResponseFlags(uint32_t flags, std::string* out) {
  if (!flags) {
    out->push_back('-');
    return;
  }
  bool first = true;
  for (int i = 0; i < kResponseFlagCount; ++i) {
    if (!(flags & (1u << i))) continue;
    if (!first) out->push_back(',');
    out->append(kFlagNames[i]);
    first = false;
  }
}

uint64_t MonotonicNowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

int64_t UnixNowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000ll + ts.tv_nsec;
}

}  // namespace rpx
