#include "source/server/worker.h"

#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "source/common/logger.h"

namespace rpx {

Worker::Worker(uint32_t index)
    : index_(index),
      dispatcher_(absl::StrCat("worker_", index)),
      random_(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
              (0x5bd1e995ULL * (index + 1))),
      clusters_(dispatcher_, index) {}

Worker::~Worker() { Stop(); }

void Worker::Start(std::shared_ptr<const ClusterMap> clusters) {
  clusters_.Apply(*clusters);
  thread_ = std::thread([this] {
    RPX_LOG(kDebug, "worker %u started", index_);
    dispatcher_.Run();
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
  if (fd < 0) return;
  auto l = std::make_unique<ActiveListener>();
  l->worker = this;
  l->config = config;
  l->router = std::make_unique<Router>(dispatcher_, config->http, config->routes, clusters_,
                                       random_, StatsFor(*config));
  ActiveListener* raw = l.get();
  Listener::AcceptCallback accept = [this, raw](int cfd, const SocketAddress& peer) {
    OnAccept(*raw, cfd, peer);
  };
  l->listener = std::make_unique<Listener>(dispatcher_, fd, accept);
  auto it = listeners_.find(config->name);
  if (it != listeners_.end()) {
    // Replaced under the same name (a new address or new socket options): the old socket
    // closes and its connections drain; with none left it is freed at once. Connections already
    // queued on it go to the new listener (closing the socket would reset them).
    if (it->second->listener) {
      it->second->listener->TakeQueued(accept);
    }
    it->second->listener.reset();
    std::vector<ServerConnection*> open = it->second->connections.Snapshot();
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
}

void Worker::UpdateListener(std::shared_ptr<const ListenerConfig> config,
                            std::function<void()> applied) {
  dispatcher_.Post([this, config, applied] {
    auto it = listeners_.find(config->name);
    if (it != listeners_.end()) {
      ActiveListener& l = *it->second;
      l.config = config;
      l.router->Update(config->http, config->routes, StatsFor(*config));
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
    l->listener.reset();  // stop accepting; the socket closes
    std::vector<ServerConnection*> open = l->connections.Snapshot();
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
  std::vector<ServerConnection*> open = l->connections.Snapshot();
  for (auto* c : open) c->ResetStream();
}

namespace {
uint64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void Worker::OnAccept(ActiveListener& l, int fd, const SocketAddress& peer) {
  LimitSlot slot;
  if (l.config->connection_limit) {
    if (!l.config->connection_limit->TryAcquire()) {
      Reject(fd, l.config->connection_limit->delay_ms);
      return;
    }
    slot = LimitSlot(l.config->connection_limit);
  }
  auto conn = std::make_unique<Connection>(dispatcher_, fd, false, l.config->buffer_limit,
                                           /*nodelay_set=*/true);
  l.connections.Add(new OpenConnection(l, std::move(slot), std::move(conn), peer));
}

Worker::OpenConnection::OpenConnection(ActiveListener& listener, LimitSlot slot,
                                       std::unique_ptr<Connection> conn, const SocketAddress& peer)
    : ServerConnection(std::move(conn), listener.config->http,
                       listener.worker->StatsFor(*listener.config), *listener.router, peer),
      listener_(listener),
      slot_(std::move(slot)) {}

void Worker::OpenConnection::OnClosed() {
  ActiveListener* l = &listener_;
  Worker* w = l->worker;
  l->connections.Remove(this);
  slot_ = LimitSlot();  // the listener's limit counts open connections, not unfreed memory
  w->dispatcher_.DeferredDelete(std::unique_ptr<DeferredDeletable>(this));
  // A draining listener with no connections left is freed (after this callback returns).
  if (l->connections.empty() && !l->listener) {
    w->dispatcher_.Post([w, l] { w->FreeDrained(l); });
  }
}

Worker::ConnectionList::~ConnectionList() {
  while (head_ != nullptr) {
    OpenConnection* c = head_;
    head_ = c->next;
    delete c;
  }
}

void Worker::ConnectionList::Add(OpenConnection* c) {
  c->prev = nullptr;
  c->next = head_;
  if (head_ != nullptr) head_->prev = c;
  head_ = c;
}

void Worker::ConnectionList::Remove(OpenConnection* c) {
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

std::vector<ServerConnection*> Worker::ConnectionList::Snapshot() const {
  std::vector<ServerConnection*> out;
  for (OpenConnection* c = head_; c != nullptr; c = c->next) out.push_back(c);
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

void Worker::Stop() {
  if (!thread_.joinable()) return;
  dispatcher_.Exit();
  thread_.join();
}

}  // namespace rpx
