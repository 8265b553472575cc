// SelectFilterChain against Envoy's documented order and specificity rules.
#include "source/network/filter_chain_match.h"

#include "gtest/gtest.h"

namespace rpx {
namespace {

SocketAddress Addr(const std::string& ip, uint32_t port) {
  return *SocketAddress::FromIpPort(ip, port);
}

CidrRange Cidr(const std::string& ip, uint32_t len) { return *CidrRange::Create(ip, len); }

class SelectTest : public ::testing::Test {
 protected:
  int Select(const std::string& sni = "", const std::string& transport = "raw_buffer",
             std::vector<std::string> alpn = {}, const std::string& peer = "10.1.2.3",
             uint32_t peer_port = 40000, const std::string& local = "10.0.0.1",
             uint32_t local_port = 443) {
    std::vector<const FilterChainMatch*> ptrs;
    for (const auto& m : chains) ptrs.push_back(&m);
    ConnectionFacts f;
    f.local = Addr(local, local_port);
    f.peer = Addr(peer, peer_port);
    f.server_name = sni;
    f.transport_protocol = transport;
    f.application_protocols = &alpn;
    return SelectFilterChain(ptrs, f);
  }
  std::vector<FilterChainMatch> chains;
};

TEST_F(SelectTest, ServerNamesExactThenLongestWildcardThenCatchAll) {
  chains.resize(4);
  chains[0].server_names = {"api.example.com"};
  chains[1].server_names = {"*.example.com"};
  chains[2].server_names = {"*.b.example.com"};
  // chains[3]: no server_names
  EXPECT_EQ(Select("api.example.com"), 0);
  EXPECT_EQ(Select("www.example.com"), 1);
  EXPECT_EQ(Select("x.b.example.com"), 2);
  EXPECT_EQ(Select("example.com"), 3);  // a wildcard needs a label in front
  EXPECT_EQ(Select(""), 3);
  EXPECT_EQ(Select("other.org"), 3);
  chains.pop_back();
  EXPECT_EQ(Select("other.org"), -1);
}

TEST_F(SelectTest, TransportProtocolAndAlpn) {
  chains.resize(3);
  chains[0].transport_protocol = "tls";
  chains[0].application_protocols = {"h2"};
  chains[1].transport_protocol = "tls";
  chains[2].transport_protocol = "raw_buffer";
  EXPECT_EQ(Select("", "tls", {"h2", "http/1.1"}), 0);
  EXPECT_EQ(Select("", "tls", {"http/1.1", "h2"}), 0);  // the first protocol some chain lists
  EXPECT_EQ(Select("", "tls", {"http/1.1"}), 1);
  EXPECT_EQ(Select("", "tls", {}), 1);
  EXPECT_EQ(Select("", "raw_buffer"), 2);
}

TEST_F(SelectTest, EarlierCriteriaDecideFirstAndThereIsNoGoingBack) {
  chains.resize(2);
  chains[0].destination_port = 443;
  chains[0].server_names = {"a.example.com"};
  // chains[1] matches anything, but port 443 has a chain of its own: SNI b does not fall back.
  EXPECT_EQ(Select("a.example.com"), 0);
  EXPECT_EQ(Select("b.example.com"), -1);
  EXPECT_EQ(Select("b.example.com", "raw_buffer", {}, "10.1.2.3", 1, "10.0.0.1", 8443), 1);
}

TEST_F(SelectTest, AddressesLongestPrefixSourceTypeAndPorts) {
  chains.resize(5);
  chains[0].prefix_ranges = {Cidr("10.0.0.0", 8)};
  chains[1].prefix_ranges = {Cidr("10.0.0.0", 24)};
  chains[2].prefix_ranges = {Cidr("192.168.0.0", 16)};
  chains[2].source_type = FilterChainMatch::SourceType::kSameIpOrLoopback;
  chains[3].prefix_ranges = {Cidr("192.168.0.0", 16)};
  chains[3].source_prefix_ranges = {Cidr("172.16.0.0", 12)};
  chains[4].prefix_ranges = {Cidr("192.168.0.0", 16)};
  chains[4].source_ports = {5555};
  EXPECT_EQ(Select("", "raw_buffer", {}, "1.1.1.1", 1, "10.0.0.9"), 1);  // /24 beats /8
  EXPECT_EQ(Select("", "raw_buffer", {}, "1.1.1.1", 1, "10.9.0.9"), 0);
  EXPECT_EQ(Select("", "raw_buffer", {}, "127.0.0.1", 1, "192.168.1.1"), 2);
  EXPECT_EQ(Select("", "raw_buffer", {}, "192.168.1.1", 1, "192.168.1.1"), 2);  // same IP
  EXPECT_EQ(Select("", "raw_buffer", {}, "172.20.0.1", 1, "192.168.1.1"), 3);
  EXPECT_EQ(Select("", "raw_buffer", {}, "8.8.8.8", 5555, "192.168.1.1"), 4);
  EXPECT_EQ(Select("", "raw_buffer", {}, "8.8.8.8", 6666, "192.168.1.1"), -1);
  // IPv4-mapped IPv6 peers match IPv4 ranges.
  EXPECT_EQ(Select("", "raw_buffer", {}, "::ffff:172.20.0.1", 1, "::ffff:192.168.1.1"), 3);
}

TEST(FilterChainMatchTest, ServerNameNormalizationAndEquality) {
  EXPECT_EQ(*NormalizeServerName("API.Example.COM"), "api.example.com");
  EXPECT_EQ(*NormalizeServerName("*.Example.com"), "*.example.com");
  EXPECT_FALSE(NormalizeServerName("*").ok());
  EXPECT_FALSE(NormalizeServerName("a*.example.com").ok());
  EXPECT_FALSE(NormalizeServerName("a..b").ok());
  EXPECT_FALSE(NormalizeServerName("").ok());
  FilterChainMatch a, b;
  a.server_names = {"x", "y"};
  b.server_names = {"y", "x"};
  EXPECT_TRUE(a == b);
  b.transport_protocol = "tls";
  EXPECT_FALSE(a == b);
  EXPECT_FALSE(CidrRange::Create("10.0.0.0", 33).ok());
  EXPECT_FALSE(CidrRange::Create("nope", 8).ok());
}

}  // namespace
}  // namespace rpx
