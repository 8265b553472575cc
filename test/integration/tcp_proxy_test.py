"""envoy.filters.network.tcp_proxy on loopback: bytes pass as they are in both directions, each
side's end of stream reaches the other as a half-close, connect failures are tried again up to
max_connect_attempts, the cluster's circuit breaker bounds upstream connections, idle and
duration limits end sessions, access logs and tcp.<prefix>.* stats record them, and a listener
mixes HTTP and TCP chains through http_inspector (HTTP/1 to the connection manager, anything else
to the TCP proxy) and tls_inspector (TLS passed through by SNI, never terminated)."""

import hashlib
import os
import socket
import ssl
import subprocess
import threading
import unittest

from harness import (IntegrationTestCase, TestPki, bootstrap, cluster, curl, free_port,
                     http_listener, make_tmpdir, remove_tmpdir, route, socket_address,
                     virtual_host, wait_until)

TCP_PROXY = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
HTTP_INSPECTOR = "type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3.HttpInspector"
TLS_INSPECTOR = "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"
FILE_LOG = "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog"


def tcp_chain(stat_prefix, cluster_name=None, weighted=None, match=None, **extra):
    cfg = {"@type": TCP_PROXY, "stat_prefix": stat_prefix}
    if weighted:
        cfg["weighted_clusters"] = {"clusters": [{"name": n, "weight": w} for n, w in weighted]}
    else:
        cfg["cluster"] = cluster_name
    cfg.update(extra)
    chain = {"filters": [{"name": "envoy.filters.network.tcp_proxy", "typed_config": cfg}]}
    if match:
        chain["filter_chain_match"] = match
    return chain


def tcp_listener(name, port, chains, listener_filters=(), default_chain=None):
    l = {"name": name, "address": socket_address(port), "filter_chains": list(chains)}
    if listener_filters:
        l["listener_filters"] = [{"name": n, "typed_config": {"@type": t}}
                                 for n, t in listener_filters]
    if default_chain:
        l["default_filter_chain"] = default_chain
    return l


def tcp_cluster(name, ports, **kwargs):
    """A STATIC cluster without HTTP options (a TCP proxy's upstream)."""
    c = cluster(name, ports, **kwargs)
    del c["typed_extension_protocol_options"]
    return c


class TcpServer(object):
    """A threaded TCP server on 127.0.0.1. Per connection, by mode:
         "echo":    writes back what it reads; closes after the peer's EOF
         "count":   reads to EOF, then answers "<bytes> <sha256>" and closes
         "speak":   sends `greeting`, shuts down its sending side, then reads to EOF and records
                    what it read in `received`
         "name":    sends `greeting` and closes
    """

    def __init__(self, mode, greeting=b""):
        self.mode = mode
        self.greeting = greeting
        self.received = []
        self.accepted = 0
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read_all(self, conn):
        chunks = []
        while True:
            b = conn.recv(65536)
            if not b:
                return b"".join(chunks)
            chunks.append(b)

    def _serve(self, conn):
        try:
            conn.settimeout(30)
            if self.mode == "echo":
                while True:
                    b = conn.recv(65536)
                    if not b:
                        break
                    conn.sendall(b)
            elif self.mode == "count":
                data = self._read_all(conn)
                conn.sendall(b"%d %s" % (len(data), hashlib.sha256(data).hexdigest().encode()))
            elif self.mode == "speak":
                conn.sendall(self.greeting)
                conn.shutdown(socket.SHUT_WR)
                data = self._read_all(conn)
                with self.lock:
                    self.received.append(data)
            elif self.mode == "name":
                conn.sendall(self.greeting)
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self):
        self.stopping = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def read_all(sock):
    chunks = []
    while True:
        b = sock.recv(65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


class TcpProxyTest(IntegrationTestCase):

    def start_tcp(self, mode, greeting=b""):
        s = TcpServer(mode, greeting)
        self.addCleanup(s.stop)
        return s

    def connect(self, port):
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.addCleanup(s.close)
        return s

    def test_bytes_pass_unchanged_both_ways(self):
        echo = self.start_tcp("echo")
        port = free_port()
        proxy = self.start_rpx(bootstrap([tcp_listener("t", port, [tcp_chain("echo", "E")])],
                                         [tcp_cluster("E", echo.port)]))
        data = os.urandom(8 * 1024 * 1024)
        c = self.connect(port)
        got = []
        reader = threading.Thread(target=lambda: got.append(read_all(c)))
        reader.start()
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)  # the echo server ends after our EOF; rpx passes both on
        reader.join(60)
        self.assertFalse(reader.is_alive(), "no end of stream came back")
        self.assertEqual(hashlib.sha256(got[0]).hexdigest(), hashlib.sha256(data).hexdigest())
        proxy.wait_stat("tcp.echo.downstream_cx_tx_bytes_total", lambda v: v == len(data))
        self.assertEqual(proxy.stat("tcp.echo.downstream_cx_total"), 1)
        self.assertEqual(proxy.stat("tcp.echo.downstream_cx_rx_bytes_total"), len(data))
        self.assertEqual(proxy.stat("cluster.E.upstream_cx_total"), 1)
        proxy.wait_stat("cluster.E.upstream_cx_active", lambda v: v == 0)

    def test_client_half_close_reaches_the_upstream(self):
        # The client says it is done sending and waits for the answer on the same connection:
        # the upstream must see the EOF while the way back stays open.
        counter = self.start_tcp("count")
        port = free_port()
        self.start_rpx(bootstrap([tcp_listener("t", port, [tcp_chain("count", "C")])],
                                 [tcp_cluster("C", counter.port)]))
        data = os.urandom(300000)
        c = self.connect(port)
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        answer = read_all(c)
        self.assertEqual(answer, b"%d %s" % (len(data), hashlib.sha256(data).hexdigest().encode()))

    def test_upstream_half_close_reaches_the_client(self):
        # The upstream speaks first and ends its side; the client still sends afterwards.
        speaker = self.start_tcp("speak", greeting=b"220 ready\r\n")
        port = free_port()
        self.start_rpx(bootstrap([tcp_listener("t", port, [tcp_chain("speak", "S")])],
                                 [tcp_cluster("S", speaker.port)]))
        c = self.connect(port)
        self.assertEqual(read_all(c), b"220 ready\r\n")  # the greeting, then EOF
        c.sendall(b"still talking after your EOF")
        c.shutdown(socket.SHUT_WR)
        wait_until(lambda: speaker.received, timeout=10, what="the upstream got the late bytes")
        self.assertEqual(speaker.received, [b"still talking after your EOF"])

    def test_weighted_clusters(self):
        a = self.start_tcp("name", greeting=b"A")
        b = self.start_tcp("name", greeting=b"B")
        port = free_port()
        self.start_rpx(bootstrap(
            [tcp_listener("t", port, [tcp_chain("w", weighted=[("A", 1), ("B", 3)])])],
            [tcp_cluster("A", a.port), tcp_cluster("B", b.port)]))
        seen = {b"A": 0, b"B": 0}
        for _ in range(60):
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            seen[read_all(c)] += 1
            c.close()
        self.assertGreater(seen[b"A"], 0)
        self.assertGreater(seen[b"B"], seen[b"A"])

    def test_connect_attempts_pass_over_a_dead_host(self):
        echo = self.start_tcp("echo")
        dead = free_port()  # nothing listens there
        port, port2 = free_port(), free_port()
        tmp = make_tmpdir()
        self.addCleanup(remove_tmpdir, tmp)
        log = os.path.join(tmp, "tcp.log")
        fmt = {"text_format_source": {"inline_string":
               "%UPSTREAM_HOST% %BYTES_RECEIVED% %BYTES_SENT% %RESPONSE_FLAGS% %UPSTREAM_CLUSTER%\n"}}
        access_log = [{"name": "envoy.access_loggers.file",
                       "typed_config": {"@type": FILE_LOG, "path": log, "log_format": fmt}}]
        proxy = self.start_rpx(bootstrap(
            [tcp_listener("t", port, [tcp_chain("retry", "R", max_connect_attempts=2,
                                                access_log=access_log)]),
             tcp_listener("t1", port2, [tcp_chain("once", "D", access_log=access_log)])],
            [tcp_cluster("R", [dead, echo.port], lb_policy="ROUND_ROBIN"),
             tcp_cluster("D", dead)]))
        for i in range(4):
            c = self.connect(port)
            c.sendall(b"ping%d" % i)
            self.assertEqual(c.recv(100), b"ping%d" % i)
            c.close()
        self.assertGreater(proxy.stat("cluster.R.upstream_cx_connect_fail"), 0)
        # Only dead hosts, one attempt: the client's connection is closed without a byte.
        c = self.connect(port2)
        self.assertEqual(read_all(c), b"")
        wait_until(lambda: os.path.exists(log) and
                   len(open(log).read().splitlines()) >= 5, timeout=10, what="5 log lines")
        lines = open(log).read().splitlines()
        ok = [l for l in lines if l.endswith(" R")]
        self.assertEqual(len(ok), 4, lines)
        for l in ok:
            self.assertTrue(l.startswith("127.0.0.1:%d 5 5 - " % echo.port), l)
        failed = [l for l in lines if l.endswith(" D")]
        self.assertEqual(len(failed), 1, lines)
        self.assertIn(" UF ", failed[0])

    def test_circuit_breaker_bounds_upstream_connections(self):
        echo = self.start_tcp("echo")
        port = free_port()
        proxy = self.start_rpx(bootstrap([tcp_listener("t", port, [tcp_chain("cb", "E")])],
                                         [tcp_cluster("E", echo.port, max_connections=1)]),
                               concurrency=1)
        first = self.connect(port)
        first.sendall(b"one")
        self.assertEqual(first.recv(10), b"one")
        second = self.connect(port)
        self.assertEqual(read_all(second), b"", "a connection over max_connections was carried")
        self.assertEqual(proxy.stat("cluster.E.upstream_cx_overflow"), 1)
        first.sendall(b"still")
        self.assertEqual(first.recv(10), b"still")
        first.close()
        proxy.wait_stat("cluster.E.upstream_cx_active", lambda v: v == 0)
        third = self.connect(port)
        third.sendall(b"three")
        self.assertEqual(third.recv(10), b"three")

    def test_idle_timeout_and_max_duration(self):
        echo = self.start_tcp("echo")
        port, port2 = free_port(), free_port()
        proxy = self.start_rpx(bootstrap(
            [tcp_listener("idle", port, [tcp_chain("idle", "E", idle_timeout="0.3s")]),
             tcp_listener("dur", port2, [tcp_chain("dur", "E",
                                                   max_downstream_connection_duration="0.5s")])],
            [tcp_cluster("E", echo.port)]))
        c = self.connect(port)
        c.sendall(b"x")
        self.assertEqual(c.recv(10), b"x")
        self.assertEqual(read_all(c), b"")  # closed by rpx once quiet
        self.assertEqual(proxy.stat("tcp.idle.idle_timeout"), 1)
        d = self.connect(port2)
        d.sendall(b"y")
        self.assertEqual(d.recv(10), b"y")
        self.assertEqual(read_all(d), b"")
        self.assertEqual(proxy.stat("tcp.dur.max_downstream_connection_duration"), 1)

    def test_http_inspector_sends_http_to_the_connection_manager_and_the_rest_to_tcp(self):
        http_origin = self.start_echo("H")
        echo = self.start_tcp("echo")
        port = free_port()
        hcm_chain = http_listener("x", port, [virtual_host("all", ["*"], [route("/", "H")])])[
            "filter_chains"][0]
        hcm_chain["filter_chain_match"] = {"application_protocols": ["http/1.1", "http/1.0"]}
        proxy = self.start_rpx(bootstrap(
            [tcp_listener("mixed", port, [hcm_chain],
                          listener_filters=[("envoy.filters.listener.http_inspector",
                                             HTTP_INSPECTOR)],
                          default_chain=tcp_chain("raw", "E"))],
            [cluster("H", http_origin.port), tcp_cluster("E", echo.port)]))
        r = curl("http://127.0.0.1:%d/hello" % port)
        self.assertEqual(r.status, 200)
        self.assertEqual(http_origin.request_count(), 1)
        c = self.connect(port)
        c.sendall(b"\x00\x01binary, not HTTP\r\n")
        self.assertEqual(c.recv(100), b"\x00\x01binary, not HTTP\r\n")
        # A request line split over two segments still goes to the connection manager.
        c2 = self.connect(port)
        c2.sendall(b"GET /split HT")
        c2.sendall(b"TP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        self.assertTrue(read_all(c2).startswith(b"HTTP/1.1 200"))
        self.assertEqual(proxy.stat("tcp.raw.downstream_cx_total"), 1)
        self.assertEqual(proxy.stat("http.x.downstream_rq_total"), 2)

    def test_tls_passed_through_by_sni(self):
        pki = TestPki()
        self.addCleanup(pki.cleanup)
        cert, key = pki.cert("backend", ["DNS:backend.example"])
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        raw = socket.socket()
        raw.bind(("127.0.0.1", 0))
        raw.listen(8)
        self.addCleanup(raw.close)
        backend_port = raw.getsockname()[1]

        def serve():
            try:
                conn, _ = raw.accept()
                with ctx.wrap_socket(conn, server_side=True) as t:
                    t.sendall(b"hello from the backend: " + t.recv(100))
            except OSError:
                pass
        threading.Thread(target=serve, daemon=True).start()
        port = free_port()
        other = self.start_tcp("name", greeting=b"wrong chain")
        proxy = self.start_rpx(bootstrap(
            [tcp_listener("sni", port,
                          [tcp_chain("backend", "B",
                                     match={"server_names": ["backend.example"]})],
                          listener_filters=[("envoy.filters.listener.tls_inspector",
                                             TLS_INSPECTOR)],
                          default_chain=tcp_chain("other", "O"))],
            [tcp_cluster("B", backend_port), tcp_cluster("O", other.port)]))
        cctx = ssl.create_default_context(cafile=pki.ca)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            with cctx.wrap_socket(s, server_hostname="backend.example") as t:
                # The backend's own certificate, verified end to end: rpx did not terminate TLS.
                t.sendall(b"hi")
                self.assertEqual(t.recv(100), b"hello from the backend: hi")
        self.assertEqual(proxy.stat("tcp.backend.downstream_cx_total"), 1)
        # openssl s_client, as a user would check it.
        r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port,
                            "-servername", "other.example", "-brief"],
                           input=b"", capture_output=True, timeout=20)
        self.assertEqual(proxy.stat("tcp.other.downstream_cx_total"), 1)

    def test_original_dst_needs_a_restored_destination(self):
        # A connection made to the capture port itself (not redirected) has no original
        # destination: an ORIGINAL_DST cluster has no host for it (sending it to the listener's
        # own address would loop back into rpx until the circuit breaker stopped it).
        port = free_port()
        od = {"name": "Passthrough", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED",
              "connect_timeout": "1s"}
        listener = tcp_listener("capture", port, [tcp_chain("pass", "Passthrough")])
        listener["listener_filters"] = [{"name": "envoy.filters.listener.original_dst"}]
        listener["use_original_dst"] = True
        proxy = self.start_rpx(bootstrap([listener], [od]))
        c = self.connect(port)
        self.assertEqual(read_all(c), b"")  # closed at once
        self.assertEqual(proxy.stat("tcp.pass.downstream_cx_no_route"), 1)
        self.assertEqual(proxy.stat("cluster.Passthrough.upstream_cx_total"), 0)

    def test_bad_configs_are_refused_by_name(self):
        port = free_port()
        self.assert_refused(bootstrap([tcp_listener("t", port, [tcp_chain("", "E")])],
                                      [tcp_cluster("E", free_port())]),
                            "filter_chains[0].filters[0].typed_config.stat_prefix: is required")
        self.assert_refused(bootstrap([tcp_listener("t", port, [tcp_chain("p", "E",
                                                                          max_connect_attempts=0)])],
                                      [tcp_cluster("E", free_port())]),
                            "max_connect_attempts: must be at least 1")
        self.assert_refused(bootstrap([tcp_listener("t", port, [tcp_chain("p", "E",
                                                                          hash_policy=[{}])])],
                                      [tcp_cluster("E", free_port())]),
                            "hash_policy")
        od = {"name": "od", "type": "ORIGINAL_DST", "lb_policy": "ROUND_ROBIN",
              "connect_timeout": "1s"}
        self.assert_refused(bootstrap([tcp_listener("t", port, [tcp_chain("p", "od")])], [od]),
                            "clusters[0].lb_policy: an ORIGINAL_DST cluster needs lb_policy "
                            "CLUSTER_PROVIDED")
        provided = tcp_cluster("E", free_port(), lb_policy="CLUSTER_PROVIDED")
        self.assert_refused(bootstrap([tcp_listener("t", port, [tcp_chain("p", "E")])],
                                      [provided]),
                            "CLUSTER_PROVIDED is for ORIGINAL_DST clusters only")


class TcpProxyCopyTest(TcpProxyTest):
    """The same with splicing off (rpx --disable-splice): the bytes are copied through userspace,
    as they are when either side is TLS."""

    def start_rpx(self, config, **kwargs):
        kwargs["extra_args"] = list(kwargs.get("extra_args", ())) + ["--disable-splice"]
        return super().start_rpx(config, **kwargs)


class OriginalDstHeaderTest(IntegrationTestCase):
    """An ORIGINAL_DST cluster with use_http_header: each request goes where its
    x-envoy-original-dst-host header says (no capture needed; netns_sidecar_test covers capture)."""

    def test_header_picks_the_destination(self):
        a = self.start_echo("A")
        b = self.start_echo("B")
        port = free_port()
        od = {"name": "od", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED",
              "connect_timeout": "1s", "cleanup_interval": "1s",
              "original_dst_lb_config": {"use_http_header": True}}
        proxy = self.start_rpx(bootstrap(
            [http_listener("h", port, [virtual_host("all", ["*"], [route("/", "od")])])], [od]),
            concurrency=1)
        for target, origin in ((a, "A"), (b, "B"), (a, "A")):
            r = curl("http://127.0.0.1:%d/x" % port, "-H",
                     "x-envoy-original-dst-host: 127.0.0.1:%d" % target.port)
            self.assertEqual(r.status, 200)
        self.assertEqual(a.request_count(), 2)
        self.assertEqual(b.request_count(), 1)
        r = curl("http://127.0.0.1:%d/x" % port, "-H", "x-envoy-original-dst-host: nonsense")
        self.assertEqual(r.status, 503)
        self.assertIn(b"x-envoy-original-dst-host", r.body)
        # No header and no restored destination: no host (not rpx's own address, a loop).
        r = curl("http://127.0.0.1:%d/x" % port)
        self.assertEqual(r.status, 503)
        self.assertEqual(proxy.stat("cluster.od.upstream_cx_total"), 2)


if __name__ == "__main__":
    unittest.main()
