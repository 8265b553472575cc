// Choosing a listener's filter chain for a new connection, as Envoy's FilterChainMatch does.
//
// The criteria are tried in Envoy's order: destination port, destination IP, server name (SNI),
// transport protocol, application protocols (ALPN), direct source IP, source type, source IP,
// source port. At each step the candidates narrow to the chains whose criterion matches most
// specifically (an exact server name before the longest wildcard, the longest IP prefix, ...),
// or, when none does, to the chains that leave the criterion empty; with neither, nothing
// matches (Envoy does not go back to an earlier step). The listener's default_filter_chain, if
// any, then takes the connection.
//
// Immutable after config build; SelectFilterChain runs on workers (pure function).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "source/network/address.h"

namespace rpx {

struct CidrRange {
  int family = AF_INET;
  uint8_t addr[16] = {};
  uint32_t prefix_len = 0;
  // "10.0.0.0", 8 (Envoy's address_prefix and prefix_len); bits beyond the prefix are ignored.
  static absl::StatusOr<CidrRange> Create(const std::string& address, uint32_t prefix_len);
  bool Contains(const SocketAddress& a) const;
};

struct FilterChainMatch {
  enum class SourceType { kAny, kSameIpOrLoopback, kExternal };
  std::optional<uint32_t> destination_port;
  std::vector<CidrRange> prefix_ranges;
  std::vector<std::string> server_names;  // lower case; "*.example.com" matches any subdomain
  std::string transport_protocol;         // "", "tls" or "raw_buffer"
  std::vector<std::string> application_protocols;
  std::vector<CidrRange> direct_source_prefix_ranges;
  SourceType source_type = SourceType::kAny;
  std::vector<CidrRange> source_prefix_ranges;
  std::vector<uint32_t> source_ports;

  bool operator==(const FilterChainMatch& o) const;
  // Whether choosing among chains needs what tls_inspector finds in the ClientHello.
  bool NeedsClientHello() const;
  bool NeedsLocalAddress() const { return destination_port || !prefix_ranges.empty(); }
};

// What is known about a new connection when its chain is chosen.
struct ConnectionFacts {
  SocketAddress local;  // meaningful only where a chain needs it (NeedsLocalAddress)
  SocketAddress peer;
  std::string_view server_name;                        // SNI, lower case; empty: none
  std::string_view transport_protocol = "raw_buffer";  // "tls" when a ClientHello was seen
  const std::vector<std::string>* application_protocols = nullptr;  // ALPN offered, in order
};

// Index into `chains` of the chosen chain, or -1 when none matches.
int SelectFilterChain(const std::vector<const FilterChainMatch*>& chains,
                      const ConnectionFacts& facts);

// Checks one server_names entry: a DNS name, or "*." and a DNS name. Returns it lower-cased.
absl::StatusOr<std::string> NormalizeServerName(const std::string& name);

}  // namespace rpx
