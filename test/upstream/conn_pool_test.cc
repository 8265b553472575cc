#include "source/upstream/conn_pool.h"

#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "source/event/io_ring.h"
#include "source/upstream/worker_cluster.h"
#include "test/test_common/fake_upstream.h"
#include "test/test_common/tcp_pair.h"

namespace rpx {
namespace {

constexpr uint64_t kWaitMs = 10000;  // generous: only a hang reaches it

std::shared_ptr<ClusterInfo> MakeCluster(uint32_t max_conn, uint32_t max_pending,
                                         uint32_t max_requests = 1024) {
  auto info = std::make_shared<ClusterInfo>();
  info->name = "test";
  info->resources = std::make_shared<ClusterResources>(max_conn, max_pending, max_requests);
  info->stats_slots = 1;
  info->stats.reset(new ClusterStats[1]);
  return info;
}

std::shared_ptr<const Host> MakeHost(uint16_t port) {
  auto h = std::make_shared<Host>();
  h->address = *SocketAddress::FromIpPort("127.0.0.1", port);
  return h;
}

// One request through the pool: records what happened.
class TestRequest : public PoolCallbacks, public ResponseDecoder {
 public:
  void OnPoolReady(UpstreamStream& client) override {
    ready = true;
    client_ = &client;
    RequestHead head;
    head.method = body_length ? "POST" : "GET";
    head.path = "/";
    head.headers.Add("host", "test");
    head.has_content_length = body_length > 0;
    head.content_length = body_length;
    client.StartRequest(this, head);
    if (!first_body_bytes.empty()) {
      client.SendData(first_body_bytes.data(), first_body_bytes.size(), false);
    }
  }
  void OnPoolFailure(PoolFailure reason, const std::string& d) override {
    failed = true;
    failure = reason;
    detail = d;
  }
  void OnResponseHeaders(ResponseHead& head, bool) override { status = head.status; }
  void OnResponseData(const char* data, size_t len, bool end_stream) override {
    body.append(data ? data : "", len);
    if (end_stream) complete = true;
  }
  void OnUpstreamReset(UpstreamResetReason, const std::string& d) override {
    reset = true;
    detail = d;
  }
  void OnUpstreamWriteWatermark(bool) override {}

  // A request with a body: its length, and the part sent at once (the rest never comes).
  uint64_t body_length = 0;
  std::string first_body_bytes;
  bool ready = false, failed = false, complete = false, reset = false;
  PoolFailure failure = PoolFailure::kOverflow;
  int status = 0;
  std::string body, detail;
  UpstreamStream* client_ = nullptr;
  ConnPool::Pending* handle = nullptr;
};

class ConnPoolTest : public ::testing::Test {
 protected:
  // Sends `r` through `pool` to the upstream, held so that it does not answer, and abandons it.
  void SendToHeldUpstreamAndReset(ConnPool& pool, TestRequest& r) {
    upstream_.Hold();
    r.handle = pool.NewStream(r);
    ASSERT_TRUE(dispatcher_.RunUntil([&] { return r.ready; }, kWaitMs));
    r.client_->Reset();
  }

  Dispatcher dispatcher_{"test"};
  FakeUpstream upstream_;
};

TEST_F(ConnPoolTest, ReusesIdleConnection) {
  auto info = MakeCluster(10, 10);
  ConnPool pool(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  for (int i = 0; i < 5; ++i) {
    TestRequest r;
    r.handle = pool.NewStream(r);
    ASSERT_TRUE(dispatcher_.RunUntil([&] { return r.complete; }, kWaitMs));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "ok");
  }
  EXPECT_EQ(upstream_.connections(), 1);
  EXPECT_EQ(info->stats[0].upstream_cx_total.Value(), 1u);
  EXPECT_EQ(info->stats[0].upstream_rq_total.Value(), 5u);
  EXPECT_EQ(info->resources->connections(), 1);
}

TEST_F(ConnPoolTest, QueuesUpToMaxPendingThenOverflows) {
  auto info = MakeCluster(/*max_conn=*/1, /*max_pending=*/2);
  ConnPool pool(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  upstream_.Hold();
  TestRequest a, b, c;
  a.handle = pool.NewStream(a);
  b.handle = pool.NewStream(b);
  c.handle = pool.NewStream(c);
  // The third request finds one connection opening and two waiting: refused at once.
  EXPECT_TRUE(c.failed);
  EXPECT_EQ(c.failure, PoolFailure::kOverflow);
  EXPECT_EQ(info->stats[0].upstream_rq_pending_overflow.Value(), 1u);
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return a.ready; }, kWaitMs));
  EXPECT_FALSE(b.ready);  // waits for the only connection
  upstream_.Release();
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return a.complete && b.complete; }, kWaitMs));
  EXPECT_EQ(upstream_.connections(), 1);
  EXPECT_EQ(info->resources->pending(), 0);
  EXPECT_EQ(info->stats[0].upstream_cx_total.Value(), 1u);
}

TEST_F(ConnPoolTest, CancelReleasesPendingSlot) {
  auto info = MakeCluster(1, 1);
  ConnPool pool(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  TestRequest a;
  a.handle = pool.NewStream(a);
  ASSERT_NE(a.handle, nullptr);
  EXPECT_EQ(info->resources->pending(), 1);
  pool.Cancel(a.handle);
  EXPECT_EQ(info->resources->pending(), 0);
  // The connection opened for it is parked idle and serves the next request.
  TestRequest b;
  b.handle = pool.NewStream(b);
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return b.complete; }, kWaitMs));
  EXPECT_EQ(upstream_.connections(), 1);
}

TEST_F(ConnPoolTest, IdleConnectionClosesAfterIdleTimeout) {
  auto info = MakeCluster(10, 10);
  info->idle_timeout_ms = 30;
  ConnPool pool(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  TestRequest r;
  r.handle = pool.NewStream(r);
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return r.complete; }, kWaitMs));
  ASSERT_TRUE(dispatcher_.RunUntil(
      [&] { return info->stats[0].upstream_cx_idle_timeout.Value() == 1; }, kWaitMs));
  EXPECT_EQ(info->stats[0].upstream_cx_active.Value(), 0);
  EXPECT_EQ(info->resources->connections(), 0);
  EXPECT_TRUE(pool.idle());
}

TEST_F(ConnPoolTest, MaxRequestsPerConnection) {
  auto info = MakeCluster(10, 10);
  info->max_requests_per_connection = 2;
  ConnPool pool(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  for (int i = 0; i < 4; ++i) {
    TestRequest r;
    r.handle = pool.NewStream(r);
    ASSERT_TRUE(dispatcher_.RunUntil([&] { return r.complete; }, kWaitMs));
  }
  EXPECT_EQ(info->stats[0].upstream_cx_total.Value(), 2u);
  EXPECT_EQ(info->stats[0].upstream_cx_max_requests.Value(), 2u);
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return upstream_.connections() == 2; }, kWaitMs));
}

TEST_F(ConnPoolTest, ConnectFailureFailsTheWaiter) {
  auto info = MakeCluster(10, 10);
  uint16_t dead_port;
  {
    FakeUpstream gone;
    dead_port = gone.port();
  }
  ConnPool pool(dispatcher_, info, MakeHost(dead_port), info->stats[0]);
  TestRequest r;
  r.handle = pool.NewStream(r);
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return r.failed; }, kWaitMs));
  EXPECT_EQ(r.failure, PoolFailure::kConnectFailure);
  EXPECT_EQ(info->stats[0].upstream_cx_connect_fail.Value(), 1u);
  EXPECT_EQ(info->resources->connections(), 0);
  EXPECT_EQ(info->resources->pending(), 0);
}

// A request abandoned after it was sent (its client went away): the response is read and
// dropped, and the connection serves the next request instead of a new one being opened.
TEST_F(ConnPoolTest, ResetReadsTheAbandonedResponseAndKeepsTheConnection) {
  auto info = MakeCluster(10, 10);
  ConnPool pool(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  TestRequest r;
  SendToHeldUpstreamAndReset(pool, r);
  EXPECT_EQ(info->stats[0].upstream_rq_reset.Value(), 1u);
  EXPECT_EQ(info->resources->connections(), 1);  // still reading the response
  upstream_.Release();
  ASSERT_TRUE(dispatcher_.RunUntil(
      [&] { return info->stats[0].upstream_cx_kept_after_reset.Value() == 1; }, kWaitMs));
  EXPECT_FALSE(r.complete);  // the abandoned request's decoder heard nothing more
  EXPECT_FALSE(r.reset);
  TestRequest next;
  next.handle = pool.NewStream(next);
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return next.complete; }, kWaitMs));
  EXPECT_EQ(next.status, 200);
  EXPECT_EQ(info->stats[0].upstream_cx_total.Value(), 1u);
  EXPECT_EQ(upstream_.open_connections(), 1);
}

// Calls `on_data` when its connection has bytes: a client whose event comes in the same epoll
// batch as the upstream's response.
class Trigger : public ConnectionCallbacks {
 public:
  void OnData(Buffer& in) override {
    in.Drain(in.size());
    if (on_data) on_data();
  }
  void OnEvent(ConnectionEvent) override {}
  std::function<void()> on_data;
};

// The response of an abandoned request may already be read when the reset comes: the loop's read
// batching reads every socket of a batch before running their events, so a client that hangs up
// in the same batch as its response arrives finds it in the upstream's buffer, unparsed. It is
// still parsed and dropped, and the connection kept: whether the upstream's own event then
// delivers it (`reset_in_batch`), or nothing will (its reading was disabled by the client's
// backpressure when its event ran, and the reset comes after the batch).
TEST_F(ConnPoolTest, ResetWithTheResponseAlreadyReadKeepsTheConnection) {
  if (!IoRing::Create(4)) GTEST_SKIP() << "io_uring unavailable: no read batching here";
  dispatcher_.SetReadBatching(true);
  for (bool reset_in_batch : {true, false}) {
    auto info = MakeCluster(10, 10);
    ConnPool pool(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
    TestRequest r;
    upstream_.Hold();
    int responses = upstream_.responses();
    r.handle = pool.NewStream(r);
    ASSERT_TRUE(dispatcher_.RunUntil([&] { return r.ready; }, kWaitMs));
    TcpPair p = MakeTcpPair();
    ASSERT_GE(p.ours, 0);
    Trigger trigger;
    bool triggered = false;
    trigger.on_data = [&] {
      triggered = true;
      if (reset_in_batch) {
        r.client_->Reset();
      } else {
        r.client_->ReadDisable(true);
      }
    };
    auto client = std::make_unique<Connection>(dispatcher_, p.ours, false, 1 << 20);
    client->SetCallbacks(&trigger);
    // The client's bytes first, then the response: one batch, the client's event first.
    ASSERT_EQ(send(p.peer, "x", 1, 0), 1);
    upstream_.Release();
    for (int i = 0; i < 10000 && upstream_.responses() == responses; ++i) usleep(1000);
    ASSERT_GT(upstream_.responses(), responses);
    int passes = 0;
    dispatcher_.RunUntil([&] { return triggered && ++passes > 2; }, kWaitMs);
    ASSERT_TRUE(triggered);
    ASSERT_FALSE(r.complete) << "the response was parsed before the client's event ran";
    if (!reset_in_batch) {
      EXPECT_EQ(info->stats[0].upstream_cx_kept_after_reset.Value(), 0u);
      r.client_->Reset();
    }
    ASSERT_TRUE(dispatcher_.RunUntil(
        [&] {
          return info->stats[0].upstream_cx_kept_after_reset.Value() == 1 ||
                 info->resources->connections() == 0;
        },
        kWaitMs));
    EXPECT_EQ(info->stats[0].upstream_cx_kept_after_reset.Value(), 1u)
        << (reset_in_batch ? "reset in the batch" : "reset after the batch")
        << ": the connection was closed";
    EXPECT_FALSE(r.complete);
    EXPECT_FALSE(r.reset);
    TestRequest next;
    next.handle = pool.NewStream(next);
    ASSERT_TRUE(dispatcher_.RunUntil([&] { return next.complete; }, kWaitMs));
    EXPECT_EQ(info->stats[0].upstream_cx_total.Value(), 1u);
    client.reset();
    close(p.peer);
  }
}

// An abandoned request's response that does not come within the discard time: closed.
TEST_F(ConnPoolTest, ResetClosesTheConnectionWhenTheResponseDoesNotCome) {
  auto info = MakeCluster(10, 10);
  ConnPool pool(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  TestRequest r;
  SendToHeldUpstreamAndReset(pool, r);
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return info->resources->connections() == 0; }, kWaitMs));
  EXPECT_EQ(info->stats[0].upstream_cx_kept_after_reset.Value(), 0u);
  upstream_.Release();  // (a held fake upstream notices the close only once released)
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return upstream_.open_connections() == 0; }, kWaitMs));
}

// Reset before the request was sent whole (its body still coming): the upstream waits for bytes
// that never come, so the connection closes at once.
TEST_F(ConnPoolTest, ResetMidRequestClosesTheConnection) {
  auto info = MakeCluster(10, 10);
  ConnPool pool(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  TestRequest r;
  r.body_length = 10;
  r.first_body_bytes = "12345";
  SendToHeldUpstreamAndReset(pool, r);
  EXPECT_EQ(info->resources->connections(), 0);
  EXPECT_EQ(info->stats[0].upstream_rq_reset.Value(), 1u);
  upstream_.Release();
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return upstream_.open_connections() == 0; }, kWaitMs));
}

TEST(WorkerClusterTest, ClusterLimitIsSharedAcrossHostsAndIdleSlotsAreReclaimed) {
  Dispatcher dispatcher("test");
  FakeUpstream up1, up2;
  auto info = MakeCluster(/*max_conn=*/1, /*max_pending=*/10);
  auto hosts = std::make_shared<HostSet>();
  hosts->push_back(MakeHost(up1.port()));
  hosts->push_back(MakeHost(up2.port()));
  WorkerCluster cluster(dispatcher, 0, ClusterEntry{info, hosts});
  // Round robin alternates hosts; only one connection may exist at a time, so each request
  // to the other host must first close the idle connection to the previous one.
  for (int i = 0; i < 4; ++i) {
    TestRequest r;
    ConnPool* pool = cluster.ChoosePool(0);
    r.handle = pool->NewStream(r);
    ASSERT_TRUE(dispatcher.RunUntil([&] { return r.complete; }, kWaitMs)) << i;
    EXPECT_LE(info->resources->connections(), 1);
  }
  EXPECT_EQ(up1.connections(), 2);
  EXPECT_EQ(up2.connections(), 2);
}

TEST(WorkerClusterTest, WeightedRoundRobinFollowsWeights) {
  Dispatcher dispatcher("test");
  auto info = MakeCluster(10, 10);
  auto hosts = std::make_shared<HostSet>();
  for (uint16_t port : {1001, 1002}) {
    auto h = std::make_shared<Host>();
    h->address = *SocketAddress::FromIpPort("127.0.0.1", port);
    h->weight = port == 1001 ? 3 : 1;
    hosts->push_back(h);
  }
  WorkerCluster cluster(dispatcher, 0, ClusterEntry{info, hosts});
  int first = 0;
  for (int i = 0; i < 400; ++i) {
    if (cluster.ChoosePool(0)->host().address.port() == 1001) ++first;
  }
  EXPECT_EQ(first, 300);
}

TEST(WorkerClusterTest, UpdateKeepsPoolsOfHostsThatStay) {
  Dispatcher dispatcher("test");
  FakeUpstream up;
  auto info = MakeCluster(10, 10);
  auto hosts = std::make_shared<HostSet>();
  hosts->push_back(MakeHost(up.port()));
  WorkerCluster cluster(dispatcher, 0, ClusterEntry{info, hosts});
  TestRequest r;
  ConnPool* pool = cluster.ChoosePool(0);
  r.handle = pool->NewStream(r);
  ASSERT_TRUE(dispatcher.RunUntil([&] { return r.complete; }, kWaitMs));
  auto more = std::make_shared<HostSet>(*hosts);
  more->push_back(MakeHost(1));
  cluster.Update(ClusterEntry{info, more});
  // The same pool (and its idle connection) serves the host that stayed.
  bool found = false;
  for (int i = 0; i < 2; ++i) found |= cluster.ChoosePool(0) == pool;
  EXPECT_TRUE(found);
  EXPECT_EQ(info->resources->connections(), 1);
}

// Two pools (two workers) share max_connections = 2. While one is starved, the other gives back
// one connection, not every connection that finishes before the starved one takes its slot.
TEST_F(ConnPoolTest, GivesBackOneSlotPerStarvedPool) {
  auto info = MakeCluster(/*max_conn=*/2, /*max_pending=*/10);
  ConnPool a(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  ConnPool b(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  upstream_.Hold();
  TestRequest a1, a2, b1;
  a1.handle = a.NewStream(a1);
  a2.handle = a.NewStream(a2);
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return a1.ready && a2.ready; }, kWaitMs));
  b1.handle = b.NewStream(b1);
  EXPECT_FALSE(b1.failed);
  EXPECT_EQ(info->resources->starved_workers.load(), 1);
  EXPECT_TRUE(info->resources->SlotWanted());
  upstream_.Release();
  ASSERT_TRUE(
      dispatcher_.RunUntil([&] { return a1.complete && a2.complete && b1.complete; }, kWaitMs));
  EXPECT_EQ(b1.status, 200);
  // One of a's connections moved to b; the other stayed in a's pool, idle.
  EXPECT_EQ(upstream_.connections(), 3);
  EXPECT_EQ(info->resources->connections(), 2);
  EXPECT_EQ(info->resources->starved_workers.load(), 0);
  EXPECT_FALSE(info->resources->SlotWanted());
  TestRequest a3;
  a3.handle = a.NewStream(a3);
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return a3.complete; }, kWaitMs));
  EXPECT_EQ(upstream_.connections(), 3);  // a3 reused a's idle connection
}

// A slot freed while another pool is starved is kept for the starved pool: the pool that freed
// it cannot take it back when its own next request comes first (it queues on its connections).
TEST_F(ConnPoolTest, FreedSlotGoesToTheStarvedPool) {
  auto info = MakeCluster(/*max_conn=*/2, /*max_pending=*/10);
  ConnPool a(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  ConnPool b(dispatcher_, info, MakeHost(upstream_.port()), info->stats[0]);
  upstream_.Hold();
  TestRequest a1, a2, a3, b1;
  a1.body_length = 10;  // abandoned mid-body below, so its connection closes at once
  a1.first_body_bytes = "12345";
  a1.handle = a.NewStream(a1);
  a2.handle = a.NewStream(a2);
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return a1.ready && a2.ready; }, kWaitMs));
  b1.handle = b.NewStream(b1);
  EXPECT_EQ(info->resources->starved_workers.load(), 1);
  // a1 is abandoned mid-request: its connection closes and its slot is free, reserved for b.
  a1.client_->Reset();
  EXPECT_EQ(info->resources->connections(), 1);
  EXPECT_FALSE(info->resources->TryAcquireConnection(/*starved=*/false));
  a3.handle = a.NewStream(a3);
  EXPECT_FALSE(a3.failed);
  EXPECT_EQ(info->resources->connections(), 1);  // a3 waits for a2's connection
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return b1.ready; }, kWaitMs));
  EXPECT_FALSE(a3.ready);
  EXPECT_EQ(info->resources->starved_workers.load(), 0);
  EXPECT_EQ(info->resources->connections(), 2);
  upstream_.Release();
  ASSERT_TRUE(
      dispatcher_.RunUntil([&] { return a2.complete && a3.complete && b1.complete; }, kWaitMs));
  EXPECT_EQ(a3.status, 200);
  EXPECT_EQ(b1.status, 200);
  EXPECT_EQ(upstream_.connections(), 3);  // a's two, then b's one: no slot went back and forth
}

}  // namespace
}  // namespace rpx
