// The event loop the connection fuzz targets drive by hand: one Dispatcher for the process, turned
// one non-blocking pass at a time, and the peer's end of a socketpair read dry.
#pragma once

#include <unistd.h>

#include <string>

#include "source/event/dispatcher.h"

namespace rpx {
namespace fuzz {

inline Dispatcher& Loop() {
  static Dispatcher* d = new Dispatcher("fuzz");
  return *d;
}

// One pass of the event loop that never blocks (a posted no-op wakes epoll_wait): fires due
// timers (zero-delay ones included), flushes writes and runs deferred deletions.
inline void Turn() {
  Dispatcher& d = Loop();
  d.Post([] {});
  bool ran = false;
  d.RunUntil(
      [&ran] {
        bool r = ran;
        ran = true;
        return r;
      },
      1000);
}

// Appends what is readable on `fd` (non-blocking) to `out`.
inline void DrainPeer(int fd, std::string* out) {
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return;
    out->append(buf, n);
  }
}

}  // namespace fuzz
}  // namespace rpx
