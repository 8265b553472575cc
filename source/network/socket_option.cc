#include "source/network/socket_option.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rpx {

std::string SocketOption::Describe() const {
  std::string numbers = absl::StrCat("level ", level, ", name ", name);
  if (description.empty()) return absl::StrCat("socket option (", numbers, ")");
  return absl::StrCat("socket option '", description, "' (", numbers, ")");
}

absl::Status ApplySocketOptions(int fd, const SocketOptions& options, SocketOption::State state) {
  for (const SocketOption& o : options) {
    if (o.state != state) continue;
    int rc = o.is_int ? ::setsockopt(fd, o.level, o.name, &o.int_value, sizeof(o.int_value))
                      : ::setsockopt(fd, o.level, o.name, o.buf_value.data(),
                                     static_cast<socklen_t>(o.buf_value.size()));
    if (rc != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("setting ", o.Describe(), ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace rpx
