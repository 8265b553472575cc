"""Many connections: 15,000 concurrent keep-alive client connections to one rpx.

One client (this process, non-blocking sockets and epoll) opens 15,000 connections in batches,
holds them all open, sends one request on every connection (at most WINDOW in flight), reads every
response, then does a second round on the same connections (keep-alive). Every response must be
a 200 echo of its own request; no connection may be refused, reset or closed; rpx's stats must
agree (15,000 accepted, 15,000 active, 30,000 requests, no new connections in round two).

File descriptors (the hard limit here is 20,000 per process):
  this process: 15,000 client sockets + the echo upstream (at most MAX_UPSTREAM connections) +
                a few dozen others, with the soft limit raised to the hard limit;
  rpx:          15,000 downstream + at most MAX_UPSTREAM upstream + listeners and epoll. rpx is
                started with a soft limit of 1024 on purpose: it must raise its own (main.cc).
"""

import errno
import json
import os
import re
import resource
import select
import socket
import subprocess
import time
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, free_port, http_listener, route,
                     virtual_host)

N = 15000              # client connections
CONNECT_BATCH = 500    # connects started together; rpx's listen backlog is 4096 per worker
MAX_UNACCEPTED = 2000  # the client waits for rpx's accepts when it is this far ahead
WINDOW = 1000          # requests in flight at once (below max_pending_requests)
MAX_UPSTREAM = 16      # rpx's pool to the echo upstream (circuit breaker max_connections)
WORKERS = 2
FD_MARGIN = 300        # fds this process needs besides the client sockets
PHASE_TIMEOUT = 30.0   # seconds for any one phase (connect, accept, a request round, close)
SLOW_CONNECT = 1.0     # a connect taking this long means a SYN was retransmitted
MAX_SLOW_CONNECT_FRACTION = 0.05
MAX_ACCEPT_LAG = 5.0   # seconds from the last connect to rpx having accepted every connection
NET_COUNTERS = ["ListenOverflows", "ListenDrops", "TCPReqQFullDrop", "TCPBacklogDrop",
                "TWKilled"]


def _tcp_ext(names):
    """Values of TcpExt counters from /proc/net/netstat (machine-wide; informational)."""
    try:
        with open("/proc/net/netstat") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    for i in range(0, len(lines) - 1, 2):
        keys, vals = lines[i].split(), lines[i + 1].split()
        if keys and keys[0] == "TcpExt:":
            d = dict(zip(keys[1:], vals[1:]))
            return {n: int(d.get(n, 0)) for n in names}
    return {}


def _accept_queues(port):
    """[(queued, backlog)] of the listening sockets on port (one per worker), from ss."""
    try:
        out = subprocess.run(["ss", "-Hltn", "sport = :%d" % port], capture_output=True,
                             text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [(int(f[1]), int(f[2])) for f in (line.split() for line in out.splitlines())
            if len(f) >= 4 and f[0] == "LISTEN"]


def _proc_status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _soft_nofile_of(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError("no 'Max open files' in /proc/%d/limits" % pid)


class Client(object):
    """N non-blocking client sockets driven by one epoll."""

    def __init__(self, port):
        self.port = port
        self.socks = []        # index -> socket
        self.fd_index = {}     # fd -> index
        self.buf = {}          # index -> bytes received for the response being read
        self.ep = select.epoll()
        self.errors = []       # (index, what)
        self.connect_times = []

    def error(self, i, what):
        if len(self.errors) < 10000:
            self.errors.append((i, what))

    def close(self):
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass
        self.socks = []
        self.ep.close()

    # -- connecting
    def connect_batch(self, count, deadline):
        pending = {}
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            i = len(self.socks)
            self.socks.append(s)
            self.fd_index[s.fileno()] = i
            rc = s.connect_ex(("127.0.0.1", self.port))
            if rc not in (0, errno.EINPROGRESS):
                self.error(i, "connect: %s" % os.strerror(rc))
                continue
            pending[s.fileno()] = (i, time.monotonic())
            self.ep.register(s.fileno(), select.EPOLLOUT)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                for fd, (i, _) in pending.items():
                    self.error(i, "connect timed out")
                    self.ep.unregister(fd)
                return
            for fd, _ in self.ep.poll(min(left, 1.0)):
                if fd not in pending:
                    continue
                i, t0 = pending.pop(fd)
                self.connect_times.append(time.monotonic() - t0)
                err = self.socks[i].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                self.ep.unregister(fd)
                if err:
                    self.error(i, "connect: %s" % os.strerror(err))

    def watch_all(self):
        """From now on every socket is watched for input: a response, or an unexpected close."""
        for s in self.socks:
            self.ep.register(s.fileno(), select.EPOLLIN | select.EPOLLRDHUP)

    # -- one request round over every connection
    @staticmethod
    def path(rnd, i):
        return "/round%d/conn%d" % (rnd, i)

    def round(self, rnd, deadline):
        """Sends one GET on every connection (at most WINDOW in flight); returns the number of
        200 responses whose echo names this connection's request."""
        ok = 0
        next_send = 0
        in_flight = set()
        n = len(self.socks)
        done = 0
        while done < n:
            while next_send < n and len(in_flight) < WINDOW:
                i = next_send
                next_send += 1
                req = ("GET %s HTTP/1.1\r\nHost: many.test\r\n\r\n" % self.path(rnd, i)).encode()
                try:
                    sent = self.socks[i].send(req)
                except OSError as e:
                    self.error(i, "round %d send: %s" % (rnd, e))
                    done += 1
                    continue
                if sent != len(req):
                    self.error(i, "round %d: short send %d of %d" % (rnd, sent, len(req)))
                    done += 1
                    continue
                self.buf[i] = b""
                in_flight.add(i)
            left = deadline - time.monotonic()
            if left <= 0:
                for i in in_flight:
                    self.error(i, "round %d: no response in time" % rnd)
                self.error(-1, "round %d: %d connections never sent a request (timeout)" %
                           (rnd, n - next_send))
                return ok
            for fd, ev in self.ep.poll(min(left, 1.0)):
                i = self.fd_index[fd]
                if i not in in_flight:
                    # Input (or a close) on a connection with no request outstanding.
                    what = self._drain_unexpected(i)
                    self.error(i, "round %d: unexpected %s on an idle connection" % (rnd, what))
                    self.ep.unregister(fd)
                    continue
                r = self._read(i, rnd)
                if r is None:
                    continue  # response not complete yet
                in_flight.discard(i)
                done += 1
                if r is True:
                    ok += 1
                else:
                    self.error(i, r)
                    self.ep.unregister(fd)
        return ok

    def _drain_unexpected(self, i):
        try:
            data = self.socks[i].recv(4096)
        except ConnectionResetError:
            return "reset"
        except OSError as e:
            return "error %s" % e
        return "close" if not data else "data %r" % data[:80]

    def _read(self, i, rnd):
        """Reads what is there; returns None (incomplete), True (good response) or an error."""
        s = self.socks[i]
        try:
            data = s.recv(65536)
        except BlockingIOError:
            return None
        except ConnectionResetError:
            return "round %d: connection reset" % rnd
        except OSError as e:
            return "round %d: recv: %s" % (rnd, e)
        if not data:
            return "round %d: connection closed by rpx before a full response (%d bytes)" % (
                rnd, len(self.buf[i]))
        b = self.buf[i] + data
        self.buf[i] = b
        head_end = b.find(b"\r\n\r\n")
        if head_end < 0:
            return None
        head = b[:head_end].decode("latin-1")
        m = re.search(r"(?im)^content-length:\s*(\d+)\s*$", head)
        if not m:
            return "round %d: response without Content-Length: %r" % (rnd, head[:200])
        body_len = int(m.group(1))
        if len(b) < head_end + 4 + body_len:
            return None
        if len(b) > head_end + 4 + body_len:
            return "round %d: %d stray bytes after the response" % (
                rnd, len(b) - head_end - 4 - body_len)
        del self.buf[i]
        status_line = head.split("\r\n", 1)[0]
        if not status_line.startswith("HTTP/1.1 200 "):
            return "round %d: %s" % (rnd, status_line)
        if re.search(r"(?im)^connection:\s*close", head):
            return "round %d: rpx answered with Connection: close" % rnd
        try:
            echo = json.loads(b[head_end + 4:])
        except ValueError:
            return "round %d: body is not the echo JSON" % rnd
        if echo.get("path") != self.path(rnd, i):
            return "round %d: got the echo of %r, expected %r" % (rnd, echo.get("path"),
                                                                 self.path(rnd, i))
        return True


class ManyConnectionsTest(IntegrationTestCase):

    def setUp(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < N + FD_MARGIN:
            self.skipTest("the hard open-file limit is %d; %d connections need at least %d" %
                          (hard, N, N + FD_MARGIN))
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        self.hard = hard
        self.echo = self.start_echo("E")
        self.port = free_port()
        config = bootstrap(
            [http_listener("ingress", self.port,
                           [virtual_host("all", ["*"], [route("/", "E", timeout="20s")])])],
            [cluster("E", self.echo.port, max_connections=MAX_UPSTREAM,
                     max_pending_requests=4 * WINDOW, max_requests=4 * WINDOW,
                     idle_timeout="300s")])
        # rpx inherits a soft limit of 1024 and must raise it itself (to the hard limit).
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, soft), hard))
        try:
            self.proxy = self.start_rpx(config, concurrency=WORKERS, log_level="info")
        finally:
            target = hard if hard != resource.RLIM_INFINITY else 1 << 20
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))

    def test_15000_keepalive_connections_two_rounds(self):
        rpx_pid = self.proxy.proc.pid
        rpx_soft = _soft_nofile_of(rpx_pid)
        expected_soft = self.hard if self.hard != resource.RLIM_INFINITY else 1 << 20
        self.assertEqual(rpx_soft, expected_soft,
                         "rpx did not raise its open-file soft limit to the hard limit")
        self.assertIn("open-file limit (RLIMIT_NOFILE): %d" % expected_soft,
                      self.proxy.stderr_text())
        rss_before = _proc_status_kib(rpx_pid, "VmRSS")
        net_before = _tcp_ext(NET_COUNTERS)
        client = Client(self.port)
        self.addCleanup(client.close)
        t_start = time.monotonic()

        # -- connect, in batches; wait for rpx's accepts when the client gets far ahead
        deadline = time.monotonic() + PHASE_TIMEOUT
        queued_max, backlogs = 0, set()
        while len(client.socks) < N and time.monotonic() < deadline:
            client.connect_batch(min(CONNECT_BATCH, N - len(client.socks)), deadline)
            self.assertFalse(client.errors, client.errors[:20])
            for queued, backlog in _accept_queues(self.port):
                queued_max = max(queued_max, queued)
                backlogs.add(backlog)
            if len(client.socks) % 2000 < CONNECT_BATCH:
                opened = len(client.socks)
                self.proxy.wait_stat("http.ingress.downstream_cx_total",
                                     lambda v, o=opened: v >= o - MAX_UNACCEPTED,
                                     timeout=max(1.0, deadline - time.monotonic()))
        self.assertEqual(len(client.socks), N, "connecting took over %.0fs" % PHASE_TIMEOUT)
        t_connected = time.monotonic()
        # Every connection is accepted, promptly (no SYN retransmits, no stalled accept queue).
        self.proxy.wait_stat("http.ingress.downstream_cx_active", lambda v: v == N,
                             timeout=PHASE_TIMEOUT)
        t_accepted = time.monotonic()
        # A connect of a second or more means its SYN (or SYN-ACK) was retransmitted. Under heavy
        # load from other processes a few hundred of 15,000 were once seen to take ~1.0-1.25s
        # with no listen-queue overflow counted (a kernel-level retransmit, not a stalled
        # accept): tolerate a few, report them, fail if they are common.
        slow = [t for t in client.connect_times if t >= SLOW_CONNECT]
        net_now = _tcp_ext(NET_COUNTERS)
        self.assertLess(len(slow), N * MAX_SLOW_CONNECT_FRACTION,
                        "%d connects took >= %.1fs (SYN retransmits); slowest %.2fs; machine-wide "
                        "TcpExt before %s, now %s" % (len(slow), SLOW_CONNECT, max(slow or [0]),
                                                       net_before, net_now))
        self.assertLess(t_accepted - t_connected, MAX_ACCEPT_LAG,
                        "rpx took %.1fs to accept the last connections" % (
                            t_accepted - t_connected))
        stats = self.proxy.stats()
        self.assertEqual(stats["http.ingress.downstream_cx_total"], N)
        self.assertEqual(stats["http.ingress.downstream_cx_active"], N)
        rss_connected = _proc_status_kib(rpx_pid, "VmRSS")

        # -- two request rounds over the same connections
        client.watch_all()
        round_times = []
        for rnd in (1, 2):
            t0 = time.monotonic()
            ok = client.round(rnd, time.monotonic() + PHASE_TIMEOUT)
            round_times.append(time.monotonic() - t0)
            self.assertFalse(client.errors, "round %d: %d errors, first: %s" % (
                rnd, len(client.errors), client.errors[:20]))
            self.assertEqual(ok, N)
            stats = self.proxy.stats()
            self.assertEqual(stats["http.ingress.downstream_rq_2xx"], rnd * N)
            # Keep-alive: no connection was opened or closed.
            self.assertEqual(stats["http.ingress.downstream_cx_total"], N)
            self.assertEqual(stats["http.ingress.downstream_cx_active"], N)
        rss_loaded = _proc_status_kib(rpx_pid, "VmRSS")

        stats = self.proxy.stats()
        expect = {
            "http.ingress.downstream_rq_total": 2 * N,
            "http.ingress.downstream_rq_2xx": 2 * N,
            "http.ingress.downstream_rq_5xx": 0,
            "http.ingress.downstream_rq_4xx": 0,
            "http.ingress.downstream_cx_protocol_error": 0,
            "http.ingress.downstream_rq_rx_reset": 0,
            "http.ingress.downstream_cx_idle_timeout": 0,
            "cluster.E.upstream_rq_total": 2 * N,
            "cluster.E.upstream_rq_2xx": 2 * N,
            "cluster.E.upstream_rq_pending_overflow": 0,
            "cluster.E.upstream_cx_connect_fail": 0,
            "cluster.E.upstream_rq_timeout": 0,
            "cluster.E.upstream_rq_reset": 0,
        }
        self.assertEqual({k: stats.get(k) for k in expect}, expect)
        self.assertEqual(self.echo.request_count(), 2 * N)
        # The pool stayed bounded. (Connections may be replaced when a starved worker gets a
        # slot handed over by the other worker, so the total may exceed MAX_UPSTREAM a little.)
        self.assertLessEqual(self.echo.peak_open, MAX_UPSTREAM)
        self.assertLessEqual(stats["cluster.E.upstream_cx_active"], MAX_UPSTREAM)
        self.assertEqual(stats["cluster.E.upstream_cx_total"], self.echo.accepted)
        self.assertLess(self.echo.accepted, 4 * MAX_UPSTREAM,
                        {k: v for k, v in stats.items() if k.startswith("cluster.E.")})

        # -- close everything; rpx notices every close
        client.close()
        self.proxy.wait_stat("http.ingress.downstream_cx_active", lambda v: v == 0,
                             timeout=PHASE_TIMEOUT)
        net_after = _tcp_ext(NET_COUNTERS)
        print("\nmany_connections: %d connections in %.1fs (all accepted %.1fs later; connect "
              "max %.3fs, %d took >= %.1fs; accept queue max %d, backlog %s), round 1 %.1fs, round 2 %.1fs, total %.1fs; rpx RSS "
              "%d KiB idle, %d KiB with %d connections, %d KiB after both rounds (%.1f KiB per "
              "connection); upstream connections %d (peak open %d); machine-wide TcpExt "
              "changes: %s" %
              (N, t_connected - t_start, t_accepted - t_connected, max(client.connect_times),
               len(slow), SLOW_CONNECT, queued_max, sorted(backlogs), round_times[0], round_times[1],
               time.monotonic() - t_start, rss_before, rss_connected, N, rss_loaded,
               (rss_loaded - rss_before) / float(N), self.echo.accepted, self.echo.peak_open,
               {k: net_after.get(k, 0) - net_before.get(k, 0) for k in NET_COUNTERS}))

if __name__ == "__main__":
    unittest.main()
