// StreamInfo: what happened to one request, for access logs and header formatters (Envoy's
// StreamInfo, reduced to what rpx records). The connection manager owns it for the stream's
// lifetime and fills in times, sizes and the status; the router adds the route, cluster, host
// and why it answered as it did. Worker thread only.
//
// Pointers (route name, cluster name, upstream address) point into objects the stream's handler
// keeps alive (its route table and cluster); they are valid until the handler is destroyed, and
// access logs are written before that.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "source/http/headers.h"
#include "source/network/address.h"

namespace rpx {

// Envoy's response flags, in Envoy's order (the order %RESPONSE_FLAGS% lists them in).
enum ResponseFlag : uint32_t {
  kFailedLocalHealthCheck = 1u << 0,             // LH
  kNoHealthyUpstream = 1u << 1,                  // UH
  kUpstreamRequestTimeout = 1u << 2,             // UT
  kLocalReset = 1u << 3,                         // LR
  kUpstreamRemoteReset = 1u << 4,                // UR
  kUpstreamConnectionFailure = 1u << 5,          // UF
  kUpstreamConnectionTermination = 1u << 6,      // UC
  kUpstreamOverflow = 1u << 7,                   // UO
  kNoRouteFound = 1u << 8,                       // NR
  kDelayInjected = 1u << 9,                      // DI
  kFaultInjected = 1u << 10,                     // FI
  kRateLimited = 1u << 11,                       // RL
  kUnauthorizedExternalService = 1u << 12,       // UAEX
  kRateLimitServiceError = 1u << 13,             // RLSE
  kDownstreamConnectionTermination = 1u << 14,   // DC
  kUpstreamRetryLimitExceeded = 1u << 15,        // URX
  kStreamIdleTimeout = 1u << 16,                 // SI
  kInvalidEnvoyRequestHeaders = 1u << 17,        // IH
  kDownstreamProtocolError = 1u << 18,           // DPE
  kUpstreamMaxStreamDurationReached = 1u << 19,  // UMSDR
  kResponseFromCacheFilter = 1u << 20,           // RFCF
  kNoFilterConfigFound = 1u << 21,               // NFCF
  kDurationTimeout = 1u << 22,                   // DT
  kUpstreamProtocolError = 1u << 23,             // UPE
  kNoClusterFound = 1u << 24,                    // NC
  kOverloadManager = 1u << 25,                   // OM
  kDnsResolutionFailed = 1u << 26,               // DF
  kDropOverload = 1u << 27,                      // DO
  kDownstreamRemoteReset = 1u << 28,             // DR
};
constexpr int kResponseFlagCount = 29;
// The short name of flag number `bit` ("UH" for bit 1).
const char* ResponseFlagShortName(int bit);
// The flag with that short name, or 0.
uint32_t ResponseFlagFromShortName(std::string_view name);
// "UH,UF" (Envoy's order), or "-" for none.
void AppendResponseFlags(uint32_t flags, std::string* out);

struct StreamInfo {
  // Monotonic nanoseconds (0: did not happen); the wall clock at the start, for %START_TIME%.
  uint64_t start_ns = 0;
  int64_t start_unix_ns = 0;
  uint64_t request_end_ns = 0;          // the last request byte arrived
  uint64_t upstream_first_byte_ns = 0;  // the upstream's response head arrived
  uint64_t end_ns = 0;                  // the last response byte was handed to the socket
  uint64_t bytes_received = 0;          // request body bytes
  uint64_t bytes_sent = 0;              // response body bytes
  int response_code = 0;                // 0: no response was sent
  uint32_t response_flags = 0;
  std::string response_code_details;  // Envoy's words: via_upstream, route_not_found, ...
  const std::string* route_name = nullptr;
  const std::string* cluster_name = nullptr;
  const SocketAddress* upstream_address = nullptr;  // the upstream host's
  std::string upstream_local_address;               // "ip:port", when a log asks for it
  std::string upstream_transport_failure_reason;
  // The response headers as sent, kept only when a log prints %RESP(...)%.
  std::unique_ptr<HeaderMap> response_headers;

  void Reset() {
    start_ns = request_end_ns = upstream_first_byte_ns = end_ns = 0;
    start_unix_ns = 0;
    bytes_received = bytes_sent = 0;
    response_code = 0;
    response_flags = 0;
    response_code_details.clear();
    route_name = cluster_name = nullptr;
    upstream_address = nullptr;
    upstream_local_address.clear();
    upstream_transport_failure_reason.clear();
    response_headers.reset();
  }
};

// Monotonic and wall-clock nanoseconds.
uint64_t MonotonicNowNs();
int64_t UnixNowNs();

}  // namespace rpx
