#include "source/network/tls_inspector.h"

#include <algorithm>
#include <bitset>
#include <utility>

namespace rpx {
namespace {

constexpr uint8_t kContentTypeHandshake = 22;
constexpr uint8_t kHandshakeTypeClientHello = 1;
constexpr size_t kRecordHeaderBytes = 5;
constexpr size_t kHandshakeHeaderBytes = 4;
// RFC 5246 6.2.3: no record is longer than 2^14 + 2048 bytes (plaintext ones never reach that).
constexpr size_t kMaxRecordBytes = 16384 + 2048;
constexpr size_t kMaxSessionIdBytes = 32;
constexpr uint16_t kExtServerName = 0;
constexpr uint16_t kExtAlpn = 16;
constexpr uint16_t kExtSupportedVersions = 43;
constexpr uint8_t kNameTypeHostName = 0;
constexpr uint16_t kTls13 = 0x0304;

enum class Parse { kOk, kNeedMore, kBad };

#define RPX_TLS_TRY(expr)              \
  do {                                 \
    const Parse rpx_tls_try_ = (expr); \
    if (rpx_tls_try_ != Parse::kOk) {  \
      return rpx_tls_try_;             \
    }                                  \
  } while (0)

// A cursor over a structure that its enclosing length says is `end` bytes long, of which only the
// first `avail` have arrived. Going past `end` means the lengths contradict each other (kBad, for
// good); going past `avail` only means that more bytes are needed. Keeping the two apart is what
// lets a partial hello be refused as early as possible and accepted only when whole.
class Reader {
 public:
  Reader() = default;
  Reader(const uint8_t* p, size_t end, size_t avail)
      : p_(p), end_(end), avail_(std::min(avail, end)) {}

  bool Done() const { return pos_ == end_; }

  Parse Bytes(size_t n, const uint8_t** out) {
    if (n > end_ - pos_) return Parse::kBad;
    if (pos_ + n > avail_) return Parse::kNeedMore;
    *out = p_ + pos_;
    pos_ += n;
    return Parse::kOk;
  }
  Parse U8(uint8_t* v) {
    const uint8_t* b;
    RPX_TLS_TRY(Bytes(1, &b));
    *v = b[0];
    return Parse::kOk;
  }
  Parse U16(uint16_t* v) {
    const uint8_t* b;
    RPX_TLS_TRY(Bytes(2, &b));
    *v = static_cast<uint16_t>(b[0] << 8 | b[1]);
    return Parse::kOk;
  }
  // The next n bytes as a structure of their own, whether or not they have all arrived.
  Parse Sub(size_t n, Reader* sub) {
    if (n > end_ - pos_) return Parse::kBad;
    *sub = Reader(p_ + pos_, n, avail_ > pos_ ? avail_ - pos_ : 0);
    pos_ += n;
    return Parse::kOk;
  }
  // Steps over n bytes that need not have arrived yet (their content is not looked at).
  Parse Skip(size_t n) {
    Reader ignored;
    return Sub(n, &ignored);
  }
  // A vector<1..2^16-1> that must fill the rest of this structure exactly (as every extension's
  // outer list does).
  Parse WholeList16(Reader* list) {
    uint16_t n;
    RPX_TLS_TRY(U16(&n));
    RPX_TLS_TRY(Sub(n, list));
    return n == 0 || !Done() ? Parse::kBad : Parse::kOk;
  }

 private:
  const uint8_t* p_ = nullptr;
  size_t end_ = 0;
  size_t avail_ = 0;
  size_t pos_ = 0;
};

// RFC 6066 3. Every entry is read as a 16-bit length and bytes (the only form ever defined), so a
// list with an unknown name type before the host name still parses; the first host_name wins.
Parse ParseServerName(Reader ext, std::string* server_name) {
  Reader list;
  RPX_TLS_TRY(ext.WholeList16(&list));
  bool found = false;
  while (!list.Done()) {
    uint8_t type;
    uint16_t n;
    const uint8_t* name;
    RPX_TLS_TRY(list.U8(&type));
    RPX_TLS_TRY(list.U16(&n));
    RPX_TLS_TRY(list.Bytes(n, &name));
    if (type != kNameTypeHostName || found) continue;
    found = true;
    // DNS names are case-insensitive and filter chains match lowercase names; other bytes are
    // kept as they are: deciding what a valid host name is belongs to the TLS stack, not here.
    server_name->assign(reinterpret_cast<const char*>(name), n);
    for (char& c : *server_name) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return Parse::kOk;
}

// RFC 7301 3.1: ProtocolName protocol_name_list<2..2^16-1>, ProtocolName opaque<1..2^8-1>.
Parse ParseAlpn(Reader ext, std::vector<std::string>* alpn) {
  Reader list;
  RPX_TLS_TRY(ext.WholeList16(&list));
  while (!list.Done()) {
    uint8_t n;
    const uint8_t* name;
    RPX_TLS_TRY(list.U8(&n));
    if (n == 0) return Parse::kBad;
    RPX_TLS_TRY(list.Bytes(n, &name));
    alpn->emplace_back(reinterpret_cast<const char*>(name), n);
  }
  return Parse::kOk;
}

// RFC 8446 4.2.1, in a ClientHello: ProtocolVersion versions<2..254>.
Parse ParseSupportedVersions(Reader ext, bool* supports_tls13) {
  uint8_t n;
  Reader list;
  RPX_TLS_TRY(ext.U8(&n));
  RPX_TLS_TRY(ext.Sub(n, &list));
  if (n == 0 || n % 2 != 0 || !ext.Done()) return Parse::kBad;
  while (!list.Done()) {
    uint16_t version;
    RPX_TLS_TRY(list.U16(&version));
    if (version == kTls13) *supports_tls13 = true;
  }
  return Parse::kOk;
}

// RFC 8446 4.1.2 (the TLS 1.2 ClientHello of RFC 5246 7.4.1.2 has the same layout), over the
// handshake message's body.
Parse ParseClientHello(Reader hello, ClientHelloInfo* info) {
  uint8_t major, minor, n8;
  uint16_t n16;
  RPX_TLS_TRY(hello.U8(&major));
  if (major != 3) return Parse::kBad;
  RPX_TLS_TRY(hello.U8(&minor));
  info->legacy_version = static_cast<uint16_t>(major << 8 | minor);
  RPX_TLS_TRY(hello.Skip(32));  // random
  RPX_TLS_TRY(hello.U8(&n8));   // legacy_session_id<0..32>
  if (n8 > kMaxSessionIdBytes) return Parse::kBad;
  RPX_TLS_TRY(hello.Skip(n8));
  RPX_TLS_TRY(hello.U16(&n16));  // cipher_suites<2..2^16-2>, two bytes each
  if (n16 == 0 || n16 % 2 != 0) return Parse::kBad;
  RPX_TLS_TRY(hello.Skip(n16));
  RPX_TLS_TRY(hello.U8(&n8));  // legacy_compression_methods<1..2^8-1>
  if (n8 == 0) return Parse::kBad;
  RPX_TLS_TRY(hello.Skip(n8));
  if (hello.Done()) return Parse::kOk;  // no extensions at all (an SSLv3-era hello)

  Reader extensions;
  RPX_TLS_TRY(hello.U16(&n16));
  RPX_TLS_TRY(hello.Sub(n16, &extensions));
  if (!hello.Done()) return Parse::kBad;
  // RFC 8446 4.2: no extension type twice. A bitmap keeps this linear: a 64 KiB hello can carry
  // over 16000 (empty) extensions.
  std::bitset<65536> seen;
  while (!extensions.Done()) {
    uint16_t type, len;
    Reader ext;
    RPX_TLS_TRY(extensions.U16(&type));
    RPX_TLS_TRY(extensions.U16(&len));
    RPX_TLS_TRY(extensions.Sub(len, &ext));
    if (seen[type]) return Parse::kBad;
    seen[type] = true;
    switch (type) {
      case kExtServerName:
        RPX_TLS_TRY(ParseServerName(ext, &info->server_name));
        break;
      case kExtAlpn:
        RPX_TLS_TRY(ParseAlpn(ext, &info->alpn));
        break;
      case kExtSupportedVersions:
        RPX_TLS_TRY(ParseSupportedVersions(ext, &info->supports_tls13));
        break;
      default:
        break;
    }
  }
  return Parse::kOk;
}

#undef RPX_TLS_TRY

}  // namespace

InspectResult InspectClientHello(const uint8_t* data, size_t len, ClientHelloInfo* info) {
  if (info != nullptr) *info = ClientHelloInfo();
  // The handshake bytes carried by the records so far: a view into the first record while there
  // is only one (the usual case), a copy once a second record adds to it.
  const uint8_t* hs = nullptr;
  size_t hs_len = 0;
  std::vector<uint8_t> joined;
  size_t total = 0;  // the ClientHello's size with its 4-byte header, once that header is known
  size_t pos = 0;    // start of the next record
  while (total == 0 || hs_len < total) {
    const size_t have = len - pos;
    if (have >= 1 && data[pos] != kContentTypeHandshake) return InspectResult::kNotTls;
    if (have >= 2 && data[pos + 1] != 3) return InspectResult::kNotTls;
    if (have < kRecordHeaderBytes) break;
    const size_t record_len = static_cast<size_t>(data[pos + 3]) << 8 | data[pos + 4];
    // RFC 8446 5.1: handshake records are never empty.
    if (record_len == 0 || record_len > kMaxRecordBytes) return InspectResult::kNotTls;
    const size_t body = pos + kRecordHeaderBytes;
    const size_t take = std::min(record_len, len - body);
    const size_t before = hs_len;
    if (pos == 0) {
      hs = data + body;
      hs_len = take;
    } else {
      if (joined.empty()) joined.assign(hs, hs + hs_len);
      joined.insert(joined.end(), data + body, data + body + take);
      hs = joined.data();
      hs_len = joined.size();
    }
    if (hs_len >= 1 && hs[0] != kHandshakeTypeClientHello) return InspectResult::kNotTls;
    if (total == 0 && hs_len >= kHandshakeHeaderBytes) {
      total = kHandshakeHeaderBytes +
              (static_cast<size_t>(hs[1]) << 16 | static_cast<size_t>(hs[2]) << 8 | hs[3]);
    }
    if (total != 0) {
      // Where the hello would end in the input at the earliest: in this record, or else after at
      // least one more record header. Past the cap it is refused now, from what is known, so the
      // verdict does not depend on how many bytes the peek happened to return.
      const size_t rest = total - std::min(before, total);
      const size_t end = rest <= record_len
                             ? body + rest
                             : body + record_len + kRecordHeaderBytes + (rest - record_len);
      if (end > kMaxClientHelloBytes) return InspectResult::kNotTls;
    }
    if (take < record_len) break;
    pos = body + record_len;
  }
  if (total == 0) return InspectResult::kNeedMoreData;

  // Parsed whether or not all of it is here, so that a malformed hello is refused early.
  const size_t got = std::min(hs_len, total);
  ClientHelloInfo parsed;
  Parse p = ParseClientHello(Reader(hs + kHandshakeHeaderBytes, total - kHandshakeHeaderBytes,
                                    got - kHandshakeHeaderBytes),
                             &parsed);
  if (p == Parse::kBad) return InspectResult::kNotTls;
  // kOk with bytes missing: they are inside extensions this does not read, but the hello is only
  // whole once they are there.
  if (p == Parse::kNeedMore || got < total) return InspectResult::kNeedMoreData;
  if (info != nullptr) *info = std::move(parsed);
  return InspectResult::kTls;
}

}  // namespace rpx
