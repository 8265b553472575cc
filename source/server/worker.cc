#include "source/server/worker.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "source/common/logger.h"

namespace rpx {

Worker::Worker(uint32_t index)
    : index_(index),
      dispatcher_(absl::StrCat("worker_", index)),
      random_(static_cast<uint64_t>(
                  std::chrono::steady_clock::now().time_since_epoch().count()) ^
              (0x5bd1e995ULL * (index + 1))),
      clusters_(dispatcher_, index) {}

Worker::~Worker() { Stop(); }

void Worker::Start(std::shared_ptr<const ServerConfig> config, std::vector<int> listen_fds) {
  // Everything is built before the thread starts, so nothing here races with it.
  clusters_.Apply(config->clusters);
  for (size_t i = 0; i < config->listeners.size(); ++i) {
    auto l = std::make_unique<ActiveListener>();
    l->config = config->listeners[i];
    HttpStats& stats = l->config->http->stats[index_ % l->config->http->stats_slots];
    l->router = std::make_unique<Router>(dispatcher_, l->config->http, l->config->routes, clusters_,
                                         random_, stats);
    ActiveListener* raw = l.get();
    l->listener = std::make_unique<Listener>(
        dispatcher_, listen_fds[i],
        [this, raw](int fd, const SocketAddress& peer) { OnAccept(*raw, fd, peer); });
    listeners_.push_back(std::move(l));
  }
  thread_ = std::thread([this] {
    RPX_LOG(kDebug, "worker %u started", index_);
    dispatcher_.Run();
    // Tear down on this thread: connections and pools belong to it.
    listeners_.clear();
    clusters_.Apply(ClusterMap());
    RPX_LOG(kDebug, "worker %u stopped", index_);
  });
}

void Worker::OnAccept(ActiveListener& l, int fd, const SocketAddress& peer) {
  auto conn = std::make_unique<Connection>(dispatcher_, fd, false, l.config->buffer_limit);
  HttpStats& stats = l.config->http->stats[index_ % l.config->http->stats_slots];
  ActiveListener* lp = &l;
  auto sc = std::make_unique<ServerConnection>(
      std::move(conn), l.config->http, stats, *l.router, peer, [this, lp](ServerConnection* c) {
        auto it = lp->connections.find(c);
        if (it == lp->connections.end()) return;
        dispatcher_.DeferredDelete(std::move(it->second));
        lp->connections.erase(it);
      });
  ServerConnection* raw = sc.get();
  l.connections.emplace(raw, std::move(sc));
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
