#include "source/tls/tls_transport.h"

#include <openssl/err.h>
#include <openssl/x509.h>

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
                           SSL_SESSION** session_slot)
    : context_(std::move(context)),
      ssl_(SSL_new(context_->ssl_ctx())),
      session_slot_(session_slot) {
  SSL_set_ex_data(ssl_, TransportIndex(), this);
  if (context_->server()) {
    SSL_set_accept_state(ssl_);
  } else {
    SSL_set_connect_state(ssl_);
    if (!sni.empty()) SSL_set_tlsext_host_name(ssl_, sni.c_str());
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
  if (n > 0) return n;
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

bool TlsTransport::HasPendingReadData() const { return SSL_pending(ssl_) > 0; }

void TlsTransport::Shutdown(int fd) {
  // close_notify, best effort: the socket closes next whatever happens.
  if (failed_ || !SSL_is_init_finished(ssl_)) return;
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

bool TlsTransport::has_peer_certificate() const {
  return SSL_get0_peer_certificate(ssl_) != nullptr;
}

}  // namespace rpx
