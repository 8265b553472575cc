#include "source/server/hot_restart.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "source/common/assert.h"
#include "source/common/logger.h"
#include "source/network/address.h"

namespace rpx {
namespace {

constexpr int kIoTimeoutS = 10;

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

socklen_t AbstractAddress(const std::string& name, sockaddr_un* sun) {
  memset(sun, 0, sizeof(*sun));
  sun->sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, no file to clean up, gone with the process.
  size_t n = std::min(name.size(), sizeof(sun->sun_path) - 1);
  memcpy(sun->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

void SetTimeouts(int fd) {
  timeval tv{kIoTimeoutS, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

bool SendMessage(int fd, const std::string& text, int pass_fd) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  for (;;) {
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n) == text.size();
    if (errno != EINTR) return false;
  }
}

// One message; `*fd` receives a passed descriptor (close-on-exec) or -1. False on EOF or error.
bool ReceiveMessage(int fd, std::string* text, int* passed) {
  char buf[512];
  iovec iov{buf, sizeof(buf)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  *passed = -1;
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      memcpy(passed, CMSG_DATA(c), sizeof(int));
    }
  }
  text->assign(buf, static_cast<size_t>(n));
  return true;
}

bool IsListeningTcp(int fd) {
  int v = 0;
  socklen_t len = sizeof(v);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) != 0 || !v) return false;
  len = sizeof(v);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) != 0 || v != SOCK_STREAM) return false;
  len = sizeof(v);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) != 0) return false;
  return v == AF_INET || v == AF_INET6;
}

// Every listening TCP socket this process holds: listeners (one per worker with SO_REUSEPORT)
// and admin. Found by descriptor rather than kept in a registry, so nothing can fall out of
// step with the workers that own them.
std::vector<int> ListeningSockets() {
  std::vector<int> out;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return out;
  int self = dirfd(d);
  while (dirent* e = readdir(d)) {
    int fd;
    if (!absl::SimpleAtoi(e->d_name, &fd) || fd == self) continue;
    if (IsListeningTcp(fd)) out.push_back(fd);
  }
  closedir(d);
  return out;
}

}  // namespace

HotRestart::HotRestart(uint32_t base_id, uint32_t epoch)
    : base_id_(base_id), epoch_(epoch), first_start_unix_ms_(UnixMs()) {}

HotRestart::~HotRestart() {
  StopListening();
  if (parent_fd_ >= 0) close(parent_fd_);
  if (successor_fd_ >= 0) {
    successor_event_.reset();
    close(successor_fd_);
  }
  for (int fd : inherited_.TakeRest()) close(fd);
}

std::string HotRestart::SocketName(uint32_t base_id, uint32_t epoch) {
  return absl::StrCat("rpx_hot_restart_", base_id, "_", epoch);
}

bool HotRestart::TakeParentSockets(std::string* error) {
  if (epoch_ == 0) return true;
  std::string name = SocketName(base_id_, epoch_ - 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sun;
  socklen_t len = AbstractAddress(name, &sun);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sun), len) != 0) {
    *error = absl::StrCat("--restart-epoch ", epoch_, ": no rpx of epoch ", epoch_ - 1,
                          " (base id ", base_id_, ") answers on @", name, ": ", strerror(errno));
    close(fd);
    return false;
  }
  SetTimeouts(fd);
  if (!SendMessage(fd, "sockets", -1)) {
    *error = absl::StrCat("hot restart: cannot ask the parent for its sockets: ", strerror(errno));
    close(fd);
    return false;
  }
  for (;;) {
    std::string text;
    int passed;
    if (!ReceiveMessage(fd, &text, &passed)) {
      *error = absl::StrCat("hot restart: the parent (epoch ", epoch_ - 1,
                            ") stopped answering while handing over its sockets",
                            errno ? absl::StrCat(": ", strerror(errno)) : "");
      close(fd);
      return false;
    }
    if (text.rfind("listen ", 0) == 0 && passed >= 0) {
      // Checked again here: the parent's descriptor could have been reused in between.
      if (IsListeningTcp(passed)) {
        inherited_.Add(text.substr(7), passed);
      } else {
        close(passed);
      }
      continue;
    }
    if (passed >= 0) close(passed);
    if (text.rfind("end ", 0) == 0) {
      int64_t start;
      if (absl::SimpleAtoi(text.substr(4), &start) && start > 0) first_start_unix_ms_ = start;
      break;
    }
    *error = absl::StrCat("hot restart: unexpected message from the parent: '", text, "'");
    close(fd);
    return false;
  }
  parent_fd_ = fd;
  RPX_LOG(kInfo, "hot restart: took %zu listening sockets from epoch %u", inherited_.size(),
          epoch_ - 1);
  return true;
}

void HotRestart::ReleaseParent(uint64_t parent_shutdown_ms) {
  for (int fd : inherited_.TakeRest()) close(fd);
  if (parent_fd_ < 0) return;
  if (!SendMessage(parent_fd_, absl::StrCat("drain ", parent_shutdown_ms), -1)) {
    RPX_LOG(kWarn, "hot restart: cannot ask the parent to drain: %s", strerror(errno));
  } else {
    RPX_LOG(kInfo, "hot restart: epoch %u serves; epoch %u drains", epoch_, epoch_ - 1);
  }
  close(parent_fd_);
  parent_fd_ = -1;
}

bool HotRestart::Listen(Dispatcher& main, std::function<void(uint64_t)> on_drain,
                        std::string* error) {
  RPX_ASSERT(listen_fd_ < 0);
  on_drain_ = std::move(on_drain);
  dispatcher_ = &main;
  std::string name = SocketName(base_id_, epoch_);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un sun;
  socklen_t len = AbstractAddress(name, &sun);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sun), len) != 0 || listen(fd, 4) != 0) {
    *error = absl::StrCat(
        "hot restart: cannot listen on @", name, ": ", strerror(errno),
        errno == EADDRINUSE
            ? absl::StrCat(" (another rpx runs with --base-id ", base_id_, " --restart-epoch ",
                           epoch_, "; give this one the next epoch or another base id)")
            : "");
    close(fd);
    return false;
  }
  listen_fd_ = fd;
  listen_event_ = main.CreateFileEvent(
      fd, [this](uint32_t) { OnSuccessor(); }, FileEvent::kRead);
  return true;
}

void HotRestart::StopListening() {
  listen_event_.reset();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

void HotRestart::OnSuccessor() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    if (successor_fd_ >= 0) {
      RPX_LOG(kWarn, "hot restart: a second successor connected while one is starting; refused");
      close(fd);
      continue;
    }
    SetTimeouts(fd);
    successor_fd_ = fd;
    successor_event_ = dispatcher_->CreateFileEvent(
        fd, [this](uint32_t) { OnSuccessorMessage(); }, FileEvent::kRead);
  }
}

void HotRestart::OnSuccessorMessage() {
  std::string text;
  int passed;
  auto end = [this] {
    successor_event_.reset();
    close(successor_fd_);
    successor_fd_ = -1;
  };
  if (!ReceiveMessage(successor_fd_, &text, &passed)) {
    // The successor went away before asking us to drain: we keep serving.
    RPX_LOG(kWarn, "hot restart: epoch %u left before taking over; epoch %u keeps serving",
            epoch_ + 1, epoch_);
    end();
    return;
  }
  if (passed >= 0) close(passed);
  if (text == "sockets") {
    std::vector<int> fds = ListeningSockets();
    for (int fd : fds) {
      if (!SendMessage(successor_fd_, "listen " + SocketAddress::LocalOf(fd).ToString(), fd)) {
        RPX_LOG(kWarn, "hot restart: handing sockets to epoch %u failed: %s", epoch_ + 1,
                strerror(errno));
        end();
        return;
      }
    }
    SendMessage(successor_fd_, absl::StrCat("end ", first_start_unix_ms_), -1);
    RPX_LOG(kInfo, "hot restart: handed %zu listening sockets to epoch %u", fds.size(), epoch_ + 1);
    return;
  }
  if (text.rfind("drain ", 0) == 0) {
    uint64_t max_ms = 0;
    if (!absl::SimpleAtoi(text.substr(6), &max_ms)) max_ms = 0;
    end();
    StopListening();  // one handover per process
    RPX_LOG(kInfo, "hot restart: epoch %u took over; draining", epoch_ + 1);
    if (on_drain_) on_drain_(max_ms);
    return;
  }
  RPX_LOG(kWarn, "hot restart: unexpected message from epoch %u: '%s'", epoch_ + 1, text);
  end();
}

}  // namespace rpx
