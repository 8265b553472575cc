#include "source/http/http1_parser.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace rpx {
namespace {
Http1Parser* Self(llhttp_t* p) { return static_cast<Http1Parser*>(p->data); }

// True if the Transfer-Encoding headers say exactly "chunked". rpx decodes no other transfer
// coding; forwarding "gzip, chunked" de-chunked (TE is hop-by-hop) would hand on a body still
// gzip-coded with nothing saying so.
bool OnlyChunked(const HeaderMap& headers) {
  int tokens = 0;
  bool only_chunked = true;
  for (const HeaderMap::Field f : headers) {
    if (f.name != "transfer-encoding") continue;
    ForEachListToken(f.value, [&](std::string_view t) {
      ++tokens;
      return only_chunked = EqualsIgnoreCase(t, "chunked");
    });
    if (!only_chunked) return false;
  }
  return tokens == 1;
}

// Authority of an absolute-form target ("http://host:port/path"), or empty.
std::string AuthorityFromAbsoluteUrl(const std::string& url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos || url[0] == '/') return "";
  size_t start = scheme_end + 3;
  size_t end = url.find_first_of("/?#", start);
  return url.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

bool fast_path_enabled = true;

// Byte classes for the fast path: a header name's token characters (RFC 9110 5.6.2), what it
// accepts in a request target, and in a value or reason phrase (HTAB, SP and visible ASCII;
// obs-text, NUL and other controls are left to llhttp).
struct ByteClasses {
  bool token[256] = {};
  bool text[256] = {};
  bool target[256] = {};  // an origin-form target's (RFC 3986 pchar, '/', '?'; no '#')
  bool host[256] = {};    // a Host's or an absolute-form authority's (see ValidAuthority)
  constexpr ByteClasses() {
    for (int c = '0'; c <= '9'; ++c) target[c] = true;
    for (int c = 'a'; c <= 'z'; ++c) target[c] = target[c - 32] = true;
    for (char c : std::string_view("-._~!$&'()*+,;=:@/?%"))
      target[static_cast<unsigned char>(c)] = true;
    for (int c = '0'; c <= '9'; ++c) token[c] = true;
    for (int c = 'a'; c <= 'z'; ++c) token[c] = token[c - 32] = true;
    for (char c : std::string_view("!#$%&'*+-.^_`|~")) token[static_cast<unsigned char>(c)] = true;
    for (int c = 0x20; c < 0x7f; ++c) text[c] = true;
    text[static_cast<unsigned char>('\t')] = true;
    for (int c = '0'; c <= '9'; ++c) host[c] = true;
    for (int c = 'a'; c <= 'z'; ++c) host[c] = host[c - 32] = true;
    for (char c : std::string_view("-._~!$&'()*+,;=%:[]"))
      host[static_cast<unsigned char>(c)] = true;
  }
};
constexpr ByteClasses kBytes;

// RFC 9112 3.2: a Host is uri-host [":" port], where a host is a reg-name (unreserved,
// pct-encoded, sub-delims), an IPv4 address or a bracketed IP literal (RFC 3986 3.2.2); a server
// answers 400 to any other. rpx checks the characters, not the whole grammar: enough that no
// Host carries a path, userinfo ('@'), whitespace or a control byte into routing, redirects'
// Location, logs or the upstream request. Empty is valid (a target with no authority).
bool ValidAuthority(std::string_view v) {
  for (char c : v) {
    if (!kBytes.host[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

// The first byte from `p` on (before `end`) that kBytes.text refuses, 16 at a time where it can:
// values are most of a head's bytes.
inline const char* SkipText(const char* p, const char* end) {
#ifdef __SSE2__
  const __m128i space = _mm_set1_epi8(0x20), del = _mm_set1_epi8(0x7f);
  while (end - p >= 16) {
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // Signed: below SP is a control byte or one >= 0x80.
    int refused = _mm_movemask_epi8(_mm_or_si128(_mm_cmplt_epi8(b, space), _mm_cmpeq_epi8(b, del)));
    if (refused == 0) {
      p += 16;
      continue;
    }
    p += __builtin_ctz(refused);
    if (*p != '\t') return p;
    ++p;
  }
#endif
  while (p < end && kBytes.text[static_cast<unsigned char>(*p)]) ++p;
  return p;
}
}  // namespace

void Http1Parser::SetFastPathEnabled(bool enabled) { fast_path_enabled = enabled; }

// The same callbacks for every parser: one table, not one per connection.
const llhttp_settings_t& Http1Parser::Settings() {
  static const llhttp_settings_t* settings = [] {
    auto* s = new llhttp_settings_t;
    llhttp_settings_init(s);
    s->on_message_begin = &Http1Parser::OnMessageBegin;
    s->on_url = &Http1Parser::OnUrl;
    s->on_status = &Http1Parser::OnStatus;
    s->on_header_field = &Http1Parser::OnHeaderField;
    s->on_header_value = &Http1Parser::OnHeaderValue;
    s->on_header_value_complete = &Http1Parser::OnHeaderValueComplete;
    s->on_headers_complete = &Http1Parser::OnHeadersComplete;
    s->on_body = &Http1Parser::OnBodyCb;
    s->on_message_complete = &Http1Parser::OnMessageCompleteCb;
    return s;
  }();
  return *settings;
}

Http1Parser::Http1Parser(Type type, Http1ParserCallbacks& callbacks, Limits limits)
    : type_(type), callbacks_(&callbacks), limits_(limits) {
  if (type == Type::kResponse) head_.emplace<ResponseHead>();
  llhttp_init(&parser_, type == Type::kRequest ? HTTP_REQUEST : HTTP_RESPONSE, &Settings());
  parser_.data = this;
}

namespace {
thread_local std::vector<std::unique_ptr<Http1Parser>> parser_pool;
}  // namespace

std::unique_ptr<Http1Parser> Http1Parser::Acquire(Type type, Http1ParserCallbacks& callbacks,
                                                  Limits limits) {
  auto& pool = parser_pool;
  for (size_t i = pool.size(); i-- > 0;) {
    if (pool[i]->type_ != type) continue;
    std::unique_ptr<Http1Parser> p = std::move(pool[i]);
    pool[i] = std::move(pool.back());
    pool.pop_back();
    p->Reset(callbacks, limits);
    return p;
  }
  return std::make_unique<Http1Parser>(type, callbacks, limits);
}

void Http1Parser::Release(std::unique_ptr<Http1Parser> parser) {
  if (!parser) return;
  auto& pool = parser_pool;
  if (pool.size() >= kPoolSize || parser->header_bytes_ > kPoolMaxHeadBytes) return;
  if (pool.capacity() == 0) pool.reserve(kPoolSize);
  pool.push_back(std::move(parser));
}

void Http1Parser::Reset(Http1ParserCallbacks& callbacks, Limits limits) {
  callbacks_ = &callbacks;
  limits_ = limits;
  llhttp_init(&parser_, type_ == Type::kRequest ? HTTP_REQUEST : HTTP_RESPONSE, &Settings());
  parser_.data = this;
  if (type_ == Type::kRequest) {
    request().Clear();
  } else {
    response().Clear();
  }
  in_trailers_ = false;
  in_message_ = false;
  expect_no_body_ = false;
  in_fast_body_ = false;
  fast_body_remaining_ = 0;
  fast_finish_unsafe_ = false;
  llhttp_closing_ = false;
  header_bytes_ = 0;
  exec_begin_ = nullptr;
  prev_tail_[0] = prev_tail_[1] = 0;
  error_status_ = 0;
  error_reason_.clear();
}

int Http1Parser::Fail(int status, const char* reason) {
  error_status_ = status;
  error_reason_ = reason;
  return HPE_USER;
}

int Http1Parser::HeadersTooLarge() {
  return type_ == Type::kRequest ? Fail(431, "request headers too large")
                                 : Fail(502, "response headers too large");
}

bool Http1Parser::AddHeaderBytes(size_t n) {
  header_bytes_ += n;
  return header_bytes_ <= limits_.max_header_bytes;
}

int Http1Parser::OnMessageBegin(llhttp_t* p) {
  Http1Parser* self = Self(p);
  self->in_message_ = true;
  self->in_trailers_ = false;
  self->header_bytes_ = 0;
  if (self->type_ == Type::kRequest) {
    self->request().Clear();
  } else {
    self->response().Clear();
  }
  return 0;
}

int Http1Parser::OnUrl(llhttp_t* p, const char* at, size_t len) {
  Http1Parser* self = Self(p);
  if (!self->AddHeaderBytes(len)) return self->Fail(414, "request URI too long");
  self->request().path.append(at, len);
  return 0;
}

int Http1Parser::OnStatus(llhttp_t* p, const char* at, size_t len) {
  Http1Parser* self = Self(p);
  if (!self->AddHeaderBytes(len)) return self->Fail(502, "status line too long");
  self->response().reason.append(at, len);
  return 0;
}

int Http1Parser::OnHeaderField(llhttp_t* p, const char* at, size_t len) {
  Http1Parser* self = Self(p);
  // A header line starts right after CRLF. llhttp ends the status line at a bare CR and skips the
  // byte after it unchecked ("200 OK\rXContent-Length: 0"), which would make a header out of what
  // other parsers read as part of the reason phrase.
  if (self->headers().pending_name().empty() && len > 0 &&
      (self->Before(at, 1) != '\n' || self->Before(at, 2) != '\r')) {
    return self->type_ == Type::kRequest ? self->Fail(400, "header line without CRLF before it")
                                         : self->Fail(502, "header line without CRLF before it");
  }
  if (!self->AddHeaderBytes(len)) return self->HeadersTooLarge();
  // llhttp lets a space through inside a name ("Transfer Encoding: chunked"), which would be
  // forwarded as a header named "transfer encoding"; a field name is a token (RFC 9110 5.1).
  for (size_t i = 0; i < len; ++i) {
    if (!kBytes.token[static_cast<unsigned char>(at[i])]) {
      return self->type_ == Type::kRequest ? self->Fail(400, "invalid character in header name")
                                           : self->Fail(502, "invalid character in header name");
    }
  }
  self->headers().AppendName(at, len);
  return 0;
}

int Http1Parser::OnHeaderValue(llhttp_t* p, const char* at, size_t len) {
  Http1Parser* self = Self(p);
  // A value span that starts right after CRLF and whitespace is a folded continuation (obs-fold),
  // which llhttp joins silently.
  char b1 = len > 0 ? self->Before(at, 1) : 0;
  if (b1 == '\n' || (len > 0 && self->Before(at, 2) == '\n' && (b1 == ' ' || b1 == '\t'))) {
    return self->type_ == Type::kRequest ? self->Fail(400, "folded header line (obs-fold)")
                                         : self->Fail(502, "folded header line (obs-fold)");
  }
  if (!self->AddHeaderBytes(len)) return self->HeadersTooLarge();
  self->headers().AppendValue(at, len);
  return 0;
}

int Http1Parser::OnHeaderValueComplete(llhttp_t* p) {
  Http1Parser* self = Self(p);
  HeaderMap& headers = self->headers();
  if (self->in_trailers_) {
    // Trailers are dropped (HTTP/1 trailers are rarely used; gRPC needs HTTP/2 anyway).
    headers.DropPending();
    return 0;
  }
  if (headers.size() >= self->limits_.max_headers) {
    return self->type_ == Type::kRequest ? self->Fail(431, "too many request headers")
                                         : self->Fail(502, "too many response headers");
  }
  // llhttp accepts obs-fold (a header continued on the next line); intermediaries may read it
  // differently, so it is refused (RFC 9112 5.2 allows a 400).
  std::string_view v = headers.pending_value();
  // (An empty value may have no storage at all: memchr must not see its null.)
  if (!v.empty() && (memchr(v.data(), '\n', v.size()) || memchr(v.data(), '\r', v.size()))) {
    return self->type_ == Type::kRequest ? self->Fail(400, "folded header line (obs-fold)")
                                         : self->Fail(502, "folded header line (obs-fold)");
  }
  if (headers.pending_name().empty()) {
    // llhttp accepts ": value"; a field name must be a token (RFC 9110 5.1).
    return self->type_ == Type::kRequest ? self->Fail(400, "empty header name")
                                         : self->Fail(502, "empty header name");
  }
  headers.CommitPending();
  return 0;
}

int Http1Parser::OnHeadersComplete(llhttp_t* p) {
  Http1Parser* self = Self(p);
  self->in_trailers_ = true;
  bool chunked = (p->flags & F_CHUNKED) != 0;
  bool has_cl = (p->flags & F_CONTENT_LENGTH) != 0;
  if (self->type_ == Type::kRequest) {
    RequestHead& r = self->request();
    // HTTP/1.0 has no transfer codings: a 1.0 hop in front may have framed this body by
    // Content-Length or by close (RFC 9112 6.1: the framing is faulty; nginx and HAProxy say 400).
    if ((p->flags & F_TRANSFER_ENCODING) && p->http_major == 1 && p->http_minor == 0) {
      return self->Fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    }
    // A transfer coding other than a final "chunked": llhttp reports it only after this callback,
    // when the request would already be routed; refuse it here.
    if ((p->flags & F_TRANSFER_ENCODING) && !(chunked && OnlyChunked(self->request().headers))) {
      return self->Fail(501, "unsupported transfer coding");
    }
    r.method = llhttp_method_name(static_cast<llhttp_method_t>(p->method));
    r.version_minor = p->http_minor;
    if (p->http_major != 1) return self->Fail(505, "unsupported HTTP version");
    r.keep_alive = llhttp_should_keep_alive(p);
    r.chunked = chunked;
    r.has_content_length = has_cl && !chunked;
    r.content_length = r.has_content_length ? p->content_length : 0;
    std::optional<std::string_view> host;
    int host_count = 0;
    for (const HeaderMap::Field f : r.headers) {
      if (f.name == std::string_view("host")) {
        host = f.value;
        ++host_count;
      } else if (f.name == std::string_view("expect") &&
                 EqualsIgnoreCase(f.value, "100-continue")) {
        r.expect_continue = true;
      }
    }
    if (host_count > 1) return self->Fail(400, "multiple Host headers");
    if (p->upgrade && r.method != "CONNECT") {
      // llhttp set `upgrade` for `Connection: upgrade` plus an Upgrade header.
      if (auto u = r.headers.Get("upgrade")) r.upgrade = *u;
      if (r.has_body() && !EqualsIgnoreCase(r.upgrade, "h2c")) {
        return self->Fail(400, "an upgrade request must not have a body");
      }
    }
    std::string authority = AuthorityFromAbsoluteUrl(r.path);
    if (!authority.empty()) {
      r.host = authority;  // RFC 9112 3.2.2: absolute-form overrides Host
      size_t path_start = r.path.find('/', r.path.find("://") + 3);
      r.path = path_start == std::string::npos ? "/" : r.path.substr(path_start);
    } else if (host) {
      r.host = *host;
    } else if (r.version_minor >= 1) {
      return self->Fail(400, "missing Host header");
    }
    if (!ValidAuthority(r.host)) {
      return self->Fail(400, authority.empty() ? "invalid Host header"
                                               : "invalid authority in the request target");
    }
    if (r.method == std::string_view("CONNECT")) return self->Fail(501, "CONNECT is not supported");
    self->callbacks_->OnHead();
    return 0;
  }
  ResponseHead& r = self->response();
  if (p->http_major != 1) return self->Fail(502, "response is not HTTP/1.x");
  // llhttp takes one to three digits; a status code is three, 100 to 599 (RFC 9110 15).
  if (p->status_code < 100 || p->status_code > 599) {
    return self->Fail(502, "invalid response status code");
  }
  // RFC 9112 6.3 would read a non-chunked coding until close; rpx decodes none but chunked, and
  // passing the coded body on without its Transfer-Encoding would misrepresent it.
  if ((p->flags & F_TRANSFER_ENCODING) && !(chunked && OnlyChunked(r.headers))) {
    return self->Fail(502, "unsupported transfer coding in response");
  }
  r.status = p->status_code;
  r.version_minor = p->http_minor;
  r.keep_alive = llhttp_should_keep_alive(p);
  r.chunked = chunked;
  r.has_content_length = has_cl && !chunked;
  r.content_length = r.has_content_length ? p->content_length : 0;
  self->callbacks_->OnHead();
  // 1xx, 204 and 304 never have a body, whatever Content-Length or Transfer-Encoding say (a 304
  // carries the representation's length); llhttp leaves that rule to the caller. Nor does the
  // answer to a HEAD request.
  if (r.status < 200 || r.status == 204 || r.status == 304) return 1;
  return self->expect_no_body_ ? 1 : 0;
}

int Http1Parser::OnBodyCb(llhttp_t* p, const char* at, size_t len) {
  Self(p)->callbacks_->OnBody(at, len);
  return 0;
}

int Http1Parser::OnMessageCompleteCb(llhttp_t* p) {
  Http1Parser* self = Self(p);
  self->in_message_ = false;
  if (self->type_ == Type::kResponse && self->response().status >= 100 &&
      self->response().status < 200 && self->response().status != 101) {
    return 0;  // interim response: keep parsing for the final one
  }
  self->llhttp_closing_ = !llhttp_should_keep_alive(p);
  self->callbacks_->OnMessageComplete();
  return HPE_PAUSED;
}

void Http1Parser::RememberTail(const char* data, size_t len) {
  if (len >= 2) {
    prev_tail_[0] = data[len - 2];
    prev_tail_[1] = data[len - 1];
  } else if (len == 1) {
    prev_tail_[0] = prev_tail_[1];
    prev_tail_[1] = data[0];
  }
}

namespace {
// The methods the fast path takes (llhttp's names for them; CONNECT and the rest go to llhttp).
bool FastMethod(std::string_view m) {
  switch (m.size()) {
    case 3:
      return m == "GET" || m == "PUT";
    case 4:
      return m == "HEAD" || m == "POST";
    case 5:
      return m == "PATCH";
    case 6:
      return m == "DELETE";
    case 7:
      return m == "OPTIONS";
    default:
      return false;
  }
}
}  // namespace

bool Http1Parser::FastMessage(const char* data, size_t len, size_t* consumed, Result* result) {
  const bool is_request = type_ == Type::kRequest;
  // The whole head must be here and within the limit (llhttp's path counts fewer bytes: the
  // same head passes there too).
  const char* end = data + std::min<size_t>(len, limits_.max_header_bytes);
  const char* p = data;
  std::string_view method, target, reason;
  int status = 0;
  char minor;
  if (is_request) {
    // "METHOD /origin-form-target HTTP/1.x\r\n"
    while (p < end && *p >= 'A' && *p <= 'Z') ++p;
    method = std::string_view(data, p - data);
    if (!FastMethod(method) || end - p < 2 || p[0] != ' ' || p[1] != '/') return false;
    const char* t = ++p;
    while (p < end && kBytes.target[static_cast<unsigned char>(*p)]) ++p;
    target = std::string_view(t, p - t);
    if (end - p < 11 || memcmp(p, " HTTP/1.", 8) != 0 || (p[8] != '0' && p[8] != '1') ||
        p[9] != '\r' || p[10] != '\n') {
      return false;
    }
    minor = p[8];
    p += 11;
  } else {
    // "HTTP/1.x ddd reason\r\n"
    if (len < 19 || memcmp(data, "HTTP/1.", 7) != 0 || (data[7] != '0' && data[7] != '1') ||
        data[8] != ' ' || data[12] != ' ') {
      return false;
    }
    for (int i = 9; i < 12; ++i) {
      if (data[i] < '0' || data[i] > '9') return false;
      status = status * 10 + (data[i] - '0');
    }
    // 1xx, 204 and 304 have no body, nor has a HEAD's answer: llhttp's callbacks handle those.
    if (status < 200 || status > 599 || status == 204 || status == 304 || expect_no_body_) {
      return false;
    }
    minor = data[7];
    p = data + 13;
    const char* r = p;
    p = SkipText(p, end);
    reason = std::string_view(r, p - r);
    if (reason.empty() || end - p < 2 || p[0] != '\r' || p[1] != '\n') return false;
    p += 2;
  }

  HeaderMap* hp;
  if (is_request) {
    request().Clear();
    hp = &request().headers;
  } else {
    response().Clear();
    hp = &response().headers;
  }
  HeaderMap& h = *hp;
  bool has_cl = false, keep_alive_listed = false, expect_continue = false;
  uint64_t cl = 0;
  size_t host_index = SIZE_MAX;
  while (true) {
    if (end - p < 2) return false;
    if (p[0] == '\r') {
      if (p[1] != '\n') return false;
      p += 2;
      break;
    }
    const char* name = p;
    while (p < end && kBytes.token[static_cast<unsigned char>(*p)]) ++p;
    if (p == name || p == end || *p != ':') return false;
    size_t name_len = p - name;
    ++p;
    while (p < end && (*p == ' ' || *p == '\t')) ++p;
    const char* value = p;
    p = SkipText(p, end);
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n') return false;
    size_t value_len = p - value;
    p += 2;
    if (h.size() >= limits_.max_headers) return false;
    h.AppendName(name, name_len);
    h.AppendValue(value, value_len);
    h.CommitPending();
    // The names llhttp gives a meaning to. Their values are taken only in the form senders use
    // (one space after the colon, nothing after the value): llhttp has its own rules for the
    // whitespace around them.
    const HeaderMap::Field f = h[h.size() - 1];
    bool plain = value == name + name_len + 2 && value[-1] == ' ' && f.value.size() == value_len;
    switch (f.name.size()) {
      case 4:
        if (is_request && f.name == std::string_view("host")) {
          // Twice or not a valid authority: llhttp's path refuses it with the reason.
          if (host_index != SIZE_MAX || !ValidAuthority(f.value)) return false;
          host_index = h.size() - 1;
        }
        break;
      case 6:
        if (is_request && f.name == std::string_view("expect")) {
          expect_continue |= EqualsIgnoreCase(f.value, "100-continue");
        }
        break;
      case 7:
        if (f.name == std::string_view("upgrade")) return false;
        break;
      case 10:
        if (f.name == std::string_view("connection")) {
          // close, or a list: llhttp's
          if (!plain || !EqualsIgnoreCase(f.value, "keep-alive")) return false;
          keep_alive_listed = true;
        }
        break;
      case 14:
        if (f.name == std::string_view("content-length")) {
          if (!plain || has_cl || f.value.empty() || f.value.size() > 18) return false;
          for (char c : f.value) {
            if (c < '0' || c > '9') return false;
            cl = cl * 10 + (c - '0');
          }
          has_cl = true;
        }
        break;
      case 16:
        if (f.name == std::string_view("proxy-connection")) return false;
        break;
      case 17:
        if (f.name == std::string_view("transfer-encoding")) return false;
        break;
      default:
        break;
    }
  }
  // A connection that closes after this message (llhttp then drops whatever follows it), a
  // close-delimited response body, a request without its Host: llhttp's path.
  bool keep_alive = minor == '1' || keep_alive_listed;
  if (!keep_alive) return false;
  if (is_request ? minor == '1' && host_index == SIZE_MAX : !has_cl) return false;

  size_t head_len = p - data;
  in_message_ = true;
  in_trailers_ = true;
  header_bytes_ = head_len;
  if (is_request) {
    RequestHead& r = request();
    r.method.assign(method);
    r.path.assign(target);
    if (host_index != SIZE_MAX) r.host.assign(h[host_index].value);
    r.version_minor = minor - '0';
    r.keep_alive = true;
    r.has_content_length = has_cl;
    r.content_length = cl;
    r.expect_continue = expect_continue;
  } else {
    ResponseHead& r = response();
    r.status = status;
    r.reason.assign(reason);
    r.version_minor = minor - '0';
    r.keep_alive = true;
    r.has_content_length = true;
    r.content_length = cl;
  }
  RememberTail(data, len);
  callbacks_->OnHead();
  in_fast_body_ = true;
  fast_body_remaining_ = cl;
  *result = FastBody(p, len - head_len, consumed);
  *consumed += head_len;
  return true;
}

Http1Parser::Result Http1Parser::FastBody(const char* data, size_t len, size_t* consumed) {
  size_t n = static_cast<size_t>(std::min<uint64_t>(len, fast_body_remaining_));
  fast_body_remaining_ -= n;
  if (n) callbacks_->OnBody(data, n);
  if (fast_body_remaining_ > 0) {
    *consumed = len;
    return Result::kOk;
  }
  in_fast_body_ = false;
  in_message_ = false;
  fast_finish_unsafe_ = true;
  callbacks_->OnMessageComplete();
  *consumed = n;
  return Result::kPaused;
}

Http1Parser::Result Http1Parser::Execute(const char* data, size_t len, size_t* consumed) {
  if (in_fast_body_) {
    RememberTail(data, len);
    return FastBody(data, len, consumed);
  }
  if (len > 0) fast_finish_unsafe_ = false;
  if (!in_message_ && !llhttp_closing_ && fast_path_enabled &&
      llhttp_get_errno(&parser_) == HPE_OK) {
    Result r;
    if (FastMessage(data, len, consumed, &r)) return r;
  }
  exec_begin_ = data;
  llhttp_errno_t err = llhttp_execute(&parser_, data, len);
  RememberTail(data, len);
  if (err == HPE_OK) {
    *consumed = len;
    return Result::kOk;
  }
  if (err == HPE_PAUSED) {
    *consumed = llhttp_get_error_pos(&parser_) - data;
    return Result::kPaused;
  }
  if (err == HPE_PAUSED_UPGRADE) {
    // The request asked for an upgrade. If the upstream agrees (101), the connection owner stops
    // parsing and tunnels the bytes; otherwise the connection continues as HTTP/1.1.
    *consumed = llhttp_get_error_pos(&parser_) - data;
    llhttp_resume_after_upgrade(&parser_);
    return Result::kPaused;
  }
  *consumed = 0;
  if (error_status_ == 0) {
    if (err == HPE_INVALID_TRANSFER_ENCODING && type_ == Type::kRequest) {
      error_status_ = 501;
    } else {
      error_status_ = type_ == Type::kRequest ? 400 : 502;
    }
    error_reason_ = llhttp_errno_name(err);
    const char* r = llhttp_get_error_reason(&parser_);
    if (r && *r) {
      error_reason_ += ": ";
      error_reason_ += r;
    }
  }
  return Result::kError;
}

void Http1Parser::Resume() { llhttp_resume(&parser_); }

uint64_t Http1Parser::remaining_body_length() const {
  if (in_fast_body_) return fast_body_remaining_;
  // in_trailers_ is set once the head is complete.
  if (!in_message_ || !in_trailers_ || expect_no_body_) return 0;
  if ((parser_.flags & F_CHUNKED) || !(parser_.flags & F_CONTENT_LENGTH)) return 0;
  return parser_.content_length;
}

void Http1Parser::SkipRemainingBody() {
  in_fast_body_ = false;
  fast_body_remaining_ = 0;
  fast_finish_unsafe_ = false;  // as llhttp_reset leaves llhttp
  llhttp_closing_ = false;
  llhttp_reset(&parser_);
  in_message_ = false;
}

Http1Parser::Result Http1Parser::Finish() {
  // EOF inside a Content-Length body, as llhttp_finish reports it.
  llhttp_errno_t err =
      in_fast_body_ || fast_finish_unsafe_ ? HPE_INVALID_EOF_STATE : llhttp_finish(&parser_);
  if (err == HPE_OK || err == HPE_PAUSED) return Result::kOk;
  if (error_status_ == 0) {
    error_status_ = 502;
    error_reason_ = llhttp_errno_name(err);
  }
  return Result::kError;
}

}  // namespace rpx
