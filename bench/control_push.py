#!/usr/bin/env python3
"""Push latency through the control API to a fleet of rpx nodes on this machine.

    python3 bench/control_push.py [--nodes 1,10,50] [--vhosts 100,10000] [--reps 5]
                                  [--modes sotw,delta] [--kinds apply,vhost]

For every combination it starts tools/xds_server (checked, with --control-port) on a fresh
directory holding one RouteConfiguration "r" with V virtual hosts (host<i>.example, each
answering "v<i>-0" directly), and N rpx nodes (1 worker each) whose static listener takes "r"
over ADS (state of the world or delta). Then, --reps times, one virtual host's answer changes,
sent as
  apply: `rpxctl apply -f` of the whole RouteConfiguration (what a file-based workflow sends), or
  vhost: `rpxctl set-vhost r -f` of that one virtual host,
with --wait. Measured per change:
  apply ms        wall time of rpxctl up to the change being accepted (process start, reading
                  the YAML, the API call: checks, files and history written)
  to ACKed ms     from accepted to every node ACKed it (rpxctl --wait, polling fleet status
                  every 5 ms)
  to serving ms   from accepted to every node answering the new body (curl-like GETs to each
                  node, from this script, after the ACKs)
Prints a Markdown table of medians and maxima. Everything binds to 127.0.0.1; every process is
started and stopped by PID here.
"""
import argparse
import http.client
import json
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
BIN = {
    "rpx": os.environ.get("RPX_BIN", os.path.join(ROOT, "bazel-bin/source/exe/rpx")),
    "xds": os.environ.get("XDS_SERVER_BIN",
                          os.path.join(ROOT, "bazel-bin/tools/xds_server/xds_server")),
    "ctl": os.environ.get("RPXCTL_BIN", os.path.join(ROOT, "bazel-bin/tools/rpxctl/rpxctl")),
}
HCM = ("type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
       "HttpConnectionManager")
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"


_next_port = [int(os.environ.get("BASE_PORT", "21000"))]


def free_port():
    """A bindable port below the ephemeral range (a kernel-picked one may be taken by some
    process's outgoing connection before the node binds it)."""
    while True:
        port = _next_port[0]
        _next_port[0] += 1
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue


def vhost_yaml(i, body, indent):
    pad = " " * indent
    return (f"{pad}- name: v{i}\n{pad}  domains: [host{i}.example]\n"
            f"{pad}  routes: [{{match: {{prefix: /}}, direct_response: "
            f"{{status: 200, body: {{inline_string: {body}}}}}}}]\n")


def routes_yaml(n, changed=None, body=None):
    out = ["routes:\n- name: r\n  virtual_hosts:\n"]
    for i in range(n):
        out.append(vhost_yaml(i, body if i == changed else f"v{i}-0", 2))
    return "".join(out)


def bootstrap(node_id, port, admin, xds_port, delta):
    return f"""node: {{id: {node_id}, cluster: bench}}
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}}}
dynamic_resources:
  ads_config:
    api_type: {"DELTA_GRPC" if delta else "GRPC"}
    transport_api_version: V3
    grpc_services: [{{envoy_grpc: {{cluster_name: xds}}}}]
static_resources:
  listeners:
  - name: main
    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": {HCM}
          stat_prefix: main
          rds: {{config_source: {{ads: {{}}, resource_api_version: V3}}, route_config_name: r}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": {ROUTER}}}
  clusters:
  - name: xds
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: xds
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {xds_port}}}}}}}}}]}}]
"""


def get(port, host, timeout=5.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", "/", headers={"Host": host})
        r = c.getresponse()
        return r.read().decode()
    except OSError:
        return None
    finally:
        c.close()


def wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.005)
    raise SystemExit(f"timed out after {timeout}s waiting for {what}")


class Fleet:
    def __init__(self, tmp, nodes, vhosts, delta):
        self.tmp, self.procs = tmp, []
        self.dir = os.path.join(tmp, "cp")
        os.mkdir(self.dir)
        with open(os.path.join(self.dir, "routes.yaml"), "w") as f:
            f.write(routes_yaml(vhosts))
        self.control = free_port()
        self.xds_port = free_port()
        log = open(os.path.join(tmp, "xds.log"), "w")
        self.procs.append(subprocess.Popen(
            [BIN["xds"], "--dir", self.dir, "--port", str(self.xds_port), "--control-port",
             str(self.control)], stdout=log, stderr=subprocess.STDOUT))
        wait(lambda: "control API listening" in open(os.path.join(tmp, "xds.log")).read(), 60,
             "xds_server")
        self.ports = []
        for i in range(nodes):
            port, admin = free_port(), free_port()
            path = os.path.join(tmp, f"node{i}.yaml")
            with open(path, "w") as f:
                f.write(bootstrap(f"node-{i}", port, admin, self.xds_port, delta))
            out = open(os.path.join(tmp, f"node{i}.log"), "w")
            self.procs.append(subprocess.Popen(
                [BIN["rpx"], "-c", path, "--concurrency", "1", "-l", "warn"], stdout=out,
                stderr=subprocess.STDOUT))
            self.ports.append(port)
        last = f"host{vhosts - 1}.example"
        for i, p in enumerate(self.ports):
            proc = self.procs[1 + i]

            def ready():
                if proc.poll() is not None:
                    with open(os.path.join(tmp, f"node{i}.log")) as f:
                        raise SystemExit(f"node {i} exited ({proc.returncode}):\n{f.read()[-2000:]}")
                return get(p, last) == f"v{vhosts - 1}-0"
            wait(ready, 120, f"node on {p}")

    def ctl(self, *args):
        t0 = time.monotonic()
        cp = subprocess.run([BIN["ctl"], "--server", f"127.0.0.1:{self.control}",
                             "--timeout", "60"] + list(args), capture_output=True, text=True)
        t1 = time.monotonic()
        if cp.returncode != 0:
            raise SystemExit(f"rpxctl {' '.join(args)}: exit {cp.returncode}\n{cp.stdout}"
                             f"{cp.stderr}")
        return cp.stdout, t1 - t0

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def measure(fleet, vhosts, kind, rep):
    target = (rep * 7919) % vhosts
    body = f"v{target}-{rep + 1}"
    path = os.path.join(fleet.tmp, "change.yaml")
    with open(path, "w") as f:
        if kind == "apply":
            f.write(routes_yaml(vhosts, target, body))
        else:
            f.write(vhost_yaml(target, body, 0)[2:].replace("\n  ", "\n"))
    args = (["apply", "-f", path] if kind == "apply" else ["set-vhost", "r", "-f", path])
    out, wall = fleet.ctl(*(args + ["--wait=120"]))
    m = re.search(r"running on (\d+) node\(s\), (\d+) ms after", out)
    if not m or int(m.group(1)) != len(fleet.ports):
        raise SystemExit("unexpected rpxctl output:\n" + out)
    acked_ms = int(m.group(2))
    done = time.monotonic()
    host = f"host{target}.example"
    for p in fleet.ports:
        wait(lambda: get(p, host) == body, 60, f"{host} on {p}")
    # The serving check starts when rpxctl has returned: add what --wait measured.
    serving_ms = acked_ms + (time.monotonic() - done) * 1000
    return (wall * 1000 - acked_ms, acked_ms, serving_ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="1,10,50")
    ap.add_argument("--vhosts", default="100,10000")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--modes", default="sotw,delta")
    ap.add_argument("--kinds", default="apply,vhost")
    args = ap.parse_args()
    for name, path in BIN.items():
        if not os.access(path, os.X_OK):
            raise SystemExit(f"missing {path}: bazel build -c opt //source/exe:rpx "
                             "//tools/xds_server //tools/rpxctl")
    rows = []
    for mode in args.modes.split(","):
        for vhosts in [int(v) for v in args.vhosts.split(",")]:
            for nodes in [int(n) for n in args.nodes.split(",")]:
                tmp = tempfile.mkdtemp(prefix="rpx-control-push-")
                fleet = None
                try:
                    fleet = Fleet(tmp, nodes, vhosts, mode == "delta")
                    for kind in args.kinds.split(","):
                        samples = [measure(fleet, vhosts, kind, rep + (100 if kind == "vhost"
                                                                        else 0))
                                   for rep in range(args.reps)]
                        cols = list(zip(*samples))
                        rows.append((mode, vhosts, nodes, kind, cols))
                        print(f"{mode} vhosts={vhosts} nodes={nodes} {kind}: " +
                              " ".join(f"{statistics.median(c):.0f}/{max(c):.0f}" for c in cols),
                              file=sys.stderr, flush=True)
                finally:
                    if fleet:
                        fleet.stop()
                    shutil.rmtree(tmp, ignore_errors=True)
    print("| xDS | vhosts | nodes | change | apply ms (median / max) | accepted to ACKed ms | "
          "accepted to serving ms |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for mode, vhosts, nodes, kind, cols in rows:
        cells = [f"{statistics.median(c):.0f} / {max(c):.0f}" for c in cols]
        print(f"| {mode} | {vhosts} | {nodes} | {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
