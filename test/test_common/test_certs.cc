#include "test/test_common/test_certs.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <cstdlib>
#include <string>

namespace rpx {
namespace {

[[noreturn]] void Die(const char* what) {
  fprintf(stderr, "test_certs: %s failed\n", what);
  abort();
}

EVP_PKEY* NewKey(TestKeyType type) {
  EVP_PKEY* k = type == TestKeyType::kRsa2048
                    ? EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", static_cast<size_t>(2048))
                    : EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  if (!k) Die("key generation");
  return k;
}

std::string KeyPem(EVP_PKEY* k) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, k, nullptr, nullptr, 0, nullptr, nullptr);
  char* p = nullptr;
  long n = BIO_get_mem_data(b, &p);
  std::string s(p, n);
  BIO_free(b);
  return s;
}

std::string CertPem(X509* x) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, x);
  char* p = nullptr;
  long n = BIO_get_mem_data(b, &p);
  std::string s(p, n);
  BIO_free(b);
  return s;
}

EVP_PKEY* ReadKey(const std::string& pem) {
  BIO* b = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* k = PEM_read_bio_PrivateKey(b, nullptr, nullptr, nullptr);
  BIO_free(b);
  if (!k) Die("reading the CA key");
  return k;
}

X509* ReadCert(const std::string& pem) {
  BIO* b = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* x = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
  BIO_free(b);
  if (!x) Die("reading the CA certificate");
  return x;
}

void AddExt(X509* x, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, x, nullptr, nullptr, 0);
  X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!e) Die("an X.509 extension");
  X509_add_ext(x, e, -1);
  X509_EXTENSION_free(e);
}

X509* NewCert(EVP_PKEY* key, const std::string& cn, long from_days, long to_days) {
  X509* x = X509_new();
  X509_set_version(x, 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof(serial));
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(x), from_days * 86400);
  X509_gmtime_adj(X509_getm_notAfter(x), to_days * 86400);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return x;
}

}  // namespace

TestCert MakeTestCa(const std::string& common_name, TestKeyType type) {
  EVP_PKEY* key = NewKey(type);
  X509* x = NewCert(key, common_name, -1, 3650);
  X509_set_issuer_name(x, X509_get_subject_name(x));
  AddExt(x, x, NID_basic_constraints, "critical,CA:TRUE");
  AddExt(x, x, NID_key_usage, "critical,keyCertSign,cRLSign");
  AddExt(x, x, NID_subject_key_identifier, "hash");
  if (!X509_sign(x, key, EVP_sha256())) Die("signing the CA");
  TestCert out{CertPem(x), KeyPem(key)};
  X509_free(x);
  EVP_PKEY_free(key);
  return out;
}

TestCert MakeTestLeaf(const TestCert& ca, const LeafOptions& o) {
  EVP_PKEY* ca_key = ReadKey(ca.key_pem);
  X509* ca_cert = ReadCert(ca.cert_pem);
  EVP_PKEY* key = NewKey(o.key);
  X509* x = NewCert(key, o.common_name, o.not_before_days, o.not_after_days);
  X509_set_issuer_name(x, X509_get_subject_name(ca_cert));
  AddExt(x, ca_cert, NID_basic_constraints, "CA:FALSE");
  AddExt(x, ca_cert, NID_ext_key_usage, "serverAuth,clientAuth");
  AddExt(x, ca_cert, NID_authority_key_identifier, "keyid");
  if (!o.sans.empty()) {
    std::string list;
    for (const auto& s : o.sans) list += (list.empty() ? "" : ",") + s;
    AddExt(x, ca_cert, NID_subject_alt_name, list);
  }
  if (!X509_sign(x, ca_key, EVP_sha256())) Die("signing a leaf");
  TestCert out{CertPem(x), KeyPem(key)};
  X509_free(x);
  X509_free(ca_cert);
  EVP_PKEY_free(key);
  EVP_PKEY_free(ca_key);
  return out;
}

}  // namespace rpx
