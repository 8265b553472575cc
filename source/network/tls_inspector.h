// TLS ClientHello inspection (the core of Envoy's envoy.filters.listener.tls_inspector): decides
// from the first bytes of an accepted connection, as MSG_PEEK returned them, whether it opens with
// a TLS ClientHello, and if so reads the SNI host name, the ALPN list and the offered versions, so
// that a filter chain can be chosen before any byte is consumed.
// A pure function over caller-owned bytes: no OpenSSL, no allocation kept, safe on any thread. The
// bytes are untrusted (this runs on the accept path): every length is checked before it is used.
// The result depends only on the bytes it looks at, so a verdict other than kNeedMoreData never
// changes when the caller peeks again and gets more bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rpx {

// What the first bytes of a connection say (the bytes a MSG_PEEK returned, from offset 0).
enum class InspectResult { kNeedMoreData, kTls, kNotTls };

struct ClientHelloInfo {
  std::string server_name;        // SNI host_name, lowercased; empty if none
  std::vector<std::string> alpn;  // ALPN protocol names in the client's order
  uint16_t legacy_version = 0;    // ClientHello.legacy_version (0x0303 for TLS 1.2/1.3)
  bool supports_tls13 = false;    // supported_versions lists 0x0304
};

// Max bytes worth peeking: a ClientHello larger than this is treated as not TLS (Envoy's default
// max_client_hello_size is 64 KiB).
constexpr size_t kMaxClientHelloBytes = 64 * 1024;

// Looks at data[0, len):
// - kTls once a whole ClientHello handshake message is there, possibly fragmented over several
//   handshake records (bytes after it, in its record or later, are not looked at). *info is then
//   filled in.
// - kNeedMoreData while the bytes are a valid beginning of one (including no bytes at all).
// - kNotTls as soon as they cannot be: not a handshake record, a record version other than 3.x,
//   a first handshake message other than client_hello, inconsistent or overrunning lengths,
//   malformed server_name, ALPN or supported_versions extensions, a duplicate extension, or a
//   ClientHello that would end past kMaxClientHelloBytes of input (record headers included).
// Server names are taken as sent, ASCII letters lowercased; other extensions are not parsed.
// `info` may be null; otherwise it is reset unless the result is kTls.
InspectResult InspectClientHello(const uint8_t* data, size_t len, ClientHelloInfo* info);

}  // namespace rpx
