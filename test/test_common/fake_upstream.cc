#include "test/test_common/fake_upstream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace rpx {

FakeUpstream::FakeUpstream() {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  listen(listen_fd_, 128);
  socklen_t len = sizeof(a);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FakeUpstream::~FakeUpstream() {
  stop_.store(true);
  Release();
  shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  close(listen_fd_);
  {
    std::lock_guard<std::mutex> l(mu_);
    for (int fd : fds_) {
      if (fd >= 0) shutdown(fd, SHUT_RDWR);
    }
  }
  for (auto& t : threads_) t.join();
}

void FakeUpstream::Release() {
  {
    std::lock_guard<std::mutex> l(mu_);
    hold_.store(false);
  }
  cv_.notify_all();
}

void FakeUpstream::AcceptLoop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    connections_++;
    open_++;
    std::lock_guard<std::mutex> l(mu_);
    fds_.push_back(fd);
    threads_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeUpstream::Serve(int fd) {
  std::string in;
  char buf[4096];
  while (!stop_.load()) {
    size_t end = in.find("\r\n\r\n");
    if (end == std::string::npos) {
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      in.append(buf, n);
      continue;
    }
    in.erase(0, end + 4);  // requests in these tests have no body
    requests_++;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return !hold_.load() || stop_.load(); });
    }
    static const char kResp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    if (write(fd, kResp, sizeof(kResp) - 1) < 0) break;
    responses_++;
  }
  open_--;
  std::lock_guard<std::mutex> l(mu_);
  for (int& f : fds_) {
    if (f == fd) f = -1;
  }
  close(fd);
}

}  // namespace rpx
