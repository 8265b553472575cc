"""HTTP/2 to upstreams: clusters with explicit_http_config.http2_protocol_options (h2c with prior
knowledge, or TLS with ALPN h2) and auto_config (ALPN over TLS, HTTP/1.1 when the server does not
pick h2), reached from HTTP/1.1 and HTTP/2 clients.

Origins: a scripted python3-h2 origin (harness.H2Origin: holds streams until several are open at
once, announces SETTINGS_MAX_CONCURRENT_STREAMS, sends GOAWAY, refuses or resets streams, sends
trailers), a real nginx (h2c, and TLS with and without http2) and a real gRPC server and client
(Debian's python3-grpcio). Multiplexing is shown by connection counts on both ends."""

import hashlib
import http.client
import json
import ssl
import subprocess
import threading
import time
import unittest

from harness import (H2Client, H2Origin, IntegrationTestCase, TestPki, UPSTREAM_HTTP_OPTIONS,
                     bootstrap, cluster, curl, det_bytes, free_port, grpc_available,
                     http_listener, port_is_listening, repo_file, route, sha256, virtual_host,
                     wait_until)

WAIT = 10.0


def h2_cluster(name, port, http2_options=None, auto=False, **kwargs):
    c = cluster(name, port, **kwargs)
    opts = c["typed_extension_protocol_options"][UPSTREAM_HTTP_OPTIONS]
    del opts["explicit_http_config"]
    if auto:
        opts["auto_config"] = {"http2_protocol_options": http2_options or {}}
    else:
        opts["explicit_http_config"] = {"http2_protocol_options": http2_options or {}}
    return c


def upstream_tls(ca, sni="localhost"):
    return {"name": "envoy.transport_sockets.tls", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "sni": sni,
        "common_tls_context": {"validation_context": {"trusted_ca": {"filename": ca}}}}}


class Http2UpstreamTest(IntegrationTestCase):

    def start_origin(self, **kwargs):
        origin = H2Origin(**kwargs)
        self.addCleanup(origin.stop)
        return origin

    def start_proxy(self, clusters, routes=None, concurrency=1):
        # One worker unless said otherwise: a pool per worker, and these tests count one pool's
        # connections.
        self.port = free_port()
        routes = routes or [route(prefix="/", cluster=clusters[0]["name"])]
        cfg = bootstrap([http_listener("main", self.port,
                                       [virtual_host("all", ["*"], routes)])], clusters)
        self.proxy = self.start_rpx(cfg, concurrency=concurrency)
        return self.proxy

    def h2(self):
        c = H2Client(self.port)
        self.addCleanup(c.close)
        return c

    def get(self, path, method="GET", body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
        finally:
            conn.close()

    # --- multiplexing and its bounds ---

    def test_streams_share_one_connection(self):
        origin = self.start_origin()
        proxy = self.start_proxy([h2_cluster("h2", origin.port)])
        c = self.h2()
        # The origin answers none of them until all eight are open on one connection.
        sids = [c.request("/hold/8") for _ in range(8)]
        for sid in sids:
            r = c.response(sid)
            self.assertEqual(r["headers"][":status"], "200")
            self.assertEqual(json.loads(bytes(r["data"]))["conn"], 1)
        self.assertEqual(origin.connections, 1)
        self.assertEqual(proxy.stat("cluster.h2.upstream_cx_total"), 1)
        self.assertEqual(proxy.stat("cluster.h2.upstream_cx_http2_total"), 1)
        self.assertEqual(proxy.stat("cluster.h2.upstream_rq_total"), 8)

        # HTTP/1.1 clients (one connection each) share it too.
        results = []

        def one():
            results.append(self.get("/hold/4"))
        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        self.assertEqual([r[0] for r in results], [200] * 4)
        self.assertEqual(origin.connections, 1)

    def test_peer_max_concurrent_streams_bounds_the_streams(self):
        origin = self.start_origin(max_streams=2)
        proxy = self.start_proxy([h2_cluster("h2", origin.port)])
        c = self.h2()
        # A first stream brings the origin's SETTINGS (before them, a client may open 100 streams:
        # an origin would refuse the excess, and rpx would send those again).
        self.assertEqual(c.response(c.request("/echo"))["headers"][":status"], "200")
        sids = [c.request("/hold/2") for _ in range(6)]
        for sid in sids:
            self.assertEqual(c.response(sid)["headers"][":status"], "200")
        self.assertLessEqual(origin.max_open, 2)
        # The streams that waited got a connection of their own, whose first streams (sent before
        # its SETTINGS arrived) the origin may have refused: each was sent again, once.
        self.assertEqual(origin.errors, [])
        self.assertEqual(proxy.stat("cluster.h2.upstream_rq_total"), 7 + origin.refused)

    def test_max_concurrent_streams_opens_more_connections(self):
        origin = self.start_origin()
        proxy = self.start_proxy([h2_cluster("h2", origin.port,
                                             http2_options={"max_concurrent_streams": 2})])
        c = self.h2()
        # Answered only once all six wait at the origin: two streams per connection need three.
        sids = [c.request("/holdall/6") for _ in range(6)]
        conns = set()
        for sid in sids:
            r = c.response(sid)
            self.assertEqual(r["headers"][":status"], "200")
            conns.add(json.loads(bytes(r["data"]))["conn"])
        self.assertEqual(len(conns), 3)
        self.assertLessEqual(origin.max_open, 2)
        self.assertEqual(proxy.stat("cluster.h2.upstream_cx_total"), 3)

    def test_circuit_breaker_bounds_connections_and_streams_wait(self):
        origin = self.start_origin()
        proxy = self.start_proxy([h2_cluster("h2", origin.port, max_connections=1,
                                             http2_options={"max_concurrent_streams": 2})])
        c = self.h2()
        sids = [c.request("/hold/2") for _ in range(6)]
        for sid in sids:
            self.assertEqual(c.response(sid)["headers"][":status"], "200")
        self.assertEqual(origin.connections, 1)
        self.assertLessEqual(origin.max_open, 2)
        self.assertGreaterEqual(proxy.stat("cluster.h2.upstream_rq_pending_total"), 1)

    def test_max_requests_per_connection_counts_streams(self):
        origin = self.start_origin()
        proxy = self.start_proxy([h2_cluster("h2", origin.port, max_requests_per_connection=3)])
        c = self.h2()
        for _ in range(7):
            self.assertEqual(c.response(c.request("/echo"))["headers"][":status"], "200")
        self.assertEqual(origin.connections, 3)
        self.assertEqual(proxy.stat("cluster.h2.upstream_cx_max_requests"), 2)

    # --- the upstream ending things ---

    def test_goaway_drains_the_connection_and_new_streams_use_a_fresh_one(self):
        origin = self.start_origin()
        proxy = self.start_proxy([h2_cluster("h2", origin.port)])
        s, _, body = self.get("/goaway")
        self.assertEqual(s, 200)
        self.assertEqual(json.loads(body)["conn"], 1)
        proxy.wait_stat("cluster.h2.upstream_cx_close_notify", lambda v: v == 1)
        s, _, body = self.get("/echo")
        self.assertEqual(s, 200)
        self.assertEqual(json.loads(body)["conn"], 2)
        proxy.wait_stat("cluster.h2.upstream_cx_active", lambda v: v == 1)

    def test_refused_stream_is_sent_again_once(self):
        origin = self.start_origin()
        proxy = self.start_proxy([h2_cluster("h2", origin.port)])
        s, _, body = self.get("/refuse-once")
        self.assertEqual(s, 200)
        self.assertEqual(origin.requests.count("/refuse-once"), 2)
        s, _, body = self.get("/refuse")
        self.assertEqual(s, 502)
        self.assertIn(b"refused", body)
        self.assertEqual(origin.requests.count("/refuse"), 2)  # once, and once again only

    def test_upstream_stream_reset_reaches_the_client(self):
        origin = self.start_origin()
        self.start_proxy([h2_cluster("h2", origin.port)])
        c = self.h2()
        r = c.response(c.request("/rst"))
        self.assertIsNotNone(r["reset"])
        # The connection stays usable for other streams.
        r = c.response(c.request("/echo"))
        self.assertEqual(r["headers"][":status"], "200")
        self.assertEqual(origin.connections, 1)

    def test_client_cancel_resets_only_its_upstream_stream(self):
        origin = self.start_origin()
        proxy = self.start_proxy([h2_cluster("h2", origin.port)])
        c = self.h2()
        sid = c.request("/hold/2")  # never answered: a second one does not come
        wait_until(lambda: "/hold/2" in origin.requests, timeout=WAIT)
        c.conn.reset_stream(sid)
        c.flush()
        proxy.wait_stat("cluster.h2.upstream_rq_active", lambda v: v == 0)
        r = c.response(c.request("/echo"))
        self.assertEqual(r["headers"][":status"], "200")
        self.assertEqual(origin.connections, 1)

    def test_route_max_stream_duration(self):
        origin = self.start_origin()
        r = route(prefix="/", cluster="h2")
        r["route"]["max_stream_duration"] = {"max_stream_duration": "0.2s"}
        proxy = self.start_proxy([h2_cluster("h2", origin.port)], routes=[r])
        s, _, body = self.get("/hold/2")  # never answered: the second does not come
        self.assertEqual(s, 408)
        self.assertEqual(body, b"downstream duration timeout\n")
        proxy.wait_stat("cluster.h2.upstream_rq_active", lambda v: v == 0)

    # --- header mapping and bodies ---

    def test_http1_request_maps_to_http2_fields(self):
        origin = self.start_origin()
        self.start_proxy([h2_cluster("h2", origin.port)])
        body = det_bytes(300000)
        s, _, out = self.get("/echo?q=1", method="POST", body=body, headers={
            "Host": "svc.example:8080", "Connection": "keep-alive, x-hop", "x-hop": "1",
            "TE": "trailers", "Cookie": "a=1", "x-custom": "v"})
        self.assertEqual(s, 200)
        e = json.loads(out)
        fields = e["headers"]
        names = [k for k, _ in fields]
        self.assertEqual(names[:4], [":method", ":scheme", ":authority", ":path"])
        d = dict(fields)
        self.assertEqual(d[":method"], "POST")
        self.assertEqual(d[":scheme"], "http")
        self.assertEqual(d[":authority"], "svc.example:8080")
        self.assertEqual(d[":path"], "/echo?q=1")
        self.assertEqual(d["te"], "trailers")
        self.assertEqual(d["cookie"], "a=1")
        self.assertEqual(d["x-custom"], "v")
        self.assertEqual(d["content-length"], str(len(body)))
        for gone in ("host", "connection", "x-hop", "keep-alive", "transfer-encoding"):
            self.assertNotIn(gone, d)
        self.assertEqual(e["body_len"], len(body))
        self.assertEqual(e["body_sha256"], hashlib.sha256(body).hexdigest())

    def test_chunked_upload_and_large_download(self):
        origin = self.start_origin()
        self.start_proxy([h2_cluster("h2", origin.port)])
        body = det_bytes(1 << 20)
        # http.client sends chunked when given an iterable body without a length.
        s, _, out = self.get("/echo", method="POST",
                             body=iter([body[i:i + 65536] for i in range(0, len(body), 65536)]))
        self.assertEqual(s, 200)
        e = json.loads(out)
        self.assertNotIn("content-length", dict(e["headers"]))
        self.assertEqual(e["body_sha256"], hashlib.sha256(body).hexdigest())
        big = 4 << 20
        r = curl("http://127.0.0.1:%d/bytes/%d" % (self.port, big))
        self.assertEqual(r.status, 200)
        self.assertEqual(sha256(r.body), sha256(det_bytes(big)))
        c = self.h2()
        r = c.response(c.request("/bytes/%d" % big))
        self.assertEqual(sha256(bytes(r["data"])), sha256(det_bytes(big)))

    def test_trailers_pass_to_http2_clients(self):
        origin = self.start_origin()
        self.start_proxy([h2_cluster("h2", origin.port)])
        c = self.h2()
        r = c.response(c.request("/trailers"))
        self.assertEqual(bytes(r["data"]), b"abc")
        self.assertEqual(r["trailers"], {"grpc-status": "0", "x-trailer": "yes"})
        # An HTTP/1.1 client gets the body (chunked, the trailers dropped as Envoy does).
        s, _, out = self.get("/trailers")
        self.assertEqual((s, out), (200, b"abc"))

    def test_request_trailers_reach_an_http2_upstream(self):
        origin = self.start_origin()
        self.start_proxy([h2_cluster("h2", origin.port)])
        c = self.h2()
        sid = c.request("/echo", method="POST", body=b"hello", end=False)
        c.conn.send_headers(sid, [("x-req-trailer", "one"), ("x-other", "two")], end_stream=True)
        c.flush()
        r = c.response(sid)
        self.assertEqual(r["headers"][":status"], "200")
        echo = json.loads(bytes(r["data"]))
        self.assertEqual(echo["body_len"], 5)
        self.assertEqual(echo["trailers"], [["x-req-trailer", "one"], ["x-other", "two"]])
        # Trailers right after the head (no DATA at all) end the request too.
        sid = c.request("/echo", method="POST", end=False)
        c.conn.send_headers(sid, [("x-only", "trailers")], end_stream=True)
        c.flush()
        echo = json.loads(bytes(c.response(sid)["data"]))
        self.assertEqual((echo["body_len"], echo["trailers"]), (0, [["x-only", "trailers"]]))

    def test_request_trailers_are_dropped_for_an_http1_upstream(self):
        echo = self.start_echo()
        self.start_proxy([cluster("h1", echo.port)])
        c = self.h2()
        sid = c.request("/echo", method="POST", body=b"hello", end=False)
        c.conn.send_headers(sid, [("x-req-trailer", "one")], end_stream=True)
        c.flush()
        r = c.response(sid)
        self.assertEqual(r["headers"][":status"], "200")
        self.assertEqual(json.loads(bytes(r["data"]))["body_length"], 5)
        self.assertNotIn(b"x-req-trailer", bytes(r["data"]))

    def test_oversized_request_trailers_reset_the_stream(self):
        origin = self.start_origin()
        self.start_proxy([h2_cluster("h2", origin.port)])
        c = self.h2()
        sid = c.request("/echo", method="POST", body=b"x", end=False)
        c.conn.send_headers(sid, [("x-big-%d" % i, "v" * 1000) for i in range(80)],
                            end_stream=True)
        c.flush()
        r = c.response(sid)
        self.assertIsNotNone(r["reset"])
        self.assertEqual(self.proxy.stat("http.main.http2.header_overflow"), 1)
        # The connection serves the next stream.
        r = c.response(c.request("/echo"))
        self.assertEqual(r["headers"][":status"], "200")

    # --- real origins ---

    def start_h2_nginx(self, listen):
        """A real nginx whose one server has `listen` (PORT: a free port) and answers every
        request with its connection number; returns the port."""
        port = free_port()
        self.start_nginx("""  server {
    %s
    location / { add_header x-conn $connection always; return 200 "nginx $connection\\n"; }
  }""" % listen.replace("PORT", str(port)), [port])
        return port

    def test_nginx_h2c_origin_under_h2load(self):
        nginx_port = self.start_h2_nginx(
            "listen 127.0.0.1:PORT http2; http2_max_concurrent_streams 32;")
        proxy = self.start_proxy([h2_cluster("ngx", nginx_port)], concurrency=2)
        r = curl("http://127.0.0.1:%d/" % self.port)
        self.assertEqual(r.status, 200)
        self.assertTrue(r.body.startswith(b"nginx "))
        cp = subprocess.run(["h2load", "-n", "400", "-c", "4", "-m", "10",
                             "http://127.0.0.1:%d/" % self.port],
                            capture_output=True, timeout=60)
        out = cp.stdout.decode()
        self.assertIn("400 succeeded, 0 failed, 0 errored", out, out)
        # 40 streams in flight at most, over a handful of upstream connections.
        self.assertLessEqual(proxy.stat("cluster.ngx.upstream_cx_total"), 4)
        self.assertEqual(proxy.stat("cluster.ngx.upstream_rq_total"), 401)

    def test_auto_config_speaks_what_alpn_picked(self):
        pki = TestPki()
        self.addCleanup(pki.cleanup)
        cert, key = pki.cert("localhost", ["DNS:localhost"])
        tls = "ssl_certificate %s; ssl_certificate_key %s;" % (cert, key)
        with_h2 = self.start_h2_nginx("listen 127.0.0.1:PORT ssl http2; " + tls)
        h1_only = self.start_h2_nginx("listen 127.0.0.1:PORT ssl; " + tls)
        a = h2_cluster("a", with_h2, auto=True,
                       extra={"transport_socket": upstream_tls(pki.ca)})
        b = h2_cluster("b", h1_only, auto=True,
                       extra={"transport_socket": upstream_tls(pki.ca)})
        proxy = self.start_proxy([a, b], routes=[route(prefix="/a", cluster="a"),
                                                 route(prefix="/b", cluster="b")])
        for p in ("/a", "/b"):
            r = curl("http://127.0.0.1:%d%s" % (self.port, p))
            self.assertEqual(r.status, 200, r.body)
        self.assertEqual(proxy.stat("cluster.a.upstream_cx_http2_total"), 1)
        self.assertEqual(proxy.stat("cluster.a.upstream_cx_http1_total"), 0)
        self.assertEqual(proxy.stat("cluster.b.upstream_cx_http1_total"), 1)
        self.assertEqual(proxy.stat("cluster.b.upstream_cx_http2_total"), 0)

    def test_explicit_h2_over_tls(self):
        pki = TestPki()
        self.addCleanup(pki.cleanup)
        cert, key = pki.cert("localhost", ["DNS:localhost"])
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        ctx.set_alpn_protocols(["h2"])
        origin = self.start_origin(ssl_context=ctx)
        self.start_proxy([h2_cluster("h2", origin.port,
                                     extra={"transport_socket": upstream_tls(pki.ca)})])
        s, _, body = self.get("/echo")
        self.assertEqual(s, 200)
        self.assertEqual(dict(json.loads(body)["headers"])[":scheme"], "https")


@unittest.skipUnless(grpc_available(), "python3-grpcio is not installed")
class GrpcThroughRpxTest(IntegrationTestCase):
    """A python3-grpcio server behind rpx (h2 upstream) and a python3-grpcio client in front of it
    (h2 downstream): the four call shapes, a 4 MiB message, deadlines, cancellation and
    non-OK statuses, all with raw-bytes messages (no generated code needed)."""

    def setUp(self):
        import grpc
        from concurrent import futures
        self.grpc = grpc
        self.cancelled = threading.Event()
        test = self

        def unary(req, ctx):
            if req == b"fail":
                ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
            if req.startswith(b"sleep"):
                end = time.time() + float(req[5:])
                while time.time() < end:
                    if not ctx.is_active():
                        test.cancelled.set()
                        return b""
                    time.sleep(0.05)
            return b"echo:" + req

        def server_stream(req, ctx):
            for i in range(int(req)):
                yield b"msg%d" % i

        def client_stream(it, ctx):
            return str(sum(len(m) for m in it)).encode()

        def bidi(it, ctx):
            for m in it:
                yield m.upper()

        ident = lambda b: b  # noqa: E731
        handler = grpc.method_handlers_generic_handler("t.Svc", {
            "Unary": grpc.unary_unary_rpc_method_handler(unary, ident, ident),
            "Capped": grpc.unary_unary_rpc_method_handler(unary, ident, ident),
            "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, ident, ident),
            "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream, ident, ident),
            "Bidi": grpc.stream_stream_rpc_method_handler(bidi, ident, ident),
        })
        opts = [("grpc.max_receive_message_length", 8 << 20),
                ("grpc.max_send_message_length", 8 << 20)]
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=opts)
        self.server.add_generic_rpc_handlers((handler,))
        self.backend_port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.addCleanup(self.server.stop, None)
        self.port = free_port()
        # /t.Svc/Capped: the client's deadline (grpc-timeout) applies, at most 300 ms.
        capped = route(prefix="/t.Svc/Capped", cluster="grpc")
        capped["route"]["max_stream_duration"] = {"grpc_timeout_header_max": "0.3s"}
        catch_all = route(prefix="/", cluster="grpc")
        cfg = bootstrap([http_listener("main", self.port,
                                       [virtual_host("all", ["*"], [capped, catch_all])])],
                        [h2_cluster("grpc", self.backend_port)])
        self.proxy = self.start_rpx(cfg)
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.port, options=opts)
        self.addCleanup(self.channel.close)

    def call(self, kind, name):
        return getattr(self.channel, kind)("/t.Svc/" + name)

    def test_the_four_shapes(self):
        self.assertEqual(self.call("unary_unary", "Unary")(b"hi", timeout=WAIT), b"echo:hi")
        self.assertEqual(list(self.call("unary_stream", "ServerStream")(b"3", timeout=WAIT)),
                         [b"msg0", b"msg1", b"msg2"])
        self.assertEqual(self.call("stream_unary", "ClientStream")(iter([b"ab", b"cde"]),
                                                                  timeout=WAIT), b"5")
        self.assertEqual(list(self.call("stream_stream", "Bidi")(iter([b"x", b"yz"]),
                                                                 timeout=WAIT)), [b"X", b"YZ"])
        # All over one upstream connection.
        self.assertEqual(self.proxy.stat("cluster.grpc.upstream_cx_total"), 1)

    def test_large_message(self):
        msg = det_bytes(4 << 20)
        out = self.call("unary_unary", "Unary")(msg, timeout=WAIT)
        self.assertEqual(sha256(out), sha256(b"echo:" + msg))

    def test_status_and_message_pass_through(self):
        with self.assertRaises(self.grpc.RpcError) as cm:
            self.call("unary_unary", "Unary")(b"fail", timeout=WAIT)
        self.assertEqual(cm.exception.code(), self.grpc.StatusCode.NOT_FOUND)
        self.assertEqual(cm.exception.details(), "no such thing")

    def test_deadline_exceeded_and_cancellation_reach_the_server(self):
        with self.assertRaises(self.grpc.RpcError) as cm:
            self.call("unary_unary", "Unary")(b"sleep3", timeout=0.5)
        self.assertEqual(cm.exception.code(), self.grpc.StatusCode.DEADLINE_EXCEEDED)
        self.cancelled.wait(WAIT)  # (the server also knows the deadline: grpc-timeout)
        self.cancelled.clear()
        # A cancel long before the deadline: only the client's RST_STREAM, passed on by rpx, can
        # tell the server.
        fut = self.call("unary_unary", "Unary").future(b"sleep8", timeout=WAIT)
        time.sleep(0.3)
        fut.cancel()
        self.assertTrue(self.cancelled.wait(WAIT))
        self.assertEqual(self.call("unary_unary", "Unary")(b"ok", timeout=WAIT), b"echo:ok")

    def test_grpc_timeout_capped_by_the_route(self):
        # The client allows 10 s, the server would answer after 8 s: only rpx's cap (300 ms from
        # grpc_timeout_header_max) can end the call, as DEADLINE_EXCEEDED.
        with self.assertRaises(self.grpc.RpcError) as cm:
            self.call("unary_unary", "Capped")(b"sleep8", timeout=WAIT)
        self.assertEqual(cm.exception.code(), self.grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual(self.proxy.stat("http.main.downstream_rq_max_duration_reached"), 1)
        self.assertTrue(self.cancelled.wait(WAIT))  # the upstream stream was reset


@unittest.skipUnless(grpc_available(), "python3-grpcio is not installed")
class GrpcWalkthroughTest(IntegrationTestCase):
    """docs/http2.md's gRPC walkthrough as written: configs/grpc.yaml and tools/grpc_echo.py (on
    free ports instead of 10000, 50051 and 9901)."""

    def test_walkthrough(self):
        echo = repo_file("tools/grpc_echo.py")
        listen, backend, admin = free_port(), free_port(), free_port()
        with open(repo_file("configs/grpc.yaml")) as f:
            yaml = f.read()
        yaml = (yaml.replace("port_value: 10000", "port_value: %d" % listen)
                .replace("port_value: 50051", "port_value: %d" % backend)
                .replace("port_value: 9901", "port_value: %d" % admin))
        server = subprocess.Popen(["/usr/bin/python3", echo, "serve", str(backend)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (server.kill(), server.wait()))
        wait_until(lambda: port_is_listening(backend), timeout=WAIT, what="grpc_echo serving")
        proxy = self.start_rpx(yaml, admin_port=admin)

        def call(*args):
            cp = subprocess.run(["/usr/bin/python3", echo, "call", "127.0.0.1:%d" % listen] +
                                list(args), capture_output=True, timeout=30)
            return cp.returncode, cp.stdout.decode()

        self.assertEqual(call("Say", "hello"), (0, "echo: hello\n"))
        self.assertEqual(call("Count", "3"), (0, "message 0\nmessage 1\nmessage 2\n"))
        self.assertEqual(call("Sum", "ab,cde"), (0, "5\n"))
        self.assertEqual(call("Chat", "hi,there"), (0, "HI\nTHERE\n"))
        self.assertEqual(call("Fail", "x"), (1, "NOT_FOUND: no such thing: x\n"))
        # The client's deadline and rpx's copy of it (grpc-timeout) race: either may end the call.
        code, out = call("Sleep", "5", "--timeout", "0.5")
        self.assertEqual(code, 1)
        self.assertTrue(out.startswith("DEADLINE_EXCEEDED: "), out)
        # Calls share the upstream connection of the worker they land on (two workers here).
        self.assertLessEqual(proxy.stat("cluster.echo.upstream_cx_http2_total"), 2)
        self.assertEqual(proxy.stat("cluster.echo.upstream_rq_total"), 6)


if __name__ == "__main__":
    unittest.main()
