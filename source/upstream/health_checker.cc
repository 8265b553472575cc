#include "source/upstream/health_checker.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "source/common/assert.h"
#include "source/common/logger.h"
#include "source/tls/tls_transport.h"

namespace rpx {

struct HealthChecker::Session {
  std::shared_ptr<const Host> host;
  SocketAddress address;  // where probes go (the host's, or alt_port)
  int fd = -1;
  std::unique_ptr<FileEvent> event;
  std::unique_ptr<Timer> next;     // the next probe
  std::unique_ptr<Timer> timeout;  // the probe in flight
  bool connected = false;
  // A TLS cluster's probes speak TLS as its requests do (the host's transport, its SNI).
  std::unique_ptr<TlsTransport> tls;
  bool handshaken = false;
  std::string out;    // what is still to be sent
  std::string in;     // what came back
  bool first = true;  // no verdict yet: one passing probe makes it healthy
  uint32_t passes = 0, fails = 0;

  void Close() {
    event.reset();
    if (tls && fd >= 0) tls->Shutdown(fd);
    tls.reset();
    handshaken = false;
    if (fd >= 0) ::close(fd);
    fd = -1;
    connected = false;
    out.clear();
    in.clear();
    if (timeout) timeout->Disable();
  }
};

namespace {

bool InRanges(int64_t status, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  for (const auto& [lo, hi] : ranges) {
    if (status >= lo && status < hi) return true;
  }
  return false;
}

// Each piece found in `data` after the previous one (Envoy's TCP receive check).
bool HoldsInOrder(const std::string& data, const std::vector<std::string>& pieces) {
  size_t at = 0;
  for (const auto& p : pieces) {
    size_t found = data.find(p, at);
    if (found == std::string::npos) return false;
    at = found + p.size();
  }
  return true;
}

}  // namespace

HealthChecker::HealthChecker(Dispatcher& main, const ClusterEntry& entry,
                             std::function<void(const std::string&)> on_pass)
    : main_(main), on_pass_(std::move(on_pass)) {
  Update(entry);
}

HealthChecker::~HealthChecker() {
  for (auto& [addr, s] : sessions_) s->Close();
}

void HealthChecker::Update(const ClusterEntry& entry) {
  info_ = entry.info;
  hosts_ = entry.hosts ? entry.hosts : std::make_shared<const HostSet>();
  RPX_ASSERT(info_->health_check && info_->health);
  const HealthCheckConfig& c = *info_->health_check;
  std::map<std::string, std::unique_ptr<Session>> next;
  if (entry.hosts) {
    for (const auto& h : *entry.hosts) {
      std::string key = h->address.ToString();
      if (next.count(key)) continue;  // the same endpoint twice: one session checks it
      auto old = sessions_.find(key);
      std::unique_ptr<Session> s;
      if (old != sessions_.end()) {
        s = std::move(old->second);
        sessions_.erase(old);
        // The host's new object carries the verdict before any worker sees it.
        h->failed_active_hc.store(s->host->failed_active_hc.load(std::memory_order_relaxed),
                                  std::memory_order_relaxed);
        s->host = h;
      } else {
        s = std::make_unique<Session>();
        s->host = h;
        h->failed_active_hc.store(true, std::memory_order_relaxed);  // until a probe passes
        Session* raw = s.get();
        s->next = main_.CreateTimer([this, raw] { Probe(*raw); });
        s->timeout =
            main_.CreateTimer([this, raw] { Finish(*raw, false, true, false, "timed out"); });
        uint64_t jitter = c.initial_jitter_ms ? rng_() % c.initial_jitter_ms : 0;
        Schedule(*s, jitter);
      }
      s->address = h->address;
      if (c.alt_port) {
        if (s->address.family() == AF_INET) {
          reinterpret_cast<sockaddr_in*>(&s->address.storage)->sin_port = htons(c.alt_port);
        } else {
          reinterpret_cast<sockaddr_in6*>(&s->address.storage)->sin6_port = htons(c.alt_port);
        }
      }
      next[key] = std::move(s);
    }
  }
  for (auto& [key, s] : sessions_) s->Close();  // hosts that left
  sessions_ = std::move(next);
  Publish();
}

void HealthChecker::Publish() { PublishHealth(*info_->health, *hosts_); }

void HealthChecker::Schedule(Session& s, uint64_t delay_ms) { s.next->Enable(delay_ms); }

void HealthChecker::Probe(Session& s) {
  const HealthCheckConfig& c = *info_->health_check;
  s.Close();
  info_->health->attempt.fetch_add(1, std::memory_order_relaxed);
  s.fd = ::socket(s.address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s.fd < 0) {
    Finish(s, false, true, false, absl::StrCat("socket: ", strerror(errno)));
    return;
  }
  int one = 1;
  setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (c.kind == HealthCheckConfig::Kind::kHttp) {
    std::string host = c.host.empty() ? info_->name : c.host;
    s.out = absl::StrCat(c.method, " ", c.path, " HTTP/1.1\r\nHost: ", host, "\r\n");
    if (c.send_user_agent) s.out += "User-Agent: Envoy/HC\r\n";
    for (const auto& [k, v] : c.headers_to_add) absl::StrAppend(&s.out, k, ": ", v, "\r\n");
    s.out += "Connection: close\r\n\r\n";
  } else {
    s.out = c.send;
  }
  const ClusterInfo::Transport& transport = info_->TransportFor(*s.host);
  if (transport.tls_required) {
    if (!transport.tls) {
      Finish(s, false, true, false, "the TLS context is still waiting for its SDS secrets");
      return;
    }
    // As the cluster's requests: its SNI, or with auto_sni the name the probe asks for.
    std::string name = c.host.empty() ? info_->name : c.host;
    std::string sni = info_->auto_sni ? name : transport.sni;
    s.tls = std::make_unique<TlsTransport>(transport.tls, sni, nullptr,
                                           info_->auto_san_validation ? name : "");
  }
  int r = ::connect(s.fd, s.address.sa(), s.address.len);
  if (r < 0 && errno != EINPROGRESS) {
    Finish(s, false, true, false, absl::StrCat("connect: ", strerror(errno)));
    return;
  }
  Session* raw = &s;
  s.event = main_.CreateFileEvent(
      s.fd, [this, raw](uint32_t events) { OnSocket(*raw, events); },
      FileEvent::kWrite | FileEvent::kRead);
  s.timeout->Enable(c.timeout_ms);
}

void HealthChecker::OnSocket(Session& s, uint32_t events) {
  const HealthCheckConfig& c = *info_->health_check;
  if (!s.connected) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      Finish(s, false, true, false, absl::StrCat("connect: ", strerror(err)));
      return;
    }
    if (!(events & (FileEvent::kWrite | FileEvent::kRead))) return;
    s.connected = true;
  }
  if (s.tls && !s.handshaken) {
    switch (s.tls->Handshake(s.fd)) {
      case TransportSocket::HandshakeResult::kDone:
        s.handshaken = true;
        break;
      case TransportSocket::HandshakeResult::kWantRead:
        s.event->SetInterest(FileEvent::kRead);
        return;
      case TransportSocket::HandshakeResult::kWantWrite:
        s.event->SetInterest(FileEvent::kWrite);
        return;
      case TransportSocket::HandshakeResult::kFailed:
        Finish(s, false, true, false, absl::StrCat("TLS handshake: ", s.tls->FailureReason()));
        return;
    }
  }
  if (c.kind == HealthCheckConfig::Kind::kTcp && c.send.empty() && c.receive.empty()) {
    Finish(s, true, false, false, "");  // connecting (and the handshake) is all it asks
    return;
  }
  TransportSocket* t = s.tls ? static_cast<TransportSocket*>(s.tls.get())
                             : static_cast<TransportSocket*>(&RawTransport::Instance());
  while (!s.out.empty()) {
    ssize_t n = t->Write(s.fd, s.out.data(), s.out.size(), false);
    if (n < 0) {
      if (n == -EAGAIN) break;
      Finish(s, false, true, false, absl::StrCat("send: ", strerror(static_cast<int>(-n))));
      return;
    }
    s.out.erase(0, n);
  }
  if (c.kind == HealthCheckConfig::Kind::kTcp && c.receive.empty() && s.out.empty()) {
    Finish(s, true, false, false, "");
    return;
  }
  s.event->SetInterest(s.out.empty() ? FileEvent::kRead : FileEvent::kRead | FileEvent::kWrite);
  bool eof = false;
  char buf[4096];
  while (s.in.size() < 65536) {
    ssize_t n = t->Read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      s.in.append(buf, n);
      continue;
    }
    if (n == 0) eof = true;
    if (n < 0 && n != -EAGAIN) eof = true;
    break;
  }
  if (c.kind == HealthCheckConfig::Kind::kTcp) {
    if (HoldsInOrder(s.in, c.receive)) {
      Finish(s, true, false, false, "");
    } else if (eof || s.in.size() >= 65536) {
      Finish(s, false, false, false, "the answer does not hold the expected bytes");
    }
    return;
  }
  size_t line_end = s.in.find("\r\n");
  if (line_end == std::string::npos) {
    if (eof) Finish(s, false, true, false, "closed before a status line");
    return;
  }
  // "HTTP/1.1 200 OK"
  std::string line = s.in.substr(0, line_end);
  int status = 0;
  if (line.size() < 12 || line.compare(0, 7, "HTTP/1.") != 0 || line[8] != ' ' ||
      sscanf(line.c_str() + 9, "%3d", &status) != 1) {
    Finish(s, false, false, true, absl::StrCat("not an HTTP response: '", line.substr(0, 40), "'"));
    return;
  }
  if (InRanges(status, c.expected_statuses)) {
    Finish(s, true, false, false, "");
  } else {
    // A status outside expected_statuses fails the host at once, unless it is retriable.
    bool retriable = InRanges(status, c.retriable_statuses);
    Finish(s, false, false, !retriable, absl::StrCat("status ", status));
  }
}

void HealthChecker::Finish(Session& s, bool passed, bool network, bool immediate,
                           const std::string& why) {
  const HealthCheckConfig& c = *info_->health_check;
  ClusterHealth& h = *info_->health;
  s.Close();
  bool failed = s.host->failed_active_hc.load(std::memory_order_relaxed);
  bool edge = false;
  if (passed) {
    h.success.fetch_add(1, std::memory_order_relaxed);
    if (on_pass_) on_pass_(s.host->address.ToString());
    s.fails = 0;
    ++s.passes;
    if (failed && (s.first || s.passes >= c.healthy_threshold)) {
      s.host->failed_active_hc.store(false, std::memory_order_relaxed);
      edge = true;
      RPX_LOG(kInfo, "cluster '%s': host %s is healthy", info_->name, s.host->address.ToString());
    }
  } else {
    (network ? h.network_failure : h.failure).fetch_add(1, std::memory_order_relaxed);
    s.passes = 0;
    ++s.fails;
    if (!failed && (immediate || s.fails >= c.unhealthy_threshold)) {
      s.host->failed_active_hc.store(true, std::memory_order_relaxed);
      edge = true;
      RPX_LOG(kWarn,
              "cluster '%s': host %s failed its health check (%s); no traffic until it "
              "passes again",
              info_->name, s.host->address.ToString(), why);
    } else if (c.always_log_failures) {
      RPX_LOG(kWarn, "cluster '%s': health check of %s failed: %s", info_->name,
              s.host->address.ToString(), why);
    }
  }
  s.first = false;
  if (edge) Publish();
  Schedule(s, NextInterval(s, edge));
}

uint64_t HealthChecker::NextInterval(const Session& s, bool edge) {
  const HealthCheckConfig& c = *info_->health_check;
  bool failed = s.host->failed_active_hc.load(std::memory_order_relaxed);
  uint64_t traffic = 0;
  for (uint32_t i = 0; i < info_->stats_slots; ++i)
    traffic += info_->stats[i].upstream_rq_total.Value();
  uint64_t base;
  if (traffic == 0) {
    // Envoy's no_traffic intervals, until the cluster carries a request.
    base = failed ? c.no_traffic_interval_ms : c.no_traffic_healthy_interval_ms;
  } else if (failed) {
    uint64_t unhealthy = c.unhealthy_interval_ms ? c.unhealthy_interval_ms : c.interval_ms;
    base = edge && c.unhealthy_edge_interval_ms ? c.unhealthy_edge_interval_ms : unhealthy;
  } else {
    base = edge && c.healthy_edge_interval_ms ? c.healthy_edge_interval_ms : c.interval_ms;
  }
  uint64_t jitter = c.interval_jitter_ms ? rng_() % c.interval_jitter_ms : 0;
  if (c.interval_jitter_percent) {
    uint64_t span = base * c.interval_jitter_percent / 100;
    if (span) jitter += rng_() % span;
  }
  return base + jitter;
}

HealthCheckers::HealthCheckers(Dispatcher& main) : main_(main) {}

HealthCheckers::~HealthCheckers() {
  checkers_.clear();  // before the detectors their probes report to
  detectors_.clear();
}

void HealthCheckers::Sync(const ClusterMap& clusters) {
  auto gone = [&clusters](const std::string& name, bool (*wanted)(const ClusterInfo&)) {
    auto c = clusters.find(name);
    return c == clusters.end() || !wanted(*c->second.info);
  };
  for (auto it = checkers_.begin(); it != checkers_.end();) {
    it = gone(it->first, [](const ClusterInfo& i) { return i.health_check != nullptr; })
             ? checkers_.erase(it)
             : std::next(it);
  }
  for (auto it = detectors_.begin(); it != detectors_.end();) {
    it = gone(it->first, [](const ClusterInfo& i) { return i.outlier != nullptr; })
             ? detectors_.erase(it)
             : std::next(it);
  }
  for (const auto& [name, entry] : clusters) {
    if (entry.info->outlier) {
      auto it = detectors_.find(name);
      if (it == detectors_.end()) {
        detectors_[name] = std::make_unique<OutlierDetector>(main_, entry);
      } else {
        it->second->Update(entry);
      }
    }
    if (entry.info->health_check) {
      auto it = checkers_.find(name);
      if (it == checkers_.end()) {
        std::string cluster = name;
        checkers_[name] = std::make_unique<HealthChecker>(
            main_, entry, [this, cluster](const std::string& address) {
              auto d = detectors_.find(cluster);
              if (d != detectors_.end()) d->second->OnHealthCheckPassed(address);
            });
      } else {
        it->second->Update(entry);
      }
    }
  }
}

}  // namespace rpx
