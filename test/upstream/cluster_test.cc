#include "source/upstream/cluster.h"

#include "gtest/gtest.h"

namespace rpx {
namespace {

std::shared_ptr<Host> MakeHost(uint16_t port, uint32_t slots) {
  auto h = std::make_shared<Host>();
  h->address = *SocketAddress::FromIpPort("127.0.0.1", port);
  h->AllocateStats(slots);
  return h;
}

// An endpoint an update keeps goes on counting where /clusters reads (the worker's pool keeps the
// old Host); a new endpoint starts from zero.
TEST(ClusterTest, KeptEndpointsKeepTheirHostStats) {
  HostSet before = {MakeHost(1001, 2), MakeHost(1002, 2)};
  before[0]->StatsFor(1)->rq_total.Inc(5);
  HostSet after = {MakeHost(1001, 2), MakeHost(1003, 2)};
  CarryHostStats(&before, after);
  EXPECT_EQ(after[0]->StatsFor(1)->rq_total.Value(), 5u);
  before[0]->StatsFor(0)->rq_total.Inc();  // counted through the old Host, read through the new
  EXPECT_EQ(after[0]->StatsFor(0)->rq_total.Value(), 1u);
  EXPECT_EQ(after[1]->StatsFor(1)->rq_total.Value(), 0u);
  EXPECT_EQ(after[1]->StatsFor(2), nullptr);  // no block past the workers
  CarryHostStats(nullptr, after);             // a first assignment: nothing to carry
}

}  // namespace
}  // namespace rpx
