// Splicer over real TCP sockets on 127.0.0.1: exact lengths, the head-before-body order, the pipe
// as backpressure against a client that does not read, and failures on either side.
#include "source/network/splice.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "test/test_common/tcp_pair.h"

namespace rpx {
namespace {

std::string Pattern(size_t n, size_t offset = 0) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i + offset) % 23);
  return s;
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += n;
  }
}

std::string ReadExactly(int fd, size_t n) {
  std::string out;
  char buf[65536];
  while (out.size() < n) {
    ssize_t r = recv(fd, buf, std::min(sizeof(buf), n - out.size()), 0);
    if (r <= 0) break;
    out.append(buf, r);
  }
  return out;
}

struct Recorder : public SplicerCallbacks, public ConnectionCallbacks {
  uint64_t progress = 0;
  bool done = false;
  std::string failed;
  std::string data;  // what the source connection read itself (after the splice)
  void OnSpliceProgress(uint64_t bytes) override { progress += bytes; }
  void OnSpliceDone() override { done = true; }
  void OnSpliceFailed(const std::string& detail) override { failed = detail; }
  void OnData(Buffer& in) override {
    data.append(in.data(), in.size());
    in.Drain(in.size());
  }
  void OnEvent(ConnectionEvent) override {}
};

class SpliceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    up_ = MakeTcpPair();
    down_ = MakeTcpPair();
    source_ = std::make_unique<Connection>(d_, up_.ours, false, 1 << 20);
    sink_ = std::make_unique<Connection>(d_, down_.ours, false, 1 << 20);
    source_->SetCallbacks(&rec_);
  }
  void TearDown() override {
    Splicer::SetEnabled(true);
    splicer_.reset();
    source_.reset();
    sink_.reset();
    if (up_.peer >= 0) close(up_.peer);
    close(down_.peer);
  }

  Dispatcher d_{"t"};
  TcpPair up_, down_;
  std::unique_ptr<Connection> source_, sink_;
  Recorder rec_;
  std::unique_ptr<Splicer> splicer_;
  void PauseAfter(size_t first, size_t last);
};

TEST_F(SpliceTest, MovesExactlyTheLengthAfterTheHead) {
  const size_t kLen = 3 * 1024 * 1024 + 17;
  std::string body = Pattern(kLen);
  std::thread writer([&] { WriteAll(up_.peer, body + "NEXT"); });
  sink_->Write("HEAD\r\n\r\n");  // queued: must reach the client before any body byte
  splicer_ = Splicer::Create(*source_, *sink_, kLen, rec_);
  ASSERT_TRUE(splicer_);
  splicer_->Start();
  std::string got;
  std::thread reader([&] { got = ReadExactly(down_.peer, 8 + kLen); });
  ASSERT_TRUE(d_.RunUntil([&] { return rec_.done || !rec_.failed.empty(); }, 20000));
  reader.join();
  writer.join();
  EXPECT_EQ(rec_.failed, "");
  EXPECT_EQ(rec_.progress, kLen);
  EXPECT_EQ(got.substr(0, 8), "HEAD\r\n\r\n");
  EXPECT_TRUE(got.substr(8) == body) << "spliced body differs";
  // The client connection is not left held to a small unsent limit.
  int v = -1;
  socklen_t vl = sizeof(v);
  ASSERT_EQ(getsockopt(down_.ours, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &vl), 0);
  EXPECT_EQ(v, 0);
  // The bytes after the body were not taken: the connection reads them itself again.
  splicer_.reset();
  ASSERT_TRUE(d_.RunUntil([&] { return rec_.data.size() >= 4; }, 5000));
  EXPECT_EQ(rec_.data, "NEXT");
}

// A byte stream (a TCP proxy): everything up to the source's end of stream moves, the end is
// what makes the splice done (not a failure), and the sink's own end is left to the caller.
TEST_F(SpliceTest, UntilTheEndMovesAStreamAndStopsAtItsEnd) {
  const size_t kLen = 5 * 1024 * 1024 + 3;
  std::string data = Pattern(kLen, 3);
  std::thread writer([&] {
    WriteAll(up_.peer, data);
    shutdown(up_.peer, SHUT_WR);
  });
  splicer_ = Splicer::Create(*source_, *sink_, Splicer::kUntilEnd, rec_);
  ASSERT_TRUE(splicer_);
  splicer_->Start();
  std::string got;
  std::thread reader([&] { got = ReadExactly(down_.peer, kLen); });
  ASSERT_TRUE(d_.RunUntil([&] { return rec_.done || !rec_.failed.empty(); }, 20000));
  reader.join();
  writer.join();
  EXPECT_EQ(rec_.failed, "");
  EXPECT_EQ(rec_.progress, kLen);
  EXPECT_TRUE(got == data) << "the stream differs";
  // The sink is still open: no end of stream was sent for the caller.
  char c;
  EXPECT_EQ(recv(down_.peer, &c, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
}

// A source reset mid-stream is a failure, not an end.
TEST_F(SpliceTest, UntilTheEndAResetFails) {
  splicer_ = Splicer::Create(*source_, *sink_, Splicer::kUntilEnd, rec_);
  ASSERT_TRUE(splicer_);
  splicer_->Start();
  WriteAll(up_.peer, "some bytes");
  CloseWithReset(up_.peer);
  up_.peer = -1;
  ASSERT_TRUE(d_.RunUntil([&] { return rec_.done || !rec_.failed.empty(); }, 5000));
  EXPECT_FALSE(rec_.done);
  EXPECT_NE(rec_.failed, "");
}

// An upstream that sends its body with sendfile(2), as nginx does, all of it buffered on our side
// before the splicer starts: the socket's buffers then reference file pages, a pipe's slots fill
// before its byte capacity does, and splice returns short (or EAGAIN) with the socket still
// holding bytes. The splicer must still move the whole body (under edge-triggered readiness it
// stalled with the last megabyte unread: the socket was never reported again).
TEST_F(SpliceTest, ABodyFromSendfileAlreadyBufferedMovesWhole) {
  const size_t kLen = 4 * 1024 * 1024;
  std::string body = Pattern(kLen, 7);
  char path[] = "/tmp/rpx-splice-test.XXXXXX";
  int file = mkstemp(path);
  ASSERT_GE(file, 0);
  unlink(path);
  ASSERT_EQ(write(file, body.data(), body.size()), static_cast<ssize_t>(body.size()));
  int big = 16 << 20;
  setsockopt(up_.ours, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  std::thread writer([&] {
    off_t off = 0;
    while (static_cast<size_t>(off) < kLen) {
      if (sendfile(up_.peer, file, &off, kLen - off) <= 0) break;
    }
  });
  std::string got;
  std::thread reader([&] { got = ReadExactly(down_.peer, kLen); });
  // Let the upstream's bytes pile up in our receive buffer before the first splice.
  for (int i = 0; i < 200; ++i) {
    int queued = 0;
    ioctl(up_.ours, FIONREAD, &queued);
    if (static_cast<size_t>(queued) >= kLen / 2) break;
    usleep(5000);
  }
  splicer_ = Splicer::Create(*source_, *sink_, kLen, rec_);
  ASSERT_TRUE(splicer_);
  splicer_->Start();
  bool finished = d_.RunUntil([&] { return rec_.done || !rec_.failed.empty(); }, 10000);
  if (!finished) shutdown(down_.peer, SHUT_RDWR);  // let the reader thread go
  reader.join();
  writer.join();
  close(file);
  ASSERT_TRUE(finished) << rec_.progress << " of " << kLen << " bytes moved";
  EXPECT_EQ(rec_.failed, "");
  EXPECT_TRUE(got == body) << "spliced body differs";
}

// An upstream that pauses mid-body (here until the client has the first 200 KiB) must not have
// what it already sent held back, e.g. by a receive low-water mark (SO_RCVLOWAT) on its socket.
// The source sends kFirst bytes, then waits until the client has them all before sending the
// rest: splicing must not hold back what arrived before a pause.
void SpliceTest::PauseAfter(size_t kFirst, size_t kLast) {
  std::string body = Pattern(kFirst + kLast, 3);
  std::mutex mu;
  std::condition_variable cv;
  bool first_seen = false;
  std::thread writer([&] {
    WriteAll(up_.peer, body.substr(0, kFirst));
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return first_seen; });
    lock.unlock();
    WriteAll(up_.peer, body.substr(kFirst));
  });
  std::string got;
  std::thread reader([&] {
    got = ReadExactly(down_.peer, kFirst);
    {
      std::lock_guard<std::mutex> lock(mu);
      first_seen = true;
    }
    cv.notify_one();
    got += ReadExactly(down_.peer, kLast);
  });
  splicer_ = Splicer::Create(*source_, *sink_, kFirst + kLast, rec_);
  ASSERT_TRUE(splicer_);
  splicer_->Start();
  bool finished = d_.RunUntil([&] { return rec_.done || !rec_.failed.empty(); }, 20000);
  if (!finished) shutdown(down_.peer, SHUT_RDWR);  // unblock the threads before failing
  {
    std::lock_guard<std::mutex> lock(mu);
    first_seen = true;
  }
  cv.notify_one();
  reader.join();
  writer.join();
  ASSERT_TRUE(finished) << splicer_->remaining() << " bytes were never moved";
  EXPECT_EQ(rec_.failed, "");
  EXPECT_TRUE(got == body) << "spliced body differs";
}

TEST_F(SpliceTest, BytesSentBeforeAPauseReachTheClient) { PauseAfter(200 * 1024, 100 * 1024); }

// Less than the source's low-water mark before the pause: it still arrives (the dry-source retry),
// as does a tail below the mark.
TEST_F(SpliceTest, AFewBytesBeforeAPauseReachTheClient) { PauseAfter(10 * 1024, 300 * 1024 + 7); }

TEST_F(SpliceTest, AClientThatDoesNotReadStopsTheSource) {
  const size_t kLen = 32 * 1024 * 1024;
  std::string body = Pattern(kLen, 5);
  std::thread writer([&] { WriteAll(up_.peer, body); });
  splicer_ = Splicer::Create(*source_, *sink_, kLen, rec_);
  ASSERT_TRUE(splicer_);
  splicer_->Start();
  // Let it run with nobody reading the client side: it must stall, not finish.
  d_.RunUntil([] { return false; }, 300);
  EXPECT_FALSE(rec_.done);
  EXPECT_GT(splicer_->remaining(), 0u);
  // Bounded by the pipe and the two sockets' buffers, not by the body.
  EXPECT_LT(rec_.progress, kLen / 2);
  std::string got;
  std::thread reader([&] { got = ReadExactly(down_.peer, kLen); });
  ASSERT_TRUE(d_.RunUntil([&] { return rec_.done || !rec_.failed.empty(); }, 30000));
  reader.join();
  writer.join();
  EXPECT_EQ(rec_.failed, "");
  EXPECT_TRUE(got == body) << "spliced body differs";
}

TEST_F(SpliceTest, EarlyEofFromTheSourceFails) {
  WriteAll(up_.peer, Pattern(1000));
  shutdown(up_.peer, SHUT_WR);
  splicer_ = Splicer::Create(*source_, *sink_, 5000, rec_);
  ASSERT_TRUE(splicer_);
  splicer_->Start();
  ASSERT_TRUE(d_.RunUntil([&] { return rec_.done || !rec_.failed.empty(); }, 5000));
  EXPECT_FALSE(rec_.done);
  EXPECT_NE(rec_.failed.find("4000 body bytes still to come"), std::string::npos) << rec_.failed;
}

// The upstream's last bytes and its end of stream arrive together while the splicer is already
// waiting on the source: one edge-triggered report covers both, and the short read of the bytes
// must not be taken for "drained" (the end of stream would never be reported again).
TEST_F(SpliceTest, LastBytesAndEofTogetherMidBodyFail) {
  splicer_ = Splicer::Create(*source_, *sink_, 5000, rec_);
  ASSERT_TRUE(splicer_);
  splicer_->Start();
  WriteAll(up_.peer, Pattern(1000));
  std::string got;
  ASSERT_TRUE(d_.RunUntil([&] { return rec_.progress >= 1000; }, 5000));
  EXPECT_EQ(ReadExactly(down_.peer, 1000), Pattern(1000));
  WriteAll(up_.peer, Pattern(500, 1000));
  shutdown(up_.peer, SHUT_WR);
  ASSERT_TRUE(d_.RunUntil([&] { return rec_.done || !rec_.failed.empty(); }, 5000))
      << "the end of stream went unnoticed";
  EXPECT_FALSE(rec_.done);
  EXPECT_NE(rec_.failed.find("3500 body bytes still to come"), std::string::npos) << rec_.failed;
}

TEST_F(SpliceTest, ClosingTheSinkFailsAndForgetsIt) {
  splicer_ = Splicer::Create(*source_, *sink_, 1 << 20, rec_);
  ASSERT_TRUE(splicer_);
  splicer_->Start();
  WriteAll(up_.peer, Pattern(4096));
  sink_->Close(Connection::CloseType::kNoFlush, false);
  EXPECT_EQ(rec_.failed, "downstream connection closed");
  // Nothing touches the closed descriptor afterwards, even with source bytes arriving.
  WriteAll(up_.peer, Pattern(4096));
  d_.RunUntil([] { return false; }, 50);
  EXPECT_FALSE(rec_.done);
}

TEST_F(SpliceTest, DisabledOrBufferedInputMeansNoSplicer) {
  Splicer::SetEnabled(false);
  EXPECT_FALSE(Splicer::Create(*source_, *sink_, 100, rec_));
  Splicer::SetEnabled(true);
  source_->read_buffer().Append("x", 1);  // bytes already read must be forwarded first
  EXPECT_FALSE(Splicer::Create(*source_, *sink_, 100, rec_));
}

}  // namespace
}  // namespace rpx
