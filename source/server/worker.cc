#include "source/server/worker.h"

#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "source/common/assert.h"
#include "source/common/logger.h"
#include "source/network/http_inspector.h"
#include "source/network/original_dst.h"
#include "source/tls/tls_transport.h"

namespace rpx {

Worker::Worker(uint32_t index)
    : index_(index),
      dispatcher_(absl::StrCat("worker_", index)),
      random_(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
              (0x5bd1e995ULL * (index + 1))),
      clusters_(dispatcher_, index) {
  dispatcher_.set_worker_index(index);
}

Worker::~Worker() { Stop(); }

void Worker::Start(std::shared_ptr<const ClusterMap> clusters) {
  clusters_.Apply(*clusters);
  thread_ = std::thread([this] {
    RPX_LOG(kDebug, "worker %u started", index_);
    std::unique_ptr<Timer> log_flush;
    if (log_files_) {
      log_flush = dispatcher_.CreateTimer([this, &log_flush] {
        for (const auto& f : log_files_->Files()) f->FlushWorker(index_);
        log_flush->Enable(1000);
      });
      log_flush->Enable(1000);
    }
    dispatcher_.Run();
    log_flush.reset();
    // Tear down on this thread: connections and pools belong to it.
    listeners_.clear();
    draining_.clear();
    for (auto& [due, fd] : delayed_rejects_) ::close(fd);
    delayed_rejects_.clear();
    reject_timer_.reset();
    clusters_.Apply(ClusterMap());
    RPX_LOG(kDebug, "worker %u stopped", index_);
  });
}

void Worker::AddListener(std::shared_ptr<const ListenerConfig> config, int fd) {
  dispatcher_.Post([this, config, fd] { AddListenerNow(config, fd); });
}

void Worker::AddListenerNow(std::shared_ptr<const ListenerConfig> config, int fd) {
  // -1: the listener's one socket is another worker's (no SO_REUSEPORT); but a listener without
  // a socket (bind_to_port false) exists on every worker, to take hand-offs.
  if (fd < 0 && config->bind_to_port) return;
  if (stopped_accepting_) {  // draining for shutdown: a listener added now takes nothing
    if (fd >= 0) ::close(fd);
    return;
  }
  auto l = std::make_unique<ActiveListener>();
  l->worker = this;
  l->config = config;
  UpdateRouters(*l);
  ActiveListener* raw = l.get();
  Listener::AcceptCallback accept = [this, raw](int cfd, const SocketAddress& peer) {
    OnAccept(*raw, cfd, peer);
  };
  if (fd >= 0) l->listener = std::make_unique<Listener>(dispatcher_, fd, accept);
  auto it = listeners_.find(config->name);
  if (it != listeners_.end()) {
    // Replaced under the same name (a new address or new socket options): the old socket
    // closes and its connections drain; with none left it is freed at once. Connections already
    // queued on it go to the new listener (closing the socket would reset them).
    if (it->second->listener) {
      it->second->listener->TakeQueued(accept);
    }
    it->second->listener.reset();
    EndInspections(*it->second);
    std::vector<DownstreamConnection*> open = it->second->connections.Snapshot();
    if (!open.empty()) {
      ActiveListener* raw_old = it->second.get();
      raw_old->drain_timer = dispatcher_.CreateTimer([this, raw_old] { FinishDrain(raw_old); });
      raw_old->drain_timer->Enable(drain_ms_);
      draining_.push_back(std::move(it->second));
    }
    listeners_.erase(it);
    for (auto* c : open) c->CloseWhenIdle();
  }
  listeners_.emplace(config->name, std::move(l));
  RebuildAddressIndex();
}

void Worker::RebuildAddressIndex() {
  by_address_.clear();
  bool used = false;
  for (const auto& [name, l] : listeners_) used |= l->config->use_original_dst;
  if (!used) return;
  for (const auto& [name, l] : listeners_) {
    by_address_.emplace(l->config->address.ToString(), l.get());
  }
}

Worker::ActiveListener* Worker::ListenerFor(const SocketAddress& dst) {
  auto it = by_address_.find(dst.ToString());
  if (it == by_address_.end()) it = by_address_.find(dst.AnyWithPort().ToString());
  return it == by_address_.end() ? nullptr : it->second;
}

void Worker::UpdateListener(std::shared_ptr<const ListenerConfig> config,
                            std::function<void()> applied) {
  dispatcher_.Post([this, config, applied] {
    auto it = listeners_.find(config->name);
    if (it != listeners_.end()) {
      ActiveListener& l = *it->second;
      l.config = config;
      UpdateRouters(l);
      RebuildAddressIndex();
    }
    if (applied) applied();
  });
}

void Worker::RemoveListener(const std::string& name, uint64_t drain_ms) {
  dispatcher_.Post([this, name, drain_ms] {
    auto it = listeners_.find(name);
    if (it == listeners_.end()) return;
    std::unique_ptr<ActiveListener> l = std::move(it->second);
    listeners_.erase(it);
    RebuildAddressIndex();
    l->listener.reset();  // stop accepting; the socket closes
    EndInspections(*l);
    std::vector<DownstreamConnection*> open = l->connections.Snapshot();
    ActiveListener* raw = l.get();
    if (!open.empty()) {
      l->drain_timer = dispatcher_.CreateTimer([this, raw] { FinishDrain(raw); });
      l->drain_timer->Enable(drain_ms);
      draining_.push_back(std::move(l));
    }
    // Closing an idle connection runs its OnClosed, which edits the list: iterate a copy.
    for (auto* c : open) c->CloseWhenIdle();
  });
}

void Worker::FinishDrain(ActiveListener* l) {
  // Connections still open after the drain time are closed.
  std::vector<DownstreamConnection*> open = l->connections.Snapshot();
  for (auto* c : open) c->CloseNow();
}

namespace {
uint64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void Worker::UpdateRouters(ActiveListener& l) {
  const auto& chains = l.config->chains;
  for (size_t i = 0; i < chains.size(); ++i) {
    const FilterChainConfig& c = *chains[i];
    // A TCP proxy chain has no router; an index that had one keeps it for its connections.
    if (i < l.routers.size()) {
      if (!c.http) continue;
      if (l.routers[i]) {
        l.routers[i]->Update(c.http, c.routes, StatsFor(*c.http));
        continue;
      }
    } else {
      l.routers.emplace_back();
    }
    if (c.http) {
      l.routers[i] = std::make_unique<Router>(dispatcher_, c.http, c.routes, clusters_, random_,
                                              StatsFor(*c.http));
    }
  }
}

void Worker::OnAccept(ActiveListener& l, int fd, const SocketAddress& peer) {
  const ListenerConfig& c = *l.config;
  StatsFor(c).downstream_cx_total.Inc();
  SocketAddress original_dst;
  if (c.original_dst || c.use_original_dst) {
    SocketAddress od;
    if (OriginalDestination(fd, SocketAddress::LocalOf(fd), &od)) original_dst = od;
  }
  if (original_dst.len && c.use_original_dst) {
    ActiveListener* to = ListenerFor(original_dst);
    if (to && to != &l) {
      StatsFor(*to->config).downstream_cx_total.Inc();
      Dispatch(*to, fd, peer, original_dst);
      return;
    }
  }
  Dispatch(l, fd, peer, original_dst);
}

void Worker::Dispatch(ActiveListener& l, int fd, const SocketAddress& peer,
                      const SocketAddress& original_dst) {
  const ListenerConfig& c = *l.config;
  if (c.single_catch_all) {
    Serve(l, fd, peer, 0, original_dst);
    return;
  }
  if (c.inspect_tls || c.inspect_http) {
    auto* i = new Inspection(l, fd, peer, original_dst);
    i->next = l.inspecting;
    if (l.inspecting) l.inspecting->prev = i;
    l.inspecting = i;
    return;
  }
  ConnectionFacts facts;
  facts.peer = peer;
  if (c.needs_local_address) {
    facts.local = original_dst.len ? original_dst : SocketAddress::LocalOf(fd);
  }
  Serve(l, fd, peer, c.SelectChain(facts), original_dst);
}

void Worker::Serve(ActiveListener& l, int fd, const SocketAddress& peer, int chain,
                   const SocketAddress& original_dst) {
  const ListenerConfig& c = *l.config;
  if (chain < 0) {
    StatsFor(c).no_filter_chain_match.Inc();
    ::close(fd);
    return;
  }
  RPX_ASSERT(static_cast<size_t>(chain) < c.chains.size() && l.routers.size() >= c.chains.size());
  RPX_ASSERT(c.chains[chain]->tcp || l.routers[chain]);
  const FilterChainConfig& fc = *c.chains[chain];
  if (fc.tls_required && !fc.tls) {
    // Its certificate has not arrived over SDS: refused, never served in cleartext.
    StatsFor(c).ssl_connection_error.Inc();
    ::close(fd);
    return;
  }
  if (global_connections_ && !global_connections_->TryAcquire()) {
    // Envoy closes it at once too (no delay: the process itself is at its limit).
    StatsFor(c).downstream_global_cx_overflow.Inc();
    ::close(fd);
    return;
  }
  LimitSlot slot;
  if (fc.connection_limit) {
    if (!fc.connection_limit->TryAcquire()) {
      if (global_connections_) global_connections_->Release();
      Reject(fd, fc.connection_limit->delay_ms);
      return;
    }
    slot = LimitSlot(fc.connection_limit);
  }
  auto conn = std::make_unique<Connection>(dispatcher_, fd, false, c.buffer_limit,
                                           /*nodelay_set=*/true);
  if (original_dst.len) conn->SetOriginalDestination(original_dst);
  if (fc.tls) conn->SetTransport(std::make_unique<TlsTransport>(fc.tls), fc.handshake_timeout_ms);
  if (fc.tcp) {
    auto* t = new TcpConnection(l, std::move(slot), std::move(conn), fc.tcp, peer);
    l.connections.Add(t);
    open_connections_.fetch_add(1, std::memory_order_relaxed);
    t->Start();  // may end at once (no cluster, no host): then it unlinks itself
    return;
  }
  const auto& http = fc.http;
  if (http->codec == HttpConfig::Codec::kHttp2 && !fc.tls) {
    auto* h2 = new Http2Connection(l, std::move(slot), std::move(conn), http, StatsFor(*http),
                                   *l.routers[chain], peer, false);
    l.connections.Add(h2);
    h2->Start();
  } else {
    // AUTO starts on HTTP/1 and switches on the client's preface or on ALPN h2 (as does HTTP2
    // over TLS, whose ALPN is known only after the handshake).
    l.connections.Add(new Http1Connection(l, chain, std::move(slot), std::move(conn), peer));
  }
  open_connections_.fetch_add(1, std::memory_order_relaxed);
}

void Worker::EndInspections(ActiveListener& l) {
  while (l.inspecting) delete l.inspecting;  // unlinks itself and closes its socket
}

Worker::ActiveListener::~ActiveListener() {
  while (inspecting) delete inspecting;
}

Worker::Inspection::Inspection(ActiveListener& listener, int fd, const SocketAddress& peer,
                               const SocketAddress& original_dst)
    : listener_(&listener),
      dispatcher_(listener.worker->dispatcher_),
      fd_(fd),
      peer_(peer),
      original_dst_(original_dst),
      // Edge-triggered: a ClientHello that is not whole yet is reported again only when more of
      // it arrives (peeking consumes nothing, so level triggering would report it forever).
      event_(listener.worker->dispatcher_, fd, FileEvent::kRead, this, FileEvent::Trigger::kEdge),
      timer_(listener.worker->dispatcher_, this) {
  // 0: no timeout (Envoy's meaning), for protocols where the server speaks first.
  if (listener.config->listener_filters_timeout_ms > 0) {
    timer_.Enable(listener.config->listener_filters_timeout_ms);
  }
}

Worker::Inspection::~Inspection() {
  if (fd_ >= 0) {
    event_.UnregisterForClose();
    ::close(fd_);
  }
  Unlink();
}

void Worker::Inspection::Unlink() {
  if (prev) prev->next = next;
  if (next) next->prev = prev;
  if (listener_ && listener_->inspecting == this) listener_->inspecting = next;
  prev = next = nullptr;
  listener_ = nullptr;
}

void Worker::Inspection::OnReadable(uint32_t) {
  // One buffer per worker thread: a ClientHello is looked at in place, never copied.
  static thread_local uint8_t buf[kMaxClientHelloBytes];
  ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_PEEK);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {  // gone before a chain was chosen
    Unlink();
    dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(this));
    return;
  }
  const ListenerConfig& c = *listener_->config;
  if (c.inspect_tls) {
    ClientHelloInfo hello;
    switch (InspectClientHello(buf, static_cast<size_t>(n), &hello)) {
      case InspectResult::kNeedMoreData:
        return;
      case InspectResult::kTls:
        Finish(&hello);
        return;
      case InspectResult::kNotTls:
        break;
    }
  }
  if (!c.inspect_http) {
    Finish(nullptr);
    return;
  }
  HttpInspectResult r = InspectHttp(buf, static_cast<size_t>(n));
  if (r == HttpInspectResult::kNeedMoreData) return;
  Finish(nullptr, HttpInspectProtocols(r));
}

void Worker::Inspection::OnTimeout() {
  const ListenerConfig& c = *listener_->config;
  if (c.continue_on_listener_filters_timeout) {
    Finish(nullptr);
    return;
  }
  listener_->worker->StatsFor(c).downstream_pre_cx_timeout.Inc();
  Unlink();
  dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(this));
}

void Worker::Inspection::Finish(const ClientHelloInfo* hello,
                                const std::vector<std::string>* http_protocols) {
  ActiveListener& l = *listener_;
  const ListenerConfig& c = *l.config;
  ConnectionFacts facts;
  facts.peer = peer_;
  if (c.needs_local_address) {
    facts.local = original_dst_.len ? original_dst_ : SocketAddress::LocalOf(fd_);
  }
  if (hello) {
    facts.transport_protocol = "tls";
    facts.server_name = hello->server_name;
    facts.application_protocols = &hello->alpn;
  } else {
    facts.application_protocols = http_protocols;
  }
  int chain = c.SelectChain(facts);
  timer_.Disable();
  event_.Unregister();  // the socket gets a file event of its own next
  int fd = fd_;
  fd_ = -1;
  Unlink();
  l.worker->Serve(l, fd, peer_, chain, original_dst_);
  dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(this));
}

Worker::TcpConnection::TcpConnection(ActiveListener& listener, LimitSlot slot,
                                     std::unique_ptr<Connection> conn,
                                     std::shared_ptr<const TcpProxyConfig> config,
                                     const SocketAddress& peer)
    : TcpProxySession(std::move(conn), std::move(config), listener.worker->clusters_,
                      listener.worker->random_, peer, listener.worker->index_),
      ConnectionEntry(listener, std::move(slot)) {}

Worker::Http1Connection::Http1Connection(ActiveListener& listener, size_t chain, LimitSlot slot,
                                         std::unique_ptr<Connection> conn,
                                         const SocketAddress& peer)
    : ServerConnection(std::move(conn), listener.config->chains[chain]->http,
                       listener.worker->StatsFor(*listener.config->chains[chain]->http),
                       *listener.routers[chain], peer),
      ConnectionEntry(listener, std::move(slot)) {}

bool Worker::Http1Connection::SwitchToHttp2() {
  ActiveListener& l = listener_;
  std::shared_ptr<const HttpConfig> config = http_config();
  bool drain = draining();
  HttpStats& st = stats();
  StreamHandlerFactory& f = factory();
  SocketAddress peer = peer_address();
  // The new connection takes this one's place in the list (and its limit slot); this object
  // goes without running OnClosed: the client's connection did not close.
  l.connections.Remove(this);
  std::unique_ptr<Connection> conn = TakeConnection();
  Dispatcher& d = conn->dispatcher();
  auto* h2 = new Http2Connection(l, std::move(slot_), std::move(conn), std::move(config), st, f,
                                 peer, /*counted=*/true);
  l.connections.Add(h2);
  d.DeferredDelete(std::unique_ptr<DeferredDeletable>(static_cast<ServerConnection*>(this)));
  h2->Start();  // the preface and what followed it are in the connection's read buffer
  // A drain that began before the client's first bytes: it gets GOAWAY once its first streams
  // are in (they are served, as an HTTP/1.1 client's first request would be).
  if (drain) h2->CloseWhenIdle();
  return true;
}

void Worker::ConnectionEntry::CountHandshake(Connection& conn) {
  if (conn.plaintext()) return;
  auto& tls = static_cast<TlsTransport&>(conn.transport());
  ListenerStats& st = listener_.worker->StatsFor(*listener_.config);
  st.ssl_handshake.Inc();
  if (tls.session_reused()) st.ssl_session_reused.Inc();
  if (!tls.has_peer_certificate()) st.ssl_no_certificate.Inc();
}

void Worker::ConnectionEntry::Closed(Connection& conn) {
  ActiveListener* l = &listener_;
  Worker* w = l->worker;
  if (conn.handshaking()) {
    ListenerStats& st = w->StatsFor(*l->config);
    if (conn.handshake_timed_out()) {
      st.ssl_handshake_timeout.Inc();
    } else {
      st.ssl_connection_error.Inc();
    }
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    if (::getpeername(conn.fd(), reinterpret_cast<sockaddr*>(&peer), &len) != 0) len = 0;
    RPX_LOG(
        kDebug, "listener '%s': TLS handshake with %s failed: %s", l->config->name,
        SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&peer), len).ToString(),
        conn.handshake_timed_out() ? std::string("timed out") : conn.transport().FailureReason());
  }
  l->connections.Remove(this);
  w->open_connections_.fetch_sub(1, std::memory_order_relaxed);
  if (w->global_connections_) w->global_connections_->Release();
  slot_ = LimitSlot();  // the listener's limit counts open connections, not unfreed memory
  w->dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(&downstream()));
  // A draining listener with no connections left is freed (after this callback returns).
  if (l->connections.empty() && !l->listener) {
    w->dispatcher_.Post([w, l] { w->FreeDrained(l); });
  }
}

Worker::ConnectionList::~ConnectionList() {
  while (head_ != nullptr) {
    ConnectionEntry* c = head_;
    head_ = c->next;
    delete c;
  }
}

void Worker::ConnectionList::Add(ConnectionEntry* c) {
  c->prev = nullptr;
  c->next = head_;
  if (head_ != nullptr) head_->prev = c;
  head_ = c;
}

void Worker::ConnectionList::Remove(ConnectionEntry* c) {
  if (c->prev != nullptr) {
    c->prev->next = c->next;
  } else if (head_ == c) {
    head_ = c->next;
  } else {
    return;  // not in this list
  }
  if (c->next != nullptr) c->next->prev = c->prev;
  c->prev = c->next = nullptr;
}

std::vector<DownstreamConnection*> Worker::ConnectionList::Snapshot() const {
  std::vector<DownstreamConnection*> out;
  for (ConnectionEntry* c = head_; c != nullptr; c = c->next) out.push_back(&c->downstream());
  return out;
}

void Worker::Reject(int fd, uint64_t delay_ms) {
  if (delay_ms == 0) {
    ::close(fd);  // unread: the client sees the connection closed before any response
    return;
  }
  uint64_t due = SteadyMs() + delay_ms;
  delayed_rejects_.emplace(due, fd);
  if (!reject_timer_) reject_timer_ = dispatcher_.CreateTimer([this] { CloseDueRejects(); });
  if (delayed_rejects_.begin()->first == due) reject_timer_->Enable(delay_ms);
}

void Worker::CloseDueRejects() {
  uint64_t now = SteadyMs();
  while (!delayed_rejects_.empty() && delayed_rejects_.begin()->first <= now) {
    ::close(delayed_rejects_.begin()->second);
    delayed_rejects_.erase(delayed_rejects_.begin());
  }
  if (!delayed_rejects_.empty()) reject_timer_->Enable(delayed_rejects_.begin()->first - now);
}

void Worker::FreeDrained(ActiveListener* l) {
  for (size_t i = 0; i < draining_.size(); ++i) {
    if (draining_[i].get() == l) {
      draining_.erase(draining_.begin() + i);
      return;
    }
  }
}

void Worker::UpdateClusters(std::shared_ptr<const ClusterMap> clusters) {
  dispatcher_.Post([this, clusters] { clusters_.Apply(*clusters); });
}

void Worker::Drain(uint64_t drain_ms, bool gradual, bool inbound_only) {
  dispatcher_.Post([this, drain_ms, gradual, inbound_only] {
    if (!inbound_only) stopped_accepting_ = true;
    for (auto& [name, l] : listeners_) {
      if (!l->listener || (inbound_only && !l->config->inbound)) continue;
      // Connections already queued are served (closing the socket would reset them); then it
      // stops accepting and the socket closes.
      ActiveListener* raw = l.get();
      l->listener->TakeQueued(
          [this, raw](int cfd, const SocketAddress& peer) { OnAccept(*raw, cfd, peer); });
      l->listener.reset();
      EndInspections(*l);
    }
    uint64_t open = open_connections();
    // Gradual: in 20 steps over the first 90% of the drain time, so that the last connections
    // asked still have time to finish a request.
    constexpr uint64_t kSteps = 20;
    if (!gradual || drain_ms < kSteps || open <= 1) {
      DrainSome(SIZE_MAX, inbound_only);
      return;
    }
    size_t per_step = (open + kSteps - 1) / kSteps;
    uint64_t step_ms = drain_ms * 9 / 10 / kSteps;
    DrainSome(per_step, inbound_only);
    drain_step_timer_ = dispatcher_.CreateTimer([this, per_step, step_ms, inbound_only] {
      if (DrainSome(per_step, inbound_only) == per_step) drain_step_timer_->Enable(step_ms);
    });
    drain_step_timer_->Enable(step_ms);
  });
}

size_t Worker::DrainSome(size_t n, bool inbound_only) {
  std::vector<DownstreamConnection*> pick;
  for (auto& [name, l] : listeners_) {
    if (inbound_only && !l->config->inbound) continue;
    for (DownstreamConnection* c : l->connections.Snapshot()) {
      if (pick.size() >= n) break;
      if (!c->draining()) pick.push_back(c);
    }
  }
  for (auto& l : draining_) {
    if (inbound_only && !l->config->inbound) continue;
    for (DownstreamConnection* c : l->connections.Snapshot()) {
      if (pick.size() >= n) break;
      if (!c->draining()) pick.push_back(c);
    }
  }
  // Closing an idle connection edits the lists: close from the copy.
  for (DownstreamConnection* c : pick) c->CloseWhenIdle();
  return pick.size();
}

void Worker::Stop() {
  if (!thread_.joinable()) return;
  dispatcher_.Exit();
  thread_.join();
}

}  // namespace rpx
