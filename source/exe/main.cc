// rpx: an Envoy-style L7 reverse proxy. Flags follow Envoy's.
#include <malloc.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "source/common/logger.h"
#include "source/http/http1_parser.h"
#include "source/network/splice.h"
#include "source/server/server.h"

namespace {

// Like nginx's worker_rlimit_nofile: every downstream connection and every pooled upstream
// connection is a file descriptor, and the usual soft limit (1024) is far below what a proxy
// holds. Raise the soft limit to the hard limit; failing to is a warning, not fatal.
void RaiseFileLimit() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    RPX_LOG(kWarn, "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
    return;
  }
  rlim_t target = rl.rlim_max;
  if (target == RLIM_INFINITY) target = 1 << 20;  // the kernel's default fs.nr_open
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < target) {
    rlim_t before = rl.rlim_cur;
    rl.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      RPX_LOG(kWarn, "cannot raise the open-file limit from %llu to %llu: %s",
              static_cast<unsigned long long>(before), static_cast<unsigned long long>(target),
              strerror(errno));
      return;
    }
  }
  RPX_LOG(kInfo, "open-file limit (RLIMIT_NOFILE): %llu",
          static_cast<unsigned long long>(rl.rlim_cur));
}

void Usage(FILE* out) {
  fprintf(
      out,
      "usage: rpx -c CONFIG [options]\n"
      "  -c, --config-path FILE   Envoy v3 bootstrap (YAML or JSON)\n"
      "  --concurrency N          worker threads (default: number of cores)\n"
      "  --mode serve|validate    validate: check the config, print every error, exit\n"
      "  -l, --log-level LEVEL    trace, debug, info, warning, error, critical, off\n"
      "  --service-node NAME      node id (overrides node.id)\n"
      "  --service-cluster NAME   node cluster (overrides node.cluster)\n"
      "  --service-zone NAME      node zone (overrides node.locality.zone)\n"
      "  --drain-time-s N         seconds open connections may finish: a removed listener's,\n"
      "                           and everyone's on SIGTERM/SIGINT (5; 0: stop at once)\n"
      "  --drain-strategy S       on SIGTERM, ask connections to close gradually over the\n"
      "                           drain time (gradual, the default) or all at once (immediate)\n"
      "  --restart-epoch N        hot restart (on with this flag or --base-id): epoch N > 0\n"
      "                           takes the listening sockets of the running rpx of epoch\n"
      "                           N-1 (same --base-id), which then drains and exits\n"
      "  --base-id N              tells apart rpx instances on one host for hot restart (0)\n"
      "  --parent-shutdown-time-s N  the longest the parent may drain after a hot restart (900)\n"
      "  --disable-hot-restart    no hot restart even with --restart-epoch 0 / --base-id\n"
      "  --hot-restart-version    print the hot restart protocol version and exit\n"
      "  --disable-splice         copy large bodies through userspace instead of splice(2)\n"
      "  --disable-fast-parse     parse every HTTP/1 head with llhttp (no fast path)\n"
      "  --batch-wait-us N        with requests in flight, an idle worker sleeps N us (up to\n"
      "                           10 times) before blocking, to handle arrivals in batches\n"
      "                           instead of being woken for each (default 20; 0: off)\n"
      "  --disable-read-batching  read each ready socket with its own recv(2) instead of\n"
      "                           all of an epoll batch in one io_uring_enter(2)\n"
      "  --disable-write-batching send each connection's output with its own send(2)\n"
      "                           instead of all of a flush's in one io_uring_enter(2)\n"
      "  --version, -h/--help\n");
}

// Parses `v` as a decimal integer in [lo, hi]; otherwise prints an error naming `flag` and exits.
long IntFlag(const char* flag, const std::string& v, long lo, long hi) {
  char* end = nullptr;
  long n = strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < lo || n > hi) {
    fprintf(stderr, "error: %s must be an integer in [%ld, %ld], got '%s'\n", flag, lo, hi,
            v.c_str());
    exit(1);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__x86_64__)
  // The HTTP/1 parser is built for SSE4.2 (third_party/llhttp.BUILD); say so rather than die of
  // SIGILL on the first long header.
  if (!__builtin_cpu_supports("sse4.2")) {
    fprintf(stderr, "error: this CPU lacks SSE4.2, which this build of rpx needs (x86-64-v2)\n");
    return 1;
  }
#endif
  // glibc hands freed memory back to the kernel eagerly (madvise/munmap, each costing hundreds of
  // microseconds on some VMs), then faults it back in on the next large request or config push.
  // A proxy's heap is its steady state: keep what it freed for reuse.
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  rpx::ServerOptions options;
  bool hot_restart_asked = false;
  bool hot_restart_disabled = false;
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
    auto next = [&](const char* name) -> std::string {
      if (has_inline) return value;
      if (i + 1 >= argc) {
        fprintf(stderr, "error: %s needs a value\n", name);
        exit(1);
      }
      return argv[++i];
    };
    if (arg == "-c" || arg == "--config-path") {
      options.config_path = next("--config-path");
    } else if (arg == "--concurrency") {
      options.concurrency =
          static_cast<uint32_t>(IntFlag("--concurrency", next("--concurrency"), 1, 1024));
    } else if (arg == "--mode") {
      std::string m = next("--mode");
      if (m == "validate") {
        options.validate_only = true;
      } else if (m != "serve") {
        fprintf(stderr, "error: --mode must be 'serve' or 'validate', got '%s'\n", m.c_str());
        return 1;
      }
    } else if (arg == "-l" || arg == "--log-level") {
      std::string l = next("--log-level");
      rpx::LogLevel level;
      if (!rpx::ParseLogLevel(l, &level)) {
        fprintf(stderr, "error: unknown log level '%s'\n", l.c_str());
        return 1;
      }
      rpx::SetLogLevel(level);
    } else if (arg == "--service-node") {
      options.service_node = next("--service-node");
    } else if (arg == "--service-cluster") {
      options.service_cluster = next("--service-cluster");
    } else if (arg == "--service-zone") {
      options.service_zone = next("--service-zone");
    } else if (arg == "--drain-time-s") {
      options.drain_time_ms =
          static_cast<uint64_t>(IntFlag("--drain-time-s", next("--drain-time-s"), 0, 86400)) * 1000;
    } else if (arg == "--drain-strategy") {
      std::string v = next("--drain-strategy");
      if (v != "gradual" && v != "immediate") {
        fprintf(stderr, "error: --drain-strategy: '%s' is not gradual or immediate\n", v.c_str());
        return 1;
      }
      options.drain_gradual = v == "gradual";
    } else if (arg == "--restart-epoch") {
      options.restart_epoch =
          static_cast<uint32_t>(IntFlag("--restart-epoch", next("--restart-epoch"), 0, 1 << 30));
      hot_restart_asked = true;
    } else if (arg == "--base-id") {
      options.base_id = static_cast<uint32_t>(IntFlag("--base-id", next("--base-id"), 0, 1 << 30));
      hot_restart_asked = true;
    } else if (arg == "--parent-shutdown-time-s") {
      options.parent_shutdown_ms =
          static_cast<uint64_t>(
              IntFlag("--parent-shutdown-time-s", next("--parent-shutdown-time-s"), 0, 86400)) *
          1000;
    } else if (arg == "--disable-hot-restart") {
      hot_restart_disabled = true;
    } else if (arg == "--hot-restart-version") {
      printf("rpx.1\n");
      return 0;
    } else if (arg == "--batch-wait-us") {
      options.batch_wait_us =
          static_cast<uint32_t>(IntFlag("--batch-wait-us", next("--batch-wait-us"), 0, 1000));
    } else if (arg == "--disable-read-batching") {
      options.read_batching = false;
    } else if (arg == "--disable-write-batching") {
      options.write_batching = false;
    } else if (arg == "--disable-splice") {
      rpx::Splicer::SetEnabled(false);
    } else if (arg == "--disable-fast-parse") {
      rpx::Http1Parser::SetFastPathEnabled(false);
    } else if (arg == "--version") {
      printf("rpx version 0.1.0\n");
      return 0;
    } else if (arg == "-h" || arg == "--help") {
      Usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "error: unknown argument '%s'\n", argv[i]);
      Usage(stderr);
      return 1;
    }
  }
  if (hot_restart_disabled && options.restart_epoch > 0) {
    fprintf(stderr,
            "error: --restart-epoch %u needs hot restart, which --disable-hot-restart "
            "turns off\n",
            options.restart_epoch);
    return 1;
  }
  options.hot_restart = hot_restart_asked && !hot_restart_disabled;
  if (options.config_path.empty()) {
    fprintf(stderr, "error: a configuration is required (-c FILE)\n");
    Usage(stderr);
    return 1;
  }
  if (!options.validate_only) RaiseFileLimit();
  return rpx::RunServer(options);
}
