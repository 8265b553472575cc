#include "source/server/server.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "source/common/logger.h"
#include "source/config/server_config.h"
#include "source/config/supported_fields.h"
#include "source/config/yaml_loader.h"
#include "source/network/listener.h"
#include "source/server/admin.h"
#include "source/server/worker.h"

namespace rpx {
namespace {

bool LoadConfig(const ServerOptions& options, uint32_t workers, bool resolve_dns,
                ServerConfig* out) {
  std::vector<std::string> errors;
  envoy::config::bootstrap::v3::Bootstrap bootstrap;
  bool ok = LoadYamlFile(options.config_path, &bootstrap, &errors);
  if (ok) {
    CheckSupportedFields(bootstrap, options.config_path + ": ", "", &errors);
    ok = errors.empty();
  }
  if (ok) {
    if (!options.service_node.empty()) bootstrap.mutable_node()->set_id(options.service_node);
    if (!options.service_cluster.empty()) {
      bootstrap.mutable_node()->set_cluster(options.service_cluster);
    }
    BuildOptions bo;
    bo.stats_slots = workers;
    bo.resolve_dns = resolve_dns;
    bo.source = options.config_path;
    ok = BuildServerConfig(bootstrap, bo, out, &errors);
  }
  for (const auto& e : errors) fprintf(stderr, "error: %s\n", e.c_str());
  if (!errors.empty()) {
    fprintf(stderr, "%zu error%s in configuration '%s'\n", errors.size(),
            errors.size() == 1 ? "" : "s", options.config_path.c_str());
  }
  return ok && errors.empty();
}

// Opens one socket per worker for `addr`. With port 0 the first socket picks the port and the
// others reuse it.
absl::StatusOr<std::vector<int>> OpenListenSockets(SocketAddress addr, bool reuse_port,
                                                   uint32_t workers) {
  std::vector<int> fds;
  if (reuse_port && addr.port() != 0) {
    // SO_REUSEPORT would let us share a port with a stranger's socket: check it is free first.
    auto probe = OpenListenSocket(addr, false, 1);
    if (!probe.ok()) return probe.status();
    close(*probe);
  }
  uint32_t n = reuse_port ? workers : 1;
  for (uint32_t i = 0; i < n; ++i) {
    auto fd = OpenListenSocket(addr, reuse_port, 4096);
    if (!fd.ok()) {
      for (int f : fds) close(f);
      return fd.status();
    }
    if (i == 0 && addr.port() == 0) {
      socklen_t len = sizeof(addr.storage);
      getsockname(*fd, reinterpret_cast<sockaddr*>(&addr.storage), &len);
    }
    fds.push_back(*fd);
  }
  return fds;
}

}  // namespace

int RunServer(const ServerOptions& options) {
  uint32_t workers = options.concurrency;
  if (workers == 0) workers = std::max(1u, std::thread::hardware_concurrency());
  auto config = std::make_shared<ServerConfig>();
  if (!LoadConfig(options, workers, !options.validate_only, config.get())) return 1;
  if (options.validate_only) {
    printf("configuration '%s' OK\n", options.config_path.c_str());
    return 0;
  }

  // Signals are taken by the main loop through a signalfd; workers never see them.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Sockets first: a bind failure is a startup error.
  std::vector<std::vector<int>> per_listener;
  for (const auto& l : config->listeners) {
    auto fds = OpenListenSockets(l->address, l->reuse_port, workers);
    if (!fds.ok()) {
      fprintf(stderr, "error: listener '%s': %s\n", l->name.c_str(),
              std::string(fds.status().message()).c_str());
      for (auto& v : per_listener) {
        for (int f : v) close(f);
      }
      return 1;
    }
    per_listener.push_back(*fds);
  }
  Dispatcher main_dispatcher("main");
  std::unique_ptr<Admin> admin;
  bool stopping = false;
  auto quit = [&] {
    if (stopping) return;
    stopping = true;
    main_dispatcher.Exit();
  };
  if (config->admin_address) {
    auto fd = OpenListenSocket(*config->admin_address, false, 128);
    if (!fd.ok()) {
      fprintf(stderr, "error: admin: %s\n", std::string(fd.status().message()).c_str());
      return 1;
    }
    admin = std::make_unique<Admin>(main_dispatcher, *config, workers, quit);
    admin->Start(*fd);
  }

  std::vector<std::unique_ptr<Worker>> worker_list;
  auto clusters = std::make_shared<const ClusterMap>(config->clusters);
  for (uint32_t w = 0; w < workers; ++w) {
    worker_list.push_back(std::make_unique<Worker>(w));
    worker_list[w]->Start(clusters);
    // Each worker gets its own socket per listener; a listener without SO_REUSEPORT has one
    // socket, served by worker 0.
    for (size_t i = 0; i < config->listeners.size(); ++i) {
      int fd = w < per_listener[i].size() ? per_listener[i][w] : -1;
      worker_list[w]->AddListener(config->listeners[i], fd);
    }
  }

  // DNS refresh for STRICT_DNS clusters, on the main thread.
  std::vector<std::unique_ptr<Timer>> dns_timers;
  for (size_t i = 0; i < config->dns_clusters.size(); ++i) {
    auto t = main_dispatcher.CreateTimer([&, i] {
      const DnsCluster& dns = config->dns_clusters[i];
      std::vector<std::string> errors;
      auto hosts = ResolveDnsCluster(dns, &errors);
      for (const auto& e : errors) RPX_LOG(kWarn, "cluster '%s': %s", dns.cluster, e);
      ClusterEntry& entry = config->clusters[dns.cluster];
      bool changed = hosts->size() != entry.hosts->size();
      for (size_t h = 0; !changed && h < hosts->size(); ++h) {
        changed = !((*hosts)[h]->address == (*entry.hosts)[h]->address);
      }
      if (changed && !(hosts->empty() && !errors.empty())) {
        RPX_LOG(kInfo, "cluster '%s': %zu hosts after DNS refresh", dns.cluster, hosts->size());
        entry.hosts = hosts;
        auto snapshot = std::make_shared<const ClusterMap>(config->clusters);
        for (auto& w : worker_list) w->UpdateClusters(snapshot);
      }
      dns_timers[i]->Enable(dns.refresh_ms);
    });
    t->Enable(config->dns_clusters[i].refresh_ms);
    dns_timers.push_back(std::move(t));
  }

  int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  auto signal_event = main_dispatcher.CreateFileEvent(
      sfd,
      [&](uint32_t) {
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
          RPX_LOG(kInfo, "caught signal %u, shutting down", si.ssi_signo);
          quit();
        }
      },
      FileEvent::kRead);

  if (admin) admin->set_ready(true);
  for (const auto& l : config->listeners) {
    RPX_LOG(kInfo, "listener '%s' on %s", l->name, l->address.ToString());
  }
  RPX_LOG(kInfo, "rpx started with %u worker%s", workers, workers == 1 ? "" : "s");
  main_dispatcher.Run();

  for (auto& w : worker_list) w->Stop();
  worker_list.clear();
  dns_timers.clear();
  signal_event.reset();
  close(sfd);
  admin.reset();
  RPX_LOG(kInfo, "rpx stopped");
  return 0;
}

}  // namespace rpx
