#include "source/tls/tls_context.h"

#include <arpa/inet.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "source/tls/tls_transport.h"

namespace rpx {
namespace {

// Envoy's default TLS 1.2 suites (BoringSSL's equal-preference groups flattened), forward secret
// AEAD only: no CBC, RC4, 3DES, NULL or EXPORT suite can be negotiated.
constexpr char kDefaultCiphers[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-RSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384";
constexpr char kDefaultCurves[] = "X25519:P-256";
constexpr size_t kTicketKeySize = 80;  // Envoy's format: name(16) | hmac secret(32) | aes key(32)

int ContextIndex() {
  static int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}
// Per connection: why verification failed (a std::string owned by the SSL, freed with it).
int VerifyFailureIndex() {
  static int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr,
                                          [](void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
                                            delete static_cast<std::string*>(ptr);
                                          });
  return index;
}

void SetVerifyFailure(SSL* ssl, std::string why) {
  auto* old = static_cast<std::string*>(SSL_get_ex_data(ssl, VerifyFailureIndex()));
  if (old) {
    *old = std::move(why);
  } else {
    SSL_set_ex_data(ssl, VerifyFailureIndex(), new std::string(std::move(why)));
  }
}

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

BioPtr MemBio(const std::string& s) {
  return BioPtr(BIO_new_mem_buf(s.data(), static_cast<int>(s.size())));
}

std::string Joined(const std::vector<std::string>& v) { return absl::StrJoin(v, "; "); }

absl::Status Error(const std::string& where, const std::string& what) {
  std::vector<std::string> ssl = TlsErrors();
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": ", what, ssl.empty() ? "" : absl::StrCat(" (", Joined(ssl), ")")));
}

int PasswordCallback(char* buf, int size, int, void* u) {
  const std::string* pw = static_cast<const std::string*>(u);
  if (!pw || pw->empty() || static_cast<int>(pw->size()) > size) return 0;
  memcpy(buf, pw->data(), pw->size());
  return static_cast<int>(pw->size());
}

std::string KeyTypeName(int type) {
  switch (type) {
    case EVP_PKEY_RSA:
      return "RSA";
    case EVP_PKEY_EC:
      return "ECDSA";
    case EVP_PKEY_ED25519:
      return "Ed25519";
    default:
      return OBJ_nid2sn(type);
  }
}

// Loads one certificate chain and key into `ctx` (one per key type: OpenSSL picks the one the
// client's signature algorithms allow, e.g. ECDSA or RSA).
absl::Status LoadCertificate(SSL_CTX* ctx, const TlsCertificatePem& c, std::set<int>* key_types) {
  auto chain_bio = MemBio(c.chain);
  X509* leaf = PEM_read_bio_X509_AUX(chain_bio.get(), nullptr, nullptr, nullptr);
  if (!leaf) return Error(c.where + ".certificate_chain", "no PEM certificate could be read");
  STACK_OF(X509)* chain = sk_X509_new_null();
  while (X509* x = PEM_read_bio_X509(chain_bio.get(), nullptr, nullptr, nullptr)) {
    sk_X509_push(chain, x);
  }
  ERR_clear_error();  // the loop ends on "no start line"
  auto key_bio = MemBio(c.key);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, PasswordCallback,
                                          const_cast<std::string*>(&c.password));
  auto free_all = [&] {
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
  };
  if (!key) {
    free_all();
    return Error(c.where + ".private_key",
                 c.password.empty() ? "no PEM private key could be read"
                                    : "no PEM private key could be read with the password");
  }
  if (X509_check_private_key(leaf, key) != 1) {
    free_all();
    return Error(c.where + ".private_key", "does not match the certificate");
  }
  int type = EVP_PKEY_get_base_id(key);
  if (!key_types->insert(type).second) {
    free_all();
    return Error(c.where,
                 absl::StrCat("a second certificate with a ", KeyTypeName(type),
                              " key: a context holds one per key type (use filter chains with "
                              "server_names to serve certificates for different names)"));
  }
  if (SSL_CTX_use_cert_and_key(ctx, leaf, key, chain, 1) != 1) {
    free_all();
    return Error(c.where, "the certificate cannot be used (too weak for the security level?)");
  }
  free_all();
  return absl::OkStatus();
}

// Envoy's cipher names may group equal-preference suites as "[A|B]"; OpenSSL has no such
// groups, so they are taken in order.
std::vector<std::string> FlattenCiphers(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& c : in) {
    std::string s = c;
    if (!s.empty() && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
    for (auto part : absl::StrSplit(s, '|', absl::SkipEmpty())) out.emplace_back(part);
  }
  return out;
}

absl::Status SetCiphers(SSL_CTX* ctx, const TlsContextOptions& o) {
  std::vector<std::string> tls12, tls13;
  for (const auto& name : FlattenCiphers(o.cipher_suites)) {
    (absl::StartsWith(name, "TLS_") ? tls13 : tls12).push_back(name);
  }
  std::string where = o.where + ".tls_params.cipher_suites";
  // Each name alone, so that a typo is named rather than silently dropped from the list.
  SSL_CTX* scratch = SSL_CTX_new(TLS_method());
  for (const auto& name : tls12) {
    if (SSL_CTX_set_cipher_list(scratch, name.c_str()) != 1) {
      SSL_CTX_free(scratch);
      return Error(where, absl::StrCat("unknown cipher suite '", name, "'"));
    }
  }
  for (const auto& name : tls13) {
    if (SSL_CTX_set_ciphersuites(scratch, name.c_str()) != 1) {
      SSL_CTX_free(scratch);
      return Error(where, absl::StrCat("unknown TLS 1.3 cipher suite '", name, "'"));
    }
  }
  SSL_CTX_free(scratch);
  std::string list = tls12.empty() && tls13.empty() ? kDefaultCiphers : absl::StrJoin(tls12, ":");
  if (!list.empty() && SSL_CTX_set_cipher_list(ctx, list.c_str()) != 1) {
    return Error(where, "no usable cipher suite");
  }
  if (list.empty() && o.max_version < TLS1_3_VERSION) {
    return Error(where, "only TLS 1.3 suites are listed, but TLS 1.3 is not allowed");
  }
  if (list.empty()) SSL_CTX_set_cipher_list(ctx, "");  // TLS 1.3 only
  if (!tls13.empty() && SSL_CTX_set_ciphersuites(ctx, absl::StrJoin(tls13, ":").c_str()) != 1) {
    return Error(where, "no usable TLS 1.3 cipher suite");
  }
  return absl::OkStatus();
}

absl::Status SetCurves(SSL_CTX* ctx, const TlsContextOptions& o) {
  std::string where = o.where + ".tls_params.ecdh_curves";
  for (const auto& c : o.ecdh_curves) {
    SSL_CTX* scratch = SSL_CTX_new(TLS_method());
    int ok = SSL_CTX_set1_groups_list(scratch, c.c_str());
    SSL_CTX_free(scratch);
    if (ok != 1) return Error(where, absl::StrCat("unknown curve '", c, "'"));
  }
  std::string list = o.ecdh_curves.empty() ? kDefaultCurves : absl::StrJoin(o.ecdh_curves, ":");
  if (SSL_CTX_set1_groups_list(ctx, list.c_str()) != 1) return Error(where, "no usable curve");
  return absl::OkStatus();
}

absl::Status SetTrust(SSL_CTX* ctx, const TlsValidationOptions& v, const std::string& where) {
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  auto bio = MemBio(v.trusted_ca);
  int n = 0;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store, x);
    X509_free(x);
    ++n;
  }
  ERR_clear_error();
  if (n == 0) return Error(where + ".trusted_ca", "no PEM certificate could be read");
  if (!v.crl.empty()) {
    auto crl_bio = MemBio(v.crl);
    int crls = 0;
    while (X509_CRL* crl = PEM_read_bio_X509_CRL(crl_bio.get(), nullptr, nullptr, nullptr)) {
      X509_STORE_add_crl(store, crl);
      X509_CRL_free(crl);
      ++crls;
    }
    ERR_clear_error();
    if (crls == 0) return Error(where + ".crl", "no PEM CRL could be read");
    X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
  }
  return absl::OkStatus();
}

int VerifyCallback(int ok, X509_STORE_CTX* store) {
  SSL* ssl =
      static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  const TlsContext* ctx = TlsContext::FromSsl(ssl);
  if (!ctx) return ok;
  const TlsValidationOptions& v = ctx->validation();
  if (!ok) {
    int err = X509_STORE_CTX_get_error(store);
    if (v.allow_expired &&
        (err == X509_V_ERR_CERT_HAS_EXPIRED || err == X509_V_ERR_CRL_HAS_EXPIRED)) {
      X509_STORE_CTX_set_error(store, X509_V_OK);  // still counts as validated
      return 1;
    }
    if (v.accept_untrusted) {
      // Let through, but the error stays the verify result: the certificate is presented, not
      // validated (RouteMatch.tls_context.validated: false).
      return 1;
    }
    SetVerifyFailure(
        ssl, absl::StrCat("certificate verify failed: ", X509_verify_cert_error_string(err)));
    return 0;
  }
  if (X509_STORE_CTX_get_error_depth(store) == 0 && !v.san_matchers.empty() &&
      !ctx->SanMatches(X509_STORE_CTX_get_current_cert(store))) {
    SetVerifyFailure(ssl, "certificate verify failed: no subject alternative name matched");
    X509_STORE_CTX_set_error(store, X509_V_ERR_HOSTNAME_MISMATCH);
    return 0;
  }
  return 1;
}

std::string IpToString(const ASN1_OCTET_STRING* ip) {
  char buf[INET6_ADDRSTRLEN] = {};
  int len = ASN1_STRING_length(ip);
  const unsigned char* d = ASN1_STRING_get0_data(ip);
  if (len == 4) {
    inet_ntop(AF_INET, d, buf, sizeof(buf));
  } else if (len == 16) {
    inet_ntop(AF_INET6, d, buf, sizeof(buf));
  }
  return buf;
}

}  // namespace

std::vector<std::string> TlsErrors() {
  std::vector<std::string> out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    out.emplace_back(buf);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const TlsContext>> TlsContext::Create(const TlsContextOptions& o) {
  ERR_clear_error();
  std::shared_ptr<TlsContext> c(new TlsContext());
  c->server_ = o.server;
  c->validation_ = o.validation;
  c->ctx_ = SSL_CTX_new(o.server ? TLS_server_method() : TLS_client_method());
  if (!c->ctx_) return Error(o.where, "cannot create an SSL context");
  SSL_CTX* ctx = c->ctx_;
  SSL_CTX_set_ex_data(ctx, ContextIndex(), c.get());
  if (o.min_version > o.max_version) {
    return Error(o.where + ".tls_params",
                 "tls_minimum_protocol_version is above tls_maximum_protocol_version");
  }
  SSL_CTX_set_min_proto_version(ctx, o.min_version);
  SSL_CTX_set_max_proto_version(ctx, o.max_version);
  // No renegotiation, no compression (CRIME), the server's cipher order, and a peer that closes
  // without close_notify is an end of stream (HTTP's framing tells a truncated message).
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_IGNORE_UNEXPECTED_EOF);
  // Partial writes from a buffer that may move between retries (rpx's write buffer), and read
  // and write buffers given back while a connection is idle.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  // Records are read as many as the socket holds per recv(2), not a header and a body at a
  // time: half the reads (the connection reads to EAGAIN, and bytes left in OpenSSL's buffer
  // are read on before it waits again: HasPendingReadData).
  SSL_CTX_set_read_ahead(ctx, 1);
  if (auto st = SetCiphers(ctx, o); !st.ok()) return st;
  if (auto st = SetCurves(ctx, o); !st.ok()) return st;

  if (o.server && o.certificates.empty()) {
    return Error(o.where + ".common_tls_context.tls_certificates",
                 "a server needs at least one certificate");
  }
  std::set<int> key_types;
  for (const auto& cert : o.certificates) {
    if (auto st = LoadCertificate(ctx, cert, &key_types); !st.ok()) return st;
  }

  for (const auto& p : o.alpn) {
    if (p.empty() || p.size() > 255) {
      return Error(o.where + ".common_tls_context.alpn_protocols",
                   absl::StrCat("'", p, "' is not a valid protocol name"));
    }
    c->alpn_wire_.push_back(static_cast<char>(p.size()));
    c->alpn_wire_ += p;
  }
  if (!c->alpn_wire_.empty()) {
    if (o.server) {
      SSL_CTX_set_alpn_select_cb(
          ctx,
          [](SSL* ssl, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
             unsigned int inlen, void*) {
            const TlsContext* t = FromSsl(ssl);
            return t ? t->SelectAlpn(out, outlen, in, inlen) : SSL_TLSEXT_ERR_NOACK;
          },
          nullptr);
    } else {
      SSL_CTX_set_alpn_protos(ctx, reinterpret_cast<const unsigned char*>(c->alpn_wire_.data()),
                              c->alpn_wire_.size());
    }
  }

  std::string vwhere = o.where + ".common_tls_context.validation_context";
  if (!o.validation.trusted_ca.empty()) {
    if (auto st = SetTrust(ctx, o.validation, vwhere); !st.ok()) return st;
    int mode = SSL_VERIFY_PEER;
    if (o.server && o.require_client_certificate) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx, mode, VerifyCallback);
    SSL_CTX_set_verify_depth(ctx, static_cast<int>(o.validation.max_verify_depth));
  } else if (o.require_client_certificate) {
    return Error(vwhere + ".trusted_ca",
                 "require_client_certificate needs a trusted_ca to verify the certificate with");
  } else if (!o.validation.san_matchers.empty()) {
    return Error(vwhere + ".match_typed_subject_alt_names",
                 "subject alternative names are checked only with a trusted_ca");
  }

  if (o.server) {
    for (size_t i = 0; i < o.ticket_keys.size(); ++i) {
      if (o.ticket_keys[i].size() != kTicketKeySize) {
        return Error(absl::StrCat(o.where, ".session_ticket_keys.keys[", i, "]"),
                     absl::StrCat("a session ticket key must be ", kTicketKeySize, " bytes, not ",
                                  o.ticket_keys[i].size()));
      }
    }
    c->ticket_keys_ = o.ticket_keys;
    if (o.disable_tickets) {
      SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    } else if (!c->ticket_keys_.empty()) {
      SSL_CTX_set_tlsext_ticket_key_evp_cb(
          ctx, [](SSL* ssl, unsigned char* name, unsigned char* iv, EVP_CIPHER_CTX* cctx,
                  EVP_MAC_CTX* hctx, int enc) {
            const TlsContext* t = FromSsl(ssl);
            return t ? t->TicketKey(ssl, name, iv, cctx, hctx, enc) : -1;
          });
    }
    if (o.require_sni) {
      SSL_CTX_set_client_hello_cb(
          ctx,
          [](SSL* ssl, int* alert, void*) {
            const unsigned char* ext = nullptr;
            size_t len = 0;
            if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &ext, &len) == 1) {
              return SSL_CLIENT_HELLO_SUCCESS;
            }
            *alert = SSL_AD_UNRECOGNIZED_NAME;
            return SSL_CLIENT_HELLO_ERROR;
          },
          nullptr);
    }
    // One TLS 1.3 ticket per handshake (OpenSSL sends two by default): one is enough to resume.
    SSL_CTX_set_num_tickets(ctx, 1);
    SSL_CTX_set_timeout(ctx, o.session_timeout_s);
    SSL_CTX_set_session_cache_mode(
        ctx, o.disable_session_cache ? SSL_SESS_CACHE_OFF : SSL_SESS_CACHE_SERVER);
    // Sessions resume only in a context with the same certificates and settings: the id is a
    // hash of what was configured.
    std::string material;
    for (const auto& cert : o.certificates) material += cert.chain;
    material += o.validation.trusted_ca;
    material += c->alpn_wire_;
    unsigned char id[EVP_MAX_MD_SIZE];
    unsigned int id_len = 0;
    EVP_Digest(material.data(), material.size(), id, &id_len, EVP_sha256(), nullptr);
    SSL_CTX_set_session_id_context(ctx, id, std::min<unsigned int>(id_len, SSL_MAX_SID_CTX_LENGTH));
  } else {
    // Client sessions are kept by the connection pool, per host: each new one (TLS 1.3 tickets
    // arrive after the handshake) goes to the connection's session slot.
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
    SSL_CTX_sess_set_new_cb(ctx, &TlsTransport::OnNewSession);
  }
  ERR_clear_error();
  return std::shared_ptr<const TlsContext>(std::move(c));
}

TlsContext::~TlsContext() {
  if (ctx_) SSL_CTX_free(ctx_);
}

const TlsContext* TlsContext::FromSsl(const SSL* ssl) {
  return static_cast<const TlsContext*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ContextIndex()));
}

std::string TlsContext::VerifyFailure(const SSL* ssl) {
  auto* why = static_cast<std::string*>(SSL_get_ex_data(ssl, VerifyFailureIndex()));
  return why ? *why : std::string();
}

int TlsContext::SelectAlpn(const unsigned char** out, unsigned char* outlen,
                           const unsigned char* in, unsigned int inlen) const {
  // The server's order decides (as Envoy): the first of ours the client offers.
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen,
                            reinterpret_cast<const unsigned char*>(alpn_wire_.data()),
                            alpn_wire_.size(), in, inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;  // no protocol in common: go on without ALPN
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

int TlsContext::TicketKey(SSL* ssl, unsigned char* key_name, unsigned char* iv,
                          EVP_CIPHER_CTX* cctx, EVP_MAC_CTX* hctx, int enc) const {
  const std::string* key = nullptr;
  bool first = true;
  if (enc) {
    key = &ticket_keys_.front();  // the first key encrypts
    memcpy(key_name, key->data(), 16);
    if (RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1) return -1;
  } else {
    for (const auto& k : ticket_keys_) {  // every key decrypts
      if (memcmp(key_name, k.data(), 16) == 0) {
        key = &k;
        break;
      }
      first = false;
    }
    if (!key) return 0;  // unknown key: a full handshake
  }
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, const_cast<char*>(key->data() + 16),
                                        32),
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>("SHA256"), 0),
      OSSL_PARAM_construct_end()};
  if (EVP_MAC_CTX_set_params(hctx, params) != 1) return -1;
  const auto* aes = reinterpret_cast<const unsigned char*>(key->data() + 48);
  int ok = enc ? EVP_EncryptInit_ex(cctx, EVP_aes_256_cbc(), nullptr, aes, iv)
               : EVP_DecryptInit_ex(cctx, EVP_aes_256_cbc(), nullptr, aes, iv);
  if (ok != 1) return -1;
  // A ticket under an older key is accepted and renewed under the first.
  return enc || first ? 1 : 2;
}

bool TlsContext::SanMatches(X509* cert) const {
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (!names) return false;
  bool matched = false;
  for (int i = 0; i < sk_GENERAL_NAME_num(names) && !matched; ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    SanMatcher::Type type;
    std::string value;
    switch (n->type) {
      case GEN_DNS:
        type = SanMatcher::Type::kDns;
        value.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                     ASN1_STRING_length(n->d.dNSName));
        break;
      case GEN_URI:
        type = SanMatcher::Type::kUri;
        value.assign(
            reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.uniformResourceIdentifier)),
            ASN1_STRING_length(n->d.uniformResourceIdentifier));
        break;
      case GEN_EMAIL:
        type = SanMatcher::Type::kEmail;
        value.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.rfc822Name)),
                     ASN1_STRING_length(n->d.rfc822Name));
        break;
      case GEN_IPADD:
        type = SanMatcher::Type::kIpAddress;
        value = IpToString(n->d.iPAddress);
        break;
      default:
        continue;
    }
    for (const auto& m : validation_.san_matchers) {
      if (m.type == type && m.matches(value)) {
        matched = true;
        break;
      }
    }
  }
  GENERAL_NAMES_free(names);
  return matched;
}

}  // namespace rpx
