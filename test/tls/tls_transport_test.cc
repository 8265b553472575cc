// TlsTransport under real Connections: both ends of a loopback TCP pair run on one dispatcher,
// one as a TLS server and one as a client, with throwaway certificates (test_certs).
#include "source/tls/tls_transport.h"

#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/test_common/tcp_pair.h"
#include "test/test_common/test_certs.h"

namespace rpx {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kWaitMs = 10000;  // only reached when something is wrong

class Recorder : public ConnectionCallbacks {
 public:
  void OnData(Buffer& in) override {
    data.append(in.data(), in.size());
    in.Drain(in.size());
  }
  void OnEvent(ConnectionEvent e) override {
    if (e == ConnectionEvent::kConnected) connected = true;
    if (e == ConnectionEvent::kConnectFailed) connect_failed = true;
    if (e == ConnectionEvent::kRemoteClose || e == ConnectionEvent::kLocalClose) closed = true;
  }
  std::string data;
  bool connected = false, connect_failed = false, closed = false;
};

struct Certs {
  TestCert ca = MakeTestCa();
  TestCert server = MakeTestLeaf(ca, {"server", {"DNS:api.example.com", "URI:spiffe://rpx/api"}});
  TestCert client = MakeTestLeaf(ca, {"client", {"URI:spiffe://rpx/client"}});
};

const Certs& TheCerts() {
  static const Certs* c = new Certs();
  return *c;
}

TlsContextOptions ServerOptions() {
  TlsContextOptions o;
  o.server = true;
  o.certificates.push_back({TheCerts().server.cert_pem, TheCerts().server.key_pem, "", "srv"});
  o.where = "server";
  return o;
}

TlsContextOptions ClientOptions(bool verify = true) {
  TlsContextOptions o;
  o.server = false;
  if (verify) o.validation.trusted_ca = TheCerts().ca.cert_pem;
  o.where = "client";
  return o;
}

std::shared_ptr<const TlsContext> Make(const TlsContextOptions& o) {
  auto c = TlsContext::Create(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

class TlsPairTest : public ::testing::Test {
 protected:
  // Connects a server Connection (context `s`) and a client one (context `c`).
  void Start(std::shared_ptr<const TlsContext> s, std::shared_ptr<const TlsContext> c,
             const std::string& sni = "api.example.com", SSL_SESSION** session_slot = nullptr,
             uint64_t server_handshake_timeout_ms = 0, bool client_tls = true) {
    TcpPair p = MakeTcpPair();
    ASSERT_GE(p.ours, 0);
    fcntl(p.peer, F_SETFL, fcntl(p.peer, F_GETFL) | O_NONBLOCK);
    server = std::make_unique<Connection>(d, p.ours, false, 1 << 20);
    client = std::make_unique<Connection>(d, p.peer, false, 1 << 20);
    server->SetCallbacks(&server_cb);
    client->SetCallbacks(&client_cb);
    auto st = std::make_unique<TlsTransport>(s);
    server_tls = st.get();
    server->SetTransport(std::move(st), server_handshake_timeout_ms);
    if (client_tls) {
      auto ct = std::make_unique<TlsTransport>(c, sni, session_slot);
      client_tls_ = ct.get();
      client->SetTransport(std::move(ct), 0);
    }
  }
  bool Run(const std::function<bool()>& done) { return d.RunUntil(done, kWaitMs); }
  bool Handshaken() {
    return Run([&] {
             return (server_cb.connected && client_cb.connected) || server_cb.closed ||
                    client_cb.closed;
           }) &&
           server_cb.connected && client_cb.connected;
  }
  void TearDown() override {
    server.reset();
    client.reset();
  }

  Dispatcher d{"t"};
  Recorder server_cb, client_cb;
  std::unique_ptr<Connection> server, client;
  TlsTransport* server_tls = nullptr;
  TlsTransport* client_tls_ = nullptr;
};

TEST_F(TlsPairTest, HandshakeThenBytesBothWaysAndLargeTransfers) {
  auto so = ServerOptions();
  so.alpn = {"h2", "http/1.1"};
  auto co = ClientOptions();
  co.alpn = {"http/1.1"};
  Start(Make(so), Make(co));
  // Queued before the handshake is done: sent after it.
  client->Write("GET / HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(Handshaken());
  EXPECT_EQ(server_tls->alpn(), "http/1.1");
  EXPECT_EQ(client_tls_->alpn(), "http/1.1");
  EXPECT_EQ(server_tls->server_name(), "api.example.com");
  EXPECT_EQ(server_tls->version(), "TLSv1.3");
  EXPECT_FALSE(server_tls->session_reused());
  EXPECT_FALSE(server->plaintext());
  ASSERT_TRUE(Run([&] { return server_cb.data.size() >= 18; }));
  EXPECT_EQ(server_cb.data, "GET / HTTP/1.1\r\n\r\n");

  // 4 MiB each way: many records, partial writes, short reads.
  std::string big(4 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>('a' + i % 26);
  server->Write(big);
  client->Write(big);
  ASSERT_TRUE(Run([&] {
    return client_cb.data.size() >= big.size() && server_cb.data.size() >= 18 + big.size();
  }));
  EXPECT_TRUE(client_cb.data == big);
  EXPECT_TRUE(server_cb.data.substr(18) == big);

  // An orderly close: close_notify, then the peer sees the end of the stream.
  server->Close(Connection::CloseType::kFlushWrite, false);
  ASSERT_TRUE(Run([&] { return client_cb.closed; }));
}

TEST_F(TlsPairTest, AlpnWithNothingInCommonGoesOnWithout) {
  auto so = ServerOptions();
  so.alpn = {"h2"};
  auto co = ClientOptions();
  co.alpn = {"http/1.1"};
  Start(Make(so), Make(co));
  ASSERT_TRUE(Handshaken());
  EXPECT_EQ(server_tls->alpn(), "");
}

TEST_F(TlsPairTest, ClientRefusesAServerItCannotVerify) {
  auto other_ca = MakeTestCa("another CA");
  auto co = ClientOptions();
  co.validation.trusted_ca = other_ca.cert_pem;
  Start(Make(ServerOptions()), Make(co));
  ASSERT_TRUE(Run([&] { return client_cb.closed || client_cb.connect_failed; }));
  EXPECT_FALSE(client_cb.connected);
  EXPECT_THAT(client->transport().FailureReason(),
              HasSubstr("certificate verify failed: unable to get local issuer certificate"));
}

TEST_F(TlsPairTest, ClientChecksSubjectAltNames) {
  auto co = ClientOptions();
  co.validation.san_matchers.push_back(
      {SanMatcher::Type::kDns, [](std::string_view v) { return v == "other.example.com"; }});
  Start(Make(ServerOptions()), Make(co));
  ASSERT_TRUE(Run([&] { return client_cb.closed; }));
  EXPECT_THAT(client->transport().FailureReason(),
              HasSubstr("no subject alternative name matched"));

  co.validation.san_matchers[0].matches = [](std::string_view v) { return v == "api.example.com"; };
  server_cb = Recorder();
  client_cb = Recorder();
  Start(Make(ServerOptions()), Make(co));
  EXPECT_TRUE(Handshaken());
}

TEST_F(TlsPairTest, ExpiredCertificateRefusedUnlessAllowed) {
  auto expired = MakeTestLeaf(TheCerts().ca,
                              {"old", {"DNS:api.example.com"}, TestKeyType::kEcdsaP256, -30, -1});
  auto so = ServerOptions();
  so.certificates[0] = {expired.cert_pem, expired.key_pem, "", "srv"};
  Start(Make(so), Make(ClientOptions()));
  ASSERT_TRUE(Run([&] { return client_cb.closed; }));
  EXPECT_THAT(client->transport().FailureReason(), HasSubstr("certificate has expired"));

  auto co = ClientOptions();
  co.validation.allow_expired = true;
  server_cb = Recorder();
  client_cb = Recorder();
  Start(Make(so), Make(co));
  EXPECT_TRUE(Handshaken());
}

TEST_F(TlsPairTest, MutualTls) {
  auto so = ServerOptions();
  so.validation.trusted_ca = TheCerts().ca.cert_pem;
  so.require_client_certificate = true;
  auto server_ctx = Make(so);
  // No client certificate: refused by the server.
  Start(server_ctx, Make(ClientOptions()));
  ASSERT_TRUE(Run([&] { return server_cb.closed; }));
  EXPECT_FALSE(server_cb.connected);
  EXPECT_THAT(server->transport().FailureReason(), HasSubstr("certificate"));

  // A certificate from another CA: refused.
  auto other_ca = MakeTestCa("another CA");
  auto stranger = MakeTestLeaf(other_ca, {"stranger", {"URI:spiffe://rpx/client"}});
  auto co = ClientOptions();
  co.certificates.push_back({stranger.cert_pem, stranger.key_pem, "", "cli"});
  server_cb = Recorder();
  client_cb = Recorder();
  Start(server_ctx, Make(co));
  ASSERT_TRUE(Run([&] { return server_cb.closed; }));
  EXPECT_THAT(server->transport().FailureReason(), HasSubstr("certificate verify failed"));

  // The right one: served, and its certificate is there.
  co.certificates[0] = {TheCerts().client.cert_pem, TheCerts().client.key_pem, "", "cli"};
  server_cb = Recorder();
  client_cb = Recorder();
  Start(server_ctx, Make(co));
  ASSERT_TRUE(Handshaken());
  client->Write("ping");  // TLS 1.3: the server verifies the client's certificate after Finished
  ASSERT_TRUE(Run([&] { return server_cb.data == "ping"; }));
  EXPECT_TRUE(server_tls->has_peer_certificate());
}

// Resumes with the session of a first connection; `expect` says whether it was reused.
class ResumptionTest : public TlsPairTest {
 protected:
  bool Resumes(std::shared_ptr<const TlsContext> first_server,
               std::shared_ptr<const TlsContext> second_server, int max_version) {
    auto co = ClientOptions();
    co.max_version = max_version;
    auto client_ctx = Make(co);
    SSL_SESSION* slot = nullptr;
    Start(first_server, client_ctx, "api.example.com", &slot);
    EXPECT_TRUE(Handshaken());
    // TLS 1.3 tickets come after the handshake: exchange data so the client reads them.
    client->Write("a");
    server->Write("b");
    EXPECT_TRUE(Run([&] { return server_cb.data == "a" && client_cb.data == "b"; }));
    // The slot holds the session the server issued, if any (for TLS 1.3, the ticket that came
    // after the handshake): the second connection offers it.
    server.reset();
    client.reset();
    server_cb = Recorder();
    client_cb = Recorder();
    Start(second_server, client_ctx, "api.example.com", &slot);
    EXPECT_TRUE(Handshaken());
    bool reused = server_tls->session_reused() && client_tls_->session_reused();
    server.reset();
    client.reset();
    if (slot) SSL_SESSION_free(slot);
    return reused;
  }
};

std::string TicketKey(char fill) { return std::string(80, fill); }

TEST_F(ResumptionTest, BySessionTicketTls13And12) {
  auto server_ctx = Make(ServerOptions());
  EXPECT_TRUE(Resumes(server_ctx, server_ctx, TLS1_3_VERSION));
  EXPECT_TRUE(Resumes(server_ctx, server_ctx, TLS1_2_VERSION));
}

TEST_F(ResumptionTest, BySessionIdWithoutTickets) {
  auto so = ServerOptions();
  so.disable_tickets = true;
  auto server_ctx = Make(so);
  EXPECT_TRUE(Resumes(server_ctx, server_ctx, TLS1_2_VERSION));
  // Neither tickets nor a session cache: a full handshake every time.
  so.disable_session_cache = true;
  auto none = Make(so);
  EXPECT_FALSE(Resumes(none, none, TLS1_2_VERSION));
}

TEST_F(ResumptionTest, TicketKeyRotationFirstEncryptsAllDecrypt) {
  auto so = ServerOptions();
  so.ticket_keys = {TicketKey('1')};
  auto old_ctx = Make(so);
  // A new context (a config update) with a new first key and the old one second: old tickets
  // still resume.
  so.ticket_keys = {TicketKey('2'), TicketKey('1')};
  auto rotated = Make(so);
  EXPECT_TRUE(Resumes(old_ctx, rotated, TLS1_3_VERSION));
  EXPECT_TRUE(Resumes(old_ctx, rotated, TLS1_2_VERSION));
  // Once the old key is gone, they do not.
  so.ticket_keys = {TicketKey('2')};
  so.disable_session_cache = true;  // and no session-id fallback in the new context
  EXPECT_FALSE(Resumes(old_ctx, Make(so), TLS1_3_VERSION));
}

TEST_F(TlsPairTest, AHandshakeThatNeverCompletesIsClosedByItsTimeout) {
  // The client side speaks no TLS at all.
  Start(Make(ServerOptions()), nullptr, "", nullptr, /*server_handshake_timeout_ms=*/100,
        /*client_tls=*/false);
  ASSERT_TRUE(Run([&] { return server_cb.closed; }));
  EXPECT_TRUE(server->handshake_timed_out());
  EXPECT_FALSE(server_cb.connected);
}

TEST_F(TlsPairTest, CleartextToATlsServerFailsTheHandshake) {
  Start(Make(ServerOptions()), nullptr, "", nullptr, 0, /*client_tls=*/false);
  client->Write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(Run([&] { return server_cb.closed; }));
  EXPECT_FALSE(server_cb.connected);
  EXPECT_THAT(server->transport().FailureReason(), HasSubstr("handshake failed"));
}

TEST_F(TlsPairTest, OldProtocolVersionsAreRefused) {
  auto co = ClientOptions();
  co.min_version = TLS1_VERSION;
  co.max_version = TLS1_1_VERSION;
  Start(Make(ServerOptions()), Make(co));
  ASSERT_TRUE(Run([&] { return server_cb.closed; }));
  EXPECT_FALSE(server_cb.connected);
}

}  // namespace
}  // namespace rpx
