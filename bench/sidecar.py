#!/usr/bin/env python3
"""Latency and CPU added per sidecar hop (issue 34's benchmark), in network namespaces.

    sudo python3 bench/sidecar.py [--origin bench|nginx] [--rates 1000,10000] [--duration 10]
                                  [--reps 3] [--clients 10] [--warmup 1]
                                  [--layouts direct,relay,one-hop,two-hop] [--json FILE]
                                  [--out FILE] [--proxy-cpu 0] [--load-cpu 1] [--tcp-cc NAME]
                                  [--rpx-bin B] [--origin-bin B] [--relay-bin B] [--keep-tmp]

Run as root (namespaces, iptables). Python 3 standard library; the topology and the redirect
rules come from test/integration/netns.py (the same rules as deploy/vm/rpx-redirect.sh).

Topology (two namespaces joined by a veth, nothing changed in the root namespace):

    client ns (netns "app" role) 10.213.0.1        server ns ("svc" role) 10.213.0.2
      h2load                                         origin on 127.0.0.1:8080
      outbound rpx (uid 1337)                        inbound rpx (uid 1337)
      nat OUTPUT: capture to 15001, except           nat PREROUTING on eth0: capture to 15006,
      uid 1337, 127.0.0.1, ports 8081, 8084          except ports 15000, 8081, 8084; 8081 is
                                                     DNATed to the origin, 8084 to the relay
                                                     (route_localnet=1)

Layouts, measured interleaved in the same run (the order alternates from one repetition to the
next), all under the same rules, so that conntrack and the nat hooks are there for every layout
and no rule changes between runs:

    direct   h2load -> 10.213.0.2:8081 -> origin. Port 8081 is excluded from capture in both
             namespaces (exclude_outbound_ports / exclude_inbound_ports), so the direct path is
             never redirected; it reaches the origin through one DNAT (the bench origin listens
             on 127.0.0.1 only; nginx is set up the same way so that both origins compare).
    relay    h2load -> 10.213.0.2:8084 (not captured) -> DNAT -> bench/tcp_relay on 127.0.0.1:8090
             of the server ns (CPU 0, like the sidecars) -> origin: one user-space hop that
             parses nothing (bench/README.md, "The floor"). What a hop costs on this machine
             before any proxy logic: the reference for what rpx adds above it. Left out (with
             a message) when bazel-bin/bench/tcp_relay is missing.
    one-hop  h2load -> 10.213.0.2:8082, captured (REDIRECT :15001) -> outbound rpx:
             virtualOutbound (original_dst, use_original_dst) hands the connection to its
             bind_to_port:false listener 10.213.0.2:8082 (HTTP connection manager) -> STATIC
             cluster 10.213.0.2:8081 (HTTP/1.1 keep-alive pool) -> origin, as direct.
    two-hop  h2load -> 10.213.0.2:8080, captured -> outbound rpx: listener 10.213.0.2:8080 ->
             STATIC cluster 10.213.0.2:8080 -> captured in the server ns (REDIRECT :15006) ->
             inbound rpx: virtualInbound (original_dst, http_inspector; the HTTP chain matched by
             destination_port 8080 and application_protocols http/1.1) -> STATIC cluster
             127.0.0.1:8080 -> origin. The issue's client -> outbound -> inbound -> app path.

rpx: a copy of the binary in the temp dir (uid 1337 cannot read the bazel output tree), run as
uid 1337 with `--concurrency 1`, static bootstraps (no control plane), no access logs, admin on
127.0.0.1:15000 of its namespace. Pinning: both rpx (and the relay) on CPU 0 (--proxy-cpu);
h2load and the origin on CPU 1 (--load-cpu). On a 2-core machine the two sidecars share a core,
as h2load and the origin do; a request visits them one after the other.

Load: for each rate R, `h2load --h1 -c C -t 1 --rps R/C -D DURATION --log-file F`, keep-alive
HTTP/1.1 GETs of a 30-byte file; an unmeasured run of --warmup seconds at the same rate precedes
each measured one. From the log (every request's latency) p50, p90, p99 (nearest rank, 2xx
responses only). h2load's --rps sends a client's next request only once the previous response
is in (HTTP/1.1, no pipelining): a slow response delays the requests behind it without their
wait being counted (coordinated omission); "achieved req/s" shows whether the rate held.

CPU per request: utime+stime from /proc/PID/stat (clock ticks) of each rpx over the measured
run divided by the requests that rpx served (its http.<prefix>.downstream_rq_total); the
relay's, the origin's (nginx: master and workers) and h2load's (wait4 rusage) per request
h2load completed. The "every run" table also gives each one's schedstat time (ns resolution).
"other CPU %" is the machine's busy time not spent by these processes (a build alongside).

Reported per rate: medians over the repetitions; "added" is the median of the differences to
the direct run of the same repetition. A run with errors (failed, errored or timed-out
requests, non-2xx) or below 95% of the target rate is flagged, never dropped. The targets are a
fifth of Istio's published added latency (docs/notes/istio-figures.md).

Cleanup on every exit (normal, error, Ctrl-C, SIGTERM): the processes it started, by PID; the
namespaces (with them the veth, the rules and the sysctl); the temp dir (unless --keep-tmp).
"""

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "integration"))
import netns  # noqa: E402  (test/integration/netns.py)

CLIENT_IP, SERVER_IP = "10.213.0.1", "10.213.0.2"
ORIGIN_PORT = 8080   # the origin, on 127.0.0.1 of the server ns; also the service's address port
DIRECT_PORT = 8081   # never captured; DNATed to the origin
ONE_HOP_PORT = 8082  # captured in the client ns only; the outbound rpx sends it to DIRECT_PORT
RELAY_PORT = 8084    # never captured; DNATed to the TCP relay (127.0.0.1:8090 in the server ns)
RELAY_LISTEN = 8090
ADMIN_PORT = netns.ADMIN_PORT
UID = netns.PROXY_UID
BODY = b"rpx sidecar bench: 30 bytes..\n"
assert len(BODY) == 30

HCM = ("type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
       "HttpConnectionManager")
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
TCP_PROXY = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
ORIGINAL_DST = "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst"
HTTP_INSPECTOR = ("type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3."
                  "HttpInspector")
HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

LAYOUTS = {
    "direct": {"port": DIRECT_PORT, "hops": 0, "captured": False,
               "path": "client -> origin"},
    "relay": {"port": RELAY_PORT, "hops": 1, "captured": False,
              "path": "client -> TCP relay (bench/tcp_relay, no HTTP, no capture) -> origin"},
    "one-hop": {"port": ONE_HOP_PORT, "hops": 1, "captured": True,
                "path": "client -> outbound rpx -> origin"},
    "two-hop": {"port": ORIGIN_PORT, "hops": 2, "captured": True,
                "path": "client -> outbound rpx -> inbound rpx -> origin"},
}
# The processes of a layout's hops and what counts their requests: (hop, HCM stat_prefix), or
# (hop, None) for the relay (which has no stats: the requests h2load completed).
SERVED_BY = {"relay": [("relay", None)],
             "one-hop": [("outbound", "outbound_onehop")],
             "two-hop": [("outbound", "outbound_svc_8080"), ("inbound", "inbound_8080")]}
HOP_LABEL = {"outbound": "out", "inbound": "in", "relay": "relay"}

# docs/notes/istio-figures.md: Istio 1.20, the newest published sidecar latency, for the two
# proxies of a request together (client sidecar + server sidecar): +0.228 ms p90, +0.298 ms p99
# at 1000 req/s, 1 kB, mTLS, telemetry v2. No p50 is published. CPU: 0.20 vCPU at 1000 req/s
# per sidecar in 1.24 (~200 us/req), 0.5 vCPU per 1000 req/s in 1.20/1.22 (~500 us/req).
ISTIO = {"version": "1.20", "p90_us_two_proxies": 228.0, "p99_us_two_proxies": 298.0,
         "cpu_us_per_req_1_24": 200.0, "cpu_us_per_req_1_20": 500.0}
TARGET_FRACTION = 0.2
MIN_RATE_FRACTION = 0.95
NOISY_OTHER_CPU_PCT = 20  # "other CPU %" above this flags a run as noisy

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print("[sidecar] %s" % msg, file=sys.stderr, flush=True)


class BenchError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------------

def addr(ip, port):
    return {"socket_address": {"address": ip, "port_value": port}}


def http_options():
    return {HTTP_OPTIONS: {"@type": "type.googleapis.com/" + HTTP_OPTIONS,
                           "common_http_protocol_options": {"idle_timeout": "3600s"},
                           "explicit_http_config": {"http_protocol_options": {}}}}


def static_cluster(name, ip, port):
    return {"name": name, "type": "STATIC", "connect_timeout": "2s",
            "typed_extension_protocol_options": http_options(),
            "load_assignment": {"cluster_name": name, "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": addr(ip, port)}}]}]}}


def hcm(stat_prefix, cluster):
    return {"name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": HCM, "stat_prefix": stat_prefix, "codec_type": "HTTP1",
                "route_config": {"name": stat_prefix, "virtual_hosts": [{
                    "name": stat_prefix, "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": {"cluster": cluster}}]}]},
                "http_filters": [{"name": "envoy.filters.http.router",
                                  "typed_config": {"@type": ROUTER}}]}}


def tcp_proxy_chain(name, cluster):
    return {"name": name, "filters": [{"name": "envoy.filters.network.tcp_proxy",
                                       "typed_config": {"@type": TCP_PROXY,
                                                        "stat_prefix": cluster,
                                                        "cluster": cluster}}]}


def admin():
    return {"address": addr("127.0.0.1", ADMIN_PORT)}


def outbound_bootstrap():
    """The client's sidecar: Istio's virtualOutbound plus one bind_to_port:false listener per
    service address (what a control plane would push), static."""
    listeners = [
        {"name": "virtualOutbound", "stat_prefix": "virtualOutbound",
         "address": addr("0.0.0.0", netns.OUTBOUND_PORT),
         "use_original_dst": True, "traffic_direction": "OUTBOUND",
         "listener_filters": [{"name": "envoy.filters.listener.original_dst",
                               "typed_config": {"@type": ORIGINAL_DST}}],
         "default_filter_chain": tcp_proxy_chain("PassthroughFilterChain", "PassthroughCluster")},
        {"name": "%s_%d" % (SERVER_IP, ORIGIN_PORT), "address": addr(SERVER_IP, ORIGIN_PORT),
         "bind_to_port": False, "traffic_direction": "OUTBOUND",
         "filter_chains": [{"filters": [hcm("outbound_svc_8080", "outbound_svc_8080")]}]},
        {"name": "%s_%d" % (SERVER_IP, ONE_HOP_PORT), "address": addr(SERVER_IP, ONE_HOP_PORT),
         "bind_to_port": False, "traffic_direction": "OUTBOUND",
         "filter_chains": [{"filters": [hcm("outbound_onehop", "outbound_onehop")]}]},
    ]
    clusters = [
        {"name": "PassthroughCluster", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED",
         "connect_timeout": "2s"},
        static_cluster("outbound_svc_8080", SERVER_IP, ORIGIN_PORT),
        static_cluster("outbound_onehop", SERVER_IP, DIRECT_PORT),
    ]
    return {"admin": admin(), "static_resources": {"listeners": listeners, "clusters": clusters}}


def inbound_bootstrap():
    """The server's sidecar: Istio's virtualInbound with an HTTP chain for the app's port (chosen
    by http_inspector and the original destination's port) and a TCP passthrough for the rest."""
    listeners = [
        {"name": "virtualInbound", "stat_prefix": "virtualInbound",
         "address": addr("0.0.0.0", netns.INBOUND_PORT), "traffic_direction": "INBOUND",
         "listener_filters": [
             {"name": "envoy.filters.listener.original_dst",
              "typed_config": {"@type": ORIGINAL_DST}},
             {"name": "envoy.filters.listener.http_inspector",
              "typed_config": {"@type": HTTP_INSPECTOR}}],
         "listener_filters_timeout": "1s", "continue_on_listener_filters_timeout": True,
         "filter_chains": [
             {"name": "inbound_8080",
              "filter_chain_match": {"destination_port": ORIGIN_PORT,
                                     "application_protocols": ["http/1.1"]},
              "filters": [hcm("inbound_8080", "inbound_app_8080")]}],
         "default_filter_chain": tcp_proxy_chain("InboundPassthroughFilterChain",
                                                 "InboundPassthroughCluster")},
    ]
    clusters = [
        {"name": "InboundPassthroughCluster", "type": "ORIGINAL_DST",
         "lb_policy": "CLUSTER_PROVIDED", "connect_timeout": "2s",
         "upstream_bind_config": {"source_address": {"address": "127.0.0.6", "port_value": 0}}},
        static_cluster("inbound_app_8080", "127.0.0.1", ORIGIN_PORT),
    ]
    return {"admin": admin(), "static_resources": {"listeners": listeners, "clusters": clusters}}


def nginx_conf(d, www):
    """One worker, keep-alive, the 30-byte file on 127.0.0.1:8080 (bench/configs.sh's origin)."""
    temp = "".join("  %s_temp_path %s/%s;\n" % (k, d, k)
                   for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return ("daemon off;\nmaster_process on;\nworker_processes 1;\n"
            "pid %(d)s/nginx.pid;\nerror_log %(d)s/error.log warn;\n"
            "events { worker_connections 4096; multi_accept off; }\n"
            "http {\n  access_log off;\n%(temp)s"
            "  types { text/plain txt; }\n  default_type application/octet-stream;\n"
            "  sendfile on;\n  tcp_nopush on;\n  tcp_nodelay on;\n"
            "  keepalive_requests 100000;\n  keepalive_timeout 3700s;\n"
            "  open_file_cache max=64 inactive=300s;\n"
            "  server {\n    listen 127.0.0.1:%(port)d backlog=4096;\n"
            "    root %(www)s;\n    location / { }\n  }\n}\n"
            % {"d": d, "temp": temp, "port": ORIGIN_PORT, "www": www})


# ---------------------------------------------------------------------------------------------
# Measurement helpers
# ---------------------------------------------------------------------------------------------

def proc_ticks(pid):
    """utime+stime of `pid` (all its threads), in clock ticks."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def sched_ns(pids):
    """Time on CPU (ns) of every thread of `pids`, from /proc/PID/task/*/schedstat: the same
    quantity as utime+stime without the clock tick's resolution (a cross-check for short runs)."""
    total = 0
    for pid in pids:
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return total


def children_of(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(d))
    return out


def ticks_of(pids):
    total = 0
    for pid in pids:
        try:
            total += proc_ticks(pid)
        except (OSError, ValueError, IndexError):
            pass
    return total


def cpu_times():
    """{cpuN: (busy, steal, total)} from /proc/stat, in ticks."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if not re.match(r"^cpu\d+ ", line):
                continue
            name, *vals = line.split()
            v = [int(x) for x in vals]
            idle = v[3] + (v[4] if len(v) > 4 else 0)
            steal = v[7] if len(v) > 7 else 0
            total = sum(v[:8])
            out[name] = (total - idle, steal, total)
    return out


def percentile(sorted_vals, p):
    if not sorted_vals:
        return None
    k = max(0, math.ceil(p / 100.0 * len(sorted_vals)) - 1)
    return sorted_vals[min(k, len(sorted_vals) - 1)]


def parse_h2load(text):
    r = {}
    m = re.search(r"finished in ([\d.]+)s, ([\d.]+) req/s", text)
    if m:
        r["seconds"], r["rps"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", text)
    if m:
        (r["total"], r["started"], r["done"], r["succeeded"], r["failed"], r["errored"],
         r["timeout"]) = (int(x) for x in m.groups())
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    if m:
        r["2xx"], r["3xx"], r["4xx"], r["5xx"] = (int(x) for x in m.groups())
    return r


def read_latencies(path):
    """Latencies (µs) of the 2xx rows of an h2load --log-file, sorted; and the non-2xx count."""
    ok, bad = [], 0
    with open(path) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) < 3:
                continue
            if parts[1].startswith("2"):
                ok.append(int(parts[2]))
            else:
                bad += 1
    ok.sort()
    return ok, bad


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


# ---------------------------------------------------------------------------------------------
# The bench
# ---------------------------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.topo = None
        self.tmp = None
        self.rpx = {}       # "outbound"/"inbound" (and "relay") -> Popen
        self.origin = None  # Popen
        self.ns = {}

    # --- setup -------------------------------------------------------------------------------

    def setup(self):
        a = self.args
        ok, why = netns.available()
        if not ok:
            raise BenchError("cannot build the namespaces here: %s" % why)
        self.iptables = "%s (%s)" % (netns.iptables_bin(),
                                     netns.iptables_version(netns.iptables_bin()))
        self.tmp = tempfile.mkdtemp(prefix="rpx-sidecar-bench.")
        os.chmod(self.tmp, 0o755)  # uid 1337 (rpx) and nginx's workers read from here
        www = os.path.join(self.tmp, "www")
        os.mkdir(www, 0o755)
        with open(os.path.join(www, "small.txt"), "wb") as f:
            f.write(BODY)
        os.chmod(os.path.join(www, "small.txt"), 0o644)
        self.rpx_bin = os.path.join(self.tmp, "rpx")
        shutil.copy(a.rpx_bin, self.rpx_bin)
        os.chmod(self.rpx_bin, 0o755)
        boots = {"outbound": outbound_bootstrap(), "inbound": inbound_bootstrap()}
        self.boot_paths = {}
        for name, b in boots.items():
            p = os.path.join(self.tmp, "%s.yaml" % name)
            with open(p, "w") as f:
                json.dump(b, f, indent=1)  # JSON is YAML
                f.write("\n")
            os.chmod(p, 0o644)
            self.boot_paths[name] = p
            r = subprocess.run([self.rpx_bin, "-c", p, "--mode", "validate"],
                               capture_output=True, text=True, timeout=30)
            if r.returncode != 0:
                raise BenchError("rpx --mode validate %s:\n%s%s" % (p, r.stdout, r.stderr))

        self.topo = netns.Topology(app_ip=CLIENT_IP, svc_ip=SERVER_IP)
        client, server = self.topo.app, self.topo.svc
        self.ns = {"client": client, "server": server}
        log("namespaces %s (client) and %s (server)" % (client, server))
        if a.tcp_cc:
            for ns in (client, server):
                netns.exec_in(ns, ["sysctl", "-q", "-w",
                                   "net.ipv4.tcp_congestion_control=%s" % a.tcp_cc])
        self.tcp_cc = netns.exec_in(client, ["sysctl", "-n",
                                             "net.ipv4.tcp_congestion_control"]).stdout.strip()

        # Server ns: inbound capture (all TCP arriving on eth0 but ports 15000 and 8081); 8081 is
        # DNATed to the origin on 127.0.0.1 (route_localnet lets eth0 traffic reach it).
        netns.install_redirect(server, outbound_port=None, inbound_port=netns.INBOUND_PORT,
                               proxy_uid=UID,
                               exclude_inbound_ports=[ADMIN_PORT, DIRECT_PORT, RELAY_PORT],
                               inbound_interface=self.topo.svc_if)
        for key in ("all", self.topo.svc_if):
            netns.exec_in(server, ["sysctl", "-q", "-w",
                                   "net.ipv4.conf.%s.route_localnet=1" % key])
        for port, to in ((DIRECT_PORT, ORIGIN_PORT), (RELAY_PORT, RELAY_LISTEN)):
            netns.exec_in(server, [netns.iptables_bin(), "-w", "-t", "nat", "-A", "PREROUTING",
                                   "-i", self.topo.svc_if, "-p", "tcp", "-d", SERVER_IP,
                                   "--dport", str(port), "-j", "DNAT",
                                   "--to-destination", "127.0.0.1:%d" % to])
        # Client ns: outbound capture (rpx's uid, 127.0.0.1 and the uncaptured ports exempt).
        netns.install_redirect(client, outbound_port=netns.OUTBOUND_PORT, inbound_port=None,
                               proxy_uid=UID, exclude_outbound_ports=[DIRECT_PORT, RELAY_PORT])
        self.rules = {"client": netns.nat_rules(client), "server": netns.nat_rules(server)}

        # The origin, on --load-cpu.
        odir = os.path.join(self.tmp, "origin")
        os.mkdir(odir, 0o755)
        oout = open(os.path.join(odir, "stdout.log"), "wb")
        if a.origin == "bench":
            argv = ["taskset", "-c", a.load_cpu, a.origin_bin, www, str(ORIGIN_PORT)]
        else:
            conf = os.path.join(odir, "nginx.conf")
            with open(conf, "w") as f:
                f.write(nginx_conf(odir, www))
            netns.exec_in(server, ["nginx", "-t", "-q", "-p", odir, "-c", conf,
                                   "-e", os.path.join(odir, "error.log")])
            argv = ["taskset", "-c", a.load_cpu, "nginx", "-p", odir, "-c", conf,
                    "-e", os.path.join(odir, "error.log")]
        self.origin = self.topo.start(server, argv, stdout=oout, stderr=subprocess.STDOUT)
        oout.close()
        netns.wait_listening(server, ORIGIN_PORT)

        # The sidecars, uid 1337, on --proxy-cpu, one worker each.
        for name, ns in (("inbound", server), ("outbound", client)):
            out = open(os.path.join(self.tmp, "rpx-%s.log" % name), "wb")
            argv = ["taskset", "-c", a.proxy_cpu, self.rpx_bin, "-c", self.boot_paths[name],
                    "--concurrency", "1", "-l", "warn", "--drain-time-s", "0",
                    "--service-node", "sidecar-bench-%s" % name,
                    "--service-cluster", "sidecar-bench"] + a.rpx_args.split()
            self.rpx[name] = self.topo.start(ns, argv, uid=UID, gid=UID, stdout=out,
                                             stderr=subprocess.STDOUT)
            out.close()
        for name, ns in (("inbound", server), ("outbound", client)):
            deadline = time.monotonic() + 20
            while self.admin(ns, "/ready")[0] != "200":
                if self.rpx[name].poll() is not None or time.monotonic() > deadline:
                    raise BenchError("%s rpx did not become ready:\n%s" % (
                        name, self.read(os.path.join(self.tmp, "rpx-%s.log" % name))))
                time.sleep(0.05)
        if "relay" in a.layouts:
            out = open(os.path.join(self.tmp, "relay.log"), "wb")
            self.rpx["relay"] = self.topo.start(
                server, ["taskset", "-c", a.proxy_cpu, a.relay_bin, str(RELAY_LISTEN),
                         str(ORIGIN_PORT)], stdout=out, stderr=subprocess.STDOUT)
            out.close()
            netns.wait_listening(server, RELAY_LISTEN)
        self.check_paths()

    def read(self, path):
        try:
            with open(path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError as e:
            return str(e)

    def admin(self, ns, path):
        r = netns.exec_in(ns, ["curl", "-s", "-o", "/dev/stderr", "-w", "%{http_code}",
                               "--max-time", "5", "http://127.0.0.1:%d%s" % (ADMIN_PORT, path)],
                          check=False)
        return r.stdout.strip(), r.stderr

    def stats(self, which):
        ns = self.ns["client" if which == "outbound" else "server"]
        code, body = self.admin(ns, "/stats?filter=%5E(http%7Clistener%7Ctcp)%5C.")
        if code != "200":
            raise BenchError("%s rpx /stats answered %s" % (which, code))
        out = {}
        for line in body.splitlines():
            k, _, v = line.rpartition(": ")
            if k and v.lstrip("-").isdigit():
                out[k] = int(v)
        return out

    def all_stats(self):
        return {w: self.stats(w) for w in ("outbound", "inbound")}

    def check_paths(self):
        """Each layout's URL answers the 30-byte body, and through the proxies it should."""
        client = self.ns["client"]
        for name in self.args.layouts:
            before = self.all_stats()
            url = "http://%s:%d/small.txt" % (SERVER_IP, LAYOUTS[name]["port"])
            r = netns.exec_in(client, ["curl", "-s", "-S", "--max-time", "5", url], check=False)
            if r.returncode != 0 or r.stdout.encode() != BODY:
                raise BenchError("%s: GET %s gave %r (%s)" % (name, url, r.stdout[:100],
                                                               r.stderr.strip()))
            after = self.all_stats()
            served = {w: after[w].get("http.%s.downstream_rq_total" % p, 0)
                      - before[w].get("http.%s.downstream_rq_total" % p, 0)
                      for w, p in SERVED_BY.get(name, []) if p}
            captured = (after["outbound"].get("listener.virtualOutbound.downstream_cx_total", 0)
                        - before["outbound"].get("listener.virtualOutbound.downstream_cx_total", 0))
            want_captured = 1 if LAYOUTS[name]["captured"] else 0
            if captured != want_captured or any(v != 1 for v in served.values()):
                raise BenchError("%s: GET %s was not proxied as expected (connections captured "
                                 "by virtualOutbound: %d, requests served: %s)"
                                 % (name, url, captured, served))
            log("%-7s %s: %s OK (%s)" % (name, url, LAYOUTS[name]["path"],
                                          ", ".join("%s rpx served %d" % kv
                                                    for kv in served.items()) or "not captured"))

    # --- one run -----------------------------------------------------------------------------

    def h2load(self, port, rate, duration, log_file):
        c = self.args.clients
        per_client = max(1, int(round(rate / c)))
        argv = ["taskset", "-c", self.args.load_cpu, "h2load", "--h1", "-c", str(c), "-t", "1",
                "--rps", str(per_client), "-D", "%dms" % round(duration * 1000)]
        if log_file:
            argv += ["--log-file", log_file]
        argv.append("http://%s:%d/small.txt" % (SERVER_IP, port))
        out_path = (log_file or os.path.join(self.tmp, "warmup")) + ".out"
        with open(out_path, "wb") as out:
            p = self.topo.start(self.ns["client"], argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + duration + 30
        status, ru = None, None
        while status is None:
            pid, st, usage = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                status, ru = st, usage
                p.returncode = os.waitstatus_to_exitcode(st)
                break
            if time.monotonic() > deadline:
                netns.stop(p)
                raise BenchError("h2load did not finish in %ds: %s" % (duration + 30,
                                                                        " ".join(argv)))
            time.sleep(0.02)
        text = self.read(out_path)
        if p.returncode != 0:
            raise BenchError("h2load exited %d: %s\n%s" % (p.returncode, " ".join(argv), text))
        return argv, text, (ru.ru_utime + ru.ru_stime) * 1e6

    def origin_pids(self):
        return [self.origin.pid] + children_of(self.origin.pid)

    def measure(self, layout, rate, rep):
        a = self.args
        port = LAYOUTS[layout]["port"]
        if a.warmup > 0:
            self.h2load(port, rate, a.warmup, None)
        log_file = os.path.join(self.tmp, "h2load-%s-%d-%d.log" % (layout, rate, rep))
        s0 = self.all_stats()
        opids = self.origin_pids()
        r0 = {w: proc_ticks(p.pid) for w, p in self.rpx.items()}
        n0 = {w: sched_ns([p.pid]) for w, p in self.rpx.items()}
        o0, on0, m0 = ticks_of(opids), sched_ns(opids), cpu_times()
        argv, text, h2load_us = self.h2load(port, rate, a.duration, log_file)
        r1 = {w: proc_ticks(p.pid) for w, p in self.rpx.items()}
        n1 = {w: sched_ns([p.pid]) for w, p in self.rpx.items()}
        o1, on1, m1 = ticks_of(opids), sched_ns(opids), cpu_times()
        s1 = self.all_stats()

        h = parse_h2load(text)
        lat, non2xx = read_latencies(log_file)
        done = h.get("done", 0)
        tick_us = 1e6 / CLK_TCK
        run = {"layout": layout, "rate": rate, "rep": rep, "h2load_argv": argv,
               "achieved_rps": h.get("rps"), "requests_done": done,
               "succeeded": h.get("succeeded"),
               "errors": h.get("failed", 0) + h.get("errored", 0) + h.get("timeout", 0),
               "non2xx": done - h.get("2xx", 0) if "2xx" in h else non2xx,
               "logged": len(lat),
               "p50_us": percentile(lat, 50), "p90_us": percentile(lat, 90),
               "p99_us": percentile(lat, 99), "max_us": lat[-1] if lat else None,
               "mean_us": statistics.mean(lat) if lat else None,
               "origin_cpu_us_per_req": (o1 - o0) * tick_us / done if done else None,
               "origin_sched_us_per_req": (on1 - on0) / 1e3 / done if done else None,
               "h2load_cpu_us_per_req": h2load_us / done if done else None,
               "rpx_cpu_us": {w: (r1[w] - r0[w]) * tick_us for w in r0},
               "rpx_sched_us": {w: (n1[w] - n0[w]) / 1e3 for w in n0},
               "rpx_served": {}, "rpx_cpu_us_per_req": {}, "rpx_sched_us_per_req": {}}
        for w, prefix in SERVED_BY.get(layout, []):
            key = "http.%s.downstream_rq_total" % prefix
            served = s1[w].get(key, 0) - s0[w].get(key, 0) if prefix else done
            run["rpx_served"][w] = served
            run["rpx_cpu_us_per_req"][w] = run["rpx_cpu_us"][w] / served if served else None
            run["rpx_sched_us_per_req"][w] = (run["rpx_sched_us"][w] / served if served
                                              else None)
        captured = (s1["outbound"].get("listener.virtualOutbound.downstream_cx_total", 0)
                    - s0["outbound"].get("listener.virtualOutbound.downstream_cx_total", 0))
        run["captured_connections"] = captured
        busy = {}
        for cpu in sorted(m1):
            d_busy = m1[cpu][0] - m0[cpu][0]
            d_steal = m1[cpu][1] - m0[cpu][1]
            d_total = max(1, m1[cpu][2] - m0[cpu][2])
            busy[cpu] = {"busy_pct": 100.0 * d_busy / d_total,
                         "steal_pct": 100.0 * d_steal / d_total}
        run["cpus"] = busy
        # Busy time of the machine that is not rpx's, the origin's or h2load's (includes steal):
        # another job on the machine shows here.
        all_busy = sum(m1[c][0] - m0[c][0] for c in m1)
        all_total = max(1, sum(m1[c][2] - m0[c][2] for c in m1))
        ours = sum(r1[w] - r0[w] for w in r0) + (o1 - o0) + h2load_us / tick_us
        run["other_cpu_pct"] = max(0.0, 100.0 * (all_busy - ours) / all_total * len(m1))
        flags = []
        if run["errors"] or run["non2xx"]:
            flags.append("%d errors, %d non-2xx" % (run["errors"], run["non2xx"]))
        if run["achieved_rps"] is None or run["achieved_rps"] < MIN_RATE_FRACTION * rate:
            flags.append("achieved %s req/s < %d%% of %d" % (
                "?" if run["achieved_rps"] is None else "%.0f" % run["achieved_rps"],
                MIN_RATE_FRACTION * 100, rate))
        if run["other_cpu_pct"] > NOISY_OTHER_CPU_PCT:
            flags.append("other CPU %.0f%%: noisy" % run["other_cpu_pct"])
        if not LAYOUTS[layout]["captured"] and captured:
            flags.append("%s run: %d connections captured" % (layout, captured))
        if LAYOUTS[layout]["captured"] and captured < a.clients:
            flags.append("only %d of %d connections captured" % (captured, a.clients))
        for w, served in run["rpx_served"].items():
            if done and abs(served - done) > max(2, 0.01 * done):
                flags.append("%s rpx served %d of %d requests" % (w, served, done))
        run["flags"] = flags
        return run

    def run_all(self):
        a = self.args
        runs = []
        order = list(a.layouts)
        for rep in range(1, a.reps + 1):
            layouts = order if rep % 2 == 1 else list(reversed(order))
            for rate in a.rates:
                for layout in layouts:
                    r = self.measure(layout, rate, rep)
                    runs.append(r)
                    log("rep %d %6d req/s %-7s achieved %8.1f p50 %5s p90 %5s p99 %5s us  "
                        "rpx us/req %s  %s" % (
                            rep, rate, layout, r["achieved_rps"] or 0, r["p50_us"], r["p90_us"],
                            r["p99_us"], {k: None if v is None else round(v, 1)
                                          for k, v in r["rpx_cpu_us_per_req"].items()},
                            "; ".join(r["flags"])))
        return runs

    def close(self):
        errors = []
        if self.topo is not None:
            try:
                self.topo.close()  # stops every process it started (by PID), removes the ns
            except Exception as e:  # noqa: BLE001  keep going: the temp dir must go too
                errors.append(str(e))
            self.topo = None
        if self.tmp and not self.args.keep_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
        elif self.tmp:
            log("kept %s" % self.tmp)
        if errors:
            log("cleanup: %s" % "; ".join(errors))


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

def fmt(v, nd=0):
    if v is None:
        return "-"
    if nd == 0:
        return "{:,.0f}".format(v)
    return "{:,.{}f}".format(v, nd)


def fmt_signed(v):
    return "-" if v is None else "{:+,.0f}".format(v)


def summarize(runs, args):
    """Per rate and layout: medians over reps, and added latency paired with direct."""
    out = {}
    for rate in args.rates:
        direct = {r["rep"]: r for r in runs if r["rate"] == rate and r["layout"] == "direct"}
        relay = {r["rep"]: r for r in runs if r["rate"] == rate and r["layout"] == "relay"}
        rows = {}
        for layout in args.layouts:
            rs = [r for r in runs if r["rate"] == rate and r["layout"] == layout]
            if not rs:
                continue
            row = {"reps": len(rs)}
            for k in ("achieved_rps", "p50_us", "p90_us", "p99_us", "origin_cpu_us_per_req",
                      "h2load_cpu_us_per_req"):
                row[k] = med([r[k] for r in rs])
            row["requests"] = sum(r["requests_done"] for r in rs)
            row["errors"] = sum(r["errors"] + r["non2xx"] for r in rs)
            row["flags"] = ["rep %d: %s" % (r["rep"], f) for r in rs for f in r["flags"]]
            for q in ("p50", "p90", "p99"):
                diffs = [r[q + "_us"] - direct[r["rep"]][q + "_us"] for r in rs
                         if r["rep"] in direct and r[q + "_us"] is not None
                         and direct[r["rep"]][q + "_us"] is not None]
                row["added_%s_us" % q] = med(diffs) if layout != "direct" else None
                if layout != "direct" and LAYOUTS[layout]["hops"]:
                    row["added_%s_us_per_hop" % q] = (None if not diffs else
                                                      med(diffs) / LAYOUTS[layout]["hops"])
                # Above the floor: what the layout adds minus what as many relay hops add, in
                # the same repetition.
                if layout in ("one-hop", "two-hop") and relay:
                    above = []
                    for r in rs:
                        d, rl = direct.get(r["rep"]), relay.get(r["rep"])
                        if d and rl and None not in (r[q + "_us"], d[q + "_us"], rl[q + "_us"]):
                            above.append(r[q + "_us"] - d[q + "_us"] - LAYOUTS[layout]["hops"]
                                         * (rl[q + "_us"] - d[q + "_us"]))
                    row["above_relay_%s_us" % q] = med(above)
            row["rpx_cpu_us_per_req"] = {}
            for w, _ in SERVED_BY.get(layout, []):
                row["rpx_cpu_us_per_req"][w] = med([r["rpx_cpu_us_per_req"].get(w) for r in rs])
            row["cpu0_busy_pct"] = med([r["cpus"].get("cpu0", {}).get("busy_pct") for r in rs])
            row["cpu1_busy_pct"] = med([r["cpus"].get("cpu1", {}).get("busy_pct") for r in rs])
            row["other_cpu_pct"] = med([r["other_cpu_pct"] for r in rs])
            row["steal_pct"] = med([sum(c["steal_pct"] for c in r["cpus"].values()) /
                                    max(1, len(r["cpus"])) for r in rs])
            rows[layout] = row
        out[str(rate)] = rows
    return out


def targets():
    f = TARGET_FRACTION
    two = {"p90": ISTIO["p90_us_two_proxies"] * f, "p99": ISTIO["p99_us_two_proxies"] * f}
    return {"two-hop": two, "one-hop": {k: v / 2 for k, v in two.items()}}


def report(runs, summary, args, meta):
    L = []
    L.append("# Latency added per sidecar hop (bench/sidecar.py)")
    L.append("")
    L.append("    " + meta["command"])
    L.append("")
    L.append("- %s UTC, rpx at %s (binary %s, sha256 %s), origin: %s" % (
        meta["date"], meta["git"], meta["rpx_bin"], meta["rpx_sha256"][:12], meta["origin"]))
    L.append("- %s, %d CPUs, kernel %s; %s; %s; TCP congestion control in the namespaces: %s"
             % (meta["cpu_model"], meta["ncpu"], meta["kernel"], meta["h2load"],
                meta["iptables"], meta["tcp_cc"]))
    L.append("- Pinning: outbound and inbound rpx (`--concurrency 1`, uid 1337) and the relay "
             "on CPU %s; "
             "h2load (`-t 1`) and the origin on CPU %s." % (args.proxy_cpu, args.load_cpu))
    L.append("- Load: h2load --h1, %d keep-alive connections, fixed rate (`--rps` per "
             "connection), %ss per run after a %ss unmeasured warm-up, %d repetition(s), "
             "layouts interleaved (order reversed every other repetition). GET of a 30-byte "
             "file." % (args.clients, fmt(args.duration, 1 if args.duration % 1 else 0),
                        fmt(args.warmup, 1 if args.warmup % 1 else 0), args.reps))
    L.append("- Paths (client ns 10.213.0.1, server ns 10.213.0.2, one veth): " + "; ".join(
        "**%s** %s" % (k, LAYOUTS[k]["path"]) for k in args.layouts) + ".")
    L.append("- Latency: every request's from h2load's --log-file (2xx only), nearest-rank "
             "percentiles; medians over repetitions. \"added\" = median over repetitions of "
             "(layout - direct) within the same repetition. rpx CPU: utime+stime per request "
             "that rpx served (out = outbound sidecar, in = inbound sidecar; relay: per "
             "request completed); origin and "
             "h2load: per request completed. \"other CPU %\": busy time of the machine not "
             "spent by rpx, the relay, the origin or h2load, in % of one CPU (a build running alongside "
             "shows here).")
    others = [r["other_cpu_pct"] for r in runs]
    if others and max(others) > NOISY_OTHER_CPU_PCT:
        L.append("")
        L.append("**Warning: something else used the machine during these runs** (\"other CPU "
                 "%%\" up to %.0f%% of a CPU, median %.0f%%): the latencies are noisy; re-run on "
                 "a quiet machine." % (max(others), statistics.median(others)))
    L.append("")
    for rate in args.rates:
        rows = summary[str(rate)]
        L.append("## %s req/s (%d connections x %d req/s)" % (
            fmt(rate), args.clients, max(1, int(round(rate / args.clients)))))
        L.append("")
        L.append("| layout | achieved req/s | errors | p50 µs | p90 µs | p99 µs | added p50 µs "
                 "| added p90 µs | added p99 µs | CPU µs/req per hop | origin CPU µs/req "
                 "| h2load CPU µs/req | CPU0 / CPU1 busy % | other CPU % |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
        for layout in args.layouts:
            r = rows.get(layout)
            if not r:
                continue
            cpu = ", ".join("%s %s" % (HOP_LABEL[w], fmt(v, 1))
                            for w, v in r["rpx_cpu_us_per_req"].items()) or "-"
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s "
                     "| %s |" % (
                layout, fmt(r["achieved_rps"]), fmt(r["errors"]), fmt(r["p50_us"]),
                fmt(r["p90_us"]), fmt(r["p99_us"]), fmt_signed(r.get("added_p50_us")),
                fmt_signed(r.get("added_p90_us")), fmt_signed(r.get("added_p99_us")), cpu,
                fmt(r["origin_cpu_us_per_req"], 1), fmt(r["h2load_cpu_us_per_req"], 1),
                fmt(r["cpu0_busy_pct"]), fmt(r["cpu1_busy_pct"]), fmt(r["other_cpu_pct"])))
        flags = [("%s: %s" % (layout, f)) for layout in args.layouts
                 for f in rows.get(layout, {}).get("flags", [])]
        L.append("")
        if flags:
            L.append("Flagged runs (kept in the medians above):")
            L.extend("- " + f for f in flags)
        else:
            L.append("No run had errors or fell below %d%% of the target rate." %
                     (MIN_RATE_FRACTION * 100))
        L.append("")

    t = targets()
    L.append("## Against Istio's published figures")
    L.append("")
    L.append("Istio %s (docs/notes/istio-figures.md): its two sidecars together add %s µs to "
             "p90 and %s µs to p99 at 1,000 req/s (1 kB, mTLS, telemetry v2, 2 proxy workers, "
             "a real network between nodes). The issue's target is under a fifth of that: "
             "< %s µs p90 and < %s µs p99 for the two hops (half per hop). Istio publishes no "
             "p50, so the p50 column has no target. This run is plaintext with no telemetry "
             "filters, both sidecars on one host over a veth: the comparison flatters rpx." % (
                 ISTIO["version"], fmt(ISTIO["p90_us_two_proxies"]),
                 fmt(ISTIO["p99_us_two_proxies"]), fmt(t["two-hop"]["p90"], 1),
                 fmt(t["two-hop"]["p99"], 1)))
    L.append("")
    L.append("| rate | path | added p50 µs | added p90 µs (target) | added p99 µs (target) | "
             "under target | rpx CPU µs/req per hop (Istio: ~%s in 1.24, ~%s in 1.20) |" % (
                 fmt(ISTIO["cpu_us_per_req_1_24"]), fmt(ISTIO["cpu_us_per_req_1_20"])))
    L.append("|---:|---|---:|---:|---:|---|---|")
    for rate in args.rates:
        rows = summary[str(rate)]
        for layout in ("two-hop", "one-hop"):
            r = rows.get(layout)
            if not r or "direct" not in rows:
                continue
            tgt = t[layout]
            met = []
            for q in ("p90", "p99"):
                v = r.get("added_%s_us" % q)
                # Below zero the proxied path measured faster than the direct one: noise (a stall
                # in the direct run), not a result.
                met.append("?" if v is None else "noise (< 0)" if v < 0 else
                           "yes" if v < tgt[q] else "no")
            cpu = ", ".join("%s %s" % (HOP_LABEL[w], fmt(v, 1))
                            for w, v in r["rpx_cpu_us_per_req"].items())
            L.append("| %s | %s (%d hop%s) | %s | %s (< %s) | %s (< %s) | p90 %s, p99 %s | %s |"
                     % (fmt(rate), layout, LAYOUTS[layout]["hops"],
                        "s" if LAYOUTS[layout]["hops"] > 1 else "",
                        fmt_signed(r.get("added_p50_us")), fmt_signed(r.get("added_p90_us")),
                        fmt(tgt["p90"], 1), fmt_signed(r.get("added_p99_us")),
                        fmt(tgt["p99"], 1), met[0], met[1], cpu))
    L.append("")
    for rate in args.rates:
        r = summary[str(rate)].get("relay")
        if r and "direct" in summary[str(rate)]:
            L.append("- The floor at %s req/s: a plain TCP relay (bench/tcp_relay: no HTTP, no "
                     "capture, %s µs CPU per request) in one hop adds %s µs p50, %s µs p90, %s µs "
                     "p99 here: what any hop costs on this machine before proxy logic (one more "
                     "process to wake in each direction, two more TCP sockets)." % (
                         fmt(rate), fmt(r["rpx_cpu_us_per_req"].get("relay"), 1),
                         fmt_signed(r.get("added_p50_us")), fmt_signed(r.get("added_p90_us")),
                         fmt_signed(r.get("added_p99_us"))))
            for layout in ("one-hop", "two-hop"):
                x = summary[str(rate)].get(layout)
                if x and x.get("above_relay_p50_us") is not None:
                    L.append("  %s above %d relay hop%s (paired per repetition): %s µs p50, %s µs "
                             "p90, %s µs p99." % (
                                 layout, LAYOUTS[layout]["hops"],
                                 "s" if LAYOUTS[layout]["hops"] > 1 else "",
                                 fmt_signed(x["above_relay_p50_us"]),
                                 fmt_signed(x["above_relay_p90_us"]),
                                 fmt_signed(x["above_relay_p99_us"])))
    L.append("")
    L.append("## Every run")
    L.append("")
    L.append("CPU µs/req here: utime+stime (%g ms ticks) / schedstat (ns), which differ on "
             "short runs by the tick's resolution." % (1000.0 / CLK_TCK))
    L.append("")
    L.append("| rep | rate | layout | achieved req/s | requests | errors | p50 | p90 | p99 | max "
             "µs | CPU µs/req per hop | origin CPU µs/req | h2load | other CPU % | steal % | flags |")
    L.append("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")
    for r in runs:
        cpu = ", ".join("%s %s / %s" % (HOP_LABEL[w], fmt(v, 1),
                                        fmt(r["rpx_sched_us_per_req"].get(w), 1))
                        for w, v in r["rpx_cpu_us_per_req"].items()) or "-"
        steal = sum(c["steal_pct"] for c in r["cpus"].values()) / max(1, len(r["cpus"]))
        L.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s "
                 "| %s | %s |" % (
                     r["rep"], fmt(r["rate"]), r["layout"], fmt(r["achieved_rps"], 1),
                     fmt(r["requests_done"]), fmt(r["errors"] + r["non2xx"]),
                     fmt(r["p50_us"]), fmt(r["p90_us"]), fmt(r["p99_us"]), fmt(r["max_us"]),
                     cpu, fmt(r["origin_cpu_us_per_req"], 1),
                     fmt(r["origin_sched_us_per_req"], 1), fmt(r["h2load_cpu_us_per_req"], 1),
                     fmt(r["other_cpu_pct"]), fmt(steal, 1), "; ".join(r["flags"]) or ""))
    L.append("")
    return "\n".join(L)


def metadata(args):
    def cmd_out(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=10,
                                  cwd=ROOT).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    git = cmd_out(["git", "rev-parse", "--short", "HEAD"]) or "?"
    if cmd_out(["git", "status", "--porcelain", "--untracked-files=no"]):
        git += " (+ uncommitted changes)"
    h = hashlib.sha256()
    with open(args.rpx_bin, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    h2v = cmd_out(["h2load", "--version"])
    return {"command": " ".join(["python3", os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)]
                                + sys.argv[1:]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "git": git, "rpx_bin": os.path.relpath(args.rpx_bin, ROOT)
            if args.rpx_bin.startswith(ROOT) else args.rpx_bin,
            "rpx_sha256": h.hexdigest(),
            "origin": ("bench/origin (%s)" % args.origin_bin if args.origin == "bench"
                       else cmd_out(["nginx", "-v"]) or "nginx"),
            "cpu_model": model, "ncpu": os.cpu_count(), "kernel": platform.release(),
            "h2load": h2v.splitlines()[0] if h2v else "h2load"}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--origin", choices=("bench", "nginx"), default="bench")
    ap.add_argument("--rates", default="1000,10000",
                    help="target request rates, comma-separated (default 1000,10000)")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per measured run")
    ap.add_argument("--warmup", type=float, default=1.0,
                    help="unmeasured seconds before each run (0: none)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--clients", type=int, default=10, help="h2load connections (-c)")
    ap.add_argument("--layouts", default="direct,relay,one-hop,two-hop",
                    help="subset of direct,relay,one-hop,two-hop (direct is always measured)")
    ap.add_argument("--json", metavar="FILE", help="write every run and the summary as JSON")
    ap.add_argument("--out", metavar="FILE", help="also write the Markdown report here")
    ap.add_argument("--rpx-bin", default=os.environ.get(
        "RPX_BIN", os.path.join(ROOT, "bazel-bin/source/exe/rpx")))
    ap.add_argument("--origin-bin", default=os.environ.get(
        "ORIGIN_BIN", os.path.join(ROOT, "bazel-bin/bench/origin")))
    ap.add_argument("--relay-bin", default=os.environ.get(
        "RELAY_BIN", os.path.join(ROOT, "bazel-bin/bench/tcp_relay")))
    ap.add_argument("--proxy-cpu", default="0",
                    help="taskset CPU list of both rpx (default 0)")
    ap.add_argument("--load-cpu", default="1",
                    help="taskset CPU list of h2load and the origin (default 1)")
    ap.add_argument("--tcp-cc", metavar="NAME",
                    help="TCP congestion control inside the two namespaces (default: what a new "
                         "namespace gets, the host's). The kernel lets a namespace choose only "
                         "one listed in the host's net.ipv4.tcp_allowed_congestion_control; "
                         "the host is not touched")
    ap.add_argument("--keep-tmp", action="store_true")
    ap.add_argument("--rpx-args", default="",
                    help="extra rpx arguments for both sidecars (e.g. \"--batch-wait-us 0\")")
    a = ap.parse_args(argv)
    try:
        a.rates = [int(x) for x in a.rates.split(",") if x.strip()]
    except ValueError:
        ap.error("--rates: comma-separated integers")
    if not a.rates or min(a.rates) < a.clients:
        ap.error("--rates: each rate must be at least --clients (h2load's --rps is per client)")
    layouts = [x.strip() for x in a.layouts.split(",") if x.strip()]
    bad = [x for x in layouts if x not in LAYOUTS]
    if bad:
        ap.error("--layouts: unknown %s" % ", ".join(bad))
    if "direct" not in layouts:
        layouts.insert(0, "direct")
    a.layouts = [x for x in LAYOUTS if x in layouts]  # direct, relay, one-hop, two-hop
    if "relay" in a.layouts and not os.access(a.relay_bin, os.X_OK):
        print("bench/sidecar.py: no %s (bazel build //bench:tcp_relay): the relay layout is "
              "left out" % a.relay_bin, file=sys.stderr)
        a.layouts.remove("relay")
    if a.duration <= 0 or a.reps < 1 or a.clients < 1 or a.warmup < 0:
        ap.error("--duration, --reps and --clients must be positive, --warmup not negative")
    for b, what in ((a.rpx_bin, "rpx"),) + (((a.origin_bin, "bench origin"),)
                                             if a.origin == "bench" else ()):
        if not os.access(b, os.X_OK):
            ap.error("%s binary %s is missing (built by bazel; this script does not build)"
                     % (what, b))
    for tool in ("h2load", "taskset", "curl") + (("nginx",) if a.origin == "nginx" else ()):
        if not shutil.which(tool):
            ap.error("%s is not installed (h2load: Debian's nghttp2-client)" % tool)
    return a


def main(argv):
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("bench/sidecar.py needs root (network namespaces, iptables)", file=sys.stderr)
        return 2

    def on_signal(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    # SIGINT too: a shell starting the script in the background leaves SIGINT ignored.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    meta = metadata(args)
    n = args.reps * len(args.rates) * len(args.layouts)
    log("%d runs of %gs (+%gs warm-up): about %.0f s" % (
        n, args.duration, args.warmup, n * (args.duration + args.warmup + 1.5) + 5))
    bench = Bench(args)
    try:
        bench.setup()
        meta["iptables"] = bench.iptables
        meta["tcp_cc"] = bench.tcp_cc
        meta["rules"] = bench.rules
        runs = bench.run_all()
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        return 130
    except (BenchError, netns.NetnsError) as e:
        log("error: %s" % e)
        return 1
    finally:
        # A second Ctrl-C must not cut the cleanup short.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        bench.close()
    summary = summarize(runs, args)
    text = report(runs, summary, args, meta)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "targets_us": targets(), "istio": ISTIO,
                       "summary": summary, "runs": runs}, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
