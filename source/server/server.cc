#include "source/server/server.h"

#include <malloc.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "source/common/logger.h"
#include "source/config/server_config.h"
#include "source/config/supported_fields.h"
#include "source/config/xds_client.h"
#include "source/config/xds_sources.h"
#include "source/config/yaml_loader.h"
#include "source/network/listener.h"
#include "source/server/admin.h"
#include "source/server/config_manager.h"
#include "source/server/hot_restart.h"
#include "source/server/worker.h"

namespace rpx {
namespace {

bool LoadConfig(const ServerOptions& options, uint32_t workers, LogFileManager* log_files,
                envoy::config::bootstrap::v3::Bootstrap* bootstrap, ServerConfig* out) {
  std::vector<std::string> errors;
  bool ok = LoadYamlFile(options.config_path, bootstrap, &errors);
  if (ok) {
    CheckSupportedFields(*bootstrap, options.config_path + ": ", "", &errors);
    ok = errors.empty();
  }
  if (ok) {
    if (!options.service_node.empty()) bootstrap->mutable_node()->set_id(options.service_node);
    if (!options.service_cluster.empty()) {
      bootstrap->mutable_node()->set_cluster(options.service_cluster);
    }
    if (!options.service_zone.empty()) {
      bootstrap->mutable_node()->mutable_locality()->set_zone(options.service_zone);
    }
    BuildOptions bo;
    bo.stats_slots = workers;
    bo.source = options.config_path;
    bo.log_files = log_files;
    ok = BuildServerConfig(*bootstrap, bo, out, &errors);
  }
  for (const auto& e : errors) fprintf(stderr, "error: %s\n", e.c_str());
  if (!errors.empty()) {
    fprintf(stderr, "%zu error%s in configuration '%s'\n", errors.size(),
            errors.size() == 1 ? "" : "s", options.config_path.c_str());
  }
  return ok && errors.empty();
}

}  // namespace

int RunServer(const ServerOptions& options) {
  uint32_t workers = options.concurrency;
  if (workers == 0) workers = std::max(1u, std::thread::hardware_concurrency());
  envoy::config::bootstrap::v3::Bootstrap bootstrap;
  ServerConfig config;
  // Access log files outlive every configuration that writes to them (and the workers).
  // One slot per worker, and the last for the main thread (the admin's access logs).
  LogFileManager log_files(workers + 1);
  if (!LoadConfig(options, workers, options.validate_only ? nullptr : &log_files, &bootstrap,
                  &config)) {
    return 1;
  }
  if (options.validate_only) {
    printf("configuration '%s' OK\n", options.config_path.c_str());
    return 0;
  }

  // Signals are taken by the main loop through a signalfd; workers never see them.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGUSR1);  // reopen access logs (logrotate)
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Dispatcher main_dispatcher("main");
  main_dispatcher.set_worker_index(workers);  // its slot in the access log files
  int exit_code = 0;
  bool stopping = false;
  auto quit = [&] {
    if (stopping) return;
    stopping = true;
    main_dispatcher.Exit();
  };
  // Hot restart: take the running epoch's sockets before opening any, so that ours are the same
  // sockets (nothing queued on them is lost) and no bind fails for an address the parent holds.
  std::unique_ptr<HotRestart> hot_restart;
  if (options.hot_restart) {
    hot_restart = std::make_unique<HotRestart>(options.base_id, options.restart_epoch);
    std::string error;
    if (!hot_restart->TakeParentSockets(&error)) {
      fprintf(stderr, "error: %s\n", error.c_str());
      return 1;
    }
  }
  int admin_fd = -1;
  std::vector<int> inherited_admin;
  if (hot_restart && config.admin_address) {
    inherited_admin = hot_restart->inherited().Take(*config.admin_address, 1);
  }
  if (!inherited_admin.empty()) {
    admin_fd = inherited_admin[0];
  } else if (config.admin_address) {
    auto fd = OpenListenSocket(*config.admin_address, false, 128);
    if (!fd.ok()) {
      fprintf(stderr, "error: admin: %s\n", std::string(fd.status().message()).c_str());
      return 1;
    }
    admin_fd = *fd;
  }

  GlobalConnectionLimit global_connections;
  global_connections.set_max(config.runtime.global_max_connections);
  std::vector<std::unique_ptr<Worker>> worker_list;
  auto clusters = std::make_shared<const ClusterMap>(config.clusters);
  for (uint32_t w = 0; w < workers; ++w) {
    worker_list.push_back(std::make_unique<Worker>(w));
    worker_list[w]->set_drain_ms(options.drain_time_ms);
    worker_list[w]->set_log_files(&log_files);
    worker_list[w]->set_global_connections(&global_connections);
    worker_list[w]->dispatcher().SetBatchWait(options.batch_wait_us);
    worker_list[w]->dispatcher().SetReadBatching(options.read_batching);
    worker_list[w]->dispatcher().SetWriteBatching(options.write_batching);
    worker_list[w]->Start(clusters);
  }
  auto stop_workers = [&] {
    for (auto& w : worker_list) w->Stop();
    worker_list.clear();
  };
  auto manager = std::make_unique<ConfigManager>(main_dispatcher, worker_list, bootstrap, config,
                                                 workers, options.drain_time_ms);
  manager->set_log_files(&log_files);
  if (hot_restart) manager->set_inherited(&hot_restart->inherited());
  // Static DNS clusters resolve first (bounded), so the first requests find their hosts.
  if (manager->static_dns_pending()) {
    main_dispatcher.RunUntil([&] { return !manager->static_dns_pending(); }, 10000);
  }
  std::string error;
  // Sockets next: a bind failure is a startup error.
  if (!manager->StartStatic(&error)) {
    fprintf(stderr, "error: %s\n", error.c_str());
    if (admin_fd >= 0) close(admin_fd);
    manager.reset();
    stop_workers();
    return 1;
  }
  // Parsing the bootstrap peaks far above the steady state (a 10,000-vhost YAML file: ~110 MiB
  // RSS), and main() tells malloc to keep freed memory; give that one-time peak back.
  malloc_trim(0);
  std::unique_ptr<Admin> admin;
  XdsSources* xds_sources_ptr = nullptr;
  if (admin_fd >= 0) {
    admin = std::make_unique<Admin>(main_dispatcher, manager->current(), workers, quit);
    ConfigManager* m = manager.get();
    XdsSources** xds_ref = &xds_sources_ptr;
    admin->set_hooks(
        [m] { return m->initialized(); },
        [m](bool include_eds) { return m->ConfigDumps(include_eds); },
        [m] { return m->ConfigSummaryJson(); },
        [m, xds_ref, &log_files](std::map<std::string, int64_t>* out) {
          // Envoy's names, summed over the access log files.
          for (const auto& f : log_files.Files()) {
            const LogFile::Stats& st = f->stats();
            (*out)["filesystem.write_buffered"] += st.write_buffered.load();
            (*out)["filesystem.write_completed"] += st.write_completed.load();
            (*out)["filesystem.write_failed"] += st.write_failed.load();
            (*out)["filesystem.write_dropped"] += st.write_dropped.load();
            (*out)["filesystem.write_dropped_bytes"] += st.write_dropped_bytes.load();
            (*out)["filesystem.reopen_failed"] += st.reopen_failed.load();
            (*out)["filesystem.write_total_buffered"] += st.write_total_buffered.load();
          }
          m->DnsStats(out);
          XdsSources* x = *xds_ref;
          if (!x) return;
          (*out)["control_plane.connected"] = x->connected() ? 1 : 0;
          (*out)["control_plane.ignored_fields"] = m->ignored_fields();
          (*out)["control_plane.route_updates_measured"] = m->route_updates();
          (*out)["control_plane.last_route_propagation_us"] = m->last_route_propagation_us();
          for (const auto& [type, st] : x->status()) {
            std::string t = type.substr(type.rfind('.') + 1);
            (*out)["control_plane." + t + ".update_success"] = st.updates;
            (*out)["control_plane." + t + ".update_rejected"] = st.nacks;
          }
        });
    admin->set_drain_listeners([&worker_list, &options](bool gradual, bool inbound_only) {
      for (auto& w : worker_list) w->Drain(options.drain_time_ms, gradual, inbound_only);
    });
    admin->set_reopen_logs([&log_files] { log_files.ReopenAll(); });
    admin->set_runtime_modify(
        [&config, &global_connections](const std::map<std::string, std::string>& changes) {
          std::string error = ModifyRuntime(changes, &config.runtime);
          if (error.empty()) global_connections.set_max(config.runtime.global_max_connections);
          return error;
        });
    Admin::RestartInfo ri;
    ri.enabled = hot_restart != nullptr;
    ri.epoch = options.restart_epoch;
    ri.base_id = options.base_id;
    if (hot_restart) ri.first_start_unix_ms = hot_restart->first_start_unix_ms();
    admin->set_restart_info(ri);
    admin->Start(admin_fd);
  }

  std::unique_ptr<XdsSources> xds;
  if (config.xds.dynamic()) {
    envoy::config::core::v3::Node node = bootstrap.node();
    node.set_user_agent_name("rpx");
    xds = std::make_unique<XdsSources>(main_dispatcher, config.xds, node, *manager);
    manager->AttachXds(xds.get());
    xds_sources_ptr = xds.get();
    if (config.xds.enabled) {
      RPX_LOG(kInfo, "xDS: %s ADS to %s (cluster '%s')",
              config.xds.delta ? "delta" : "state-of-the-world", config.xds.target,
              config.xds.cluster);
    }
    RPX_LOG(kInfo, "xDS sources: %s", xds->Describe());
    std::string error;
    if (!xds->Start(&error)) {
      fprintf(stderr, "error: %s\n", error.c_str());
      exit_code = 1;
      quit();
    }
  }

  // The main thread's access log lines (admin requests) reach the files within a second, as the
  // workers' do.
  std::unique_ptr<Timer> log_flush_timer;
  if (config.admin_logging) {
    log_flush_timer = main_dispatcher.CreateTimer([&] {
      for (const auto& f : log_files.Files()) f->FlushWorker(workers);
      log_flush_timer->Enable(1000);
    });
    log_flush_timer->Enable(1000);
  }

  // DNS clusters are resolved by the ConfigManager's refreshers (asynchronously, on this loop).

  // Graceful shutdown: stop accepting, fail /ready, let every connection finish what it is doing
  // (closing once idle), and stop when none is left or the drain time is up.
  bool draining = false;
  std::unique_ptr<Timer> drain_timer;
  auto drain_deadline = std::chrono::steady_clock::now();
  auto drain = [&](uint64_t max_ms) {
    if (draining) return;
    draining = true;
    if (hot_restart) hot_restart->StopListening();  // no handover while draining
    if (admin) admin->set_draining(true);
    uint64_t drain_ms = std::min(options.drain_time_ms, max_ms);
    RPX_LOG(kInfo, "draining: %s up to %llu ms for open connections to finish",
            options.drain_gradual ? "gradually," : "at once,",
            static_cast<unsigned long long>(drain_ms));
    for (auto& w : worker_list) w->Drain(drain_ms, options.drain_gradual);
    drain_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(drain_ms);
    drain_timer = main_dispatcher.CreateTimer([&] {
      uint64_t open = 0;
      for (auto& w : worker_list) open += w->open_connections();
      if (open == 0 || std::chrono::steady_clock::now() >= drain_deadline) {
        if (open) RPX_LOG(kInfo, "drain time is up: closing %llu connections", open);
        quit();
        return;
      }
      drain_timer->Enable(50);
    });
    drain_timer->Enable(0);
  };
  int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  auto signal_event = main_dispatcher.CreateFileEvent(
      sfd,
      [&](uint32_t) {
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
          if (si.ssi_signo == SIGUSR1) {
            RPX_LOG(kInfo, "caught SIGUSR1: reopening access logs");
            log_files.ReopenAll();
            continue;
          }
          if (draining || options.drain_time_ms == 0) {
            RPX_LOG(kInfo, "caught signal %u, shutting down", si.ssi_signo);
            quit();
          } else {
            RPX_LOG(kInfo, "caught signal %u, draining (a second one stops at once)", si.ssi_signo);
            drain(options.drain_time_ms);
          }
        }
      },
      FileEvent::kRead);

  // Hot restart: the parent drains once this process serves (its listeners warm, /ready true);
  // then this process waits for its own successor.
  std::unique_ptr<Timer> takeover_timer;
  auto listen_for_successor = [&]() -> std::string {
    std::string error;
    bool ok = hot_restart->Listen(
        main_dispatcher,
        [&](uint64_t max_ms) {
          if (admin) admin->StopListening();  // the successor serves the admin socket now
          if (options.drain_time_ms == 0 || max_ms == 0) {
            quit();
          } else {
            drain(max_ms);
          }
        },
        &error);
    return ok ? std::string() : error;
  };
  if (hot_restart && options.restart_epoch > 0) {
    takeover_timer = main_dispatcher.CreateTimer([&] {
      if (!manager->initialized()) {
        takeover_timer->Enable(20);
        return;
      }
      hot_restart->ReleaseParent(options.parent_shutdown_ms);
      std::string error = listen_for_successor();
      if (!error.empty()) RPX_LOG(kError, "%s: a later epoch cannot take over", error);
    });
    takeover_timer->Enable(0);
  } else if (hot_restart) {
    // Epoch 0: another rpx with this base id would answer our successor instead; refuse to start,
    // as Envoy does.
    std::string error = listen_for_successor();
    if (!error.empty()) {
      fprintf(stderr, "error: %s\n", error.c_str());
      exit_code = 1;
      quit();
    }
  }

  if (admin) admin->set_ready(true);
  for (const auto& l : config.listeners) {
    RPX_LOG(kInfo, "listener '%s' on %s", l->name, l->address.ToString());
  }
  RPX_LOG(kInfo, "rpx started with %u worker%s", workers, workers == 1 ? "" : "s");
  main_dispatcher.Run();

  takeover_timer.reset();
  log_flush_timer.reset();
  if (xds) xds->Stop();
  stop_workers();
  log_files.Stop();  // what the workers buffered last
  signal_event.reset();
  close(sfd);
  admin.reset();
  manager.reset();
  hot_restart.reset();
  xds.reset();
  RPX_LOG(kInfo, "rpx stopped");
  return exit_code;
}

}  // namespace rpx
