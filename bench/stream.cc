// stream: one long TCP byte stream, for the TCP proxy throughput row (bench/tcp_stream.sh).
//
//   stream sink PORT                 accepts on 127.0.0.1:PORT; per connection reads until the
//                                    peer's end of stream, then answers the byte count (8 bytes)
//                                    and closes
//   stream send PORT BYTES           connects to 127.0.0.1:PORT, sends BYTES (from one 1 MiB
//                                    buffer), shuts its sending side down, waits for the count;
//                                    prints "bytes seconds GB/s" and exits 1 if the count differs
//
// Plain blocking sockets, 1 MiB buffers: the tool should cost as little per byte as the kernel
// lets it, so that what a proxy in the middle adds is what is measured.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kBuf = 1 << 20;

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

int Sink(int port) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = Loopback(port);
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(l, 16) != 0) {
    perror("stream sink: bind/listen");
    return 2;
  }
  std::printf("listening on %d\n", port);
  std::fflush(stdout);
  std::vector<char> buf(kBuf);
  while (true) {
    int c = accept(l, nullptr, nullptr);
    if (c < 0) continue;
    uint64_t total = 0;
    while (true) {
      ssize_t n = recv(c, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      total += static_cast<uint64_t>(n);
    }
    (void)!send(c, &total, sizeof(total), MSG_NOSIGNAL);
    close(c);
  }
}

int Send(int port, uint64_t bytes) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = Loopback(port);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    perror("stream send: connect");
    return 2;
  }
  std::vector<char> buf(kBuf, 'x');
  auto start = std::chrono::steady_clock::now();
  uint64_t sent = 0;
  while (sent < bytes) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - sent));
    ssize_t n = send(s, buf.data(), want, MSG_NOSIGNAL);
    if (n <= 0) {
      perror("stream send: send");
      return 2;
    }
    sent += static_cast<uint64_t>(n);
  }
  shutdown(s, SHUT_WR);
  uint64_t got = 0;
  size_t have = 0;
  while (have < sizeof(got)) {
    ssize_t n = recv(s, reinterpret_cast<char*>(&got) + have, sizeof(got) - have, 0);
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%llu %.3f %.2f\n", static_cast<unsigned long long>(got), secs,
              static_cast<double>(got) / secs / 1e9);
  close(s);
  return got == bytes ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "sink") == 0) return Sink(std::atoi(argv[2]));
  if (argc == 4 && std::strcmp(argv[1], "send") == 0) {
    return Send(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10));
  }
  std::fprintf(stderr, "usage: stream sink PORT | stream send PORT BYTES\n");
  return 2;
}
