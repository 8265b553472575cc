#!/usr/bin/env python3
"""Route-update propagation and memory with a large route table pushed over xDS.

    python3 bench/xds_scale.py [--vhosts 10000] [--updates 20] [--workers 2] [--delta]

Starts tools/xds_server and rpx (loopback only), pushes a RouteConfiguration with N virtual
hosts, then rewrites it --updates times (one vhost's response header changes each time). For each
update it waits for rpx's ACK in the control plane's log and reads rpx's own measurement
`control_plane.last_route_propagation_us` from /stats: the time from the RDS response arriving
on the ADS stream to the new table being in effect on every worker. Also reports rpx's RSS with
a 1-vhost table and with the N-vhost table. Prints a Markdown table.
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
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def routes_yaml(n, marker):
    lines = ["routes:", "- name: big", "  virtual_hosts:"]
    for i in range(n):
        lines.append(f"  - name: v{i}")
        lines.append(f'    domains: ["host{i}.example.com"]')
        lines.append('    routes: [{match: {prefix: "/"}, route: {cluster: svc}}]')
        if i == 0:
            lines.append(f'    response_headers_to_add: [{{header: {{key: x-marker, value: "{marker}"}}}}]')
    return "\n".join(lines) + "\n"


def stats(admin):
    out = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/stats", timeout=5) as r:
        for line in r.read().decode().splitlines():
            k, _, v = line.partition(": ")
            out[k] = int(v)
    return out


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vhosts", type=int, default=10000)
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--delta", action="store_true")
    ap.add_argument("--log-level", default="warn", help="rpx -l (debug shows decode/check/build times)")
    ap.add_argument("--rpx", default=os.path.join(ROOT, "bazel-bin/source/exe/rpx"))
    ap.add_argument("--xds-server", default=os.path.join(ROOT, "bazel-bin/tools/xds_server/xds_server"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rpx-xds-scale-")
    res = os.path.join(tmp, "resources")
    os.mkdir(res)
    xds_port, admin, listen, up = free_port(), free_port(), free_port(), free_port()
    write_atomic(os.path.join(res, "base.yaml"), f"""
listeners:
- name: main
  address: {{socket_address: {{address: 127.0.0.1, port_value: {listen}}}}}
  filter_chains:
  - filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: main
        rds: {{config_source: {{ads: {{}}, resource_api_version: V3}}, route_config_name: big}}
        http_filters: [{{name: envoy.filters.http.router, typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}}}]
clusters:
- name: svc
  load_assignment: {{cluster_name: svc, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {up}}}}}}}}}]}}]}}
""")
    write_atomic(os.path.join(res, "routes.yaml"), routes_yaml(1, "m0"))
    boot = os.path.join(tmp, "rpx.yaml")
    with open(boot, "w") as f:
        f.write(f"""
node: {{id: scale, cluster: bench}}
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}}}
dynamic_resources:
  lds_config: {{ads: {{}}, resource_api_version: V3}}
  cds_config: {{ads: {{}}, resource_api_version: V3}}
  ads_config: {{api_type: {"DELTA_GRPC" if args.delta else "GRPC"}, transport_api_version: V3, grpc_services: [{{envoy_grpc: {{cluster_name: xds}}}}]}}
static_resources:
  clusters:
  - name: xds
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment: {{cluster_name: xds, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {xds_port}}}}}}}}}]}}]}}
""")
    cp_log = open(os.path.join(tmp, "cp.log"), "w+")
    cp = subprocess.Popen([args.xds_server, "--port", str(xds_port), "--dir", res, "--poll-ms", "20"],
                          stdout=cp_log, stderr=subprocess.STDOUT)
    rpx = subprocess.Popen([args.rpx, "-c", boot, "--concurrency", str(args.workers), "-l", args.log_level],
                           env=dict(os.environ))
    try:
        def ready():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/ready", timeout=1) as r:
                    return r.status == 200
            except Exception:
                return False
        wait_for(ready, 20, "rpx ready")
        time.sleep(0.5)
        rss_small = rss_kb(rpx.pid)

        def acked_versions():
            cp_log.flush()
            with open(cp_log.name) as f:
                return re.findall(r"ACK node=scale type=RDS version=(\d+)", f.read())

        def push_and_wait(text):
            before = len(acked_versions())
            write_atomic(os.path.join(res, "routes.yaml"), text)
            wait_for(lambda: len(acked_versions()) > before, 60, "RDS ACK")
            n = stats(admin).get("control_plane.route_updates_measured", 0)
            wait_for(lambda: stats(admin).get("control_plane.route_updates_measured", 0) >= n, 10,
                     "propagation measured")
            return stats(admin)["control_plane.last_route_propagation_us"]

        t0 = time.time()
        first = push_and_wait(routes_yaml(args.vhosts, "m1"))
        load_s = time.time() - t0
        time.sleep(0.5)
        rss_big = rss_kb(rpx.pid)
        samples = []
        for i in range(args.updates):
            samples.append(push_and_wait(routes_yaml(args.vhosts, f"u{i}")))
        print("samples (ms, in order): " + " ".join(f"{x/1000:.1f}" for x in samples), file=sys.stderr)
        samples.sort()
        print(f"| vhosts | workers | protocol | updates | propagation median | p90 | max | "
              f"first load (file write to ACK) | RSS 1 vhost | RSS {args.vhosts} vhosts | per vhost |")
        print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        p90 = samples[min(len(samples) - 1, int(len(samples) * 0.9))]
        print(f"| {args.vhosts} | {args.workers} | {'delta' if args.delta else 'SotW'} | {len(samples)} | "
              f"{statistics.median(samples)/1000:.2f} ms | {p90/1000:.2f} ms | {samples[-1]/1000:.2f} ms | "
              f"{load_s:.2f} s | {rss_small/1024:.1f} MiB | {rss_big/1024:.1f} MiB | "
              f"{(rss_big - rss_small) * 1024 / max(1, args.vhosts - 1):.0f} B |")
        print(f"\n(first push propagation: {first/1000:.2f} ms)")
    finally:
        for p in (rpx, cp):
            p.send_signal(signal.SIGTERM)
        for p in (rpx, cp):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
