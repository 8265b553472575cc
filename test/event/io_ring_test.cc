// IoRing over real loopback TCP sockets: what the dispatcher's read, write and accept batching
// rely on is that every queued recv, send or accept is finished when Submit() returns, with the
// bytes (or the new descriptor), 0 at end of stream, or -EAGAIN on an empty (or, for a send,
// full) socket: never parked waiting.
#include "source/event/io_ring.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "test/test_common/tcp_pair.h"

namespace rpx {
namespace {

class IoRingTest : public testing::Test {
 protected:
  void SetUp() override {
    ring_ = IoRing::Create(8);
    // Where the kernel refuses io_uring (seccomp, kernel.io_uring_disabled) rpx reads with
    // recv(2); nothing here can run.
    if (!ring_) GTEST_SKIP() << "io_uring unavailable: " << strerror(errno);
  }
  std::unique_ptr<IoRing> ring_;
};

TEST_F(IoRingTest, OneSubmitReadsEverySocket) {
  TcpPair a = MakeTcpPair(), b = MakeTcpPair();
  ASSERT_GE(a.ours, 0);
  ASSERT_GE(b.ours, 0);
  ASSERT_EQ(send(a.peer, "hello", 5, 0), 5);
  ASSERT_EQ(send(b.peer, "world!", 6, 0), 6);
  char buf_a[64], buf_b[64];
  ASSERT_TRUE(ring_->QueueRecv(a.ours, buf_a, sizeof(buf_a), 1));
  ASSERT_TRUE(ring_->QueueRecv(b.ours, buf_b, sizeof(buf_b), 2));
  EXPECT_EQ(ring_->queued(), 2u);
  std::map<uint64_t, ssize_t> results;
  EXPECT_EQ(ring_->Submit([&](uint64_t tag, ssize_t r) { results[tag] = r; }), 2u);
  EXPECT_EQ(ring_->queued(), 0u);
  ASSERT_EQ(results.size(), 2u);
  ASSERT_EQ(results[1], 5);
  ASSERT_EQ(results[2], 6);
  EXPECT_EQ(std::string(buf_a, 5), "hello");
  EXPECT_EQ(std::string(buf_b, 6), "world!");
  for (int fd : {a.ours, a.peer, b.ours, b.peer}) close(fd);
}

TEST_F(IoRingTest, EmptySocketCompletesWithEagainAndEndOfStreamWithZero) {
  TcpPair empty = MakeTcpPair(), ended = MakeTcpPair();
  ASSERT_GE(empty.ours, 0);
  ASSERT_GE(ended.ours, 0);
  close(ended.peer);
  char buf1[16], buf2[16];
  ASSERT_TRUE(ring_->QueueRecv(empty.ours, buf1, sizeof(buf1), 7));
  ASSERT_TRUE(ring_->QueueRecv(ended.ours, buf2, sizeof(buf2), 8));
  std::map<uint64_t, ssize_t> results;
  // Submit waits for every operation: a recv parked until data arrives would hang here.
  EXPECT_EQ(ring_->Submit([&](uint64_t tag, ssize_t r) { results[tag] = r; }), 2u);
  EXPECT_EQ(results[7], -EAGAIN);
  EXPECT_EQ(results[8], 0);
  // The empty socket still works afterwards: nothing of the first recv is left in flight.
  ASSERT_EQ(send(empty.peer, "late", 4, 0), 4);
  ssize_t n = recv(empty.ours, buf1, sizeof(buf1), MSG_DONTWAIT);
  for (int i = 0; i < 100 && n < 0 && errno == EAGAIN; ++i) {
    usleep(10000);  // loopback delivery is immediate; this only bounds a slow machine
    n = recv(empty.ours, buf1, sizeof(buf1), MSG_DONTWAIT);
  }
  EXPECT_EQ(n, 4);
  for (int fd : {empty.ours, empty.peer, ended.ours}) close(fd);
}

TEST_F(IoRingTest, ABadDescriptorFailsOnlyItsOwnOperation) {
  TcpPair a = MakeTcpPair();
  ASSERT_GE(a.ours, 0);
  ASSERT_EQ(send(a.peer, "x", 1, 0), 1);
  int bad = dup(a.peer);
  close(bad);  // a descriptor number that is surely closed
  char buf1[8], buf2[8];
  ASSERT_TRUE(ring_->QueueRecv(bad, buf1, sizeof(buf1), 1));
  ASSERT_TRUE(ring_->QueueRecv(a.ours, buf2, sizeof(buf2), 2));
  std::map<uint64_t, ssize_t> results;
  EXPECT_EQ(ring_->Submit([&](uint64_t tag, ssize_t r) { results[tag] = r; }), 2u);
  EXPECT_EQ(results[1], -EBADF);
  EXPECT_EQ(results[2], 1);
  close(a.ours);
  close(a.peer);
}

TEST_F(IoRingTest, AFullRingRefusesMoreUntilSubmitted) {
  TcpPair a = MakeTcpPair();
  ASSERT_GE(a.ours, 0);
  std::vector<char> buf(ring_->capacity() + 1);
  for (unsigned i = 0; i < ring_->capacity(); ++i) {
    ASSERT_TRUE(ring_->QueueRecv(a.ours, &buf[i], 1, i));
  }
  EXPECT_FALSE(ring_->QueueRecv(a.ours, &buf[ring_->capacity()], 1, 99));
  unsigned eagain = 0;
  EXPECT_EQ(ring_->Submit([&](uint64_t, ssize_t r) { eagain += r == -EAGAIN; }), ring_->capacity());
  EXPECT_EQ(eagain, ring_->capacity());
  // Room again, and the ring still works.
  ASSERT_EQ(send(a.peer, "y", 1, 0), 1);
  ASSERT_TRUE(ring_->QueueRecv(a.ours, &buf[0], 1, 5));
  ssize_t got = -1;
  for (int i = 0; i < 100; ++i) {
    ring_->Submit([&](uint64_t, ssize_t r) { got = r; });
    if (got != -EAGAIN) break;
    usleep(10000);
    ASSERT_TRUE(ring_->QueueRecv(a.ours, &buf[0], 1, 5));
  }
  EXPECT_EQ(got, 1);
  EXPECT_EQ(buf[0], 'y');
  close(a.ours);
  close(a.peer);
}

TEST_F(IoRingTest, OneSubmitSendsToEverySocket) {
  TcpPair a = MakeTcpPair(), b = MakeTcpPair();
  ASSERT_GE(a.ours, 0);
  ASSERT_GE(b.ours, 0);
  ASSERT_TRUE(ring_->QueueSend(a.ours, "hello", 5, 1));
  ASSERT_TRUE(ring_->QueueSend(b.ours, "world!", 6, 2));
  std::map<uint64_t, ssize_t> results;
  EXPECT_EQ(ring_->Submit([&](uint64_t tag, ssize_t r) { results[tag] = r; }), 2u);
  EXPECT_EQ(results[1], 5);
  EXPECT_EQ(results[2], 6);
  char buf[16];
  ASSERT_EQ(recv(a.peer, buf, 5, MSG_WAITALL), 5);
  EXPECT_EQ(std::string(buf, 5), "hello");
  ASSERT_EQ(recv(b.peer, buf, 6, MSG_WAITALL), 6);
  EXPECT_EQ(std::string(buf, 6), "world!");
  for (int fd : {a.ours, a.peer, b.ours, b.peer}) close(fd);
}

// A send takes what fits and says how much; once nothing fits it completes with -EAGAIN instead
// of waiting for the peer to read (which would hang Submit here: the peer reads nothing).
TEST_F(IoRingTest, ASendToAFullSocketTakesWhatFitsThenCompletesWithEagain) {
  TcpPair a = MakeTcpPair();
  ASSERT_GE(a.ours, 0);
  int small = 16 << 10;
  setsockopt(a.ours, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  setsockopt(a.peer, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  std::string big(8 << 20, 'z');
  ssize_t first = 0;
  ASSERT_TRUE(ring_->QueueSend(a.ours, big.data(), big.size(), 1));
  ring_->Submit([&](uint64_t, ssize_t r) { first = r; });
  EXPECT_GT(first, 0);
  EXPECT_LT(first, static_cast<ssize_t>(big.size()));
  // Loopback may free some room as the peer's side takes what is in flight; the peer reads
  // nothing, so a few more sends fill everything and the next completes with -EAGAIN.
  size_t taken = first;
  ssize_t r = 0;
  for (int i = 0; i < 1000 && r != -EAGAIN; ++i) {
    ASSERT_TRUE(ring_->QueueSend(a.ours, big.data() + taken, big.size() - taken, 2));
    ring_->Submit([&](uint64_t, ssize_t result) { r = result; });
    if (r > 0) taken += r;
  }
  EXPECT_EQ(r, -EAGAIN);
  EXPECT_LT(taken, big.size());
  close(a.ours);
  close(a.peer);
}

// A send to a connection the peer reset fails with an error, and does not raise SIGPIPE (which
// would end this test process, as it would end rpx).
TEST_F(IoRingTest, ASendToAResetConnectionFailsWithoutSigpipe) {
  TcpPair a = MakeTcpPair();
  ASSERT_GE(a.ours, 0);
  CloseWithReset(a.peer);
  ssize_t result = 0;
  for (int i = 0; i < 3 && result >= 0; ++i) {  // the first may still be taken before the RST
    ASSERT_TRUE(ring_->QueueSend(a.ours, "late", 4, 1));
    ring_->Submit([&](uint64_t, ssize_t r) { result = r; });
  }
  EXPECT_TRUE(result == -ECONNRESET || result == -EPIPE) << result;
  close(a.ours);
}

// Accepts queued beyond the connections waiting complete with -EAGAIN at once (a parked accept
// would hang Submit here, or take a later connection behind the ring's back); those that find
// one return it non-blocking and close-on-exec, with the peer's address.
TEST_F(IoRingTest, AcceptsTakeWhatIsQueuedAndTheRestCompleteWithEagain) {
  if (!ring_->CanAcceptWithoutWaiting()) GTEST_SKIP() << "kernel older than 6.10";
  int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof(a);
  ASSERT_EQ(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(l, 8), 0);
  ASSERT_EQ(getsockname(l, reinterpret_cast<sockaddr*>(&a), &alen), 0);
  int clients[2];
  for (int& c : clients) {
    c = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }
  sockaddr_storage peers[4];
  socklen_t lens[4];
  for (int i = 0; i < 4; ++i) {
    lens[i] = sizeof(peers[i]);
    ASSERT_TRUE(ring_->QueueAccept(l, reinterpret_cast<sockaddr*>(&peers[i]), &lens[i], i));
  }
  std::map<uint64_t, ssize_t> results;
  EXPECT_EQ(ring_->Submit([&](uint64_t tag, ssize_t r) { results[tag] = r; }), 4u);
  ASSERT_EQ(results.size(), 4u);
  // The kernel runs them in order: the two connections go to the first two.
  for (int i = 0; i < 2; ++i) {
    int fd = static_cast<int>(results[i]);
    ASSERT_GE(fd, 0) << i;
    EXPECT_TRUE(fcntl(fd, F_GETFL) & O_NONBLOCK);
    EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    EXPECT_EQ(lens[i], sizeof(sockaddr_in));
    sockaddr_in local{};
    socklen_t llen = sizeof(local);
    getsockname(clients[i], reinterpret_cast<sockaddr*>(&local), &llen);
    EXPECT_EQ(reinterpret_cast<sockaddr_in*>(&peers[i])->sin_port, local.sin_port);
    ASSERT_EQ(send(clients[i], "x", 1, 0), 1);
    char c;
    ssize_t n = -1;
    for (int k = 0; k < 100 && n < 0; ++k) {
      n = recv(fd, &c, 1, 0);
      if (n < 0) usleep(10000);  // loopback delivery is immediate; this only bounds a slow machine
    }
    EXPECT_EQ(n, 1);
    close(fd);
  }
  EXPECT_EQ(results[2], -EAGAIN);
  EXPECT_EQ(results[3], -EAGAIN);
  // Nothing was left in flight: a connection that comes now is still in the queue.
  int late = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(late, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  int got = -1;
  for (int k = 0; k < 100 && got < 0; ++k) {
    got = accept(l, nullptr, nullptr);
    if (got < 0) usleep(10000);
  }
  EXPECT_GE(got, 0);
  for (int fd : {got, late, clients[0], clients[1], l}) close(fd);
}

}  // namespace
}  // namespace rpx
