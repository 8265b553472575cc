#include "source/common/log_file.h"

#include <stdio.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"

namespace rpx {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t Lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

class LogFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char d[] = "/tmp/rpx-log-file-XXXXXX";
    ASSERT_NE(mkdtemp(d), nullptr);
    dir_ = d;
  }
  void TearDown() override {
    for (const char* f : {"/a.log", "/a.log.1", "/a.log.2"}) unlink((dir_ + f).c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(LogFileTest, WorkersWriteWholeLinesNeverInterleaved) {
  std::string path = dir_ + "/a.log";
  LogFile f(path, -1, 2);
  std::string error;
  ASSERT_TRUE(f.Start(&error)) << error;
  // Two threads, each its own slot, lines longer than a flush, so buffers cross often.
  auto writer = [&](uint32_t slot, char c) {
    std::string line(3000, c);
    line += '\n';
    for (int i = 0; i < 500; ++i) f.Append(slot, line);
    f.FlushWorker(slot);
  };
  std::thread a(writer, 0, 'a'), b(writer, 1, 'b');
  a.join();
  b.join();
  f.Stop();
  std::string all = Read(path);
  ASSERT_EQ(Lines(all), 1000u);
  std::istringstream in(all);
  std::string line;
  while (std::getline(in, line)) {
    ASSERT_EQ(line.size(), 3000u);
    ASSERT_EQ(line.find_first_not_of(line[0]), std::string::npos) << "an interleaved line";
  }
  EXPECT_EQ(f.stats().write_dropped.load(), 0u);
  EXPECT_GT(f.stats().write_completed.load(), 0u);
}

TEST_F(LogFileTest, ReopenAfterRenameLosesNoLine) {
  std::string path = dir_ + "/a.log";
  LogFile f(path, -1, 1);
  std::string error;
  ASSERT_TRUE(f.Start(&error)) << error;
  int written = 0;
  for (int round = 1; round <= 2; ++round) {
    for (int i = 0; i < 1000; ++i, ++written) f.Append(0, "line " + std::to_string(written) + "\n");
    f.FlushWorker(0);
    f.Drain();
    // logrotate: rename, then ask for a reopen; lines written meanwhile go to the old file.
    ASSERT_EQ(rename(path.c_str(), (path + "." + std::to_string(round)).c_str()), 0);
    for (int i = 0; i < 10; ++i, ++written) f.Append(0, "line " + std::to_string(written) + "\n");
    f.FlushWorker(0);
    f.Reopen();
    f.Drain();
  }
  for (int i = 0; i < 5; ++i, ++written) f.Append(0, "line " + std::to_string(written) + "\n");
  f.Stop();
  std::string all = Read(path + ".1") + Read(path + ".2") + Read(path);
  EXPECT_EQ(Lines(all), static_cast<size_t>(written));
  EXPECT_EQ(Lines(Read(path)), 5u);
  for (int i = 0; i < written; ++i) {
    ASSERT_NE(all.find("line " + std::to_string(i) + "\n"), std::string::npos) << i;
  }
}

// A stalled disk (here: a pipe nobody reads) must not grow memory: past kMaxQueuedBytes whole
// buffers are dropped and counted, and every byte is either written or counted as dropped.
TEST_F(LogFileTest, AStalledWriterDropsWholeBuffersAndCountsThem) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  LogFile f("pipe", p[1], 1);
  std::string error;
  ASSERT_TRUE(f.Start(&error)) << error;
  std::string line(1023, 'x');
  line += '\n';
  const size_t total = 2 * LogFile::kMaxQueuedBytes + (1 << 20);
  for (size_t sent = 0; sent < total; sent += line.size()) f.Append(0, line);
  f.FlushWorker(0);
  EXPECT_GT(f.stats().write_dropped.load(), 0u);
  EXPECT_EQ(f.stats().write_dropped_bytes.load() % line.size(), 0u) << "a partial line dropped";
  size_t read_bytes = 0;
  std::thread reader([&] {
    char buf[1 << 16];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof(buf))) > 0) read_bytes += static_cast<size_t>(n);
  });
  f.Stop();
  ::close(p[1]);  // LogFile does not own a descriptor it was given
  reader.join();
  ::close(p[0]);
  EXPECT_EQ(read_bytes + f.stats().write_dropped_bytes.load(), total);
  EXPECT_EQ(read_bytes % line.size(), 0u);
}

TEST_F(LogFileTest, AnUnopenablePathIsAnError) {
  LogFile f(dir_ + "/no/such/dir/a.log", -1, 1);
  std::string error;
  EXPECT_FALSE(f.Start(&error));
  EXPECT_EQ(error, "No such file or directory");
}

TEST_F(LogFileTest, ManagerSharesOneFilePerPath) {
  LogFileManager m(1);
  std::string error;
  auto a = m.Get(dir_ + "/a.log", &error);
  auto b = m.Get(dir_ + "/a.log", &error);
  ASSERT_TRUE(a);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(m.Files().size(), 1u);
  EXPECT_FALSE(m.Get(dir_ + "/missing/x.log", &error));
  a->Append(0, "x\n");
  m.Stop();
  EXPECT_EQ(Read(dir_ + "/a.log"), "x\n");
}

}  // namespace
}  // namespace rpx
