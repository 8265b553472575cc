// What an idle keep-alive downstream connection costs on the heap (issue 5: no more than nginx per
// idle connection). Accepting one allocates its Connection and its ServerConnection and nothing
// else; once it has served a request and gone idle, nothing more is held.
#include <malloc.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include "gtest/gtest.h"
#include "source/http/server_connection.h"
#include "test/common/allocation_counter.h"

#if defined(__SANITIZE_ADDRESS__)
#define RPX_HEAP_COUNTED 0  // the sanitizer owns malloc: mallinfo2 tells nothing
#else
#define RPX_HEAP_COUNTED 1
#endif

namespace rpx {
namespace {

class OkHandler : public StreamHandler {
 public:
  explicit OkHandler(ResponseEncoder& e) : e_(e) {}
  void OnRequestHeaders(RequestHead&, bool) override {
    ResponseHead h;
    h.status = 200;
    h.has_content_length = true;
    h.content_length = 3;
    e_.EncodeHeaders(h, false);
    e_.EncodeData("ok\n", 3, true);
  }
  void OnRequestData(const char*, size_t, bool) override {}
  void OnDownstreamReset() override {}
  void OnDownstreamWatermark(bool) override {}

 private:
  ResponseEncoder& e_;
};

class OkFactory : public StreamHandlerFactory {
 public:
  std::unique_ptr<StreamHandler> CreateStream(ResponseEncoder& e) override {
    return std::make_unique<OkHandler>(e);
  }
};

std::shared_ptr<HttpConfig> MakeConfig() {
  auto config = std::make_shared<HttpConfig>();
  config->stats = std::make_unique<HttpStats[]>(1);
  config->stats_slots = 1;
  return config;
}

// Accepts `n` connections (socketpairs) into `conns` and sends a GET on each; appends the client
// ends to `clients`. False if a socketpair or a write fails.
bool AcceptWithRequests(Dispatcher& d, const std::shared_ptr<HttpConfig>& config,
                        StreamHandlerFactory& factory, int n,
                        std::vector<std::unique_ptr<ServerConnection>>& conns,
                        std::vector<int>& clients) {
  static const SocketAddress peer = *SocketAddress::FromIpPort("127.0.0.1", 1234);
  const char req[] = "GET / HTTP/1.1\r\nhost: x\r\n\r\n";
  for (int i = 0; i < n; ++i) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return false;
    clients.push_back(sv[1]);
    auto c = std::make_unique<Connection>(d, sv[0], false, 1 << 20);
    conns.push_back(
        std::make_unique<ServerConnection>(std::move(c), config, config->stats[0], factory, peer));
    if (write(sv[1], req, sizeof(req) - 1) != static_cast<ssize_t>(sizeof(req) - 1)) return false;
  }
  return true;
}

// A handler that never answers: its request stays in flight until the client goes away.
class SilentHandler : public StreamHandler {
 public:
  void OnRequestHeaders(RequestHead&, bool) override {}
  void OnRequestData(const char*, size_t, bool) override {}
  void OnDownstreamReset() override {}
  void OnDownstreamWatermark(bool) override {}
};

class SilentFactory : public StreamHandlerFactory {
 public:
  std::unique_ptr<StreamHandler> CreateStream(ResponseEncoder&) override {
    return std::make_unique<SilentHandler>();
  }
};

// Requests in flight are what the dispatcher's batching waits for (Dispatcher::AddPending): each
// one counts from its headers until it ends, also when its client hangs up mid-request.
TEST(IdleFootprintTest, RequestsInFlightCountAsDispatcherPendingWork) {
  Dispatcher d("t");
  auto config = MakeConfig();
  SilentFactory factory;
  constexpr int kConns = 10;
  std::vector<int> clients;
  std::vector<std::unique_ptr<ServerConnection>> conns;
  ASSERT_TRUE(AcceptWithRequests(d, config, factory, kConns, conns, clients));
  ASSERT_TRUE(d.RunUntil([&] { return d.pending() == kConns; }, 5000));
  for (int fd : clients) close(fd);
  ASSERT_TRUE(d.RunUntil([&] { return d.pending() == 0; }, 5000));
  EXPECT_EQ(config->stats[0].downstream_rq_active.Value(), 0);
  conns.clear();
  d.RunUntil([] { return false; }, 10);
}

TEST(IdleFootprintTest, IdleKeepAliveConnectionHoldsTwoSmallBlocks) {
  printf("sizeof: Connection %zu, ServerConnection %zu, FileEvent %zu, Timer %zu, Buffer %zu\n",
         sizeof(Connection), sizeof(ServerConnection), sizeof(FileEvent), sizeof(Timer),
         sizeof(Buffer));
  Dispatcher d("t");
  auto config = MakeConfig();
  OkFactory factory;
  constexpr int kConns = 400;
  std::vector<int> clients;
  std::vector<std::unique_ptr<ServerConnection>> conns;
  // As many as round 1: the thread's request-parser pool (up to Http1Parser::kPoolSize) keeps the
  // parsers of requests that were in flight at once, per thread, not per connection.
  constexpr int kWarm = kConns;
  static_assert(kWarm >= Dispatcher::kFlushEvents + 16);
  conns.reserve(kConns + kWarm);
  clients.reserve(kConns + kWarm);
  // Round 0 warms the thread's buffer and parser pools and the timer queue; round 1 is measured.
  // The loop writes once per Dispatcher::kFlushEvents events, so that many responses can wait in
  // write blocks at once: round 0 brings the pool up to that (per thread, not per connection).
  for (int round = 0; round < 2; ++round) {
    int n = round == 0 ? kWarm : kConns;
    malloc_trim(0);
    struct mallinfo2 before = mallinfo2();
#if RPX_HEAP_COUNTED
    long news_before = AllocationCount();
#endif
    ASSERT_TRUE(AcceptWithRequests(d, config, factory, n, conns, clients));
#if RPX_HEAP_COUNTED
    double news_per_accept = static_cast<double>(AllocationCount() - news_before) / n;
#endif
    int responses = 0;
    ASSERT_TRUE(d.RunUntil(
        [&] {
          for (size_t i = clients.size() - n; i < clients.size(); ++i) {
            char buf[512];
            if (read(clients[i], buf, sizeof(buf)) > 0) ++responses;
          }
          return responses >= n;
        },
        5000));
    d.RunUntil([] { return false; }, 20);  // deferred deletions of the finished streams
    struct mallinfo2 after = mallinfo2();
    double bytes_per_idle = static_cast<double>(after.uordblks - before.uordblks) / n;
    if (round == 0) continue;
    EXPECT_EQ(config->stats[0].downstream_cx_active.Value(), kConns + kWarm);
    EXPECT_EQ(d.pending(), 0);  // every finished request left the dispatcher's batching count
#if RPX_HEAP_COUNTED
    printf("per connection: %.2f allocations at accept, %.0f heap bytes held once idle\n",
           news_per_accept, bytes_per_idle);
    // Connection and ServerConnection; the timer queue's growth is amortized.
    EXPECT_LT(news_per_accept, 2.1);
    // 176 + 208 bytes of malloc chunks today (the idle timer is linked into its delay's list:
    // no slot in the timer heap).
    EXPECT_LT(bytes_per_idle, 410);
#else
    (void)bytes_per_idle;
#endif
  }
  conns.clear();
  d.RunUntil([] { return false; }, 10);
  for (int fd : clients) close(fd);
}

}  // namespace
}  // namespace rpx
