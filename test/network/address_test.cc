#include "source/network/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace rpx {
namespace {

std::string Ntop(const uint8_t b[4]) {
  char buf[INET_ADDRSTRLEN];
  return inet_ntop(AF_INET, b, buf, sizeof(buf));
}

// Every value in every position (one, two and three digits, 0 in the middle), against inet_ntop.
TEST(AddressTest, FormatIpv4MatchesInetNtop) {
  for (int pos = 0; pos < 4; ++pos) {
    for (int v = 0; v < 256; ++v) {
      uint8_t b[4] = {127, 0, 10, 255};
      b[pos] = static_cast<uint8_t>(v);
      ASSERT_EQ(FormatIpv4(b), Ntop(b)) << "octet " << pos << " = " << v;
    }
  }
  const uint8_t zeros[4] = {0, 0, 0, 0};
  EXPECT_EQ(FormatIpv4(zeros), "0.0.0.0");
  const uint8_t max[4] = {255, 255, 255, 255};
  EXPECT_EQ(FormatIpv4(max), "255.255.255.255");
}

TEST(AddressTest, IpAndToString) {
  auto v4 = SocketAddress::FromIpPort("192.168.100.7", 8080);
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->Ip(), "192.168.100.7");
  EXPECT_EQ(v4->ToString(), "192.168.100.7:8080");
  auto v6 = SocketAddress::FromIpPort("::1", 443);
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->Ip(), "::1");
  EXPECT_EQ(v6->ToString(), "[::1]:443");
}

// Equality is the address and port ToString shows, compared without formatting.
TEST(AddressTest, EqualityIsFamilyAddressAndPort) {
  auto a = *SocketAddress::FromIpPort("127.0.0.1", 80);
  EXPECT_TRUE(a == *SocketAddress::FromIpPort("127.0.0.1", 80));
  EXPECT_FALSE(a == *SocketAddress::FromIpPort("127.0.0.1", 81));
  EXPECT_FALSE(a == *SocketAddress::FromIpPort("127.0.0.2", 80));
  EXPECT_FALSE(a == *SocketAddress::FromIpPort("::ffff:127.0.0.1", 80));  // another family
  auto b = *SocketAddress::FromIpPort("::1", 443);
  EXPECT_TRUE(b == *SocketAddress::FromIpPort("0:0::1", 443));
  EXPECT_FALSE(b == *SocketAddress::FromIpPort("::2", 443));
  EXPECT_FALSE(b == *SocketAddress::FromIpPort("::1", 444));
  EXPECT_TRUE(SocketAddress() == SocketAddress());
}

}  // namespace
}  // namespace rpx

namespace rpx {
namespace {

TEST(AddressTest, LocalOfASocket) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  auto any = SocketAddress::FromIpPort("127.0.0.1", 0);
  ASSERT_TRUE(any.ok());
  ASSERT_EQ(::bind(fd, any->sa(), any->len), 0);
  SocketAddress a = SocketAddress::LocalOf(fd);
  EXPECT_EQ(a.Ip(), "127.0.0.1");
  EXPECT_NE(a.port(), 0);
  ::close(fd);
  EXPECT_EQ(SocketAddress::LocalOf(-1).len, 0u);
}

}  // namespace
}  // namespace rpx

namespace rpx {
namespace {

TEST(AddressTest, ParseIpPort) {
  auto a = SocketAddress::ParseIpPort("10.1.2.3:8080");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->ToString(), "10.1.2.3:8080");
  auto b = SocketAddress::ParseIpPort("[::1]:443");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->ToString(), "[::1]:443");
  for (const char* bad :
       {"", "10.1.2.3", "10.1.2.3:", "10.1.2.3:0", "10.1.2.3:65536", "10.1.2.3:80x", "::1:443",
        "[::1]443", "[::1]", "example.com:80", "10.1.2.3:123456"}) {
    EXPECT_FALSE(SocketAddress::ParseIpPort(bad).ok()) << bad;
  }
  EXPECT_NE(SocketAddress::ParseIpPort("nonsense").status().message().find("'nonsense'"),
            std::string::npos);
}

TEST(AddressTest, WithPortAndAnyWithPort) {
  auto a = *SocketAddress::FromIpPort("10.1.2.3", 80);
  EXPECT_EQ(a.WithPort(9090).ToString(), "10.1.2.3:9090");
  EXPECT_EQ(a.AnyWithPort().ToString(), "0.0.0.0:80");
  auto b = *SocketAddress::FromIpPort("fd00::5", 15001);
  EXPECT_EQ(b.AnyWithPort().ToString(), "[::]:15001");
  EXPECT_TRUE(b.AnyWithPort() == *SocketAddress::FromIpPort("::", 15001));
}

}  // namespace
}  // namespace rpx
