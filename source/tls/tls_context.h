// TlsContext: one immutable OpenSSL 3 SSL_CTX built from plain options (config/ turns Envoy's
// DownstreamTlsContext / UpstreamTlsContext into them), for the server side of a listener's filter
// chain or the client side of a cluster. The only place rpx calls OpenSSL's context API.
//
// Threads: built on the main thread, then shared read-only by every worker (shared_ptr); workers
// create their per-connection SSL objects from it (TlsTransport). OpenSSL locks its session
// cache inside the SSL_CTX; nothing else here is written after Create.
//
// Why OpenSSL and not BoringSSL (which Envoy uses): Debian's gRPC links OpenSSL 3, and the two
// cannot live in one process (docs/architecture.md, "TLS").
#pragma once

#include <openssl/ssl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace rpx {

// One certificate and its key, as PEM text.
struct TlsCertificatePem {
  std::string chain;  // leaf first, then intermediates
  std::string key;
  std::string password;  // for an encrypted key; empty: none
  std::string where;     // field path, for messages
};

// A subject alternative name the peer's certificate must carry (any one of the list).
struct SanMatcher {
  enum class Type { kDns, kUri, kEmail, kIpAddress };
  Type type;
  std::function<bool(std::string_view)> matches;
};

struct TlsValidationOptions {
  std::string trusted_ca;                // PEM bundle; empty: the peer is not verified
  std::string crl;                       // PEM; empty: none
  std::vector<SanMatcher> san_matchers;  // empty: any SAN
  bool allow_expired = false;
  bool accept_untrusted = false;  // trust_chain_verification: ACCEPT_UNTRUSTED
  uint32_t max_verify_depth = 100;
};

struct TlsContextOptions {
  bool server = true;
  std::vector<TlsCertificatePem> certificates;  // server: at least one; client: 0 or 1
  int min_version = TLS1_2_VERSION;             // TLS1_x_VERSION
  int max_version = TLS1_3_VERSION;
  // TLS 1.2 and older cipher names (OpenSSL's, e.g. ECDHE-RSA-AES128-GCM-SHA256; Envoy's
  // "[A|B]" equal-preference groups are taken as A then B). Empty: a modern default.
  std::vector<std::string> cipher_suites;
  std::vector<std::string> ecdh_curves;  // empty: X25519, P-256
  std::vector<std::string> alpn;         // server: what it may select; client: what it offers
  TlsValidationOptions validation;
  bool require_client_certificate = false;  // server
  bool require_sni = false;                 // server: a ClientHello without SNI is refused
  // Server session resumption.
  std::vector<std::string> ticket_keys;  // 80 bytes each: name(16) hmac(32) aes(32); first encrypts
  bool disable_tickets = false;          // disable_stateless_session_resumption
  bool disable_session_cache = false;    // disable_stateful_session_resumption
  uint32_t session_timeout_s = 7200;
  std::string where;  // field path of the context, for messages
};

class TlsContext {
 public:
  // Builds the SSL_CTX; every problem (a certificate that does not parse, a key that does not
  // match it, an unknown cipher or curve, a ticket key of the wrong size) is an error naming
  // the field.
  static absl::StatusOr<std::shared_ptr<const TlsContext>> Create(const TlsContextOptions& o);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  SSL_CTX* ssl_ctx() const { return ctx_; }
  bool server() const { return server_; }
  // The context an SSL belongs to (set as the SSL_CTX's ex_data).
  static const TlsContext* FromSsl(const SSL* ssl);

  // Why verification of this connection's peer failed (empty if it did not), e.g.
  // "certificate verify failed: unable to get local issuer certificate" or
  // "no subject alternative name matched".
  static std::string VerifyFailure(const SSL* ssl);

  // Called from OpenSSL's callbacks.
  int SelectAlpn(const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                 unsigned int inlen) const;
  int TicketKey(SSL* ssl, unsigned char* key_name, unsigned char* iv, EVP_CIPHER_CTX* cctx,
                EVP_MAC_CTX* hctx, int enc) const;
  bool SanMatches(X509* cert) const;
  const TlsValidationOptions& validation() const { return validation_; }

 private:
  TlsContext() = default;
  SSL_CTX* ctx_ = nullptr;
  bool server_ = true;
  std::string alpn_wire_;  // length-prefixed protocol names
  std::vector<std::string> ticket_keys_;
  TlsValidationOptions validation_;
};

// Drains this thread's OpenSSL error queue into readable strings.
std::vector<std::string> TlsErrors();

}  // namespace rpx
