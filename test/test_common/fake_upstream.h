// FakeUpstream: a blocking HTTP/1.1 server on 127.0.0.1 for unit tests, one thread per
// connection. It answers every request with "200 ok" (keep-alive) unless told to hold responses,
// and counts the TCP connections it accepted. Thread-safe counters; stops in its destructor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace rpx {

class FakeUpstream {
 public:
  FakeUpstream();
  ~FakeUpstream();
  uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }
  int requests() const { return requests_.load(); }
  int responses() const { return responses_.load(); }  // written to the socket
  int open_connections() const { return open_.load(); }
  // While held, requests are read but not answered until Release().
  void Hold() { hold_.store(true); }
  void Release();

 private:
  void AcceptLoop();
  void Serve(int fd);
  int listen_fd_;
  uint16_t port_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> hold_{false};
  std::atomic<int> connections_{0}, requests_{0}, responses_{0}, open_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  std::vector<int> fds_;
  std::thread acceptor_;
};

}  // namespace rpx
