// Plaintext HTTP detection (the core of Envoy's envoy.filters.listener.http_inspector): decides
// from the first bytes of an accepted connection, as MSG_PEEK returned them, whether it speaks
// HTTP/1.x or HTTP/2 with prior knowledge (h2c), so that filter_chain_match's
// application_protocols can send HTTP to a connection manager and anything else to a TCP proxy.
// A pure function over caller-owned bytes; safe on any thread. As with InspectClientHello, a
// verdict other than kNeedMoreData never changes when more bytes are looked at.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rpx {

enum class HttpInspectResult { kNeedMoreData, kHttp10, kHttp11, kH2c, kNotHttp };

// The bytes peeked at are bounded (Envoy reads at most 64 KiB): a request line longer than this
// is taken as not HTTP.
constexpr size_t kMaxHttpInspectBytes = 8 * 1024;

// Looks at data[0, len):
// - kH2c once the 24-byte HTTP/2 connection preface is there;
// - kHttp11 / kHttp10 once a request line ("METHOD SP target SP HTTP/1.x" CRLF) is complete;
// - kNeedMoreData while the bytes may still become one of those;
// - kNotHttp as soon as they cannot (a method with characters outside token, control bytes in
//   the target, another version, no CRLF within kMaxHttpInspectBytes).
HttpInspectResult InspectHttp(const uint8_t* data, size_t len);

// What the connection offers, as filter_chain_match's application_protocols reads it: a one-entry
// list with Envoy's name ("http/1.0", "http/1.1", "h2c"), or nullptr for the other results.
const std::vector<std::string>* HttpInspectProtocols(HttpInspectResult r);

}  // namespace rpx
