// FreeBlocks: a block given back is the next one taken, on the same thread only, and no more
// than kMaxKept wait. (Blocks a thread keeps are freed when it ends: the ASan run's leak check
// covers the threads below.)
#include "source/common/free_blocks.h"

#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rpx {
namespace {

// Each test its own instantiation: the lists are per type and per thread.
TEST(FreeBlocksTest, AGivenBlockIsTheNextTaken) {
  using Blocks = FreeBlocks<64, 4>;
  void* a = Blocks::Take();
  void* b = Blocks::Take();
  Blocks::Give(a);
  Blocks::Give(b);
  EXPECT_EQ(Blocks::Take(), b);  // last in, first out: the one most likely in cache
  EXPECT_EQ(Blocks::Take(), a);
  Blocks::Give(a);
  Blocks::Give(b);
}

TEST(FreeBlocksTest, AtMostMaxKeptWait) {
  using Blocks = FreeBlocks<72, 3>;
  std::vector<void*> taken;
  for (int i = 0; i < 5; ++i) taken.push_back(Blocks::Take());
  for (void* p : taken) Blocks::Give(p);
  // The first three given back were kept; the other two went to the allocator.
  std::set<void*> again;
  for (int i = 0; i < 3; ++i) again.insert(Blocks::Take());
  EXPECT_EQ(again, (std::set<void*>{taken[0], taken[1], taken[2]}));
  for (void* p : again) Blocks::Give(p);
}

TEST(FreeBlocksTest, EachThreadHasItsOwnList) {
  using Blocks = FreeBlocks<80, 8>;
  void* mine = Blocks::Take();
  Blocks::Give(mine);
  void* theirs = nullptr;
  std::thread([&] {
    theirs = Blocks::Take();  // not this thread's kept block
    Blocks::Give(theirs);     // kept by that thread, freed when it ends
  }).join();
  EXPECT_NE(theirs, mine);
  EXPECT_EQ(Blocks::Take(), mine);
  Blocks::Give(mine);
}

}  // namespace
}  // namespace rpx
