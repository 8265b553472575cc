// TlsContext::Create: what it accepts, and the field it names for what it refuses.
#include "source/tls/tls_context.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/test_common/test_certs.h"

namespace rpx {
namespace {

using ::testing::HasSubstr;

const TestCert& Ca() {
  static const TestCert* c = new TestCert(MakeTestCa());
  return *c;
}

TlsContextOptions Server(TestKeyType key = TestKeyType::kEcdsaP256) {
  TestCert leaf = MakeTestLeaf(Ca(), {"s", {"DNS:a.example.com"}, key});
  TlsContextOptions o;
  o.certificates.push_back({leaf.cert_pem, leaf.key_pem, "", "ctx.tls_certificates[0]"});
  o.where = "ctx";
  return o;
}

std::string ErrorOf(const TlsContextOptions& o) {
  auto c = TlsContext::Create(o);
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(TlsContextTest, EcdsaAndRsaTogether) {
  TlsContextOptions o = Server(TestKeyType::kEcdsaP256);
  o.certificates.push_back(Server(TestKeyType::kRsa2048).certificates[0]);
  EXPECT_TRUE(TlsContext::Create(o).ok());
  // Two of one key type cannot share a context.
  o.certificates.push_back(Server(TestKeyType::kEcdsaP256).certificates[0]);
  EXPECT_THAT(ErrorOf(o), HasSubstr("a second certificate with a ECDSA key"));
}

TEST(TlsContextTest, CertificateAndKeyProblemsNameTheField) {
  TlsContextOptions o = Server();
  o.certificates[0].chain = "not pem";
  EXPECT_THAT(ErrorOf(o), HasSubstr("ctx.tls_certificates[0].certificate_chain: no PEM "
                                    "certificate could be read"));
  o = Server();
  o.certificates[0].key = Server().certificates[0].key;  // another key
  EXPECT_THAT(ErrorOf(o),
              HasSubstr("ctx.tls_certificates[0].private_key: does not match the certificate"));
  o = Server();
  o.certificates[0].key = "garbage";
  EXPECT_THAT(ErrorOf(o), HasSubstr("private_key: no PEM private key could be read"));
  o = Server();
  o.certificates.clear();
  EXPECT_THAT(ErrorOf(o), HasSubstr("a server needs at least one certificate"));
}

TEST(TlsContextTest, TlsParameters) {
  TlsContextOptions o = Server();
  o.cipher_suites = {"[ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305]",
                     "ECDHE-RSA-AES256-GCM-SHA384", "TLS_AES_128_GCM_SHA256"};
  o.ecdh_curves = {"P-256", "X25519"};
  EXPECT_TRUE(TlsContext::Create(o).ok());
  o.cipher_suites = {"ECDHE-ECDSA-AES128-GCM-SHA256", "NO-SUCH-CIPHER"};
  EXPECT_THAT(ErrorOf(o), HasSubstr("ctx.tls_params.cipher_suites: unknown cipher suite "
                                    "'NO-SUCH-CIPHER'"));
  o = Server();
  o.ecdh_curves = {"P-999"};
  EXPECT_THAT(ErrorOf(o), HasSubstr("ctx.tls_params.ecdh_curves: unknown curve 'P-999'"));
  o = Server();
  o.min_version = TLS1_3_VERSION;
  o.max_version = TLS1_2_VERSION;
  EXPECT_THAT(ErrorOf(o), HasSubstr("tls_minimum_protocol_version is above"));
}

TEST(TlsContextTest, ValidationAndTickets) {
  TlsContextOptions o = Server();
  o.require_client_certificate = true;
  EXPECT_THAT(ErrorOf(o), HasSubstr("require_client_certificate needs a trusted_ca"));
  o.validation.trusted_ca = "nonsense";
  EXPECT_THAT(ErrorOf(o), HasSubstr("validation_context.trusted_ca: no PEM certificate"));
  o.validation.trusted_ca = Ca().cert_pem;
  EXPECT_TRUE(TlsContext::Create(o).ok());
  o.ticket_keys = {std::string(80, 'k'), std::string(79, 'k')};
  EXPECT_THAT(ErrorOf(o), HasSubstr("ctx.session_ticket_keys.keys[1]: a session ticket key must "
                                    "be 80 bytes, not 79"));
  o = Server();
  o.alpn = {"h2", ""};
  EXPECT_THAT(ErrorOf(o), HasSubstr("alpn_protocols: '' is not a valid protocol name"));
}

}  // namespace
}  // namespace rpx
