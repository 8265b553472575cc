// CaresDnsResolver against a tiny DNS server on 127.0.0.1 that runs on the same Dispatcher as
// the resolver (one thread: the loop serves the query it sent). The server answers A and AAAA
// from a table, or answers NXDOMAIN or SERVFAIL, or never answers, and counts the queries.
#include "source/network/dns_resolver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "source/event/dispatcher.h"

namespace rpx {
namespace {

constexpr uint16_t kA = 1, kAAAA = 28;

class FakeDns {
 public:
  enum class Mode { kAnswer, kNxdomain, kServfail, kDrop };
  struct Record {
    std::string ip;
    uint32_t ttl;
  };

  explicit FakeDns(Dispatcher& d) {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    event_ = d.CreateFileEvent(
        fd_, [this](uint32_t) { Serve(); }, FileEvent::kRead);
  }
  ~FakeDns() {
    event_.reset();
    close(fd_);
  }

  SocketAddress address() const { return *SocketAddress::FromIpPort("127.0.0.1", port_); }
  std::map<std::string, std::vector<Record>> table;
  Mode mode = Mode::kAnswer;
  int queries(const std::string& name) const {
    auto it = counts_.find(name);
    return it == counts_.end() ? 0 : it->second;
  }

 private:
  void Serve() {
    uint8_t buf[512];
    sockaddr_storage peer;
    socklen_t plen = sizeof(peer);
    ssize_t n = recvfrom(fd_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&peer), &plen);
    if (n < 12) return;
    // The question: labels, then type and class.
    size_t p = 12;
    std::string name;
    while (p < static_cast<size_t>(n) && buf[p] != 0) {
      size_t l = buf[p++];
      if (!name.empty()) name += '.';
      name.append(reinterpret_cast<char*>(buf + p), l);
      p += l;
    }
    p += 1;
    if (p + 4 > static_cast<size_t>(n)) return;
    uint16_t qtype = (buf[p] << 8) | buf[p + 1];
    size_t qend = p + 4;
    ++counts_[name];
    if (mode == Mode::kDrop) return;
    std::string out(reinterpret_cast<char*>(buf), qend);
    uint8_t rcode = mode == Mode::kNxdomain ? 3 : (mode == Mode::kServfail ? 2 : 0);
    if (mode == Mode::kAnswer && !table.count(name)) rcode = 3;
    out[2] = static_cast<char>(0x80 | (buf[2] & 0x01));  // QR; RD as asked
    out[3] = static_cast<char>(0x80 | rcode);            // RA
    uint16_t ancount = 0;
    std::string answers;
    if (rcode == 0) {
      for (const auto& r : table[name]) {
        uint8_t addr[16];
        bool v4 = inet_pton(AF_INET, r.ip.c_str(), addr) == 1;
        if (!v4 && inet_pton(AF_INET6, r.ip.c_str(), addr) != 1) continue;
        if ((qtype == kA) != v4 || (qtype != kA && qtype != kAAAA)) continue;
        uint16_t rdlen = v4 ? 4 : 16;
        const uint8_t rr[] = {0xc0,
                              0x0c,
                              static_cast<uint8_t>(qtype >> 8),
                              static_cast<uint8_t>(qtype),
                              0,
                              1,
                              static_cast<uint8_t>(r.ttl >> 24),
                              static_cast<uint8_t>(r.ttl >> 16),
                              static_cast<uint8_t>(r.ttl >> 8),
                              static_cast<uint8_t>(r.ttl),
                              0,
                              static_cast<uint8_t>(rdlen)};
        answers.append(reinterpret_cast<const char*>(rr), sizeof(rr));
        answers.append(reinterpret_cast<const char*>(addr), rdlen);
        ++ancount;
      }
    }
    out[6] = static_cast<char>(ancount >> 8);
    out[7] = static_cast<char>(ancount);
    out[8] = out[9] = out[10] = out[11] = 0;  // no authority, no additional
    out += answers;
    sendto(fd_, out.data(), out.size(), 0, reinterpret_cast<sockaddr*>(&peer), plen);
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::unique_ptr<FileEvent> event_;
  std::map<std::string, int> counts_;
};

struct Result {
  absl::Status status;
  std::vector<DnsResolver::Answer> answers;
};

class DnsResolverTest : public ::testing::Test {
 protected:
  DnsResolverTest() : dns_(dispatcher_) {}

  std::unique_ptr<CaresDnsResolver> MakeResolver(uint32_t timeout_ms = 0, uint32_t tries = 0) {
    DnsResolverOptions o;
    o.servers.push_back(dns_.address());
    o.no_search = true;
    o.timeout_ms = timeout_ms;
    o.tries = tries;
    auto r = CaresDnsResolver::Create(dispatcher_, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return std::move(*r);
  }

  // Resolves and runs the loop until the callback (bounded generously: not a timing check).
  Result ResolveNow(DnsResolver& r, const std::string& name, DnsResolver::Family f) {
    std::optional<Result> got;
    bool inside = true;
    r.Resolve(name, f, [&](const absl::Status& s, std::vector<DnsResolver::Answer> a) {
      EXPECT_FALSE(inside) << "called back from inside Resolve()";
      got = Result{s, std::move(a)};
    });
    inside = false;
    EXPECT_TRUE(dispatcher_.RunUntil([&] { return got.has_value(); }, 30000));
    return got.value_or(Result{absl::UnknownError("no callback"), {}});
  }

  static std::vector<std::string> Ips(const Result& r) {
    std::vector<std::string> out;
    for (const auto& a : r.answers) out.push_back(a.address.Ip());
    return out;
  }

  Dispatcher dispatcher_{"test"};
  FakeDns dns_;
};

TEST_F(DnsResolverTest, AnswersARecordsWithTheirTtl) {
  dns_.table["svc.test"] = {{"10.0.0.1", 30}, {"10.0.0.2", 7}, {"::5", 9}};
  auto r = MakeResolver();
  Result got = ResolveNow(*r, "svc.test", DnsResolver::Family::kV4);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(Ips(got), (std::vector<std::string>{"10.0.0.1", "10.0.0.2"}));
  EXPECT_EQ(got.answers[0].ttl_s, 30u);
  EXPECT_EQ(got.answers[1].ttl_s, 7u);
  EXPECT_EQ(r->pending(), 0u);
}

TEST_F(DnsResolverTest, AnswersAaaaRecordsForIpv6) {
  dns_.table["svc.test"] = {{"10.0.0.1", 30}, {"fd00::1", 9}};
  auto r = MakeResolver();
  Result got = ResolveNow(*r, "svc.test", DnsResolver::Family::kV6);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(Ips(got), (std::vector<std::string>{"fd00::1"}));
  EXPECT_EQ(got.answers[0].ttl_s, 9u);
}

TEST_F(DnsResolverTest, AnyFamilyAsksForBoth) {
  dns_.table["svc.test"] = {{"10.0.0.1", 30}, {"fd00::1", 9}};
  auto r = MakeResolver();
  Result got = ResolveNow(*r, "svc.test", DnsResolver::Family::kAny);
  ASSERT_TRUE(got.status.ok()) << got.status;
  auto ips = Ips(got);
  std::sort(ips.begin(), ips.end());
  EXPECT_EQ(ips, (std::vector<std::string>{"10.0.0.1", "fd00::1"}));
}

TEST_F(DnsResolverTest, NoAddressOfTheFamilyIsNotFound) {
  dns_.table["svc.test"] = {{"10.0.0.1", 30}};
  auto r = MakeResolver();
  Result got = ResolveNow(*r, "svc.test", DnsResolver::Family::kV6);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kNotFound) << got.status;
  EXPECT_TRUE(got.answers.empty());
}

TEST_F(DnsResolverTest, NxdomainIsNotFound) {
  dns_.mode = FakeDns::Mode::kNxdomain;
  auto r = MakeResolver();
  Result got = ResolveNow(*r, "gone.test", DnsResolver::Family::kV4);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kNotFound) << got.status;
  EXPECT_GE(dns_.queries("gone.test"), 1);
}

TEST_F(DnsResolverTest, ServfailIsUnavailable) {
  dns_.mode = FakeDns::Mode::kServfail;
  auto r = MakeResolver();
  Result got = ResolveNow(*r, "svc.test", DnsResolver::Family::kV4);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kUnavailable) << got.status;
}

TEST_F(DnsResolverTest, ASilentServerTimesOutAndIsAskedAgainMeanwhile) {
  dns_.mode = FakeDns::Mode::kDrop;
  auto r = MakeResolver(/*timeout_ms=*/50, /*tries=*/2);
  Result got = ResolveNow(*r, "svc.test", DnsResolver::Family::kV4);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDeadlineExceeded) << got.status;
  EXPECT_EQ(dns_.queries("svc.test"), 2);  // the retransmission came from the loop's timer
}

TEST_F(DnsResolverTest, IpLiteralsNeedNoQuery) {
  auto r = MakeResolver();
  Result v4 = ResolveNow(*r, "192.0.2.7", DnsResolver::Family::kV4);
  ASSERT_TRUE(v4.status.ok());
  EXPECT_EQ(Ips(v4), (std::vector<std::string>{"192.0.2.7"}));
  Result v6 = ResolveNow(*r, "::1", DnsResolver::Family::kAny);
  ASSERT_TRUE(v6.status.ok());
  EXPECT_EQ(Ips(v6), (std::vector<std::string>{"::1"}));
  Result wrong = ResolveNow(*r, "192.0.2.7", DnsResolver::Family::kV6);
  EXPECT_EQ(wrong.status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(dns_.queries("192.0.2.7"), 0);
  EXPECT_EQ(dns_.queries("::1"), 0);
}

TEST_F(DnsResolverTest, EtcHostsIsConsultedFirst) {
  auto r = MakeResolver();
  Result got = ResolveNow(*r, "localhost", DnsResolver::Family::kAny);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_FALSE(got.answers.empty());
  EXPECT_EQ(dns_.queries("localhost"), 0);
}

TEST_F(DnsResolverTest, CancelledQueryIsNeverCalledBack) {
  dns_.table["svc.test"] = {{"10.0.0.1", 30}};
  auto r = MakeResolver();
  bool called = false;
  DnsResolver::Query* q =
      r->Resolve("svc.test", DnsResolver::Family::kV4,
                 [&](const absl::Status&, std::vector<DnsResolver::Answer>) { called = true; });
  q->Cancel();
  EXPECT_EQ(r->pending(), 0u);
  // The answer still arrives (c-ares cannot take back a sent query); a later query on the same
  // resolver is answered after it, so by then the cancelled one was dropped.
  Result later = ResolveNow(*r, "svc.test", DnsResolver::Family::kV4);
  EXPECT_TRUE(later.status.ok());
  EXPECT_EQ(dns_.queries("svc.test"), 2);
  EXPECT_FALSE(called);
}

TEST_F(DnsResolverTest, CancelledImmediateAnswerIsNeverCalledBack) {
  auto r = MakeResolver();
  bool called = false;
  DnsResolver::Query* q =
      r->Resolve("127.0.0.1", DnsResolver::Family::kV4,
                 [&](const absl::Status&, std::vector<DnsResolver::Answer>) { called = true; });
  q->Cancel();
  Result later = ResolveNow(*r, "127.0.0.2", DnsResolver::Family::kV4);
  EXPECT_TRUE(later.status.ok());
  EXPECT_FALSE(called);
}

TEST_F(DnsResolverTest, DestroyingTheResolverDropsPendingQueries) {
  dns_.mode = FakeDns::Mode::kDrop;
  auto r = MakeResolver();
  bool called = false;
  r->Resolve("svc.test", DnsResolver::Family::kV4,
             [&](const absl::Status&, std::vector<DnsResolver::Answer>) { called = true; });
  EXPECT_TRUE(dispatcher_.RunUntil([&] { return dns_.queries("svc.test") > 0; }, 30000));
  EXPECT_EQ(r->pending(), 1u);
  r.reset();
  dispatcher_.RunUntil([] { return false; }, 20);  // whatever was deferred runs
  EXPECT_FALSE(called);
}

TEST_F(DnsResolverTest, CallbackMayResolveAgain) {
  dns_.table["a.test"] = {{"10.0.0.1", 30}};
  dns_.table["b.test"] = {{"10.0.0.2", 30}};
  auto r = MakeResolver();
  std::optional<Result> second;
  r->Resolve("a.test", DnsResolver::Family::kV4,
             [&](const absl::Status& s, std::vector<DnsResolver::Answer>) {
               ASSERT_TRUE(s.ok());
               r->Resolve("b.test", DnsResolver::Family::kV4,
                          [&](const absl::Status& s2, std::vector<DnsResolver::Answer> a) {
                            second = Result{s2, std::move(a)};
                          });
             });
  ASSERT_TRUE(dispatcher_.RunUntil([&] { return second.has_value(); }, 30000));
  ASSERT_TRUE(second->status.ok());
  EXPECT_EQ(Ips(*second), (std::vector<std::string>{"10.0.0.2"}));
}

}  // namespace
}  // namespace rpx
