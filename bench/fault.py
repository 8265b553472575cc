#!/usr/bin/env python3
"""Fault run (issue 32): wrk at c=200 over 30 s through a proxy to three upstreams (bench/origin,
one process each), one of which is killed at 10 s and restarted at 20 s (--fault kill), or stopped and continued
(--fault stop: it hangs, accepting connections it never answers). Each proxy is set up to
get through that as well as it can:

  rpx      active HTTP health checks (1 s, 2 failures / 2 passes), outlier detection (5 failures
           in a row), retries (5xx, reset, connect-failure; 2, another host each time; 1 s per
           try)
  HAProxy  option httpchk (inter 1s fall 2 rise 2), observe layer7 with on-error mark-down,
           retries 2, option redispatch, retry-on all-retryable-errors, timeout server 1s
  nginx    max_fails=1 fail_timeout=10s, proxy_next_upstream error timeout http_502/503/504
           (3 tries), proxy_read_timeout 1s; open-source nginx has no active checks

Counted per proxy: requests, client-visible errors (non-2xx answers and socket errors), req/s
over the whole run and per second (the dip: the worst second after the kill against the median
of the seconds before it), and the proxy's CPU per request. The proxy runs on CPU 0; wrk and the
origins on CPU 1 (as bench/run.sh). Loopback only; everything started here is stopped by PID.

    python3 bench/fault.py [--proxies rpx,haproxy,nginx] [--duration 30] [--out FILE]
"""

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LUA = r"""
-- Globals: thread:get() reads a thread's globals.
counts = {}
bad = {}
t0 = nil
function response(status, headers, body)
  local now = os.time()
  if t0 == nil then t0 = now end
  local s = now - t0
  counts[s] = (counts[s] or 0) + 1
  if status < 200 or status > 299 then bad[s] = (bad[s] or 0) + 1 end
end
local threads = {}
function setup(thread) table.insert(threads, thread) end
function done(summary, latency, requests)
  for _, t in ipairs(threads) do
    local c = t:get("counts")
    local b = t:get("bad")
    for s, n in pairs(c) do io.write(string.format("second %d %d %d\n", s, n, b[s] or 0)) end
  end
end
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def cpu_ticks(pid):
    total = 0
    for p in [pid] + children(pid):
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


class Run(object):
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.procs = []
        www = os.path.join(tmp, "www")
        os.makedirs(www, exist_ok=True)
        with open(os.path.join(www, "small.txt"), "w") as f:
            f.write("hello from the rpx benchmark\n")
        self.www = www

    def start(self, argv, cpu, **kw):
        p = subprocess.Popen(["taskset", "-c", str(cpu)] + argv, stdout=subprocess.DEVNULL,
                             stderr=kw.pop("stderr", subprocess.DEVNULL), **kw)
        self.procs.append(p)
        return p

    def stop(self, p, sig=signal.SIGTERM):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def origin(self, port):
        p = self.start([self.args.origin_bin, self.www, str(port)], 1)
        if not wait_port(port):
            raise RuntimeError("origin on %d did not start" % port)
        return p

    def proxy(self, name, port, ups, admin):
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        if name == "rpx":
            eps = "".join(
                "\n        - endpoint: {address: {socket_address: {address: 127.0.0.1, "
                "port_value: %d}}}" % u for u in ups)
            conf = """admin: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}
static_resources:
  listeners:
  - name: l
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: bench
          generate_request_id: false
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: /}
                route:
                  cluster: origin
                  retry_policy:
                    retry_on: 5xx,reset,connect-failure
                    num_retries: 2
                    per_try_timeout: 1s
                    retry_host_predicate: [{name: envoy.retry_host_predicates.previous_hosts}]
                    host_selection_retry_max_attempts: 5
          http_filters: [{name: envoy.filters.http.router, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}]
  clusters:
  - name: origin
    connect_timeout: 1s
    circuit_breakers: {thresholds: [{max_connections: 1000, max_pending_requests: 1000, max_requests: 1000, max_retries: 1000}]}
    health_checks:
    - {timeout: 0.5s, interval: 1s, no_traffic_interval: 1s, unhealthy_threshold: 2, healthy_threshold: 2, http_health_check: {path: /small.txt}}
    outlier_detection: {consecutive_5xx: 5, interval: 1s, base_ejection_time: 10s, max_ejection_percent: 50}
    load_assignment:
      cluster_name: origin
      endpoints:
      - lb_endpoints:%s
""" % (admin, port, eps)
            path = os.path.join(d, "rpx.yaml")
            with open(path, "w") as f:
                f.write(conf)
            return self.start([self.args.rpx_bin, "-c", path, "--concurrency", "1", "-l", "warn"],
                              0, stderr=open(os.path.join(d, "stderr.log"), "w"))
        if name == "haproxy":
            servers = "".join("\n  server o%d 127.0.0.1:%d check inter 1s fall 2 rise 2 "
                              "observe layer7 error-limit 5 on-error mark-down" % (i, u)
                              for i, u in enumerate(ups))
            conf = """global
  nbthread 1
  maxconn 9000
defaults
  mode http
  option http-keep-alive
  http-reuse always
  timeout connect 1s
  timeout client 60s
  timeout server 1s
  retries 2
  option redispatch 1
  retry-on all-retryable-errors
frontend fe
  bind 127.0.0.1:%d
  default_backend origin
backend origin
  balance roundrobin
  option httpchk GET /small.txt%s
""" % (port, servers)
            path = os.path.join(d, "haproxy.cfg")
            with open(path, "w") as f:
                f.write(conf)
            return self.start(["haproxy", "-db", "-f", path], 0)
        if name == "nginx":
            servers = "".join("\n    server 127.0.0.1:%d max_fails=1 fail_timeout=10s;" % u
                              for u in ups)
            conf = """worker_processes 1;
daemon off;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 10000; }
http {
  access_log off;
  upstream origin {%s
    keepalive 64;
  }
  server {
    listen 127.0.0.1:%d;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_connect_timeout 1s;
      proxy_read_timeout 1s;
      proxy_next_upstream error timeout http_502 http_503 http_504;
      proxy_next_upstream_tries 3;
    }
  }
}
""" % (d, d, servers, port)
            path = os.path.join(d, "nginx.conf")
            with open(path, "w") as f:
                f.write(conf)
            return self.start(["nginx", "-c", path, "-p", d], 0)
        raise ValueError(name)

    def one(self, name):
        a = self.args
        ups = [free_port() for _ in range(3)]
        origins = [self.origin(u) for u in ups]
        port, admin = free_port(), free_port()
        proxy = self.proxy(name, port, ups, admin)
        if not wait_port(port):
            raise RuntimeError("%s did not start" % name)
        time.sleep(3 if name != "nginx" else 0.5)  # first health checks
        lua = os.path.join(self.tmp, "count.lua")
        with open(lua, "w") as f:
            f.write(LUA)
        ticks0 = cpu_ticks(proxy.pid)
        wrk = subprocess.Popen(
            ["taskset", "-c", "1", "wrk", "-t1", "-c%d" % a.connections, "-d%ds" % a.duration,
             "--timeout", "5s", "-s", lua, "http://127.0.0.1:%d/small.txt" % port],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        t0 = time.time()
        time.sleep(a.duration / 3)
        if a.fault == "kill":
            self.stop(origins[1], signal.SIGKILL)  # connections reset, new ones refused
        else:
            origins[1].send_signal(signal.SIGSTOP)  # accepts (the kernel does), never answers
        killed_at = time.time() - t0
        time.sleep(a.duration / 3)
        if a.fault == "kill":
            origins[1] = self.origin(ups[1])
        else:
            origins[1].send_signal(signal.SIGCONT)
        back_at = time.time() - t0
        out, _ = wrk.communicate(timeout=a.duration + 60)
        ticks1 = cpu_ticks(proxy.pid)
        self.stop(proxy)
        for o in origins:
            self.stop(o)
        requests = int(re.search(r"(\d+) requests in", out).group(1))
        m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        non2xx = int(m.group(1)) if m else 0
        m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
        sockerr = sum(int(x) for x in m.groups()) if m else 0
        secs = {}
        for s, n, b in re.findall(r"^second (\d+) (\d+) (\d+)$", out, re.M):
            secs[int(s)] = (int(n), int(b))
        last = max(secs) if secs else 0
        series = [secs.get(s, (0, 0))[0] for s in range(last + 1)]
        k = int(killed_at)
        before = statistics.median(series[1:k]) if k > 2 else max(series or [0])
        dip = min(series[k:k + 5]) if len(series) > k else 0
        hz = os.sysconf("SC_CLK_TCK")
        return {
            "proxy": name, "requests": requests, "rps": requests / a.duration,
            "non2xx": non2xx, "sockerr": sockerr, "before": before, "dip": dip,
            "cpu_us": (ticks1 - ticks0) * 1e6 / hz / max(requests, 1),
            "series": series, "killed_at": killed_at, "back_at": back_at,
        }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--proxies", default="rpx,haproxy,nginx")
    ap.add_argument("--duration", type=int, default=30)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--fault", choices=("kill", "stop"), default="kill",
                    help="kill: SIGKILL then a new process; stop: SIGSTOP then SIGCONT (a hang)")
    ap.add_argument("--rpx-bin", default=os.path.join(ROOT, "bazel-bin/source/exe/rpx"))
    ap.add_argument("--origin-bin", default=os.path.join(ROOT, "bazel-bin/bench/origin"))
    ap.add_argument("--out", default=None, help="default bench/results/fault-<fault>.md")
    a = ap.parse_args()
    a.out = a.out or os.path.join(ROOT, "bench/results/fault-%s.md" % a.fault)
    for tool in ("wrk", "taskset", "pgrep", "haproxy", "nginx"):
        if not shutil.which(tool):
            sys.exit("fault.py needs %s" % tool)
    for b in (a.rpx_bin, a.origin_bin):
        if not os.access(b, os.X_OK):
            sys.exit("missing %s (bazel build //source/exe:rpx //bench:origin)" % b)
    tmp = tempfile.mkdtemp(prefix="rpx-fault-")
    run = Run(a, tmp)
    rows = []
    try:
        for name in a.proxies.split(","):
            r = run.one(name)
            rows.append(r)
            print("%-8s %7d req (%6.0f/s)  errors: %d non-2xx + %d socket  per-second: median "
                  "before %d, worst after the kill %d  CPU %.1f us/req" %
                  (name, r["requests"], r["rps"], r["non2xx"], r["sockerr"], r["before"],
                   r["dip"], r["cpu_us"]), flush=True)
    finally:
        for p in run.procs:
            run.stop(p, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    lines = ["# Fault run", "",
             "- command: `python3 bench/fault.py --proxies %s --duration %d --connections %d "
             "--fault %s`" % (a.proxies, a.duration, a.connections, a.fault),
             "- date: %s UTC; rpx: %s" % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                                          a.rpx_bin),
             "- one of three origins %s at %d s, %s at %d s" %
             ("killed (SIGKILL)" if a.fault == "kill" else "stopped (SIGSTOP: it hangs)",
              a.duration // 3, "restarted" if a.fault == "kill" else "continued (SIGCONT)",
              2 * a.duration // 3), "",
             "| proxy | requests | req/s | non-2xx | socket errors | req/s before (median) | "
             "worst second after the kill | CPU µs/req |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %s | %d | %.0f | %d | %d | %d | %d | %.1f |" % (
            r["proxy"], r["requests"], r["rps"], r["non2xx"], r["sockerr"], r["before"],
            r["dip"], r["cpu_us"]))
    lines.append("")
    for r in rows:
        lines.append("- %s per second: %s" % (r["proxy"], " ".join(str(x) for x in r["series"])))
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
