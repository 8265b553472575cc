#include "source/network/dns_resolver.h"

#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "source/common/assert.h"
#include "source/event/dispatcher.h"

namespace rpx {
namespace {

// c-ares wants one process-wide initialisation before the first channel.
bool InitCaresOnce() {
  static const int status = ares_library_init(ARES_LIB_INIT_ALL);
  return status == ARES_SUCCESS;
}

absl::Status StatusOf(int ares_status, const std::string& name) {
  std::string what = absl::StrCat("resolving '", name, "': ", ares_strerror(ares_status));
  switch (ares_status) {
    case ARES_SUCCESS:
      return absl::OkStatus();
    case ARES_ENOTFOUND:
    case ARES_ENODATA:
    case ARES_ENONAME:
      return absl::NotFoundError(what);
    case ARES_ETIMEOUT:
      return absl::DeadlineExceededError(what);
    default:
      return absl::UnavailableError(what);
  }
}

}  // namespace

class CaresDnsResolver::Impl {
 public:
  struct PendingQuery final : public DnsResolver::Query {
    Impl* impl = nullptr;
    std::string name;
    Callback callback;
    bool cancelled = false;
    // c-ares is done with it (it no longer holds the pointer); the answer waits in `status` /
    // `answers` for `deliver` when it came within Resolve().
    bool finished = false;
    absl::Status status;
    std::vector<Answer> answers;
    std::unique_ptr<Timer> deliver;

    void Cancel() override {
      RPX_ASSERT(!cancelled);
      cancelled = true;
      callback = nullptr;  // what it captured goes now, not when c-ares lets go
      if (finished) impl->Forget(this);
    }
  };

  Impl(Dispatcher& d) : dispatcher_(d) {}

  ~Impl() {
    destroying_ = true;
    if (channel_) ares_destroy(channel_);  // calls every pending query back: ARES_EDESTRUCTION
    sockets_.clear();
    queries_.clear();
  }

  absl::Status Init(const DnsResolverOptions& options) {
    if (!InitCaresOnce()) return absl::InternalError("c-ares: library initialisation failed");
    ares_options o{};
    int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_FLAGS;
    o.sock_state_cb = &Impl::OnSockState;
    o.sock_state_cb_data = this;
    o.flags = 0;
    if (options.use_tcp) o.flags |= ARES_FLAG_USEVC;
    if (options.no_search) o.flags |= ARES_FLAG_NOSEARCH;
    if (options.timeout_ms) {
      mask |= ARES_OPT_TIMEOUTMS;
      o.timeout = static_cast<int>(options.timeout_ms);
    }
    if (options.tries) {
      mask |= ARES_OPT_TRIES;
      o.tries = static_cast<int>(options.tries);
    }
    int rc = ares_init_options(&channel_, &o, mask);
    if (rc != ARES_SUCCESS) {
      channel_ = nullptr;
      return absl::InternalError(absl::StrCat("c-ares: ", ares_strerror(rc)));
    }
    if (!options.servers.empty()) {
      std::vector<ares_addr_port_node> nodes(options.servers.size());
      for (size_t i = 0; i < options.servers.size(); ++i) {
        const SocketAddress& s = options.servers[i];
        ares_addr_port_node& n = nodes[i];
        n.next = i + 1 < nodes.size() ? &nodes[i + 1] : nullptr;
        n.family = s.family();
        if (s.family() == AF_INET) {
          n.addr.addr4 = reinterpret_cast<const sockaddr_in*>(s.sa())->sin_addr;
        } else {
          memcpy(&n.addr.addr6, &reinterpret_cast<const sockaddr_in6*>(s.sa())->sin6_addr, 16);
        }
        int port = s.port() ? s.port() : 53;
        n.udp_port = port;
        n.tcp_port = port;
      }
      rc = ares_set_servers_ports(channel_, nodes.data());
      if (rc != ARES_SUCCESS) {
        return absl::InvalidArgumentError(absl::StrCat("c-ares servers: ", ares_strerror(rc)));
      }
    }
    timer_ = dispatcher_.CreateTimer([this] {
      ares_process_fd(channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // retransmit, time out
      UpdateTimer();
    });
    return absl::OkStatus();
  }

  Query* Resolve(const std::string& name, Family family, Callback callback) {
    auto owned = std::make_unique<PendingQuery>();
    PendingQuery* q = owned.get();
    q->impl = this;
    q->name = name;
    q->callback = std::move(callback);
    queries_[q] = std::move(owned);
    // IP literals need no query (and c-ares would send one for a literal of the other family).
    SocketAddress literal;
    if (ParseLiteral(name, &literal)) {
      bool fits =
          family == Family::kAny || (family == Family::kV4) == (literal.family() == AF_INET);
      q->finished = true;
      if (fits) {
        q->answers.push_back({literal, 0});
      } else {
        q->status = absl::NotFoundError(absl::StrCat("'", name, "' is an IPv",
                                                     literal.family() == AF_INET ? "4" : "6",
                                                     " address; the other family was asked for"));
      }
    } else {
      ares_addrinfo_hints hints{};
      hints.ai_family =
          family == Family::kV4 ? AF_INET : (family == Family::kV6 ? AF_INET6 : AF_UNSPEC);
      hints.ai_flags = ARES_AI_NOSORT;  // the server's order: LOGICAL_DNS takes the first
      in_resolve_ = true;
      ares_getaddrinfo(channel_, name.c_str(), nullptr, &hints, &Impl::OnAddrInfo, q);
      in_resolve_ = false;
    }
    if (q->finished) {
      // Answered at once (a literal, /etc/hosts, a bad name): called back on a later iteration,
      // never from inside Resolve().
      q->deliver = dispatcher_.CreateTimer([this, q] { Deliver(q); });
      q->deliver->Enable(0);
    }
    UpdateTimer();
    return q;
  }

  size_t pending() const {
    size_t n = 0;
    for (const auto& [q, owned] : queries_) n += !q->cancelled;
    return n;
  }

  void Forget(PendingQuery* q) { queries_.erase(q); }

 private:
  static bool ParseLiteral(const std::string& name, SocketAddress* out) {
    in6_addr a6;
    in_addr a4;
    if (inet_pton(AF_INET, name.c_str(), &a4) != 1 && inet_pton(AF_INET6, name.c_str(), &a6) != 1) {
      return false;
    }
    auto parsed = SocketAddress::FromIpPort(name, 0);
    if (!parsed.ok()) return false;
    *out = *parsed;
    return true;
  }

  static void OnAddrInfo(void* arg, int status, int /*timeouts*/, ares_addrinfo* res) {
    auto* q = static_cast<PendingQuery*>(arg);
    Impl* self = q->impl;
    if (status == ARES_EDESTRUCTION || status == ARES_ECANCELLED || self->destroying_) {
      if (res) ares_freeaddrinfo(res);
      self->Forget(q);
      return;
    }
    q->finished = true;
    q->status = StatusOf(status, q->name);
    if (status == ARES_SUCCESS && res) {
      for (ares_addrinfo_node* n = res->nodes; n; n = n->ai_next) {
        if (n->ai_family != AF_INET && n->ai_family != AF_INET6) continue;
        Answer a;
        a.address = SocketAddress::FromSockaddr(n->ai_addr, n->ai_addrlen);
        a.ttl_s = n->ai_ttl > 0 ? static_cast<uint32_t>(n->ai_ttl) : 0;
        q->answers.push_back(std::move(a));
      }
      if (q->answers.empty()) {
        q->status = absl::NotFoundError(absl::StrCat("'", q->name, "' has no address"));
      }
    }
    if (res) ares_freeaddrinfo(res);
    if (q->cancelled) {
      self->Forget(q);
      return;
    }
    if (self->in_resolve_) return;  // Resolve() schedules the delivery
    self->Deliver(q);
  }

  void Deliver(PendingQuery* q) {
    RPX_ASSERT(q->finished && !q->cancelled);
    Callback cb = std::move(q->callback);
    absl::Status status = std::move(q->status);
    std::vector<Answer> answers = std::move(q->answers);
    // Freed before the call: the callback may start new queries, and the handle is dead to the
    // caller once its callback runs.
    Forget(q);
    if (cb) cb(status, std::move(answers));
  }

  static void OnSockState(void* data, ares_socket_t fd, int readable, int writable) {
    auto* self = static_cast<Impl*>(data);
    if (!readable && !writable) {
      auto it = self->sockets_.find(fd);
      if (it == self->sockets_.end()) return;
      if (self->destroying_) {
        self->sockets_.erase(it);
        return;
      }
      // c-ares closes the socket next; this may run inside the event's own callback, so the
      // event is taken out of epoll now and freed after the batch.
      it->second->Unregister();
      struct Doomed : DeferredDeletable {
        std::unique_ptr<FileEvent> event;
      };
      auto doomed = std::make_unique<Doomed>();
      doomed->event = std::move(it->second);
      self->sockets_.erase(it);
      self->dispatcher_.DeferredDelete(std::move(doomed));
      return;
    }
    uint32_t interest = (readable ? FileEvent::kRead : 0) | (writable ? FileEvent::kWrite : 0);
    auto it = self->sockets_.find(fd);
    if (it != self->sockets_.end()) {
      it->second->SetInterest(interest);
      return;
    }
    self->sockets_[fd] = self->dispatcher_.CreateFileEvent(
        fd,
        [self, fd](uint32_t events) {
          bool read = events & (FileEvent::kRead | FileEvent::kClosed | FileEvent::kPeerClosed);
          bool write = events & FileEvent::kWrite;
          ares_process_fd(self->channel_, read ? fd : ARES_SOCKET_BAD,
                          write ? fd : ARES_SOCKET_BAD);
          self->UpdateTimer();
        },
        interest);
  }

  // c-ares's next deadline (a retransmission or a timeout), if any query is in flight.
  void UpdateTimer() {
    timeval tv;
    if (ares_timeout(channel_, nullptr, &tv)) {
      timer_->Enable(static_cast<uint64_t>(tv.tv_sec) * 1000 + (tv.tv_usec + 999) / 1000);
    } else {
      timer_->Disable();
    }
  }

  Dispatcher& dispatcher_;
  ares_channel channel_ = nullptr;
  std::unique_ptr<Timer> timer_;
  std::unordered_map<int, std::unique_ptr<FileEvent>> sockets_;
  std::unordered_map<PendingQuery*, std::unique_ptr<PendingQuery>> queries_;
  bool in_resolve_ = false;
  bool destroying_ = false;
};

absl::StatusOr<std::unique_ptr<CaresDnsResolver>> CaresDnsResolver::Create(
    Dispatcher& dispatcher, const DnsResolverOptions& options) {
  auto impl = std::make_unique<Impl>(dispatcher);
  absl::Status s = impl->Init(options);
  if (!s.ok()) return s;
  return std::unique_ptr<CaresDnsResolver>(new CaresDnsResolver(std::move(impl)));
}

CaresDnsResolver::CaresDnsResolver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CaresDnsResolver::~CaresDnsResolver() = default;

DnsResolver::Query* CaresDnsResolver::Resolve(const std::string& name, Family family,
                                              Callback callback) {
  return impl_->Resolve(name, family, std::move(callback));
}

size_t CaresDnsResolver::pending() const { return impl_->pending(); }

}  // namespace rpx
