// TlsTransport: the TransportSocket of one TLS connection, server or client side: an OpenSSL SSL
// over the connection's socket. Owned by its Connection and used only on that connection's
// worker thread. It keeps its TlsContext alive (OpenSSL's callbacks find the context through
// the SSL_CTX, so a context replaced by a config update stays valid for the connections that
// still use it).
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <vector>

#include "source/network/connection.h"
#include "source/tls/tls_context.h"

namespace rpx {

// What the peer's certificate says, for headers such as x-forwarded-client-cert.
struct PeerCertificateInfo {
  std::string hash;                    // SHA-256 of the DER encoding, lower-case hex
  std::string subject;                 // RFC 2253, e.g. "CN=client,O=Example"
  std::string cert_pem;                // the leaf
  std::string chain_pem;               // the leaf and the chain it sent
  std::vector<std::string> uris, dns;  // subject alternative names
  std::string local_uri;               // the first URI SAN of our own certificate ("By")
};

class TlsTransport : public TransportSocket {
 public:
  // Client side: `sni` is sent as the server name (empty: none). `session_slot`, if set, holds
  // the session offered for resumption, and receives (owning it) each new session the server
  // issues on this connection (TLS 1.3 tickets come after the handshake); it must outlive the
  // connection's reads.
  // `verify_name`, if set, must be a name (or IP address) the peer's certificate is valid for
  // (checked with the context's trusted CA).
  TlsTransport(std::shared_ptr<const TlsContext> context, const std::string& sni = "",
               SSL_SESSION** session_slot = nullptr, const std::string& verify_name = "");
  ~TlsTransport() override;

  // TransportSocket
  HandshakeResult Handshake(int fd) override;
  ssize_t Read(int fd, char* buf, size_t len) override;
  ssize_t Write(int fd, const char* buf, size_t len, bool end_follows) override;
  bool HasPendingReadData() const override;
  bool SpeaksFirst() const override { return !context_->server(); }
  bool WantsWriteForRead() const override { return read_wants_write_; }
  void Shutdown(int fd) override;
  std::string FailureReason() const override { return failure_; }

  // After the handshake.
  SSL* ssl() const { return ssl_; }
  bool session_reused() const;
  std::string alpn() const;         // the protocol ALPN selected; empty: none
  std::string server_name() const;  // the SNI the client sent (server side)
  std::string version() const;      // "TLSv1.3"
  std::string cipher() const;
  bool has_peer_certificate() const;
  // The peer's certificate was checked against a validation context and passed (false without
  // a certificate, without a CA to check it against, or when an override let it through).
  bool peer_certificate_validated() const;
  // False when the peer sent no certificate.
  bool PeerCertificate(PeerCertificateInfo* out) const;
  // A new reference to the session, to offer on the next connection to the same host.
  SSL_SESSION* Session() const { return SSL_get1_session(ssl_); }
  // OpenSSL's new-session callback of client contexts (see session_slot).
  static int OnNewSession(SSL* ssl, SSL_SESSION* session);

 private:
  enum class Status { kWantRead, kWantWrite, kClosed, kError };
  // What an SSL call's failure `ret` means; records why the connection failed.
  Status Classify(int ret, const char* op);

  std::shared_ptr<const TlsContext> context_;
  SSL* ssl_;
  SSL_SESSION** session_slot_;
  bool read_wants_write_ = false;
  bool failed_ = false;
  std::string failure_;
};

}  // namespace rpx
