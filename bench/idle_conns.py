#!/usr/bin/env python3
"""Memory per idle keep-alive connection, and errors at 10,000 busy connections: rpx vs nginx.

    python3 bench/idle_conns.py                      # ~6 minutes
    python3 bench/idle_conns.py --counts 1000,5000 --runs 1 --proxies rpx
    python3 bench/idle_conns.py --tls --counts 10000 --no-load   # idle TLS connections

Same layout and configs as bench/run.sh: origin nginx (1 worker) on CPU 1 serving a 29-byte
small.txt; the proxy under test on CPU 0 with one worker: rpx `--concurrency 1` with run.sh's
bootstrap (circuit breakers max_connections 1024, max_pending_requests 1024, max_requests 4096;
upstream idle_timeout 300s), nginx with run.sh's `upstream { keepalive 64; }` proxy config
(worker_rlimit_nofile and worker_connections from the fd limit). This client and wrk run on CPU 1.

1. Idle connections. For N in --counts, on a freshly started proxy that has served one request:
   RSS (VmRSS of the proxy and its children) before; open N keep-alive connections and send one
   `GET /small.txt` on each (at most --window in flight), read every response, keep them all
   open, wait --settle seconds; RSS after. KiB per idle connection = (after - before) / N.
   Also reported: RSS after connecting, before any request. Median of --runs.
2. Under load. wrk -t1 -c --load-conns (10,000) for --load-duration against a fresh proxy;
   errors = wrk's non-2xx responses + socket errors (connect, read, write, timeout), plus what
   the proxy says about them (rpx: its 5xx/overflow stats; nginx: error.log messages by kind).
   Each run also lists "rpx-cb" unless --no-rpx-cb: rpx with circuit breakers raised above the
   load (max_pending_requests/max_requests 20000), to tell configured limits from capacity.

--tls: the proxies terminate TLS instead (the listener of bench/run.sh's TLS rows: a throwaway
ECDSA P-256 certificate made with `openssl` in the temp dir; rpx with Envoy's DownstreamTlsContext,
nginx with `listen ... ssl` and `ssl_protocols TLSv1.2 TLSv1.3`; each one's defaults otherwise, so
TLS 1.3 with session tickets). The idle client completes a TLS handshake on every connection
before its request (RSS is also taken after the handshakes), and the load run's wrk uses https.
The origin side stays cleartext. Default report: bench/results/idle_tls_conns.md.

Writes a Markdown report to --out (default bench/results/idle_conns.md) and raw material
(configs, logs, wrk outputs) to bench/results/raw/idle_conns-<UTC stamp>/ (git-ignored).
Only the processes this script starts are signalled, by PID. Loopback only; bounded in time.
"""

import argparse
import errno
import os
import re
import resource
import select
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SMALL = b"hello from the rpx benchmark\n"  # 29 bytes, as bench/run.sh's small.txt

STARTED = []  # Popen objects we started (stopped by PID at exit)


def log(msg):
    sys.stderr.write("[idle_conns %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------------

def children_of(pid):
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def rss_kib(pid):
    """VmRSS of pid plus its direct children (nginx workers)."""
    total = 0
    for p in [pid] + children_of(pid):
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def cpu_ticks(pid):
    """utime+stime of pid plus its direct children (nginx workers), in clock ticks."""
    total = 0
    for p in [pid] + children_of(pid):
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total


def machine_ticks():
    """(user+nice+system+steal, irq+softirq) ticks of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return v[0] + v[1] + v[2] + v[7], v[5] + v[6]


def start(cmd, logdir, name):
    out = open(os.path.join(logdir, name + ".stdout.log"), "wb")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out.close()
    STARTED.append(p)
    return p


def stop(p, timeout=10.0):
    """SIGTERM by PID, then SIGKILL; then any child it left behind (by PID)."""
    if p is None:
        return
    kids = children_of(p.pid) if p.poll() is None else []
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            log("PID %d did not exit on TERM; sending KILL" % p.pid)
            p.kill()
            p.wait(5)
    for k in kids:
        for _ in range(30):
            if not os.path.exists("/proc/%d" % k):
                break
            time.sleep(0.1)
        else:
            try:
                os.kill(k, signal.SIGKILL)
            except OSError:
                pass
    if p in STARTED:
        STARTED.remove(p)


def stop_all():
    for p in list(STARTED):
        try:
            stop(p)
        except Exception as e:  # keep stopping the others
            log("stopping PID %d: %s" % (p.pid, e))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, secs=15.0):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def client_tls_context():
    """A client that verifies nothing (throwaway self-signed certificates), as wrk; TLS 1.3."""
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    c.check_hostname = False
    c.verify_mode = ssl.CERT_NONE
    c.set_alpn_protocols(["http/1.1"])
    return c


def http_get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout, context=client_tls_context()
                                if url.startswith("https:") else None) as r:
        return r.status, r.read()


# ---------------------------------------------------------------------------------------------
# configs (the same as bench/run.sh's write_origin_conf / write_nginx_proxy_conf / write_rpx_conf)
# ---------------------------------------------------------------------------------------------

def nginx_common_top(d, nofile):
    return """daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile %d;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections %d; multi_accept off; }
""" % (nofile, d, d, nofile - 100)


def nginx_temp_paths(d):
    return "".join("  %s_temp_path %s/%s;\n" % (k, d, v) for k, v in (
        ("client_body", "client_body"), ("proxy", "proxy"), ("fastcgi", "fastcgi"),
        ("uwsgi", "uwsgi"), ("scgi", "scgi")))


def write_origin_conf(d, port, www, nofile):
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(nginx_common_top(d, nofile) + """http {
  access_log off;
%s  types { text/plain txt; text/html html; application/octet-stream bin; }
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_requests 100000;
  keepalive_timeout 300s;
  open_file_cache max=64 inactive=300s;
  server {
    listen 127.0.0.1:%d backlog=4096;
    root %s;
    location / { }
  }
}
""" % (nginx_temp_paths(d), port, www))


def write_nginx_proxy_conf(d, port, origin_port, nofile, keepalive=64, tls=None):
    """tls: the dir of bench/configs.sh's write_tls_certs (None = cleartext)."""
    ssl_lines = ""
    if tls:  # as bench/configs.sh's TLS servers (nginx 1.22's default stops at TLS 1.2)
        ssl_lines = ("    ssl_protocols TLSv1.2 TLSv1.3;\n    ssl_certificate %s/ec.crt;\n"
                     "    ssl_certificate_key %s/ec.key;\n" % (tls, tls))
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(nginx_common_top(d, nofile) + """http {
  access_log off;
%s  keepalive_requests 100000;
  keepalive_timeout 300s;
  upstream origin {
    server 127.0.0.1:%d;
    keepalive %d;
  }
  server {
    listen 127.0.0.1:%d%s backlog=4096;
%s    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
""" % (nginx_temp_paths(d), origin_port, keepalive, port, " ssl" if tls else "", ssl_lines))


# The TLS part of bench/configs.sh's rpx_listener (Envoy's DownstreamTlsContext), for --tls.
RPX_TLS_CHAIN = """    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates:
            - certificate_chain: {filename: %(tls)s/ec.crt}
              private_key: {filename: %(tls)s/ec.key}
            alpn_protocols: ["http/1.1"]
      filters:
"""


def write_rpx_conf(d, port, admin, origin_port, max_pending=1024, max_requests=4096, tls=None):
    """tls: the dir of bench/configs.sh's write_tls_certs (None = cleartext)."""
    with open(os.path.join(d, "bootstrap.yaml"), "w") as f:
        f.write("""admin:
  address:
    socket_address:
      address: 127.0.0.1
      port_value: %(admin)d
static_resources:
  listeners:
  - name: ingress
    address:
      socket_address:
        address: 127.0.0.1
        port_value: %(port)d
    filter_chains:
%(chain)s      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_http
          codec_type: HTTP1
          route_config:
            name: local_route
            virtual_hosts:
            - name: origin
              domains: ["*"]
              routes:
              - match:
                  prefix: "/"
                route:
                  cluster: origin
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: origin
    type: STATIC
    connect_timeout: 5s
    lb_policy: ROUND_ROBIN
    load_assignment:
      cluster_name: origin
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address:
                address: 127.0.0.1
                port_value: %(origin)d
    circuit_breakers:
      thresholds:
      - priority: DEFAULT
        max_connections: 1024
        max_pending_requests: %(pending)d
        max_requests: %(requests)d
        max_retries: 3
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        common_http_protocol_options:
          idle_timeout: 300s
        explicit_http_config:
          http_protocol_options: {}
""" % {"admin": admin, "port": port, "origin": origin_port, "pending": max_pending,
       "requests": max_requests,
       "chain": RPX_TLS_CHAIN % {"tls": tls} if tls else "    - filters:\n"})


class Proxy(object):
    """One proxy under test, pinned to CPU 0."""

    def __init__(self, kind, ctx):
        self.kind = kind
        self.ctx = ctx
        self.proc = None
        self.port = None
        self.admin = None
        self.dir = None

    def start(self, tag):
        c = self.ctx
        self.dir = os.path.join(c.tmp, "%s-%s" % (self.kind, tag))
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)
        self.port = free_port()
        if self.kind in ("rpx", "rpx-cb"):
            self.admin = free_port()
            if self.kind == "rpx":
                write_rpx_conf(self.dir, self.port, self.admin, c.origin_port, tls=c.tls_dir)
            else:
                write_rpx_conf(self.dir, self.port, self.admin, c.origin_port, 20000, 20000,
                               tls=c.tls_dir)
            cmd = ["taskset", "-c", "0", c.rpx_bin, "-c", os.path.join(self.dir, "bootstrap.yaml"),
                   "--concurrency", "1", "-l", "warn"]
        else:
            write_nginx_proxy_conf(self.dir, self.port, c.origin_port, c.nofile, tls=c.tls_dir)
            cmd = ["taskset", "-c", "0", c.nginx, "-p", self.dir, "-c",
                   os.path.join(self.dir, "nginx.conf"), "-e", os.path.join(self.dir, "error.log")]
        self.proc = start(cmd, self.dir, self.kind)
        if not wait_port(self.port, self.proc, 20):
            raise RuntimeError("%s did not listen on %d; see %s" % (self.kind, self.port, self.dir))
        # Sanity, and the first request (pools, lazily built state) before the baseline.
        st, body = http_get("%s://127.0.0.1:%d/small.txt" % (c.scheme, self.port))
        if st != 200 or body != SMALL:
            raise RuntimeError("%s: sanity GET returned %d %r" % (self.kind, st, body[:60]))
        return self

    def stop(self):
        stop(self.proc)
        self.proc = None
        if self.dir:
            for f in os.listdir(self.dir):
                p = os.path.join(self.dir, f)
                if os.path.isfile(p):
                    shutil.copy(p, os.path.join(self.ctx.raw, "%s.%s" % (
                        os.path.basename(self.dir), f)))

    def rss(self):
        return rss_kib(self.proc.pid)

    def rpx_stats(self):
        if self.admin is None:
            return {}
        _, body = http_get("http://127.0.0.1:%d/stats" % self.admin)
        out = {}
        for line in body.decode().splitlines():
            if ": " in line:
                k, v = line.rsplit(": ", 1)
                if v.strip().lstrip("-").isdigit():
                    out[k] = int(v)
        return out

    def nginx_errors(self):
        """error.log lines by kind (the text after the '*N ' connection number)."""
        kinds = {}
        try:
            with open(os.path.join(self.dir, "error.log"), errors="replace") as f:
                for line in f:
                    m = re.search(r"\[(\w+)\] \d+#\d+: (?:\*\d+ )?([^,(]*)", line)
                    if m:
                        k = "%s: %s" % (m.group(1), m.group(2).strip())
                        kinds[k] = kinds.get(k, 0) + 1
        except OSError:
            pass
        return kinds


# ---------------------------------------------------------------------------------------------
# the idle-connection client
# ---------------------------------------------------------------------------------------------

class IdleClient(object):
    """Opens N keep-alive connections, one GET on each, and keeps them open (--tls: after a TLS
    handshake on each)."""

    REQ = b"GET /small.txt HTTP/1.1\r\nHost: bench\r\n\r\n"

    def __init__(self, port, tls=False):
        self.port = port
        self.socks = []
        self.ep = select.epoll()
        self.errors = 0
        self.first_errors = []
        self.tls = client_tls_context() if tls else None

    def _err(self, what):
        self.errors += 1
        if len(self.first_errors) < 10:
            self.first_errors.append(what)

    def connect(self, n, batch=500, timeout=60.0):
        deadline = time.monotonic() + timeout
        while len(self.socks) < n:
            pending = {}
            for _ in range(min(batch, n - len(self.socks))):
                s = socket.socket()
                s.setblocking(False)
                rc = s.connect_ex(("127.0.0.1", self.port))
                self.socks.append(s)
                if rc not in (0, errno.EINPROGRESS):
                    self._err("connect: " + os.strerror(rc))
                    continue
                pending[s.fileno()] = s
                self.ep.register(s.fileno(), select.EPOLLOUT)
            while pending and time.monotonic() < deadline:
                for fd, _ in self.ep.poll(1.0):
                    s = pending.pop(fd, None)
                    if s is None:
                        continue
                    self.ep.unregister(fd)
                    e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if e:
                        self._err("connect: " + os.strerror(e))
            if pending:
                raise RuntimeError("connects did not complete in %.0fs" % timeout)

    def _handshake_step(self, t):
        """Drives one TLS handshake: 0 = done (or failed, counted), else the epoll event it awaits."""
        try:
            t.do_handshake()
            return 0
        except ssl.SSLWantReadError:
            return select.EPOLLIN
        except ssl.SSLWantWriteError:
            return select.EPOLLOUT
        except OSError as e:  # ssl.SSLError included
            self._err("handshake: %s" % e)
            return 0

    def handshake_each(self, window, timeout=120.0):
        """--tls: a TLS handshake on every connection, at most `window` in flight."""
        deadline = time.monotonic() + timeout
        inflight = {}
        nxt, done, n = 0, 0, len(self.socks)
        while done < n:
            while nxt < n and len(inflight) < window:
                t = self.tls.wrap_socket(self.socks[nxt], server_hostname="localhost",
                                         do_handshake_on_connect=False)
                self.socks[nxt] = t
                nxt += 1
                ev = self._handshake_step(t)
                if ev:
                    inflight[t.fileno()] = t
                    self.ep.register(t.fileno(), ev)
                else:
                    done += 1
            if time.monotonic() > deadline:
                raise RuntimeError("TLS handshakes did not complete in %.0fs (%d of %d)" %
                                   (timeout, done, n))
            for fd, _ in self.ep.poll(1.0):
                t = inflight.get(fd)
                if t is None:
                    continue
                ev = self._handshake_step(t)
                if ev:
                    self.ep.modify(fd, ev)
                else:
                    self.ep.unregister(fd)
                    del inflight[fd]
                    done += 1

    def one_request_each(self, window, timeout=120.0):
        deadline = time.monotonic() + timeout
        fdmap = {s.fileno(): s for s in self.socks}
        bufs = {}
        nxt, done, n = 0, 0, len(self.socks)
        while done < n:
            while nxt < n and len(bufs) < window:
                s = self.socks[nxt]
                nxt += 1
                try:
                    s.send(self.REQ)
                except OSError as e:
                    self._err("send: %s" % e)
                    done += 1
                    continue
                bufs[s.fileno()] = b""
                self.ep.register(s.fileno(), select.EPOLLIN)
            if time.monotonic() > deadline:
                raise RuntimeError("responses did not arrive in %.0fs (%d of %d)" %
                                   (timeout, done, n))
            for fd, _ in self.ep.poll(1.0):
                s = fdmap[fd]
                try:
                    data = s.recv(65536)
                    while self.tls and data and s.pending():  # decrypted bytes epoll cannot see
                        data += s.recv(65536)
                except (BlockingIOError, ssl.SSLWantReadError):  # TLS: e.g. only a ticket came
                    continue
                except OSError as e:
                    data, err = None, "recv: %s" % e
                else:
                    err = None if data else "closed before a full response"
                if data:
                    b = bufs[fd] + data
                    bufs[fd] = b
                    h = b.find(b"\r\n\r\n")
                    if h < 0:
                        continue
                    m = re.search(rb"(?im)^content-length:\s*(\d+)", b[:h])
                    if m and len(b) < h + 4 + int(m.group(1)):
                        continue
                    if not b.startswith(b"HTTP/1.1 200 ") or not b.endswith(SMALL):
                        err = "bad response %r" % b[:80]
                if err:
                    self._err(err)
                self.ep.unregister(fd)
                del bufs[fd]
                done += 1

    def close(self):
        for s in self.socks:
            s.close()
        self.socks = []
        self.ep.close()


# ---------------------------------------------------------------------------------------------
# measurements
# ---------------------------------------------------------------------------------------------

def measure_idle(ctx, kind, n, run):
    p = Proxy(kind, ctx).start("idle%d-run%d" % (n, run))
    client = IdleClient(p.port, tls=bool(ctx.tls_dir))
    try:
        time.sleep(ctx.settle)
        before = p.rss()
        t0 = time.monotonic()
        client.connect(n)
        time.sleep(ctx.settle)
        connected = p.rss()
        handshaken = None
        if ctx.tls_dir:
            client.handshake_each(ctx.window)
            time.sleep(ctx.settle)
            handshaken = p.rss()
        client.one_request_each(ctx.window)
        t1 = time.monotonic()
        time.sleep(ctx.settle)
        after = p.rss()
        # The connections must still be open (keep-alive), not closed by the proxy meanwhile.
        open_now = sum(1 for s in client.socks if not _peer_closed(s))
        r = {"proxy": kind, "n": n, "run": run, "before": before, "connected": connected,
             "handshaken": handshaken, "after": after, "errors": client.errors, "open": open_now,
             "secs": t1 - t0, "first_errors": client.first_errors}
        log("  %s N=%d run %d: RSS %d -> %d (connected)%s -> %d KiB (after one request each); "
            "%.2f KiB/conn connected, %.2f KiB/conn idle after a request; errors %d%s; still open "
            "%d; %.1fs" % (kind, n, run, before, connected,
                           "" if handshaken is None else " -> %d (TLS handshakes)" % handshaken,
                           after, (connected - before) / n, (after - before) / n, client.errors,
                           " (first: %s)" % client.first_errors[:3] if client.errors else "",
                           open_now, t1 - t0))
        return r
    finally:
        client.close()
        p.stop()


def _peer_closed(s):
    p = select.poll()
    p.register(s.fileno(), select.POLLIN | select.POLLRDHUP)
    return any(ev & (select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLIN)
               for _, ev in p.poll(0))


def parse_wrk(text):
    r = {"requests": None, "rps": None, "non2xx": 0, "connect": 0, "read": 0, "write": 0,
         "timeout": 0, "p99_ms": None}
    m = re.search(r"(\d+) requests in", text)
    if m:
        r["requests"] = int(m.group(1))
    m = re.search(r"Requests/sec:\s*([\d.]+)", text)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", text)
    if m:
        r["non2xx"] = int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        r["connect"], r["read"], r["write"], r["timeout"] = map(int, m.groups())
    m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    if m:
        r["p99_ms"] = float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)]
    r["errors"] = r["non2xx"] + r["connect"] + r["read"] + r["write"] + r["timeout"]
    return r


def measure_load(ctx, kind, run):
    p = Proxy(kind, ctx).start("load-run%d" % run)
    try:
        out = os.path.join(ctx.raw, "wrk.%s.load.run%d.txt" % (kind, run))
        url = "%s://127.0.0.1:%d/small.txt" % (ctx.scheme, p.port)
        secs = ctx.load_secs
        cmd = ["taskset", "-c", "1", "timeout", "-k", "5", str(secs + 60), ctx.wrk, "-t1",
               "-c", str(ctx.load_conns), "-d", "%ds" % secs, "--timeout", "10s", "--latency", url]
        peak = [0]
        tick = os.sysconf("SC_CLK_TCK")
        c0, o0, (m0, i0) = cpu_ticks(p.proc.pid), cpu_ticks(ctx.origin_pid), machine_ticks()
        k0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        with open(out, "w") as f:
            w = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            STARTED.append(w)
            while w.poll() is None:
                peak[0] = max(peak[0], p.rss())
                time.sleep(0.25)
            STARTED.remove(w)
        elapsed = time.monotonic() - t0
        c1, o1, (m1, i1) = cpu_ticks(p.proc.pid), cpu_ticks(ctx.origin_pid), machine_ticks()
        k1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wrk_ticks = (k1.ru_utime + k1.ru_stime - k0.ru_utime - k0.ru_stime) * tick
        own = (c1 - c0) + (o1 - o0) + wrk_ticks
        # CPU used by any other process meanwhile, in % of one CPU (this client's own sampling
        # is a few %); more than ~10 means the run was disturbed. Interrupt and softirq time
        # (loopback TCP: connection setup, packet delivery) is charged to no process: apart.
        other_pct = max(0.0, (m1 - m0 - own) / tick / elapsed * 100)
        softirq_pct = (i1 - i0) / tick / elapsed * 100
        proxy_pct = (c1 - c0) / tick / elapsed * 100
        with open(out) as f:
            text = f.read()
        r = parse_wrk(text)
        r.update({"proxy": kind, "run": run, "rss_peak": peak[0], "other_pct": other_pct,
                  "proxy_pct": proxy_pct, "softirq_pct": softirq_pct})
        if kind.startswith("rpx"):
            s = p.rpx_stats()
            r["proxy_says"] = {k: v for k, v in sorted(s.items()) if v and (
                k.endswith(("_5xx", "_4xx", "overflow", "_timeout", "_reset", "connect_fail",
                            "protocol_error")) or k.endswith(("downstream_cx_total",
                                                              "upstream_cx_total")))}
        else:
            time.sleep(0.5)
            r["proxy_says"] = p.nginx_errors()
        log("  %s load run %d: %s requests, %s req/s, errors %d (non-2xx %d, connect %d, read %d, "
            "write %d, timeout %d), p99 %s ms, peak RSS %d KiB, proxy CPU %.0f%%, softirq %.0f%%, other "
            "CPU %.0f%%; proxy: %s" % (
                kind, run, r["requests"], r["rps"], r["errors"], r["non2xx"], r["connect"],
                r["read"], r["write"], r["timeout"], r["p99_ms"], r["rss_peak"], proxy_pct,
                softirq_pct, other_pct, r["proxy_says"]))
        if r["requests"] is None:
            log("  wrk output: " + text[-500:])
        return r
    finally:
        p.stop()


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------

def median(xs):
    return statistics.median(xs) if xs else float("nan")


def report(ctx, idle, load):
    L = []
    L.append("# Idle keep-alive %sconnections and 10,000 busy connections: rpx vs nginx" %
             ("TLS " if ctx.tls_dir else ""))
    L.append("")
    L.append("- command: `%s`" % ctx.command)
    L.append("- date: %s" % time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    L.append("- kernel: %s; %d CPUs; fd limit %d" % (" ".join(os.uname()[2:3] + os.uname()[4:5]),
                                                       os.cpu_count(), ctx.nofile))
    L.append("- rpx: %s (%s); nginx: %s; wrk: %s" % (
        os.path.relpath(ctx.rpx_bin, ROOT) if ctx.rpx_bin.startswith(ROOT) else ctx.rpx_bin,
        ctx.git_rev, ctx.nginx_version, ctx.wrk_version))
    L.append("- layout: proxy on CPU 0 (1 worker), origin nginx and this client / wrk on CPU 1; "
             "configs as bench/run.sh (rpx: circuit breakers 1024/1024/4096; nginx: upstream "
             "keepalive 64)")
    if ctx.tls_dir:
        L.append("- TLS: %s; the proxies terminate TLS with one throwaway ECDSA P-256 certificate "
                 "(bench/configs.sh's write_tls_certs), each one's defaults otherwise (TLS 1.3, "
                 "session tickets), nginx with `ssl_protocols TLSv1.2 TLSv1.3`; this client "
                 "(Python's ssl, the same libssl) completes a handshake on every connection; the "
                 "origin side is cleartext" % ctx.openssl_version)
    L.append("- CPU busy before the run: %d%% of one CPU%s" % (
        ctx.busy_start, " — WARNING: noisy" if ctx.busy_start > 10 else ""))
    L.append("- raw: %s" % os.path.relpath(ctx.raw, ROOT))
    L.append("")
    if idle:
        L.extend(idle_section(ctx, idle))
    if load:
        L.extend(load_section(ctx, load))
    return "\n".join(L) + "\n"


def idle_section(ctx, idle):
    L = []
    tls = bool(ctx.tls_dir)
    L.append("## Memory per idle keep-alive %sconnection" % ("TLS " if tls else ""))
    L.append("")
    L.append("RSS of the proxy (master + worker for nginx) before, after opening N connections, "
             "%sand after one `GET /small.txt` (29 B) on each, all still open; median of %d runs. "
             "Kernel socket buffers are not in RSS." % (
                 "after a TLS handshake on each, " if tls else "", ctx.runs))
    L.append("")
    L.append("| proxy | N | RSS before | RSS connected | " +
             ("RSS after the TLS handshakes | KiB/conn after the handshake | " if tls else "") +
             "RSS after 1 request each | KiB/conn connected | **KiB/conn idle after a request** "
             "| errors | still open | runs (KiB/conn) |")
    L.append("|---|" + "---:|" * (9 + 2 * tls) + "---|")
    for kind in ctx.proxies_idle:
        for n in ctx.counts:
            rs = [r for r in idle if r["proxy"] == kind and r["n"] == n]
            if not rs:
                continue
            per = [(r["after"] - r["before"]) / n for r in rs]
            perc = [(r["connected"] - r["before"]) / n for r in rs]
            hs = ""
            if tls:
                hs = "%.1f MiB | %.2f | " % (
                    median([r["handshaken"] for r in rs]) / 1024,
                    median([(r["handshaken"] - r["before"]) / n for r in rs]))
            L.append("| %s | %s | %.1f MiB | %.1f MiB | %s%.1f MiB | %.2f | **%.2f** | %d | %d | %s |"
                     % (kind, format(n, ","), median([r["before"] for r in rs]) / 1024,
                        median([r["connected"] for r in rs]) / 1024, hs,
                        median([r["after"] for r in rs]) / 1024, median(perc), median(per),
                        sum(r["errors"] for r in rs), min(r["open"] for r in rs),
                        " ".join("%.2f" % x for x in per)))
    L.append("")
    return L


def load_section(ctx, load):
    L = []
    if load:
        L.append("## %s connections under load" % format(ctx.load_conns, ","))
        L.append("")
        L.append("`wrk -t1 -c %d -d %ds --timeout 10s` on `/small.txt`, fresh proxy per run. "
                 "errors = non-2xx + socket errors (connect, read, write, timeout)." %
                 (ctx.load_conns, ctx.load_secs))
        L.append("")
        L.append("| proxy | run | requests | req/s | p99 | errors | non-2xx | connect | read | "
                 "write | timeout | peak RSS | proxy CPU % | softirq % | other CPU % | what the proxy "
                 "reports |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in load:
            says = "; ".join("%s %s" % (k, format(v, ",")) for k, v in r["proxy_says"].items())
            L.append("| %s | %d | %s | %s | %s | **%s** | %s | %s | %s | %s | %s | %.1f MiB | %.0f | "
                     "%.0f | %.0f | %s |" % (
                r["proxy"], r["run"], format(r["requests"] or 0, ","),
                format(int(r["rps"] or 0), ","),
                "%.0f ms" % r["p99_ms"] if r["p99_ms"] is not None else "—",
                format(r["errors"], ","), format(r["non2xx"], ","), format(r["connect"], ","),
                format(r["read"], ","), format(r["write"], ","), format(r["timeout"], ","),
                r["rss_peak"] / 1024, r["proxy_pct"], r["softirq_pct"], r["other_pct"],
                says.replace("|", "/") or "—"))
        L.append("")
        L.append("rpx-cb: rpx with max_pending_requests and max_requests 20000 (bench config "
                 "otherwise), to separate configured circuit-breaker 503s from capacity. "
                 "CPU columns in % of one CPU over the run: the proxy; interrupts and softirq "
                 "(loopback TCP work charged to no process); other = every other process "
                 "(above ~10 the run was disturbed). rpx's downstream_rq_rx_reset / "
                 "upstream_rq_reset are requests still in flight when wrk stopped.")
        L.append("")
    return L


# ---------------------------------------------------------------------------------------------

class Ctx(object):
    pass


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--counts", default="1000,5000,15000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--proxies", default="rpx,nginx")
    ap.add_argument("--window", type=int, default=100, help="requests in flight while priming")
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--load-conns", type=int, default=10000)
    ap.add_argument("--load-duration", default="10s")
    ap.add_argument("--load-runs", type=int, default=None, help="default: --runs")
    ap.add_argument("--no-load", action="store_true")
    ap.add_argument("--no-idle", action="store_true")
    ap.add_argument("--no-rpx-cb", action="store_true")
    ap.add_argument("--rpx-bin", default=os.environ.get("RPX_BIN") or
                    os.path.join(ROOT, "bazel-bin", "source", "exe", "rpx"))
    ap.add_argument("--rpx-rev", default=None,
                    help="the commit the rpx binary was built from, for the report (default: "
                         "the repo's HEAD)")
    ap.add_argument("--tls", action="store_true",
                    help="the proxies terminate TLS (see the docstring)")
    ap.add_argument("--out", default=None, help="default: bench/results/idle_conns.md, with --tls "
                    "bench/results/idle_tls_conns.md")
    a = ap.parse_args(argv)

    ctx = Ctx()
    ctx.command = "python3 bench/idle_conns.py" + ("" if not argv else " " + " ".join(argv))
    ctx.counts = [int(x) for x in a.counts.split(",") if x]
    ctx.runs = a.runs
    ctx.window = a.window
    ctx.settle = a.settle
    ctx.load_conns = a.load_conns
    ctx.load_secs = int(a.load_duration.rstrip("s"))
    ctx.rpx_bin = os.path.abspath(a.rpx_bin)
    ctx.scheme = "https" if a.tls else "http"
    ctx.tls_dir = None  # set once the temp dir exists
    ctx.openssl_version = ssl.OPENSSL_VERSION
    if a.out is None:
        a.out = os.path.join(HERE, "results", "idle_tls_conns.md" if a.tls else "idle_conns.md")
    ctx.proxies_idle = [p for p in a.proxies.split(",") if p]
    for p in ctx.proxies_idle:
        if p not in ("rpx", "nginx"):
            ap.error("unknown proxy %r (rpx, nginx)" % p)
    if "rpx" in ctx.proxies_idle and not os.access(ctx.rpx_bin, os.X_OK):
        ap.error("rpx binary %s missing: bazel build //source/exe:rpx (or --rpx-bin)" %
                 ctx.rpx_bin)
    os.environ["PATH"] += ":/usr/sbin:/sbin"
    ctx.nginx = shutil.which("nginx")
    ctx.wrk = shutil.which("wrk")
    if not ctx.nginx or not shutil.which("taskset") or (not a.no_load and not ctx.wrk):
        ap.error("needs nginx, taskset and wrk (bash tools/setup.sh installs them)")
    if os.cpu_count() < 2:
        ap.error("needs 2 CPUs (proxy on CPU 0, origin and client on CPU 1)")

    # fd limit: 20,000 (or the hard limit) for this client and everything it starts
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ctx.nofile = 20000 if hard == resource.RLIM_INFINITY or hard >= 20000 else hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (ctx.nofile, hard))
    if max(ctx.counts) + 200 > ctx.nofile:
        ap.error("N=%d needs an fd limit above %d (have %d)" % (max(ctx.counts),
                                                               max(ctx.counts) + 200, ctx.nofile))
    os.sched_setaffinity(0, {1})

    ctx.git_rev = a.rpx_rev or "HEAD %s" % (subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
        text=True).stdout.strip() or "?")
    if os.path.exists(ctx.rpx_bin):
        ctx.git_rev += ", binary built %s" % time.strftime(
            "%Y-%m-%d %H:%M UTC", time.gmtime(os.stat(ctx.rpx_bin).st_mtime))
    ctx.nginx_version = subprocess.run([ctx.nginx, "-v"], capture_output=True,
                                       text=True).stderr.strip().replace("nginx version: ", "")
    ctx.wrk_version = (subprocess.run([ctx.wrk, "-v"], capture_output=True, text=True).stdout
                       .split() or ["?", "?"])[1] if ctx.wrk else "—"

    b0 = sum(machine_ticks())
    time.sleep(1)
    ctx.busy_start = (sum(machine_ticks()) - b0) * 100 // os.sysconf("SC_CLK_TCK")
    if ctx.busy_start > 10:
        log("WARNING: %d%% of a CPU busy before the run; numbers will be noisy" % ctx.busy_start)

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    ctx.raw = os.path.join(HERE, "results", "raw", "idle_conns-" + stamp)
    os.makedirs(ctx.raw, exist_ok=True)
    ctx.tmp = tempfile.mkdtemp(prefix="rpx-idle-")
    os.chmod(ctx.tmp, 0o755)  # nginx workers may run unprivileged when started as root
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        www = os.path.join(ctx.tmp, "www")
        os.makedirs(www)
        with open(os.path.join(www, "small.txt"), "wb") as f:
            f.write(SMALL)
        os.chmod(www, 0o755)
        os.chmod(os.path.join(www, "small.txt"), 0o644)
        od = os.path.join(ctx.tmp, "origin")
        os.makedirs(od)
        if a.tls:  # the certificates of bench/run.sh's TLS rows, by the same writer
            ctx.tls_dir = os.path.join(ctx.tmp, "tls")
            os.makedirs(ctx.tls_dir)
            os.chmod(ctx.tls_dir, 0o755)
            subprocess.run(["bash", "-c", 'source "$1/configs.sh" && write_tls_certs "$2"', "_",
                            HERE, ctx.tls_dir], check=True)
        ctx.origin_port = free_port()
        write_origin_conf(od, ctx.origin_port, www, ctx.nofile)
        origin = start(["taskset", "-c", "1", ctx.nginx, "-p", od, "-c",
                        os.path.join(od, "nginx.conf"), "-e", os.path.join(od, "error.log")],
                       od, "origin")
        if not wait_port(ctx.origin_port, origin):
            raise RuntimeError("origin nginx did not start; see %s" % od)
        ctx.origin_pid = origin.pid
        log("origin nginx PID %d on 127.0.0.1:%d (CPU 1)" % (origin.pid, ctx.origin_port))

        idle = []
        for kind in ([] if a.no_idle else ctx.proxies_idle):
            for n in ctx.counts:
                for run in range(1, ctx.runs + 1):
                    idle.append(measure_idle(ctx, kind, n, run))
        load = []
        if not a.no_load:
            kinds = list(ctx.proxies_idle)
            if "rpx" in kinds and not a.no_rpx_cb:
                kinds.insert(kinds.index("rpx") + 1, "rpx-cb")
            for run in range(1, (a.load_runs or ctx.runs) + 1):
                for kind in kinds:
                    load.append(measure_load(ctx, kind, run))
        text = report(ctx, idle, load)
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text)
        sys.stdout.write(text)
        log("wrote %s; raw material in %s" % (a.out, ctx.raw))
    finally:
        stop_all()
        shutil.rmtree(ctx.tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
