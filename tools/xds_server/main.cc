// xds_server: a reference ADS control plane (state of the world and delta) serving the Envoy v3
// resources of a directory of YAML files, pushing a new version whenever a file changes or a
// change arrives through the control API (rpxctl). Used by the docs walkthroughs and rpx's
// integration tests. Log: one event per line on stdout.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>

#include "absl/strings/str_split.h"
#include "tools/xds_server/ads_service.h"
#include "tools/xds_server/etcd_backend.h"

namespace {

void Usage(FILE* out) {
  fprintf(
      out,
      "usage: xds_server --dir DIR [options]    (or --store etcd://... [--dir DIR])\n"
      "  --dir DIR        directory of *.yaml/*.yml files (rpx.tools.v1.ResourceFile)\n"
      "  --port N         port to listen on (default 0: pick a free one, shown in the log)\n"
      "  --address ADDR   address to listen on (default 127.0.0.1)\n"
      "  --poll-ms N      how often to look for changed files (default 200)\n"
      "  --control-port N serve the control API (rpx.control.v1.ControlService, used by\n"
      "                   rpxctl) on this port (0: a free one, shown in the log); off if unset\n"
      "  --control-address ADDR  address of the control API (default 127.0.0.1)\n"
      "  --history N      versions kept for rollback (default 100)\n"
      "  --static-clusters A,B  clusters the nodes define in their bootstrap: routes may\n"
      "                   name them\n"
      "  --unchecked      serve files and changes without checking them (to see how nodes\n"
      "                   handle bad resources)\n"
      "  --gone-ttl-s N   how long a disconnected node stays in the fleet status (default 600)\n"
      "Signals: SIGHUP reloads now; SIGTERM/SIGINT stop.\n");
}

bool ParseInt(const std::string& s, long min, long max, long* out) {
  char* end = nullptr;
  long n = strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || n < min || n > max) return false;
  *out = n;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  rpx::xds_server::XdsServerOptions options;
  rpx::xds_server::EtcdOptions etcd;
  std::string store;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_inline = false;
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline = true;
    }
    auto next = [&]() -> std::string {
      if (has_inline) return value;
      if (i + 1 >= argc) {
        fprintf(stderr, "error: %s needs a value\n", arg.c_str());
        exit(2);
      }
      return argv[++i];
    };
    long n = 0;
    if (arg == "--dir") {
      options.dir = next();
    } else if (arg == "--address") {
      options.address = next();
    } else if (arg == "--port") {
      std::string v = next();
      if (!ParseInt(v, 0, 65535, &n)) {
        fprintf(stderr, "error: --port must be an integer in [0, 65535], got '%s'\n", v.c_str());
        return 2;
      }
      options.port = static_cast<int>(n);
    } else if (arg == "--poll-ms") {
      std::string v = next();
      if (!ParseInt(v, 1, 3600000, &n)) {
        fprintf(stderr, "error: --poll-ms must be an integer in [1, 3600000], got '%s'\n",
                v.c_str());
        return 2;
      }
      options.poll_interval = std::chrono::milliseconds(n);
    } else if (arg == "--control-port") {
      std::string v = next();
      if (!ParseInt(v, 0, 65535, &n)) {
        fprintf(stderr, "error: --control-port must be an integer in [0, 65535], got '%s'\n",
                v.c_str());
        return 2;
      }
      options.control_port = static_cast<int>(n);
    } else if (arg == "--control-address") {
      options.control_address = next();
    } else if (arg == "--history") {
      std::string v = next();
      if (!ParseInt(v, 1, 1000000, &n)) {
        fprintf(stderr, "error: --history must be an integer in [1, 1000000], got '%s'\n",
                v.c_str());
        return 2;
      }
      options.history_limit = static_cast<size_t>(n);
    } else if (arg == "--static-clusters") {
      for (absl::string_view name : absl::StrSplit(next(), ',', absl::SkipEmpty())) {
        options.static_clusters.insert(std::string(name));
      }
    } else if (arg == "--unchecked") {
      if (has_inline) {
        fprintf(stderr, "error: --unchecked takes no value\n");
        return 2;
      }
      options.check = false;
    } else if (arg == "--gone-ttl-s") {
      std::string v = next();
      if (!ParseInt(v, 0, 86400 * 365, &n)) {
        fprintf(stderr, "error: --gone-ttl-s must be an integer in [0, 31536000], got '%s'\n",
                v.c_str());
        return 2;
      }
      options.gone_ttl = std::chrono::seconds(n);
    } else if (arg == "--tls-cert" || arg == "--tls-key" || arg == "--tls-client-ca") {
      std::string path = next();
      std::ifstream in(path);
      std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in || pem.empty()) {
        fprintf(stderr, "error: %s: cannot read '%s'\n", arg.c_str(), path.c_str());
        return 2;
      }
      (arg == "--tls-cert"  ? options.tls_cert_pem
       : arg == "--tls-key" ? options.tls_key_pem
                            : options.tls_client_ca_pem) = pem;
    } else if (arg == "--store") {
      store = next();
    } else if (arg == "--etcd-prefix") {
      etcd.prefix = next();
      if (etcd.prefix.empty()) {
        fprintf(stderr, "error: --etcd-prefix must not be empty\n");
        return 2;
      }
    } else if (arg == "-h" || arg == "--help") {
      Usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "error: unknown argument '%s'\n", argv[i]);
      Usage(stderr);
      return 2;
    }
  }
  if (!store.empty()) {
    std::string prefix = etcd.prefix;
    std::string error;
    if (!rpx::xds_server::ParseEtcdUrl(store, &etcd, &error)) {
      fprintf(stderr, "error: %s\n", error.c_str());
      return 2;
    }
    etcd.prefix = prefix;
    options.backend = rpx::xds_server::MakeEtcdBackend(etcd);
  }
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    fprintf(stderr, "error: --tls-cert and --tls-key go together\n");
    return 2;
  }
  if (!options.tls_client_ca_pem.empty() && options.tls_cert_pem.empty()) {
    fprintf(stderr, "error: --tls-client-ca needs --tls-cert and --tls-key\n");
    return 2;
  }
  if (options.dir.empty() && store.empty()) {
    fprintf(stderr, "error: --dir is required (unless --store is given)\n");
    Usage(stderr);
    return 2;
  }

  // Blocked before any thread exists (gRPC's included), so every thread inherits the mask and the
  // signals are only ever taken by sigwait below, outside any signal-handler restrictions.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::mutex log_mu;
  auto log = [&log_mu](const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mu);
    fwrite(line.data(), 1, line.size(), stdout);
    fputc('\n', stdout);
    fflush(stdout);
  };

  rpx::xds_server::XdsServer server(options, log);
  std::string error;
  if (!server.Start(&error)) {
    fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  while (true) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      log("SIGHUP: reloading");
      server.RequestReload();
      continue;
    }
    log(sig == SIGINT ? "SIGINT: stopping" : "SIGTERM: stopping");
    break;
  }
  server.Stop(std::chrono::milliseconds(1000));
  log("xds_server stopped");
  return 0;
}
