#include "source/network/listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "source/event/io_ring.h"

namespace rpx {
namespace {

using ::testing::HasSubstr;

SocketAddress Loopback(uint16_t port) { return *SocketAddress::FromIpPort("127.0.0.1", port); }

uint16_t PortOf(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

bool Listening(int fd) {
  int v = 0;
  socklen_t len = sizeof(v);
  getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len);
  return v != 0;
}

// A blocking client socket connected to 127.0.0.1:port (-1 if the connect failed).
int ConnectTo(uint16_t port) {
  int client = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(client, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(client);
    return -1;
  }
  return client;
}

// Connects to 127.0.0.1:port and returns the listener's side of the connection.
int AcceptOne(int listen_fd) {
  int client = ConnectTo(PortOf(listen_fd));
  EXPECT_GE(client, 0);
  int accepted = -1;
  for (int i = 0; i < 1000 && accepted < 0; ++i) {  // the listening socket is non-blocking
    accepted = accept(listen_fd, nullptr, nullptr);
    if (accepted < 0) usleep(1000);
  }
  close(client);
  return accepted;
}

SocketOption Option(int level, int name, SocketOption::State state) {
  SocketOption o;
  o.level = level;
  o.name = name;
  o.state = state;
  return o;
}

// Options set on the listening socket (in any state) are what the accepted connections start
// with: the congestion control and keep-alive are inherited.
TEST(ListenerTest, ListenSocketOptionsReachAcceptedConnections) {
  SocketOption cc = Option(IPPROTO_TCP, TCP_CONGESTION, SocketOption::State::kPrebind);
  cc.is_int = false;
  cc.buf_value = "reno";
  SocketOption keepalive = Option(SOL_SOCKET, SO_KEEPALIVE, SocketOption::State::kListening);
  keepalive.int_value = 1;
  auto fd = OpenListenSocket(Loopback(0), false, 16, {cc, keepalive});
  ASSERT_TRUE(fd.ok()) << fd.status();
  int accepted = AcceptOne(*fd);
  ASSERT_GE(accepted, 0);
  char name[32] = {};
  socklen_t len = sizeof(name);
  ASSERT_EQ(getsockopt(accepted, IPPROTO_TCP, TCP_CONGESTION, name, &len), 0);
  EXPECT_STREQ(name, "reno");
  int v = 0;
  len = sizeof(v);
  ASSERT_EQ(getsockopt(accepted, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0);
  EXPECT_EQ(v, 1);
  close(accepted);
  close(*fd);
}

// Every socket a Listener hands out has TCP_NODELAY (responses must not wait for Nagle). The
// listening socket has it, so accepted sockets inherit it without a setsockopt each; where a
// configured option turned it off on the listener, Listener sets it on each accepted socket.
TEST(ListenerTest, AcceptedSocketsHaveNoDelayEvenWhenAnOptionTurnedItOffOnTheListener) {
  SocketOption off = Option(IPPROTO_TCP, TCP_NODELAY, SocketOption::State::kPrebind);
  off.int_value = 0;
  for (const SocketOptions& options : {SocketOptions{}, SocketOptions{off}}) {
    auto fd = OpenListenSocket(Loopback(0), false, 16, options);
    ASSERT_TRUE(fd.ok()) << fd.status();
    int on = -1;
    socklen_t len = sizeof(on);
    ASSERT_EQ(getsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &on, &len), 0);
    EXPECT_EQ(on != 0, options.empty()) << "the listening socket's own TCP_NODELAY";
    uint16_t port = PortOf(*fd);
    Dispatcher d("t");
    int accepted = -1;
    Listener l(d, *fd, [&](int afd, const SocketAddress&) { accepted = afd; });
    int client = ConnectTo(port);
    ASSERT_GE(client, 0);
    ASSERT_TRUE(d.RunUntil([&] { return accepted >= 0; }, 5000));
    on = 0;
    len = sizeof(on);
    ASSERT_EQ(getsockopt(accepted, IPPROTO_TCP, TCP_NODELAY, &on, &len), 0);
    EXPECT_NE(on, 0) << (options.empty() ? "inherited" : "set per socket") << ": missing";
    close(accepted);
    close(client);
  }
}

// With read batching the dispatcher accepts inside its io_uring batch (where the kernel can
// accept without waiting): every connection is handed out once, with its peer's address, as
// with accept4(2), including those that arrive while the listener is busy.
TEST(ListenerTest, AcceptBatchingHandsOutEveryConnectionWithItsPeer) {
  std::unique_ptr<IoRing> ring = IoRing::Create(8);
  if (!ring || !ring->CanAcceptWithoutWaiting()) GTEST_SKIP() << "no io_uring accept here";
  auto fd = OpenListenSocket(Loopback(0), false, 128);
  ASSERT_TRUE(fd.ok()) << fd.status();
  uint16_t port = PortOf(*fd);
  Dispatcher d("t");
  d.SetReadBatching(true);
  std::map<uint16_t, int> accepted;  // peer port -> our descriptor
  int duplicates = 0;
  Listener l(d, *fd, [&](int afd, const SocketAddress& peer) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&peer.storage);
    duplicates += !accepted.emplace(ntohs(in->sin_port), afd).second;
  });
  // A burst queued before the loop runs (more than one round takes), then one at a time.
  std::vector<int> clients;
  for (int i = 0; i < 100; ++i) clients.push_back(ConnectTo(port));
  ASSERT_TRUE(d.RunUntil([&] { return accepted.size() == clients.size(); }, 5000));
  for (int i = 0; i < 20; ++i) {
    clients.push_back(ConnectTo(port));
    ASSERT_TRUE(d.RunUntil([&] { return accepted.size() == clients.size(); }, 5000));
  }
  EXPECT_EQ(duplicates, 0);
  EXPECT_GT(d.batched_accepts(), 0u);
  for (int c : clients) {
    ASSERT_GE(c, 0);
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    getsockname(c, reinterpret_cast<sockaddr*>(&local), &len);
    auto it = accepted.find(ntohs(local.sin_port));
    ASSERT_NE(it, accepted.end()) << "client port " << ntohs(local.sin_port);
    EXPECT_TRUE(fcntl(it->second, F_GETFL) & O_NONBLOCK);
    close(c);
  }
  for (auto& [p, afd] : accepted) close(afd);
}

// A refused option fails the listener in every state, naming the option; nothing stays bound.
TEST(ListenerTest, RefusedOptionFailsTheSocket) {
  for (auto state : {SocketOption::State::kPrebind, SocketOption::State::kBound,
                     SocketOption::State::kListening}) {
    SocketOption bogus = Option(SOL_SOCKET, 12345, state);
    bogus.description = "bogus";
    auto fd = OpenListenSocket(Loopback(0), false, 16, {bogus});
    ASSERT_FALSE(fd.ok());
    EXPECT_THAT(std::string(fd.status().message()),
                HasSubstr("setting socket option 'bogus' (level 1, name 12345)"));
  }
}

// Replacing a listener's sockets on the same port (new socket options): the check that a
// stranger does not hold the port must not trip over the listener's own sockets.
TEST(ListenerTest, ReplacingOwnSocketsOnTheSamePort) {
  auto first = OpenWorkerSockets(Loopback(0), true, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 2u);
  uint16_t port = PortOf((*first)[0]);
  EXPECT_EQ(PortOf((*first)[1]), port);

  auto stranger = OpenWorkerSockets(Loopback(port), true, 2);
  ASSERT_FALSE(stranger.ok());
  EXPECT_THAT(std::string(stranger.status().message()), HasSubstr("cannot bind 127.0.0.1:"));

  auto replacement = OpenWorkerSockets(Loopback(port), true, 2, {}, /*replacing_own=*/true);
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(PortOf((*replacement)[0]), port);
  // Bound only, so the old sockets keep every new connection until the replacement listens;
  // StartListening then leaves a socket that already listens as it is.
  for (int fd : *replacement) {
    EXPECT_FALSE(Listening(fd));
    ASSERT_TRUE(StartListening(fd, Loopback(port), 16, {}).ok());
    EXPECT_TRUE(Listening(fd));
    EXPECT_TRUE(StartListening(fd, Loopback(port), 16, {}).ok());
  }
  for (int fd : *first) close(fd);
  for (int fd : *replacement) close(fd);
}

// Hot restart: sockets handed over by the previous process are used first (the same sockets,
// with their queues); with more workers than inherited sockets the rest join the SO_REUSEPORT
// group; sockets for other addresses stay for TakeRest.
TEST(ListenerTest, InheritedSocketsAreUsedFirst) {
  auto parent = OpenWorkerSockets(Loopback(0), true, 2);
  ASSERT_TRUE(parent.ok()) << parent.status();
  uint16_t port = PortOf((*parent)[0]);
  auto other = OpenWorkerSockets(Loopback(0), false, 1);
  ASSERT_TRUE(other.ok()) << other.status();
  InheritedSockets inherited;
  for (int fd : *parent) inherited.Add(Loopback(port).ToString(), fd);
  inherited.Add(Loopback(PortOf((*other)[0])).ToString(), (*other)[0]);
  EXPECT_EQ(inherited.size(), 3u);

  // Without `inherited` the port is taken (the probe refuses it).
  EXPECT_FALSE(OpenWorkerSockets(Loopback(port), true, 3).ok());
  auto child = OpenWorkerSockets(Loopback(port), true, 3, {}, false, &inherited);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_EQ(child->size(), 3u);
  int reused = 0;
  for (int fd : *child) {
    EXPECT_EQ(PortOf(fd), port);
    EXPECT_TRUE(Listening(fd));
    for (int p : *parent) reused += fd == p;
  }
  EXPECT_EQ(reused, 2);
  EXPECT_EQ(inherited.size(), 1u);
  std::vector<int> rest = inherited.TakeRest();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0], (*other)[0]);
  EXPECT_EQ(inherited.size(), 0u);
  for (int fd : *child) close(fd);
  close(rest[0]);
}

}  // namespace
}  // namespace rpx
