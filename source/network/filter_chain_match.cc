#include "source/network/filter_chain_match.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace rpx {
namespace {

// The address bytes of `a` (4 or 16), or nullptr; IPv4-mapped IPv6 addresses count as IPv4.
const uint8_t* AddressBytes(const SocketAddress& a, int* family) {
  if (a.family() == AF_INET) {
    *family = AF_INET;
    return reinterpret_cast<const uint8_t*>(
        &reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_addr);
  }
  if (a.family() == AF_INET6) {
    const auto* in6 = &reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(in6)) {
      *family = AF_INET;
      return reinterpret_cast<const uint8_t*>(in6) + 12;
    }
    *family = AF_INET6;
    return reinterpret_cast<const uint8_t*>(in6);
  }
  return nullptr;
}

bool PrefixMatches(const uint8_t* a, const uint8_t* b, uint32_t bits) {
  uint32_t bytes = bits / 8;
  if (memcmp(a, b, bytes) != 0) return false;
  uint32_t rest = bits % 8;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[bytes] & mask) == (b[bytes] & mask);
}

bool IsLocal(const ConnectionFacts& f) {
  int family = 0;
  const uint8_t* p = AddressBytes(f.peer, &family);
  if (!p) return false;
  if (family == AF_INET && p[0] == 127) return true;
  if (family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(reinterpret_cast<const in6_addr*>(p))) {
    return true;
  }
  int lfamily = 0;
  const uint8_t* l = AddressBytes(f.local, &lfamily);
  return l && lfamily == family && memcmp(l, p, family == AF_INET ? 4 : 16) == 0;
}

using Candidates = std::vector<int>;

// Narrows `in` to the chains whose criterion scores best (score > 0: it matches, higher is more
// specific), or to those where it is empty (score 0) if none matches; -1: does not match.
template <typename Score>
Candidates Narrow(const std::vector<const FilterChainMatch*>& chains, const Candidates& in,
                  Score score) {
  int best = -1;
  for (int i : in) best = std::max(best, score(*chains[i]));
  Candidates out;
  if (best < 0) return out;
  for (int i : in) {
    if (score(*chains[i]) == best) out.push_back(i);
  }
  return out;
}

// 0 if `ranges` is empty; 1 + the longest prefix that contains `a`; -1 if none does.
int RangeScore(const std::vector<CidrRange>& ranges, const SocketAddress& a) {
  if (ranges.empty()) return 0;
  int best = -1;
  for (const auto& r : ranges) {
    if (r.Contains(a)) best = std::max(best, static_cast<int>(r.prefix_len) + 1);
  }
  return best;
}

}  // namespace

absl::StatusOr<CidrRange> CidrRange::Create(const std::string& address, uint32_t prefix_len) {
  CidrRange r;
  if (inet_pton(AF_INET, address.c_str(), r.addr) == 1) {
    r.family = AF_INET;
    if (prefix_len > 32) return absl::InvalidArgumentError("prefix_len must be at most 32");
  } else if (inet_pton(AF_INET6, address.c_str(), r.addr) == 1) {
    r.family = AF_INET6;
    if (prefix_len > 128) return absl::InvalidArgumentError("prefix_len must be at most 128");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not an IPv4 or IPv6 address"));
  }
  r.prefix_len = prefix_len;
  return r;
}

bool CidrRange::Contains(const SocketAddress& a) const {
  int family = 0;
  const uint8_t* p = AddressBytes(a, &family);
  return p && family == this->family && PrefixMatches(p, addr, prefix_len);
}

bool FilterChainMatch::NeedsClientHello() const {
  return !server_names.empty() || !transport_protocol.empty() || !application_protocols.empty();
}

static bool SameRanges(const std::vector<CidrRange>& a, const std::vector<CidrRange>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].family != b[i].family || a[i].prefix_len != b[i].prefix_len ||
        memcmp(a[i].addr, b[i].addr, sizeof(a[i].addr)) != 0) {
      return false;
    }
  }
  return true;
}

bool FilterChainMatch::operator==(const FilterChainMatch& o) const {
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  auto sorted_ports = [](std::vector<uint32_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  return destination_port == o.destination_port && SameRanges(prefix_ranges, o.prefix_ranges) &&
         sorted(server_names) == sorted(o.server_names) &&
         transport_protocol == o.transport_protocol &&
         sorted(application_protocols) == sorted(o.application_protocols) &&
         SameRanges(direct_source_prefix_ranges, o.direct_source_prefix_ranges) &&
         source_type == o.source_type && SameRanges(source_prefix_ranges, o.source_prefix_ranges) &&
         sorted_ports(source_ports) == sorted_ports(o.source_ports);
}

int SelectFilterChain(const std::vector<const FilterChainMatch*>& chains,
                      const ConnectionFacts& f) {
  Candidates c(chains.size());
  for (size_t i = 0; i < chains.size(); ++i) c[i] = static_cast<int>(i);
  uint16_t local_port = f.local.port();
  c = Narrow(chains, c, [&](const FilterChainMatch& m) {
    if (!m.destination_port) return 0;
    return *m.destination_port == local_port ? 1 : -1;
  });
  c = Narrow(chains, c,
             [&](const FilterChainMatch& m) { return RangeScore(m.prefix_ranges, f.local); });
  c = Narrow(chains, c, [&](const FilterChainMatch& m) {
    if (m.server_names.empty()) return 0;
    int best = -1;
    for (const auto& n : m.server_names) {
      if (n == f.server_name) return 1 << 20;  // exact beats any wildcard
      // "*.example.com" matches "a.example.com" and "a.b.example.com", not "example.com".
      std::string_view suffix = std::string_view(n).substr(1);
      if (n[0] == '*' && f.server_name.size() > suffix.size() &&
          f.server_name.substr(f.server_name.size() - suffix.size()) == suffix) {
        best = std::max(best, static_cast<int>(n.size()));  // the longest suffix wins
      }
    }
    return best;
  });
  c = Narrow(chains, c, [&](const FilterChainMatch& m) {
    if (m.transport_protocol.empty()) return 0;
    return m.transport_protocol == f.transport_protocol ? 1 : -1;
  });
  // ALPN: the client's first protocol that a chain lists decides; if none is listed, the chains
  // that ask for no protocol.
  std::string_view alpn;
  if (f.application_protocols) {
    for (const auto& proto : *f.application_protocols) {
      for (int i : c) {
        const auto& ap = chains[i]->application_protocols;
        if (std::find(ap.begin(), ap.end(), proto) != ap.end()) alpn = proto;
      }
      if (!alpn.empty()) break;
    }
  }
  c = Narrow(chains, c, [&](const FilterChainMatch& m) {
    if (m.application_protocols.empty()) return 0;
    const auto& ap = m.application_protocols;
    return !alpn.empty() && std::find(ap.begin(), ap.end(), alpn) != ap.end() ? 1 : -1;
  });
  c = Narrow(chains, c, [&](const FilterChainMatch& m) {
    return RangeScore(m.direct_source_prefix_ranges, f.peer);
  });
  bool local = IsLocal(f);
  c = Narrow(chains, c, [&](const FilterChainMatch& m) {
    switch (m.source_type) {
      case FilterChainMatch::SourceType::kAny:
        return 0;
      case FilterChainMatch::SourceType::kSameIpOrLoopback:
        return local ? 1 : -1;
      case FilterChainMatch::SourceType::kExternal:
        return local ? -1 : 1;
    }
    return -1;
  });
  c = Narrow(chains, c,
             [&](const FilterChainMatch& m) { return RangeScore(m.source_prefix_ranges, f.peer); });
  uint16_t peer_port = f.peer.port();
  c = Narrow(chains, c, [&](const FilterChainMatch& m) {
    if (m.source_ports.empty()) return 0;
    return std::find(m.source_ports.begin(), m.source_ports.end(), peer_port) !=
                   m.source_ports.end()
               ? 1
               : -1;
  });
  return c.empty() ? -1 : c.front();
}

absl::StatusOr<std::string> NormalizeServerName(const std::string& name) {
  std::string n = absl::AsciiStrToLower(name);
  std::string_view host = n;
  if (host.substr(0, 2) == "*.") host.remove_prefix(2);
  if (host.empty()) return absl::InvalidArgumentError(absl::StrCat("'", name, "' has no name"));
  for (char ch : host) {
    bool ok = absl::ascii_isalnum(ch) || ch == '-' || ch == '.' || ch == '_';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name,
                       "' is not a server name (a DNS name, or '*.' and a DNS name; a wildcard "
                       "stands only for whole leading labels)"));
    }
  }
  if (host.front() == '.' || host.back() == '.' || host.find("..") != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' has an empty label"));
  }
  return n;
}

}  // namespace rpx
