#include "source/network/socket_option.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rpx {
namespace {

using ::testing::HasSubstr;

class Fd {
 public:
  Fd() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {}
  ~Fd() { ::close(fd_); }
  int get() const { return fd_; }

 private:
  int fd_;
};

int IntOption(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof(v);
  EXPECT_EQ(::getsockopt(fd, level, name, &v, &len), 0) << std::strerror(errno);
  return v;
}

std::string Congestion(int fd) {
  char name[32] = {};
  socklen_t len = sizeof(name);
  EXPECT_EQ(::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len), 0);
  return std::string(name);
}

SocketOption Int(int level, int name, int value, SocketOption::State state) {
  SocketOption o;
  o.level = level;
  o.name = name;
  o.int_value = value;
  o.state = state;
  return o;
}

SocketOption Buf(int level, int name, std::string value, SocketOption::State state) {
  SocketOption o = Int(level, name, 0, state);
  o.is_int = false;
  o.buf_value = std::move(value);
  return o;
}

// Integer and byte-string options reach the socket; options of another state wait for theirs.
// "reno" is the one congestion control that every kernel has and any process may choose.
TEST(SocketOptionTest, AppliesTheOptionsOfTheGivenState) {
  Fd fd;
  SocketOptions options = {
      Int(SOL_SOCKET, SO_KEEPALIVE, 1, SocketOption::State::kPrebind),
      Buf(IPPROTO_TCP, TCP_CONGESTION, "reno", SocketOption::State::kPrebind),
      Int(IPPROTO_TCP, TCP_NODELAY, 1, SocketOption::State::kBound),
  };
  ASSERT_TRUE(ApplySocketOptions(fd.get(), options, SocketOption::State::kPrebind).ok());
  EXPECT_EQ(IntOption(fd.get(), SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(Congestion(fd.get()), "reno");
  EXPECT_EQ(IntOption(fd.get(), IPPROTO_TCP, TCP_NODELAY), 0);

  ASSERT_TRUE(ApplySocketOptions(fd.get(), options, SocketOption::State::kBound).ok());
  EXPECT_NE(IntOption(fd.get(), IPPROTO_TCP, TCP_NODELAY), 0);
}

// The first option the kernel refuses stops the rest, and the error names it and the reason.
TEST(SocketOptionTest, ErrorNamesTheRefusedOption) {
  Fd fd;
  SocketOption bogus = Int(SOL_SOCKET, 12345, 1, SocketOption::State::kPrebind);
  bogus.description = "made up";
  SocketOptions options = {bogus, Int(SOL_SOCKET, SO_KEEPALIVE, 1, SocketOption::State::kPrebind)};
  auto st = ApplySocketOptions(fd.get(), options, SocketOption::State::kPrebind);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("socket option 'made up' (level 1, name 12345): Protocol not available"));
  EXPECT_EQ(IntOption(fd.get(), SOL_SOCKET, SO_KEEPALIVE), 0);

  SocketOptions unknown_cc = {
      Buf(IPPROTO_TCP, TCP_CONGESTION, "no-such-algorithm", SocketOption::State::kPrebind)};
  st = ApplySocketOptions(fd.get(), unknown_cc, SocketOption::State::kPrebind);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("socket option (level 6, name 13): No such file or directory"));
}

}  // namespace
}  // namespace rpx
