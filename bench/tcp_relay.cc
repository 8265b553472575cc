// tcp_relay: the floor under any HTTP/1.1 proxy on this host, for bench/run.sh ("relay").
//
//   tcp_relay LISTEN_PORT UPSTREAM_PORT        (both on 127.0.0.1)
//
// Not a proxy: it parses nothing and routes nothing. Each accepted connection gets one upstream
// connection of its own, opened at accept and closed with it, so keep-alive clients see a perfect
// pool (no churn, no queueing) and every request costs the kernel work a proxy cannot avoid: four
// TCP segments, one recv and one send per hop, and a share of one epoll_wait. What it costs per
// request is the part of any proxy's cost that is the host's, not the proxy's; what a proxy
// spends above it is its own. It is the classic epoll design (nginx's and HAProxy's), with plain
// recv/send, where rpx batches its socket calls through io_uring.
//
// One thread, level-triggered epoll. A short send parks the rest (bounded: the reading side stops
// until it drains); an error closes both at once, an EOF once nothing is parked either way.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kBufSize = 64 * 1024;

struct Side {
  int peer = -1;             // -1: this fd is not a relayed connection
  std::vector<char> parked;  // bytes read from the peer that this fd has not accepted yet
  size_t parked_off = 0;
  bool read_done = false;  // EOF read: nothing more comes from this fd
  uint32_t interest = 0;
};

int g_epoll = -1;
std::vector<Side> g_sides;
char g_buf[kBufSize];

bool Parked(int fd) { return g_sides[fd].parked_off < g_sides[fd].parked.size(); }

// Reads fd while its peer has nothing parked (bounded memory); writes when fd has parked bytes.
void UpdateInterest(int fd) {
  Side& s = g_sides[fd];
  uint32_t want = 0;
  if (!s.read_done && !Parked(s.peer)) want |= EPOLLIN;
  if (Parked(fd)) want |= EPOLLOUT;
  if (want == s.interest) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.fd = fd;
  epoll_ctl(g_epoll, EPOLL_CTL_MOD, fd, &ev);
  s.interest = want;
}

void ClosePair(int fd) {
  int peer = g_sides[fd].peer;
  for (int f : {fd, peer}) {
    close(f);  // also leaves the epoll set
    g_sides[f] = Side();
  }
}

// After an EOF on either side, both close once nothing is parked in either direction (HTTP/1.1
// needs no more: a client or origin that half-closes is done with the connection).
bool CloseIfDone(int fd) {
  int peer = g_sides[fd].peer;
  if (!g_sides[fd].read_done && !g_sides[peer].read_done) return false;
  if (Parked(fd) || Parked(peer)) return false;
  ClosePair(fd);
  return true;
}

// Sends bytes to fd; what the socket does not take is parked. Returns false on a send error.
bool Forward(int fd, const char* data, size_t len) {
  size_t done = 0;
  if (!Parked(fd)) {
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
    if (n > 0) done = static_cast<size_t>(n);
  }
  if (done < len) {
    Side& s = g_sides[fd];
    s.parked.insert(s.parked.end(), data + done, data + len);
    UpdateInterest(fd);
    UpdateInterest(s.peer);
  }
  return true;
}

void OnWritable(int fd) {
  Side& s = g_sides[fd];
  while (Parked(fd)) {
    ssize_t n = send(fd, s.parked.data() + s.parked_off, s.parked.size() - s.parked_off,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      ClosePair(fd);
      return;
    }
    s.parked_off += static_cast<size_t>(n);
  }
  s.parked.clear();
  s.parked_off = 0;
  if (CloseIfDone(fd)) return;
  UpdateInterest(fd);
  UpdateInterest(s.peer);
}

void OnReadable(int fd, uint32_t events) {
  int peer = g_sides[fd].peer;
  if (g_sides[fd].read_done || Parked(peer)) {
    // Not reading fd now (a stale event of this batch, or the peer is slow). epoll reports
    // hang-ups and errors whatever the interest, so level-triggered they would spin: give up.
    if (events & (EPOLLHUP | EPOLLERR)) ClosePair(fd);
    return;
  }
  ssize_t n = recv(fd, g_buf, sizeof(g_buf), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n < 0) {
    ClosePair(fd);
    return;
  }
  if (n == 0) {
    g_sides[fd].read_done = true;
    if (!CloseIfDone(fd)) UpdateInterest(fd);
    return;
  }
  if (!Forward(peer, g_buf, static_cast<size_t>(n))) ClosePair(fd);
}

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

int Upstream(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in a = Loopback(port);
  // Bytes sent before the handshake ends get EAGAIN, are parked and go out on EPOLLOUT.
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) < 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

void Register(int fd, int peer) {
  if (static_cast<size_t>(fd) >= g_sides.size()) g_sides.resize(fd * 2 + 64);
  g_sides[fd] = Side();
  g_sides[fd].peer = peer;
  g_sides[fd].interest = EPOLLIN;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(g_epoll, EPOLL_CTL_ADD, fd, &ev);
}

void OnAccept(int listen_fd, uint16_t upstream_port) {
  for (;;) {
    int c = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN) perror("tcp_relay: accept4");
      return;
    }
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int u = Upstream(upstream_port);
    if (u < 0) {
      perror("tcp_relay: upstream connect");
      close(c);
      continue;
    }
    Register(c, u);
    Register(u, c);
  }
}

uint16_t ParsePort(const char* s) {
  char* end = nullptr;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 1 || v > 65535) {
    fprintf(stderr, "tcp_relay: '%s' is not a port (1-65535)\n", s);
    exit(2);
  }
  return static_cast<uint16_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: tcp_relay LISTEN_PORT UPSTREAM_PORT   (both on 127.0.0.1)\n");
    return 2;
  }
  uint16_t listen_port = ParsePort(argv[1]);
  uint16_t upstream_port = ParsePort(argv[2]);
  signal(SIGPIPE, SIG_IGN);

  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = Loopback(listen_port);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) < 0 || listen(lfd, 4096) < 0) {
    fprintf(stderr, "tcp_relay: cannot listen on 127.0.0.1:%u: %s\n", listen_port, strerror(errno));
    return 1;
  }
  g_epoll = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = lfd;
  epoll_ctl(g_epoll, EPOLL_CTL_ADD, lfd, &ev);
  g_sides.resize(1024);

  epoll_event events[512];
  for (;;) {
    int n = epoll_wait(g_epoll, events, 512, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      perror("tcp_relay: epoll_wait");
      return 1;
    }
    for (int i = 0; i < n; i++) {
      int fd = events[i].data.fd;
      if (fd == lfd) {
        OnAccept(lfd, upstream_port);
        continue;
      }
      if (g_sides[fd].peer < 0) continue;  // closed earlier in this batch
      if (events[i].events & EPOLLOUT) OnWritable(fd);
      if (g_sides[fd].peer >= 0 && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
        OnReadable(fd, events[i].events);
      }
    }
  }
}
