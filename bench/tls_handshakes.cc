// tls_handshakes: a load generator that opens a new TLS connection for every request, for
// bench/run.sh's handshake rows (tls-full-*, tls-resume-*).
//
//   tls_handshakes [-c CONNS] [-d SECONDS] [--resume] [--tls12] [--timeout SECONDS] [--sni NAME] URL
//   URL = https://127.0.0.1:PORT/PATH
//
// CONNS connections are in flight at all times. Each one connects, completes a TLS handshake,
// sends `GET PATH HTTP/1.1` with `Connection: close`, reads the whole response (Content-Length),
// waits (at most 1 s) for the server to close, closes, and starts over; the latency of a request
// runs from connect() to the response's last byte. Without --resume every handshake is a full
// one (no session is ever offered, like a new client); with --resume each of the CONNS slots
// offers the newest session its previous connection was given (a TLS 1.3 ticket, or a TLS 1.2
// ticket / session ID), like a returning client; the first connection of each slot is full.
// --tls12 offers TLS 1.2 at most (OpenSSL's default client offers 1.3): a TLS 1.2 resumption
// skips the key exchange, where a TLS 1.3 one (psk_dhe_ke, all OpenSSL offers) does a new one.
// Certificates are not verified (as wrk does), but the handshake's signature is checked, as
// OpenSSL always does, so a full handshake costs this client an ECDSA or RSA verification.
//
// Why not wrk: with `-H "Connection: close"` wrk reconnects on the same SSL object, which keeps
// its session, so it resumes (rpx counted 8,284 of 8,295 handshakes resumed): it cannot measure
// full handshakes, and it gives no count of what it resumed. Why not `openssl s_time`: it has no
// latency distribution and one connection at a time per process.
//
// Prints wrk's summary format (bench/run.sh's parse_wrk reads it) plus a "Handshakes:" line:
// full and resumed counts, and the protocol, cipher, group and server key negotiated.
// One thread, level-triggered epoll, non-blocking sockets. Loopback benchmark tool, not a client
// to trust with anything.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

enum class State { kIdle, kConnecting, kHandshake, kWriting, kReading, kDraining };

struct Slot {
  int fd = -1;
  SSL* ssl = nullptr;
  SSL_SESSION* session = nullptr;  // --resume: offered on this slot's next connection
  State state = State::kIdle;
  uint64_t start_ns = 0;     // connect() of the current request
  uint64_t deadline_ns = 0;  // timeout of the current step
  std::string in;            // response bytes so far
  size_t written = 0;
};

struct Stats {
  uint64_t completed = 0, resumed = 0, non2xx = 0, bytes = 0;
  uint64_t err_connect = 0, err_read = 0, err_write = 0, err_timeout = 0;
  std::vector<uint32_t> latency_us;
  std::string full_params, resumed_params;  // what the first full / resumed handshake negotiated
};

struct Options {
  int conns = 50;
  double seconds = 10;
  bool resume = false;
  bool tls12 = false;
  double timeout_s = 10;
  std::string sni = "localhost";
  std::string url, host = "127.0.0.1", path = "/";
  int port = 443;
};

Options g_opt;
Stats g_stats;
SSL_CTX* g_ctx = nullptr;
int g_epoll = -1;
std::vector<Slot> g_slots;
std::string g_request;
sockaddr_in g_addr{};
bool g_stopping = false;

void SetInterest(int index, uint32_t events, bool add) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u32 = static_cast<uint32_t>(index);
  epoll_ctl(g_epoll, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, g_slots[index].fd, &ev);
}

void Close(Slot& s, bool clean = false) {
  if (s.ssl) {
    // A clean close (the server closed first, after the whole response: Connection: close)
    // keeps the session resumable; SSL_free of a connection not shut down marks it bad.
    if (clean) SSL_set_shutdown(s.ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(s.ssl);
    s.ssl = nullptr;
  }
  if (s.fd >= 0) {
    epoll_ctl(g_epoll, EPOLL_CTL_DEL, s.fd, nullptr);
    close(s.fd);
    s.fd = -1;
  }
  s.state = State::kIdle;
}

std::string Negotiated(SSL* ssl) {
  std::string out = SSL_get_version(ssl);
  out += " ";
  out += SSL_get_cipher_name(ssl);
  int group = SSL_get_negotiated_group(ssl);
  if (group != 0 && group != NID_undef) {
    const char* name = OBJ_nid2sn(group & ~TLSEXT_nid_unknown);
    out += ", group ";
    out += name ? name : "?";
  }
  if (X509* cert = SSL_get0_peer_certificate(ssl)) {
    if (EVP_PKEY* key = X509_get0_pubkey(cert)) {
      out += ", server key ";
      out += EVP_PKEY_get0_type_name(key) ? EVP_PKEY_get0_type_name(key) : "?";
      out += " " + std::to_string(EVP_PKEY_get_bits(key)) + " bits";
    }
  }
  const unsigned char* alpn = nullptr;
  unsigned int alpn_len = 0;
  SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
  out += ", ALPN ";
  out += alpn_len ? std::string(reinterpret_cast<const char*>(alpn), alpn_len) : "none";
  return out;
}

void Start(int index);

// An error ends the request: counted (wrk's kinds), the slot starts a new connection.
void Fail(int index, uint64_t* counter) {
  ++*counter;
  Close(g_slots[index]);
  Start(index);
}

void Start(int index) {
  Slot& s = g_slots[index];
  if (g_stopping) return;
  s.in.clear();
  s.written = 0;
  s.start_ns = NowNs();
  s.deadline_ns = s.start_ns + static_cast<uint64_t>(g_opt.timeout_s * 1e9);
  s.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s.fd < 0) {
    perror("socket");
    exit(2);
  }
  int one = 1;
  setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  s.state = State::kConnecting;
  if (connect(s.fd, reinterpret_cast<sockaddr*>(&g_addr), sizeof(g_addr)) != 0 &&
      errno != EINPROGRESS) {
    ++g_stats.err_connect;
    close(s.fd);
    s.fd = -1;
    s.state = State::kIdle;  // retried by the timer sweep, not in a tight loop
    return;
  }
  s.ssl = SSL_new(g_ctx);
  SSL_set_fd(s.ssl, s.fd);
  SSL_set_connect_state(s.ssl);
  if (!g_opt.sni.empty()) SSL_set_tlsext_host_name(s.ssl, g_opt.sni.c_str());
  if (g_opt.resume && s.session) SSL_set_session(s.ssl, s.session);
  SetInterest(index, EPOLLOUT, true);
}

// Complete response in s.in? Returns the status code (0 = not yet; -1 = malformed).
int ResponseDone(const Slot& s) {
  size_t head = s.in.find("\r\n\r\n");
  if (head == std::string::npos) return s.in.size() > 65536 ? -1 : 0;
  if (s.in.compare(0, 9, "HTTP/1.1 ") != 0 && s.in.compare(0, 9, "HTTP/1.0 ") != 0) return -1;
  int status = atoi(s.in.c_str() + 9);
  // Content-Length, case-insensitive (every server here sends one for these files).
  size_t length = std::string::npos;
  for (size_t p = s.in.find("\r\n"); p < head; p = s.in.find("\r\n", p + 2)) {
    if (strncasecmp(s.in.c_str() + p + 2, "content-length:", 15) == 0) {
      length = strtoull(s.in.c_str() + p + 17, nullptr, 10);
      break;
    }
  }
  if (length == std::string::npos) return -1;
  return s.in.size() >= head + 4 + length ? (status > 0 ? status : -1) : 0;
}

void Step(int index) {
  Slot& s = g_slots[index];
  for (;;) {
    switch (s.state) {
      case State::kIdle:
        return;
      case State::kConnecting: {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == EINPROGRESS) return;
        if (err != 0) return Fail(index, &g_stats.err_connect);
        s.state = State::kHandshake;
        break;
      }
      case State::kHandshake: {
        ERR_clear_error();
        int r = SSL_connect(s.ssl);
        if (r == 1) {
          s.state = State::kWriting;
          break;
        }
        int e = SSL_get_error(s.ssl, r);
        if (e == SSL_ERROR_WANT_READ) return SetInterest(index, EPOLLIN, false);
        if (e == SSL_ERROR_WANT_WRITE) return SetInterest(index, EPOLLOUT, false);
        return Fail(index, &g_stats.err_read);  // a failed handshake (wrk counts it as read)
      }
      case State::kWriting: {
        ERR_clear_error();
        int r = SSL_write(s.ssl, g_request.data() + s.written,
                          static_cast<int>(g_request.size() - s.written));
        if (r > 0) {
          s.written += r;
          if (s.written == g_request.size()) s.state = State::kReading;
          break;
        }
        int e = SSL_get_error(s.ssl, r);
        if (e == SSL_ERROR_WANT_READ) return SetInterest(index, EPOLLIN, false);
        if (e == SSL_ERROR_WANT_WRITE) return SetInterest(index, EPOLLOUT, false);
        return Fail(index, &g_stats.err_write);
      }
      case State::kReading:
      case State::kDraining: {
        char buf[16384];
        ERR_clear_error();
        int r = SSL_read(s.ssl, buf, sizeof(buf));
        if (r > 0) {
          g_stats.bytes += r;
          if (s.state == State::kDraining) continue;  // unexpected bytes after the response
          s.in.append(buf, r);
          int status = ResponseDone(s);
          if (status < 0) return Fail(index, &g_stats.err_read);
          if (status > 0) {
            uint64_t now = NowNs();
            g_stats.latency_us.push_back(static_cast<uint32_t>(
                std::min<uint64_t>((now - s.start_ns) / 1000, UINT32_MAX)));
            ++g_stats.completed;
            if (status < 200 || status > 399) ++g_stats.non2xx;
            bool reused = SSL_session_reused(s.ssl);
            if (reused) ++g_stats.resumed;
            std::string& params = reused ? g_stats.resumed_params : g_stats.full_params;
            if (params.empty()) params = Negotiated(s.ssl);
            if (g_opt.resume) {
              // TLS 1.3 tickets arrive after the handshake; by the response's end they have
              // been read. Keep the newest resumable session of this slot.
              SSL_SESSION* got = SSL_get1_session(s.ssl);
              if (got && SSL_SESSION_is_resumable(got)) {
                if (s.session) SSL_SESSION_free(s.session);
                s.session = got;
              } else if (got) {
                SSL_SESSION_free(got);
              }
            }
            s.state = State::kDraining;  // now wait (briefly) for the server's close
            s.deadline_ns = now + 1000000000ull;
          }
          continue;
        }
        int e = SSL_get_error(s.ssl, r);
        if (e == SSL_ERROR_WANT_READ) return SetInterest(index, EPOLLIN, false);
        if (e == SSL_ERROR_WANT_WRITE) return SetInterest(index, EPOLLOUT, false);
        // EOF (close_notify or not) or an error.
        if (s.state == State::kDraining) {
          Close(s, true);
          return Start(index);
        }
        return Fail(index, &g_stats.err_read);
      }
    }
  }
}

std::string FormatTime(double us) {
  char b[32];
  if (us < 1000) {
    snprintf(b, sizeof(b), "%.2fus", us);
  } else if (us < 1e6) {
    snprintf(b, sizeof(b), "%.2fms", us / 1000);
  } else {
    snprintf(b, sizeof(b), "%.2fs", us / 1e6);
  }
  return b;
}

std::string FormatBytes(double b) {
  char out[32];
  if (b < 1024) {
    snprintf(out, sizeof(out), "%.2fB", b);
  } else if (b < 1024 * 1024) {
    snprintf(out, sizeof(out), "%.2fKB", b / 1024);
  } else if (b < 1024.0 * 1024 * 1024) {
    snprintf(out, sizeof(out), "%.2fMB", b / 1024 / 1024);
  } else {
    snprintf(out, sizeof(out), "%.2fGB", b / 1024 / 1024 / 1024);
  }
  return out;
}

[[noreturn]] void Usage(const char* why) {
  fprintf(stderr,
          "tls_handshakes: %s\nusage: tls_handshakes [-c CONNS] [-d SECONDS] [--resume] "
          "[--tls12] [--timeout SECONDS] [--sni NAME] https://127.0.0.1:PORT/PATH\n",
          why);
  exit(2);
}

void ParseArgs(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "-c") {
      g_opt.conns = atoi(value().c_str());
    } else if (a == "-d") {
      std::string v = value();
      g_opt.seconds = atof(v.c_str());  // "10", "10s", "500ms" or "1m"
      if (v.size() > 2 && v.compare(v.size() - 2, 2, "ms") == 0) {
        g_opt.seconds /= 1000;
      } else if (!v.empty() && v.back() == 'm') {
        g_opt.seconds *= 60;
      }
    } else if (a == "--resume") {
      g_opt.resume = true;
    } else if (a == "--tls12") {
      g_opt.tls12 = true;
    } else if (a == "--timeout") {
      g_opt.timeout_s = atof(value().c_str());
    } else if (a == "--sni") {
      g_opt.sni = value();
    } else if (a.rfind("https://", 0) == 0) {
      g_opt.url = a;
    } else {
      Usage(("unknown argument " + a).c_str());
    }
  }
  if (g_opt.url.empty()) Usage("no URL");
  if (g_opt.conns < 1 || g_opt.seconds <= 0 || g_opt.timeout_s <= 0) Usage("bad -c/-d/--timeout");
  std::string rest = g_opt.url.substr(8);
  size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  g_opt.path = slash == std::string::npos ? "/" : rest.substr(slash);
  size_t colon = hostport.rfind(':');
  g_opt.host = hostport.substr(0, colon);
  if (colon != std::string::npos) g_opt.port = atoi(hostport.c_str() + colon + 1);
  g_addr.sin_family = AF_INET;
  g_addr.sin_port = htons(static_cast<uint16_t>(g_opt.port));
  if (inet_pton(AF_INET, g_opt.host.c_str(), &g_addr.sin_addr) != 1) {
    Usage("the host must be an IPv4 address");
  }
}

}  // namespace

int main(int argc, char** argv) {
  ParseArgs(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  g_ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(g_ctx, SSL_VERIFY_NONE, nullptr);
  if (g_opt.tls12) SSL_CTX_set_max_proto_version(g_ctx, TLS1_2_VERSION);
  // Sessions are kept per slot by hand (--resume) and never otherwise.
  SSL_CTX_set_session_cache_mode(g_ctx, SSL_SESS_CACHE_OFF);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(g_ctx, kAlpn, sizeof(kAlpn));
  g_request = "GET " + g_opt.path + " HTTP/1.1\r\nHost: " + g_opt.sni +
              "\r\nConnection: close\r\n\r\n";

  g_epoll = epoll_create1(EPOLL_CLOEXEC);
  g_slots.resize(g_opt.conns);
  uint64_t t0 = NowNs();
  uint64_t end = t0 + static_cast<uint64_t>(g_opt.seconds * 1e9);
  for (int i = 0; i < g_opt.conns; ++i) Start(i);
  std::vector<epoll_event> events(1024);
  uint64_t next_sweep = t0;
  for (;;) {
    uint64_t now = NowNs();
    if (now >= end) break;
    int timeout_ms = static_cast<int>(std::min<uint64_t>((end - now) / 1000000 + 1, 100));
    int n = epoll_wait(g_epoll, events.data(), static_cast<int>(events.size()), timeout_ms);
    for (int i = 0; i < n; ++i) Step(static_cast<int>(events[i].data.u32));
    now = NowNs();
    if (now >= next_sweep) {  // timeouts, and slots whose connect() failed outright
      next_sweep = now + 50000000ull;
      for (int i = 0; i < g_opt.conns; ++i) {
        Slot& s = g_slots[i];
        if (s.state == State::kIdle) {
          Start(i);
        } else if (now > s.deadline_ns) {
          if (s.state == State::kDraining) {  // the response was complete: not an error
            Close(s, true);
            Start(i);
          } else {
            Fail(i, &g_stats.err_timeout);
          }
        }
      }
    }
  }
  double elapsed = (NowNs() - t0) / 1e9;
  g_stopping = true;
  for (auto& s : g_slots) {
    Close(s);
    if (s.session) SSL_SESSION_free(s.session);
  }

  auto& lat = g_stats.latency_us;
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) -> double {
    if (lat.empty()) return 0;
    size_t i = static_cast<size_t>(std::ceil(p / 100.0 * lat.size()));
    return lat[std::min(lat.size() - 1, i > 0 ? i - 1 : 0)];
  };
  double mean = 0, var = 0;
  for (uint32_t v : lat) mean += v;
  if (!lat.empty()) mean /= lat.size();
  for (uint32_t v : lat) var += (v - mean) * (v - mean);
  double stdev = lat.size() > 1 ? std::sqrt(var / (lat.size() - 1)) : 0;

  printf("Running %.0fs test @ %s\n", g_opt.seconds, g_opt.url.c_str());
  printf("  1 threads and %d connections, a new TLS connection per request (%s)\n", g_opt.conns,
         g_opt.resume ? "sessions resumed" : "full handshakes");
  printf("  Thread Stats   Avg      Stdev     Max\n");
  printf("    Latency   %s   %s   %s\n", FormatTime(mean).c_str(), FormatTime(stdev).c_str(),
         FormatTime(lat.empty() ? 0 : lat.back()).c_str());
  printf("  Latency Distribution\n");
  for (double p : {50.0, 75.0, 90.0, 99.0}) printf("  %4.0f%%   %s\n", p, FormatTime(pct(p)).c_str());
  printf("  %llu requests in %.2fs, %s read\n", static_cast<unsigned long long>(g_stats.completed),
         elapsed, FormatBytes(static_cast<double>(g_stats.bytes)).c_str());
  if (g_stats.err_connect + g_stats.err_read + g_stats.err_write + g_stats.err_timeout) {
    printf("  Socket errors: connect %llu, read %llu, write %llu, timeout %llu\n",
           static_cast<unsigned long long>(g_stats.err_connect),
           static_cast<unsigned long long>(g_stats.err_read),
           static_cast<unsigned long long>(g_stats.err_write),
           static_cast<unsigned long long>(g_stats.err_timeout));
  }
  if (g_stats.non2xx) {
    printf("  Non-2xx or 3xx responses: %llu\n", static_cast<unsigned long long>(g_stats.non2xx));
  }
  printf("Requests/sec: %10.2f\n", g_stats.completed / elapsed);
  printf("Transfer/sec: %10s\n", FormatBytes(g_stats.bytes / elapsed).c_str());
  printf("Handshakes: %llu completed, %llu full, %llu resumed\n",
         static_cast<unsigned long long>(g_stats.completed),
         static_cast<unsigned long long>(g_stats.completed - g_stats.resumed),
         static_cast<unsigned long long>(g_stats.resumed));
  if (!g_stats.full_params.empty()) printf("Full: %s\n", g_stats.full_params.c_str());
  if (!g_stats.resumed_params.empty()) printf("Resumed: %s\n", g_stats.resumed_params.c_str());
  SSL_CTX_free(g_ctx);
  return 0;
}
