// Connection over real TCP sockets on 127.0.0.1. What is tested here is the part no integration
// test reaches: a connection released by its owner while still flushing or lingering is closed
// and freed when its worker's dispatcher shuts down (it used to leak, descriptor included).
#include "source/network/connection.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "test/test_common/tcp_pair.h"

namespace rpx {
namespace {

bool FdOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

TEST(ConnectionTest, ADispatcherShuttingDownEndsConnectionsStillFlushingOrLingering) {
  TcpPair flushing = MakeTcpPair(), lingering = MakeTcpPair();
  ASSERT_GE(flushing.ours, 0);
  ASSERT_GE(lingering.ours, 0);
  auto d = std::make_unique<Dispatcher>("t");

  // More than the sockets can hold while the peer reads nothing: the close waits for the flush.
  auto a = std::make_unique<Connection>(*d, flushing.ours, false, 64 << 20);
  a->Write(std::string(16 << 20, 'x'));
  a->Close(Connection::CloseType::kFlushWrite, false);
  // Nothing left to write: the close lingers, discarding input until the peer closes (or 5 s).
  auto b = std::make_unique<Connection>(*d, lingering.ours, false, 1 << 20);
  b->Close(Connection::CloseType::kFlushWriteThenLinger, false);
  Connection::Release(std::move(a));
  Connection::Release(std::move(b));
  d->RunUntil([] { return false; }, 50);
  ASSERT_TRUE(FdOpen(flushing.ours))
      << "the flushing connection closed before the test could end it";
  ASSERT_TRUE(FdOpen(lingering.ours))
      << "the lingering connection closed before the test could end it";

  d.reset();
  EXPECT_FALSE(FdOpen(flushing.ours));
  EXPECT_FALSE(FdOpen(lingering.ours));
  close(flushing.peer);
  close(lingering.peer);
}

// The usual end of an orphan: once it has flushed, it closes and frees itself while the
// dispatcher runs, and the dispatcher no longer holds it (shutting down after that is harmless).
TEST(ConnectionTest, AnOrphanThatFinishesFlushingFreesItself) {
  TcpPair p = MakeTcpPair();
  ASSERT_GE(p.ours, 0);
  auto d = std::make_unique<Dispatcher>("t");
  auto c = std::make_unique<Connection>(*d, p.ours, false, 1 << 20);
  c->Write("bye");
  c->Close(Connection::CloseType::kFlushWrite, false);
  Connection::Release(std::move(c));
  ASSERT_TRUE(d->RunUntil([&] { return !FdOpen(p.ours); }, 5000));
  char buf[8];
  EXPECT_EQ(recv(p.peer, buf, sizeof(buf), MSG_WAITALL), 3);
  d.reset();
  close(p.peer);
}

}  // namespace
}  // namespace rpx
