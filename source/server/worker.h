// Worker: one thread running one Dispatcher. It owns its listening sockets (one per listener, the
// kernel balancing connections between workers via SO_REUSEPORT), the downstream connections
// accepted on them, a Router per listener and its own view of the clusters (connection pools).
// Nothing on the request path is shared with other workers except the cluster circuit-breaker
// counters (atomics). The main thread talks to a running worker only through the thread-safe
// methods below, which post to the worker's dispatcher; each carries an immutable snapshot.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "source/common/log_file.h"
#include "source/common/random.h"
#include "source/config/server_config.h"
#include "source/event/dispatcher.h"
#include "source/http/http2_server_connection.h"
#include "source/http/server_connection.h"
#include "source/network/listener.h"
#include "source/network/tls_inspector.h"
#include "source/router/router.h"
#include "source/tcp_proxy/tcp_proxy.h"
#include "source/upstream/worker_cluster.h"

namespace rpx {

class Worker {
 public:
  explicit Worker(uint32_t index);
  ~Worker();

  // Starts the thread with `clusters` and no listeners.
  void Start(std::shared_ptr<const ClusterMap> clusters);
  // Thread-safe. Publishes a new cluster set (pools of hosts that stay are kept).
  void UpdateClusters(std::shared_ptr<const ClusterMap> clusters);
  // Thread-safe. Starts accepting on `fd` (owned from now on) for `config`; fd -1 means the
  // listener exists on another worker only (no SO_REUSEPORT) and this worker skips it.
  void AddListener(std::shared_ptr<const ListenerConfig> config, int fd);
  // Thread-safe. New connections and requests of listener `name` use `config` (same address);
  // requests in flight finish on the routes they started with.
  // `applied`, if set, runs on this worker's thread once the update is in effect.
  void UpdateListener(std::shared_ptr<const ListenerConfig> config,
                      std::function<void()> applied = nullptr);
  // Thread-safe. Stops accepting on listener `name` now; open connections close once idle, and
  // those still open after `drain_ms` are closed.
  void RemoveListener(const std::string& name, uint64_t drain_ms);
  // Thread-safe. Graceful shutdown: stops accepting on every listener, and asks every open
  // connection to close once idle (a keep-alive connection after its current response, which
  // says Connection: close): all at once, or with `gradual` spread over `drain_ms`.
  // `inbound_only`: only the listeners whose traffic_direction is INBOUND, and their connections.
  void Drain(uint64_t drain_ms, bool gradual, bool inbound_only = false);
  // Open downstream connections (any thread).
  uint64_t open_connections() const { return open_connections_.load(std::memory_order_relaxed); }
  // Thread-safe: stops accepting, closes connections and ends the thread; returns when joined.
  void Stop();
  uint32_t index() const { return index_; }
  // How long connections of a listener replaced under the same name (new address) may finish.
  void set_drain_ms(uint64_t ms) { drain_ms_ = ms; }
  // Access log files: this worker hands its buffered lines to their writers once a second.
  // Before Start.
  void set_log_files(LogFileManager* files) { log_files_ = files; }
  // overload.global_downstream_max_connections, shared by every worker. Before Start.
  void set_global_connections(GlobalConnectionLimit* limit) { global_connections_ = limit; }
  Dispatcher& dispatcher() { return dispatcher_; }

 private:
  // One slot of a listener's connection limit, given back when destroyed (the connection's entry
  // leaves the listener's map).
  class LimitSlot {
   public:
    LimitSlot() = default;
    explicit LimitSlot(std::shared_ptr<const ConnectionLimit> limit) : limit_(std::move(limit)) {}
    LimitSlot(LimitSlot&&) = default;
    LimitSlot& operator=(LimitSlot&& o) {
      if (limit_) limit_->Release();
      limit_ = std::move(o.limit_);
      return *this;
    }
    ~LimitSlot() {
      if (limit_) limit_->Release();
    }

   private:
    std::shared_ptr<const ConnectionLimit> limit_;
  };
  struct ActiveListener;
  // The worker's bookkeeping for one downstream connection, whichever codec serves it: the links
  // of its listener's list and its limit slot. It lives in the same allocation as the connection
  // (an idle keep-alive connection costs that and its Connection, no table slot or callback).
  class ConnectionEntry {
   public:
    ConnectionEntry(ActiveListener& listener, LimitSlot slot)
        : listener_(listener), slot_(std::move(slot)) {}
    virtual ~ConnectionEntry() = default;
    virtual DownstreamConnection& downstream() = 0;
    ConnectionEntry* prev = nullptr;  // links of the listener's ConnectionList
    ConnectionEntry* next = nullptr;

   protected:
    // Counts the TLS handshake in the listener's stats.
    void CountHandshake(Connection& conn);
    // Unlinks, gives the limit slot back and defer-deletes the connection.
    void Closed(Connection& conn);
    ActiveListener& listener_;
    LimitSlot slot_;
  };
  class Http1Connection final : public ServerConnection, public ConnectionEntry {
   public:
    Http1Connection(ActiveListener& listener, size_t chain, LimitSlot slot,
                    std::unique_ptr<Connection> conn, const SocketAddress& peer);
    DownstreamConnection& downstream() override { return *this; }

   private:
    void OnTransportConnected() override { CountHandshake(connection()); }
    void OnClosed() override { Closed(connection()); }
    // Replaces this connection with an Http2Connection serving the same client.
    bool SwitchToHttp2() override;
  };
  class Http2Connection final : public Http2ServerConnection, public ConnectionEntry {
   public:
    Http2Connection(ActiveListener& listener, LimitSlot slot, std::unique_ptr<Connection> conn,
                    std::shared_ptr<const HttpConfig> config, HttpStats& stats,
                    StreamHandlerFactory& factory, const SocketAddress& peer, bool counted)
        : Http2ServerConnection(std::move(conn), std::move(config), stats, factory, peer, counted),
          ConnectionEntry(listener, std::move(slot)) {}
    DownstreamConnection& downstream() override { return *this; }

   private:
    void OnTransportConnected() override { CountHandshake(connection()); }
    void OnClosed() override { Closed(connection()); }
  };
  class TcpConnection final : public TcpProxySession, public ConnectionEntry {
   public:
    TcpConnection(ActiveListener& listener, LimitSlot slot, std::unique_ptr<Connection> conn,
                  std::shared_ptr<const TcpProxyConfig> config, const SocketAddress& peer);
    DownstreamConnection& downstream() override { return *this; }

   private:
    void OnTransportConnected() override { CountHandshake(connection()); }
    void OnClosed() override { Closed(connection()); }
  };
  // An accepted connection whose first bytes are being read (tls_inspector, http_inspector)
  // before its filter chain is chosen; nothing is consumed from the socket. Owned by its
  // listener's list.
  class Inspection : public DeferredDeletable {
   public:
    Inspection(ActiveListener& listener, int fd, const SocketAddress& peer,
               const SocketAddress& original_dst);
    ~Inspection() override;  // closes the socket unless it was handed on; unlinks
    Inspection* prev = nullptr;
    Inspection* next = nullptr;

   private:
    void OnReadable(uint32_t events);
    void OnTimeout();
    // Chooses the chain with what was found (a ClientHello, or the protocol http_inspector saw)
    // and hands the socket on (or closes it).
    void Finish(const ClientHelloInfo* hello,
                const std::vector<std::string>* http_protocols = nullptr);
    // Leaves the listener's list (before a deferred delete, after which the listener may be
    // gone).
    void Unlink();
    ActiveListener* listener_;  // null once unlinked
    Dispatcher& dispatcher_;
    int fd_;
    SocketAddress peer_;
    SocketAddress original_dst_;  // len 0: none restored
    MemberFileEvent<Inspection, &Inspection::OnReadable> event_;
    MemberTimer<Inspection, &Inspection::OnTimeout> timer_;
  };
  // A listener's open connections, owned: an intrusive list, so adding and removing one
  // allocates nothing. Destroying the list destroys them.
  class ConnectionList {
   public:
    ConnectionList() = default;
    ConnectionList(const ConnectionList&) = delete;
    ConnectionList& operator=(const ConnectionList&) = delete;
    ~ConnectionList();
    void Add(ConnectionEntry* c);
    void Remove(ConnectionEntry* c);  // the caller owns `c` again
    bool empty() const { return head_ == nullptr; }
    // A copy to iterate while closing them (closing one removes it).
    std::vector<DownstreamConnection*> Snapshot() const;

   private:
    ConnectionEntry* head_ = nullptr;
  };
  struct ActiveListener {
    ~ActiveListener();
    Worker* worker = nullptr;
    std::shared_ptr<const ListenerConfig> config;
    std::unique_ptr<Listener> listener;
    // One per filter chain, by index. Never shrinks: a connection keeps a reference to its
    // chain's router, so one a listener update dropped stays for the connections that use it.
    std::vector<std::unique_ptr<Router>> routers;
    ConnectionList connections;
    Inspection* inspecting = nullptr;  // list head
    std::unique_ptr<Timer> drain_timer;
  };
  void AddListenerNow(std::shared_ptr<const ListenerConfig> config, int fd);
  // Points each chain's router at the chain's current routes and settings (new ones as needed).
  void UpdateRouters(ActiveListener& l);
  void OnAccept(ActiveListener& l, int fd, const SocketAddress& peer);
  // The listener that takes a connection accepted by `l` (itself, or with use_original_dst the
  // one for its original destination), after its original destination was restored.
  void Dispatch(ActiveListener& l, int fd, const SocketAddress& peer,
                const SocketAddress& original_dst);
  // The listener on `dst` (exact address first, then the wildcard address with its port), or
  // nullptr.
  ActiveListener* ListenerFor(const SocketAddress& dst);
  void RebuildAddressIndex();
  // Starts serving an accepted connection on chain `chain` of the listener (-1: none matched,
  // the connection is closed). `original_dst` (len 0: none) becomes its local address.
  void Serve(ActiveListener& l, int fd, const SocketAddress& peer, int chain,
             const SocketAddress& original_dst);
  // Closes the connections whose ClientHello is still being read (a listener going away).
  void EndInspections(ActiveListener& l);
  void FinishDrain(ActiveListener* l);
  void FreeDrained(ActiveListener* l);
  // Gradual drain: asks up to `n` more connections (of every listener) to close once idle.
  size_t DrainSome(size_t n, bool inbound_only);
  // Closes a connection refused by the listener's connection limit, now or after `delay_ms`.
  void Reject(int fd, uint64_t delay_ms);
  void CloseDueRejects();
  HttpStats& StatsFor(const HttpConfig& c) { return c.stats[index_ % c.stats_slots]; }
  ListenerStats& StatsFor(const ListenerConfig& c) {
    return c.stats->stats[index_ % c.stats->slots];
  }

  uint32_t index_;
  LogFileManager* log_files_ = nullptr;
  GlobalConnectionLimit* global_connections_ = nullptr;
  std::atomic<uint64_t> drain_ms_{5000};  // for listeners replaced by a new address
  Dispatcher dispatcher_;
  Random random_;
  WorkerClusterManager clusters_;
  absl::flat_hash_map<std::string, std::unique_ptr<ActiveListener>> listeners_;
  // Listeners by address ("ip:port"), for use_original_dst hand-offs; built only while some
  // listener uses it.
  absl::flat_hash_map<std::string, ActiveListener*> by_address_;
  std::vector<std::unique_ptr<ActiveListener>> draining_;
  std::multimap<uint64_t, int> delayed_rejects_;  // close time (steady ms) -> fd
  std::unique_ptr<Timer> reject_timer_;
  std::unique_ptr<Timer> drain_step_timer_;  // gradual drain
  bool stopped_accepting_ = false;           // Drain was called: no listener accepts again
  std::atomic<uint64_t> open_connections_{0};
  std::thread thread_;
};

}  // namespace rpx
