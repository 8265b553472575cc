#!/usr/bin/env python3
"""Prometheus scrapes of a large configuration under load: how long a scrape takes, how big it
is, and what it does to the latency of the traffic being proxied.

    python3 bench/prom_scrape.py [--vhosts 10000] [--duration 15] [--connections 50] [--runs 3]

Starts bench/origin (CPU 1) and rpx with one worker (CPU 0) on a bootstrap with N virtual hosts,
each routing to its own cluster (so N clusters' counters, gauges and histograms are exported),
then runs wrk (CPU 1, 30 B responses, one virtual host) twice per run: once alone, once while a
scraper (CPU 1, as Prometheus on another core would be) GETs /stats/prometheus every
--interval seconds. Reports req/s and p50/p99 with and without scraping (medians over the runs),
and each scrape's time and size. Loopback only; every process it starts is stopped by PID.
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listens on %d" % port)


def bootstrap(vhosts, port, admin, origin):
    lines = ["admin: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}" % admin,
             "static_resources:",
             "  listeners:",
             "  - name: front",
             "    address: {socket_address: {address: 127.0.0.1, port_value: %d}}" % port,
             "    filter_chains:",
             "    - filters:",
             "      - name: envoy.filters.network.http_connection_manager",
             "        typed_config:",
             '          "@type": type.googleapis.com/envoy.extensions.filters.network.'
             'http_connection_manager.v3.HttpConnectionManager',
             "          stat_prefix: ingress",
             "          generate_request_id: false",
             "          http_filters: [{name: envoy.filters.http.router, typed_config: "
             '{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}]',
             "          route_config:",
             "            name: local",
             "            virtual_hosts:"]
    for i in range(vhosts):
        lines.append("            - {name: vh%d, domains: [\"vh%d.example.com\"], routes: "
                     "[{match: {prefix: \"/\"}, route: {cluster: c%d}}]}" % (i, i, i))
    lines.append("  clusters:")
    for i in range(vhosts):
        lines.append("  - {name: c%d, connect_timeout: 1s, load_assignment: {cluster_name: c%d, "
                     "endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: "
                     "{address: 127.0.0.1, port_value: %d}}}}]}]}}" % (i, i, origin))
    return "\n".join(lines) + "\n"


def parse_ms(v):
    m = re.match(r"([\d.]+)(us|ms|s)", v)
    n = float(m.group(1))
    return {"us": n / 1000, "ms": n, "s": n * 1000}[m.group(2)]


def wrk(port, duration, connections):
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c%d" % connections,
                          "-d%ds" % duration, "--latency", "-H", "Host: vh0.example.com",
                          "http://127.0.0.1:%d/small.txt" % port],
                         capture_output=True, text=True, timeout=duration + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = {p: parse_ms(v) for p, v in re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M)}
    errors = re.search(r"Socket errors: (.*)", out)
    return {"rps": rps, "p50": lat["50"], "p99": lat["99"],
            "errors": errors.group(1) if errors else "", "non2xx": "Non-2xx" in out}


class Scraper(threading.Thread):
    def __init__(self, admin, interval, path):
        super().__init__(daemon=True)
        self.admin, self.interval, self.path = admin, interval, path
        self.stop = threading.Event()
        self.times, self.sizes, self.series = [], [], 0

    def run(self):
        os.sched_setaffinity(0, {1})
        while not self.stop.is_set():
            t = time.monotonic()
            body = urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.admin, self.path),
                                          timeout=60).read()
            self.times.append((time.monotonic() - t) * 1000)
            self.sizes.append(len(body))
            self.series = body.count(b"\n") - body.count(b"\n#")
            self.stop.wait(max(0.0, self.interval - (time.monotonic() - t)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vhosts", type=int, default=10000)
    ap.add_argument("--duration", type=int, default=15)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--path", default="/stats/prometheus",
                    help="what the scraper GETs, e.g. /stats/prometheus?usedonly")
    ap.add_argument("--rpx", default=os.path.join(ROOT, "bazel-bin/source/exe/rpx"))
    ap.add_argument("--origin", default=os.path.join(ROOT, "bazel-bin/bench/origin"))
    args = ap.parse_args()
    for tool in ("wrk", "taskset"):
        if not shutil.which(tool):
            sys.exit("%s is required" % tool)
    tmp = tempfile.mkdtemp(prefix="rpx-prom-")
    procs = []
    try:
        with open(os.path.join(tmp, "small.txt"), "wb") as f:
            f.write(b"x" * 30)
        origin_port, port, admin = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen(["taskset", "-c", "1", args.origin, tmp, str(origin_port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(origin_port)
        cfg = os.path.join(tmp, "bootstrap.yaml")
        with open(cfg, "w") as f:
            f.write(bootstrap(args.vhosts, port, admin, origin_port))
        rpx = subprocess.Popen(["taskset", "-c", "0", args.rpx, "-c", cfg, "--concurrency", "1",
                                "-l", "warn"], stdout=subprocess.DEVNULL,
                               stderr=open(os.path.join(tmp, "rpx.log"), "w"))
        procs.append(rpx)
        wait_port(port)
        wait_port(admin)
        wrk(port, 2, args.connections)  # warm-up
        quiet, scraped, times, sizes, series = [], [], [], [], 0
        for _ in range(args.runs):
            quiet.append(wrk(port, args.duration, args.connections))
            s = Scraper(admin, args.interval, args.path)
            s.start()
            scraped.append(wrk(port, args.duration, args.connections))
            s.stop.set()
            s.join(120)
            times += s.times
            sizes += s.sizes
            series = s.series
        with open("/proc/%d/status" % rpx.pid) as f:
            rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        med = lambda rows, k: statistics.median(r[k] for r in rows)
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        print("rpx %s, %d virtual hosts / clusters, wrk -c%d %ds x %d runs, GET %s every %.1f s"
              % (commit, args.vhosts, args.connections, args.duration, args.runs, args.path,
                 args.interval))
        print()
        print("| | req/s | p50 ms | p99 ms | errors |")
        print("|---|---|---|---|---|")
        for name, rows in (("no scrape", quiet), ("scraping", scraped)):
            errs = "; ".join(r["errors"] for r in rows if r["errors"]) or "none"
            print("| %s | %.0f | %.3f | %.3f | %s |" % (name, med(rows, "rps"), med(rows, "p50"),
                                                       med(rows, "p99"), errs))
        print()
        print("scrapes: %d, time median %.0f ms, max %.0f ms; body %.1f MiB, %d series; "
              "rpx RSS %.0f MiB" % (len(times), statistics.median(times), max(times),
                                     statistics.median(sizes) / 2**20, series, rss / 1024))
        print("scraping costs %.1f%% of req/s, p99 x%.2f" %
              (100 * (1 - med(scraped, "rps") / med(quiet, "rps")),
               med(scraped, "p99") / med(quiet, "p99")))
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
