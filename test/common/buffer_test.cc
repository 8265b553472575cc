#include "source/common/buffer.h"

#include <string>

#include "gtest/gtest.h"

namespace rpx {
namespace {

TEST(BufferTest, AppendDrainKeepsOrder) {
  Buffer b;
  b.Append("hello ");
  b.Append("world");
  EXPECT_EQ(b.view(), "hello world");
  b.Drain(6);
  EXPECT_EQ(b.view(), "world");
  b.Drain(5);
  EXPECT_TRUE(b.empty());
}

TEST(BufferTest, ReuseAfterDrainDoesNotGrow) {
  Buffer b;
  b.Append(std::string(3000, 'a'));
  size_t cap = b.capacity();
  for (int i = 0; i < 100; ++i) {
    b.Drain(b.size());
    b.Append(std::string(3000, 'b'));
  }
  EXPECT_EQ(b.capacity(), cap);
  EXPECT_EQ(b.view(), std::string(3000, 'b'));
}

TEST(BufferTest, CompactsInsteadOfGrowingWhenFrontIsFree) {
  Buffer b;
  b.Append(std::string(4000, 'x'));
  size_t cap = b.capacity();
  b.Drain(3900);
  b.Append(std::string(3000, 'y'));  // fits once the 100 live bytes slide to the front
  EXPECT_EQ(b.capacity(), cap);
  EXPECT_EQ(b.view(), std::string(100, 'x') + std::string(3000, 'y'));
}

TEST(BufferTest, StreamingThroughALargeBufferCopiesEachByteABoundedNumberOfTimes) {
  // A consumer that drains a little less than the producer appends, around a large backlog, must
  // not make every append slide the whole backlog (that made 4 MiB bodies crawl).
  Buffer b;
  std::string chunk(16 * 1024, 'c');
  b.Append(std::string(1024 * 1024, 'b'));
  size_t appended = 0, drained = 0;
  for (int i = 0; i < 2000; ++i) {
    b.Append(chunk);
    appended += chunk.size();
    size_t d = std::min(b.size(), chunk.size());
    b.Drain(d);
    drained += d;
  }
  EXPECT_EQ(b.size(), 1024 * 1024 + appended - drained);
  // Bounded memory: the buffer holds ~1 MiB; capacity stays within a small factor of it.
  EXPECT_LE(b.capacity(), 4u * 1024 * 1024);
}

TEST(BufferTest, ReserveCommit) {
  Buffer b;
  char* p = b.Reserve(10);
  memcpy(p, "abc", 3);
  b.Commit(3);
  EXPECT_EQ(b.view(), "abc");
  EXPECT_GE(b.WritableBytes(), 7u);
}

TEST(BufferTest, ReleaseIfEmptyGivesStorageBack) {
  Buffer b;
  b.Append(std::string(1 << 20, 'z'));
  b.ReleaseIfEmpty();  // not empty: kept
  EXPECT_GE(b.capacity(), 1u << 20);
  b.Drain(b.size());
  b.ReleaseIfEmpty();
  EXPECT_EQ(b.capacity(), 0u);
  b.Append("ok");
  EXPECT_EQ(b.view(), "ok");
  EXPECT_EQ(b.capacity(), Buffer::kBlockSize);
}

TEST(BufferTest, ReleasedBlocksAreReusedByTheNextBuffer) {
  const char* first;
  {
    Buffer a;
    a.Append("x");
    first = a.data();
    a.Drain(1);
    a.ReleaseIfEmpty();
  }
  Buffer b;
  b.Append("y");
  EXPECT_EQ(b.data(), first);  // the same, cache-warm block
  Buffer c;
  c.Append("z");
  EXPECT_NE(c.data(), first);
}

}  // namespace
}  // namespace rpx

namespace rpx {
namespace {

TEST(BufferTest, AppendDecimalAndHex) {
  Buffer b;
  b.AppendDecimal(0);
  b.Append(" ");
  b.AppendDecimal(18446744073709551615ULL);
  b.Append(" ");
  b.AppendHex(0);
  b.Append(" ");
  b.AppendHex(0x4000ab);
  EXPECT_EQ(b.view(), "0 18446744073709551615 0 4000ab");
}

}  // namespace
}  // namespace rpx
