#include "source/tls/tls_transport.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rpx {

namespace {
int TransportIndex() {
  static int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}
}  // namespace

TlsTransport::TlsTransport(std::shared_ptr<const TlsContext> context, const std::string& sni,
                           SSL_SESSION** session_slot, const std::string& verify_name)
    : context_(std::move(context)), ssl_(nullptr), session_slot_(session_slot) {
  // A server's SSL (and OpenSSL's buffers with it) comes with the client's first bytes: an
  // accepted connection that sends nothing costs only this object (see Handshake).
  if (!context_->server()) {
    ssl_ = SSL_new(context_->ssl_ctx());
    SSL_set_ex_data(ssl_, TransportIndex(), this);
    SSL_set_connect_state(ssl_);
    if (!sni.empty()) SSL_set_tlsext_host_name(ssl_, sni.c_str());
    if (!verify_name.empty()) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
      // An IP address is checked against IP SANs, a name against DNS SANs (wildcards allowed).
      if (X509_VERIFY_PARAM_set1_ip_asc(param, verify_name.c_str()) != 1) {
        X509_VERIFY_PARAM_set1_host(param, verify_name.c_str(), verify_name.size());
      }
    }
    if (session_slot_ && *session_slot_) SSL_set_session(ssl_, *session_slot_);
  }
}

int TlsTransport::OnNewSession(SSL* ssl, SSL_SESSION* session) {
  auto* t = static_cast<TlsTransport*>(SSL_get_ex_data(ssl, TransportIndex()));
  if (!t || !t->session_slot_ || !SSL_SESSION_is_resumable(session)) return 0;
  if (*t->session_slot_) SSL_SESSION_free(*t->session_slot_);
  *t->session_slot_ = session;
  return 1;  // the slot owns it now
}

TlsTransport::~TlsTransport() {
  if (!ssl_) return;
  // A connection that simply closed (no close_notify either way, as most clients do) still ends
  // a good session: without this OpenSSL drops it from the session cache, and the client's next
  // resumption by session id fails. A failed connection's session is dropped as it should be.
  if (!failed_ && SSL_is_init_finished(ssl_)) {
    SSL_set_shutdown(ssl_, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
  }
  SSL_free(ssl_);
}

TlsTransport::Status TlsTransport::Classify(int ret, const char* op) {
  int err = SSL_get_error(ssl_, ret);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      return Status::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return Status::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return Status::kClosed;  // close_notify
    case SSL_ERROR_SYSCALL: {
      int e = errno;
      ERR_clear_error();
      if (e == EAGAIN || e == EINTR) return Status::kWantRead;
      if (e == 0) return Status::kClosed;  // EOF without close_notify
      failed_ = true;
      if (failure_.empty()) failure_ = absl::StrCat(op, ": ", strerror(e));
      return Status::kError;
    }
    default: {
      failed_ = true;
      std::string verify = TlsContext::VerifyFailure(ssl_);
      std::vector<std::string> errors = TlsErrors();
      if (failure_.empty()) {
        failure_ =
            !verify.empty()
                ? verify
                : absl::StrCat(
                      op, " failed: ", errors.empty() ? "TLS error" : absl::StrJoin(errors, "; "));
      }
      return Status::kError;
    }
  }
}

TransportSocket::HandshakeResult TlsTransport::Handshake(int fd) {
  if (!ssl_) {
    // The server side is first called when the socket turns readable (SpeaksFirst).
    ssl_ = SSL_new(context_->ssl_ctx());
    SSL_set_ex_data(ssl_, TransportIndex(), this);
    SSL_set_accept_state(ssl_);
  }
  if (SSL_get_fd(ssl_) != fd) SSL_set_fd(ssl_, fd);
  ERR_clear_error();
  int ret = SSL_do_handshake(ssl_);
  if (ret == 1) return HandshakeResult::kDone;
  switch (Classify(ret, "handshake")) {
    case Status::kWantRead:
      return HandshakeResult::kWantRead;
    case Status::kWantWrite:
      return HandshakeResult::kWantWrite;
    case Status::kClosed:
      if (failure_.empty()) failure_ = "handshake failed: the peer closed the connection";
      failed_ = true;
      return HandshakeResult::kFailed;
    case Status::kError:
      break;
  }
  return HandshakeResult::kFailed;
}

ssize_t TlsTransport::Read(int fd, char* buf, size_t len) {
  read_wants_write_ = false;
  if (failed_) return -EPROTO;
  ERR_clear_error();
  int n = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(len, INT_MAX)));
  if (n > 0) return n;
  switch (Classify(n, "read")) {
    case Status::kWantRead:
      // Nothing left to read: give OpenSSL's read and write buffers (about 33 KiB) back while
      // the connection waits, as nginx does for idle connections. It frees nothing that holds
      // bytes, and the next read or write takes them again from the allocator.
      SSL_free_buffers(ssl_);
      return -EAGAIN;
    case Status::kWantWrite:
      read_wants_write_ = true;  // e.g. a TLS 1.3 key update to answer with a full socket
      return -EAGAIN;
    case Status::kClosed:
      return 0;
    case Status::kError:
      break;
  }
  return -EPROTO;
}

ssize_t TlsTransport::Write(int fd, const char* buf, size_t len, bool /*end_follows*/) {
  if (failed_) return -EPROTO;
  if (len == 0) return 0;
  ERR_clear_error();
  int n = SSL_write(ssl_, buf, static_cast<int>(std::min<size_t>(len, INT_MAX)));
  if (n > 0) {
    if (static_cast<size_t>(n) == len) SSL_free_buffers(ssl_);  // see Read
    return n;
  }
  switch (Classify(n, "write")) {
    case Status::kWantRead:
    case Status::kWantWrite:
      return -EAGAIN;
    case Status::kClosed:
      return -EPIPE;
    case Status::kError:
      break;
  }
  return -EPROTO;
}

bool TlsTransport::HasPendingReadData() const { return ssl_ && SSL_has_pending(ssl_) == 1; }

void TlsTransport::Shutdown(int fd) {
  // close_notify, best effort: the socket closes next whatever happens.
  if (failed_ || !ssl_ || !SSL_is_init_finished(ssl_)) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);
  ERR_clear_error();
}

bool TlsTransport::session_reused() const { return SSL_session_reused(ssl_) == 1; }

std::string TlsTransport::alpn() const {
  const unsigned char* p = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl_, &p, &len);
  return std::string(reinterpret_cast<const char*>(p), len);
}

std::string TlsTransport::server_name() const {
  const char* n = SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name);
  return n ? n : "";
}

std::string TlsTransport::version() const { return SSL_get_version(ssl_); }

std::string TlsTransport::cipher() const {
  const SSL_CIPHER* c = SSL_get_current_cipher(ssl_);
  return c ? SSL_CIPHER_get_name(c) : "";
}

namespace {

std::string Pem(X509* x) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, x);
  char* p = nullptr;
  long n = BIO_get_mem_data(b, &p);
  std::string s(p, n);
  BIO_free(b);
  return s;
}

void Sans(X509* x, std::vector<std::string>* uris, std::vector<std::string>* dns) {
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  if (!names) return;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type == GEN_URI && uris) {
      uris->emplace_back(
          reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.uniformResourceIdentifier)),
          ASN1_STRING_length(n->d.uniformResourceIdentifier));
    } else if (n->type == GEN_DNS && dns) {
      dns->emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                        ASN1_STRING_length(n->d.dNSName));
    }
  }
  GENERAL_NAMES_free(names);
}

}  // namespace

bool TlsTransport::PeerCertificate(PeerCertificateInfo* out) const {
  X509* peer = SSL_get0_peer_certificate(ssl_);
  if (!peer) return false;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  X509_digest(peer, EVP_sha256(), md, &len);
  static const char kHex[] = "0123456789abcdef";
  out->hash.clear();
  for (unsigned int i = 0; i < len; ++i) {
    out->hash += kHex[md[i] >> 4];
    out->hash += kHex[md[i] & 0xf];
  }
  BIO* b = BIO_new(BIO_s_mem());
  X509_NAME_print_ex(b, X509_get_subject_name(peer), 0, XN_FLAG_RFC2253);
  char* p = nullptr;
  long n = BIO_get_mem_data(b, &p);
  out->subject.assign(p, n);
  BIO_free(b);
  out->cert_pem = Pem(peer);
  out->chain_pem = out->cert_pem;
  if (STACK_OF(X509)* chain = SSL_get_peer_cert_chain(ssl_)) {
    // On a server the stack holds the chain without the leaf.
    for (int i = 0; i < sk_X509_num(chain); ++i) {
      X509* x = sk_X509_value(chain, i);
      if (X509_cmp(x, peer) != 0) out->chain_pem += Pem(x);
    }
  }
  out->uris.clear();
  out->dns.clear();
  Sans(peer, &out->uris, &out->dns);
  out->local_uri.clear();
  if (X509* local = SSL_get_certificate(ssl_)) {
    std::vector<std::string> uris;
    Sans(local, &uris, nullptr);
    if (!uris.empty()) out->local_uri = uris.front();
  }
  return true;
}

bool TlsTransport::has_peer_certificate() const {
  return SSL_get0_peer_certificate(ssl_) != nullptr;
}

bool TlsTransport::peer_certificate_validated() const {
  // A resumed session carries the result of the handshake that verified it.
  return SSL_get0_peer_certificate(ssl_) != nullptr &&
         (SSL_get_verify_mode(ssl_) & SSL_VERIFY_PEER) != 0 &&
         SSL_get_verify_result(ssl_) == X509_V_OK;
}

}  // namespace rpx
