// origin: a lean static HTTP/1.1 origin for bench/run.sh (ORIGIN=lean).
//
//   origin ROOT_DIR PORT [PORT...]        (every port on 127.0.0.1)
//
// Why: in the uncapped layout wrk and the origin share CPU 1, and nginx as the origin spends
// 15-20 µs of it per 30 B response (a recv, a writev of the head, a sendfile of the body, cork
// on and off, epoll). That cost caps every proxy's req/s below what the proxy itself could do,
// so the uncapped rows measured the load side as much as the proxy. This origin answers with the
// same bytes nginx sends (the same header set and sizes; only the Server value differs) from
// responses built once at start, with one recv and one send per request on a keep-alive
// connection; files over 256 KiB go out with sendfile(2), the head first with MSG_MORE.
//
// Serves GET and HEAD of the regular files directly in ROOT_DIR (read at start; not re-read).
// Anything else gets a 4xx with Connection: close. Requests with a body are refused (400):
// the bench sends none. Pipelined requests are answered in order, in one send per read.
// One thread, level-triggered epoll, no timeouts (bench/run.sh ends it by PID).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr size_t kReadSize = 64 * 1024;
constexpr size_t kMaxHead = 16 * 1024;
constexpr off_t kSendfileAbove = 256 * 1024;
constexpr size_t kDateLen = 29;  // "Sat, 05 Dec 2026 17:15:57 GMT"

// Every response head starts with this, so Date sits at the same offset in all of them.
constexpr char kHeadStart[] = "HTTP/1.1 200 OK\r\nServer: bench-origin\r\nDate: ";
constexpr size_t kDateOff = sizeof(kHeadStart) - 1;

// A prebuilt response: the head, then the body unless the file is sent with sendfile.
struct Prebuilt {
  std::string bytes;
  size_t head_len = 0;
};

// One file's two prebuilt responses (keep-alive and close).
struct File {
  Prebuilt keep_alive;
  Prebuilt close;
  int fd = -1;  // >= 0: the body goes out with sendfile
  off_t size = 0;
};

struct Conn {
  bool open = false;
  std::string in;   // bytes read, not yet answered
  std::string out;  // bytes to send
  size_t out_off = 0;
  int file_fd = -1;  // a body to sendfile after out
  off_t file_off = 0, file_end = 0;
  bool close_after = false;  // close once everything queued is sent
  uint32_t interest = 0;
};

int g_epoll = -1;
std::vector<Conn> g_conns;
std::map<std::string, File, std::less<>> g_files;
char g_buf[kReadSize];
time_t g_date_sec = 0;

std::string HttpDate(time_t t) {
  char buf[64];
  tm g;
  gmtime_r(&t, &g);
  strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &g);
  return buf;
}

std::string ContentType(const std::string& name) {
  auto ends = [&](const char* s) {
    size_t n = strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  if (ends(".txt")) return "text/plain";
  if (ends(".html")) return "text/html";
  return "application/octet-stream";
}

// nginx 1.22's header set for a static file, in its order.
Prebuilt Head(const std::string& name, const struct stat& st, const char* connection) {
  std::string h = kHeadStart;
  h += HttpDate(time(nullptr));
  char etag[64];
  snprintf(etag, sizeof(etag), "\"%lx-%lx\"", static_cast<unsigned long>(st.st_mtime),
           static_cast<unsigned long>(st.st_size));
  h += "\r\nContent-Type: " + ContentType(name) +
       "\r\nContent-Length: " + std::to_string(st.st_size) +
       "\r\nLast-Modified: " + HttpDate(st.st_mtime) + "\r\nConnection: " + connection +
       "\r\nETag: " + etag + "\r\nAccept-Ranges: bytes\r\n\r\n";
  return Prebuilt{h, h.size()};
}

void LoadFiles(const char* root) {
  DIR* d = opendir(root);
  if (d == nullptr) {
    fprintf(stderr, "origin: cannot open directory '%s': %s\n", root, strerror(errno));
    exit(1);
  }
  while (dirent* e = readdir(d)) {
    std::string path = std::string(root) + "/" + e->d_name;
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      fprintf(stderr, "origin: cannot read '%s': %s\n", path.c_str(), strerror(errno));
      exit(1);
    }
    File f;
    f.size = st.st_size;
    f.keep_alive = Head(e->d_name, st, "keep-alive");
    f.close = Head(e->d_name, st, "close");
    if (st.st_size > kSendfileAbove) {
      f.fd = fd;
    } else {
      std::string body(static_cast<size_t>(st.st_size), '\0');
      if (pread(fd, body.data(), body.size(), 0) != static_cast<ssize_t>(body.size())) {
        fprintf(stderr, "origin: short read of '%s'\n", path.c_str());
        exit(1);
      }
      close(fd);
      f.keep_alive.bytes += body;
      f.close.bytes += body;
    }
    g_files.emplace(std::string("/") + e->d_name, std::move(f));
  }
  closedir(d);
}

// The Date header of every prebuilt response, once per second (as nginx's cached time).
void RefreshDate() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  if (ts.tv_sec == g_date_sec) return;
  g_date_sec = ts.tv_sec;
  std::string date = HttpDate(ts.tv_sec);
  if (date.size() != kDateLen) return;  // a year past 9999: keep the old date
  for (auto& [name, f] : g_files) {
    memcpy(f.keep_alive.bytes.data() + kDateOff, date.data(), kDateLen);
    memcpy(f.close.bytes.data() + kDateOff, date.data(), kDateLen);
  }
}

void SetInterest(int fd, uint32_t want) {
  Conn& c = g_conns[fd];
  if (want == c.interest) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.fd = fd;
  epoll_ctl(g_epoll, EPOLL_CTL_MOD, fd, &ev);
  c.interest = want;
}

void Close(int fd) {
  close(fd);  // also leaves the epoll set
  g_conns[fd] = Conn();
}

bool HasToken(std::string_view value, std::string_view token) {
  // Comma-separated, case-insensitive (Connection: keep-alive, Upgrade / close ...).
  size_t i = 0;
  while (i <= value.size()) {
    size_t j = value.find(',', i);
    if (j == std::string_view::npos) j = value.size();
    std::string_view t = value.substr(i, j - i);
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    if (t.size() == token.size() && strncasecmp(t.data(), token.data(), t.size()) == 0) return true;
    i = j + 1;
  }
  return false;
}

void QueueError(Conn& c, int status, const char* reason) {
  std::string body = std::to_string(status) + " " + reason + "\n";
  c.out += "HTTP/1.1 " + std::to_string(status) + " " + reason +
           "\r\nServer: bench-origin\r\nContent-Type: text/plain\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  c.close_after = true;
  c.in.clear();
}

// Answers the complete requests in c.in, in order, until one needs a sendfile or closes.
void Answer(Conn& c) {
  size_t pos = 0;
  while (!c.close_after && c.file_fd < 0) {
    size_t end = c.in.find("\r\n\r\n", pos);
    if ((end == std::string::npos ? c.in.size() : end) - pos > kMaxHead) {
      QueueError(c, 431, "Request Header Fields Too Large");
      break;
    }
    if (end == std::string::npos) break;
    std::string_view head(c.in.data() + pos, end - pos);
    pos = end + 4;
    size_t eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    size_t sp1 = line.find(' ');
    size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos) {
      QueueError(c, 400, "Bad Request");
      break;
    }
    std::string_view method = line.substr(0, sp1);
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    std::string_view version = line.substr(sp2 + 1);
    bool http10 = version == "HTTP/1.0";
    if (!http10 && version != "HTTP/1.1") {
      QueueError(c, 505, "HTTP Version Not Supported");
      break;
    }
    bool keep_alive = !http10, body = false;
    std::string_view rest = eol == std::string_view::npos ? "" : head.substr(eol + 2);
    while (!rest.empty()) {
      size_t e = rest.find("\r\n");
      std::string_view h = rest.substr(0, e);
      rest = e == std::string_view::npos ? "" : rest.substr(e + 2);
      size_t colon = h.find(':');
      if (colon == std::string_view::npos) continue;
      std::string_view name = h.substr(0, colon), value = h.substr(colon + 1);
      auto is = [&](const char* n) {
        return name.size() == strlen(n) && strncasecmp(name.data(), n, name.size()) == 0;
      };
      if (is("connection")) {
        if (HasToken(value, "close")) keep_alive = false;
        if (http10 && HasToken(value, "keep-alive")) keep_alive = true;
      } else if (is("transfer-encoding") ||
                 (is("content-length") && value.find_first_not_of(" \t0") != std::string::npos)) {
        body = true;
      }
    }
    if (body) {
      QueueError(c, 400, "Bad Request");  // the bench sends no request bodies
      break;
    }
    bool head_only = method == "HEAD";
    if (!head_only && method != "GET") {
      QueueError(c, 405, "Method Not Allowed");
      break;
    }
    std::string_view path = target.substr(0, target.find('?'));
    auto it = g_files.find(path);
    if (it == g_files.end()) {
      QueueError(c, 404, "Not Found");
      break;
    }
    const File& f = it->second;
    const Prebuilt& r = keep_alive ? f.keep_alive : f.close;
    c.out.append(r.bytes, 0, head_only ? r.head_len : r.bytes.size());
    if (!head_only && f.fd >= 0) {
      c.file_fd = f.fd;
      c.file_off = 0;
      c.file_end = f.size;
    }
    if (!keep_alive) c.close_after = true;
  }
  c.in.erase(0, pos);
}

// Sends what is queued; returns false when fd was closed.
bool Flush(int fd) {
  for (;;) {
    Conn& c = g_conns[fd];
    while (c.out_off < c.out.size()) {
      int more = c.file_fd >= 0 ? MSG_MORE : 0;
      ssize_t n = send(fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                       MSG_NOSIGNAL | MSG_DONTWAIT | more);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return SetInterest(fd, EPOLLOUT), true;
        Close(fd);
        return false;
      }
      c.out_off += static_cast<size_t>(n);
    }
    c.out.clear();
    c.out_off = 0;
    while (c.file_fd >= 0 && c.file_off < c.file_end) {
      ssize_t n =
          sendfile(fd, c.file_fd, &c.file_off, static_cast<size_t>(c.file_end - c.file_off));
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return SetInterest(fd, EPOLLOUT), true;
        Close(fd);
        return false;
      }
    }
    c.file_fd = -1;
    if (c.close_after) {
      Close(fd);
      return false;
    }
    Answer(c);  // requests that waited behind a sendfile
    if (c.out.empty()) break;
  }
  SetInterest(fd, EPOLLIN);
  return true;
}

void OnReadable(int fd) {
  for (;;) {
    ssize_t n = recv(fd, g_buf, sizeof(g_buf), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {  // EOF or error: the client is done
      Close(fd);
      return;
    }
    g_conns[fd].in.append(g_buf, static_cast<size_t>(n));
    if (static_cast<size_t>(n) < sizeof(g_buf)) break;
  }
  Conn& c = g_conns[fd];
  if (c.file_fd >= 0 || c.out_off < c.out.size()) return;  // answered after the queue drains
  Answer(c);
  if (!c.out.empty()) Flush(fd);
}

void OnAccept(int listen_fd) {
  for (;;) {
    int c = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN) perror("origin: accept4");
      return;
    }
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (static_cast<size_t>(c) >= g_conns.size()) g_conns.resize(c * 2 + 64);
    g_conns[c] = Conn();
    g_conns[c].open = true;
    g_conns[c].interest = EPOLLIN;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = c;
    epoll_ctl(g_epoll, EPOLL_CTL_ADD, c, &ev);
  }
}

uint16_t ParsePort(const char* s) {
  char* end = nullptr;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 1 || v > 65535) {
    fprintf(stderr, "origin: '%s' is not a port (1-65535)\n", s);
    exit(2);
  }
  return static_cast<uint16_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: origin ROOT_DIR PORT [PORT...]   (every port on 127.0.0.1)\n");
    return 2;
  }
  std::vector<uint16_t> ports;
  for (int i = 2; i < argc; i++) ports.push_back(ParsePort(argv[i]));
  signal(SIGPIPE, SIG_IGN);
  LoadFiles(argv[1]);
  RefreshDate();
  g_epoll = epoll_create1(EPOLL_CLOEXEC);
  g_conns.resize(1024);
  std::vector<int> listeners;
  for (uint16_t port : ports) {
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) < 0 || listen(lfd, 4096) < 0) {
      fprintf(stderr, "origin: cannot listen on 127.0.0.1:%u: %s\n", port, strerror(errno));
      return 1;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = lfd;
    epoll_ctl(g_epoll, EPOLL_CTL_ADD, lfd, &ev);
    listeners.push_back(lfd);
    if (static_cast<size_t>(lfd) >= g_conns.size()) g_conns.resize(lfd * 2 + 64);
  }

  epoll_event events[512];
  for (;;) {
    int n = epoll_wait(g_epoll, events, 512, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      perror("origin: epoll_wait");
      return 1;
    }
    RefreshDate();
    for (int i = 0; i < n; i++) {
      int fd = events[i].data.fd;
      bool is_listener = false;
      for (int l : listeners) is_listener |= (l == fd);
      if (is_listener) {
        OnAccept(fd);
        continue;
      }
      if (!g_conns[fd].open) continue;  // closed earlier in this batch
      uint32_t ev = events[i].events;
      if ((ev & EPOLLOUT) && !Flush(fd)) continue;
      if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        if (g_conns[fd].interest & EPOLLIN) {
          OnReadable(fd);
        } else if (ev & (EPOLLHUP | EPOLLERR)) {
          Close(fd);  // level-triggered hang-up while writing only: it would spin
        }
      }
    }
  }
}
