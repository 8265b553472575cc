"""HTTP/2 downstream: real clients (curl, nghttp, h2load, python3-h2, a python3-grpcio channel)
talk h2 to rpx, which forwards to HTTP/1.1 upstreams.

Covers: h2c with prior knowledge on an AUTO listener (HTTP/1.1 keeps working there), codec_type
HTTP1 and HTTP2, h2 by ALPN over TLS, header mapping (:authority to Host, cookies joined),
request and response bodies both ways (with and without Content-Length), multiplexing, flow
control bounding what rpx holds for a client that does not read, GOAWAY on drain with the open
streams finished, gRPC-shaped local replies read by a real gRPC client, and the hardening cases
(malformed requests, oversized header lists, rapid reset, PING flood)."""

import json
import os
import re
import socket
import subprocess
import threading
import time
import unittest

from harness import (H2Client, IntegrationTestCase, TestPki, bootstrap, cluster, curl, det_bytes,
                     downstream_tls, free_port, grpc_available, http_listener, route, sha256,
                     virtual_host, wait_until)

WAIT = 10.0


class Http2Test(IntegrationTestCase):

    def setUp(self):
        self.echo = self.start_echo()
        self.port = free_port()
        self.http1_port = free_port()
        self.h2_port = free_port()
        vh = virtual_host("all", ["*"], [route(prefix="/none", cluster="empty"),
                                         route(prefix="/direct", direct_response=(200, "direct\n")),
                                         route(path="/", cluster="echo"),
                                         route(prefix="/e/", cluster="echo"),
                                         route(prefix="/bytes", cluster="echo"),
                                         route(prefix="/slow", cluster="echo"),
                                         route(prefix="/post", cluster="echo")])
        listeners = [
            http_listener("auto", self.port, [vh], hcm_extra={
                "access_log": [{"name": "envoy.access_loggers.stdout", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3."
                             "StdoutAccessLog",
                    "log_format": {"text_format_source": {
                        "inline_string": "LOG %PROTOCOL% %REQ(:METHOD)% %REQ(:PATH)% "
                                         "%RESPONSE_CODE%\n"}}}}]}),
            http_listener("http1", self.http1_port, [vh], hcm_extra={"codec_type": "HTTP1"}),
            http_listener("h2only", self.h2_port, [vh], hcm_extra={
                "codec_type": "HTTP2",
                "http2_protocol_options": {"max_concurrent_streams": 50,
                                           "initial_stream_window_size": 65535,
                                           "initial_connection_window_size": 1048576},
                "common_http_protocol_options": {"idle_timeout": "30s"},
                "max_request_headers_kb": 8}),
        ]
        self.config = bootstrap(listeners, [cluster("echo", self.echo.port), cluster("empty", [])])
        self.proxy = self.start_rpx(self.config)

    def url(self, path, port=None):
        return "http://127.0.0.1:%d%s" % (port or self.port, path)

    def h2(self, port=None, **kwargs):
        c = H2Client(port or self.port, **kwargs)
        self.addCleanup(c.close)
        return c

    # -- clients and codecs

    def test_curl_prior_knowledge_is_proxied_to_http1_upstream(self):
        r = curl(self.url("/e/hello?x=1"), "--http2-prior-knowledge", "-H", "X-Test: yes")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.info.get("http_version"), "2")
        rec = self.echo.requests[-1]
        self.assertEqual(rec["version"], "HTTP/1.1")
        self.assertEqual(rec["path"], "/e/hello?x=1")
        hdrs = dict(rec["headers"])
        self.assertEqual(hdrs["host"], "127.0.0.1:%d" % self.port)
        self.assertEqual(hdrs["x-test"], "yes")
        self.assertEqual(hdrs["x-forwarded-proto"], "http")
        self.assertNotIn(":authority", hdrs)
        self.assertEqual(self.proxy.stat("http.auto.downstream_cx_http2_total"), 1)
        self.assertIn("LOG HTTP/2 GET /e/hello?x=1 200", self.proxy_stdout_wait("LOG HTTP/2"))

    def proxy_stdout_wait(self, needle):
        path = os.path.join(self.proxy.dir, "stdout.log")
        text = {"t": ""}

        def has():
            try:
                with open(path, "rb") as f:
                    text["t"] = f.read().decode("utf-8", "replace")
            except OSError:
                return False
            return needle in text["t"]
        wait_until(has, timeout=WAIT, what="%r in rpx's stdout" % needle)
        return text["t"]

    def test_http1_still_served_on_auto_listener(self):
        r = curl(self.url("/e/one"))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.info.get("http_version"), "1.1")
        self.assertEqual(self.proxy.stat("http.auto.downstream_cx_http2_total"), 0)

    def test_http1_codec_does_not_speak_h2(self):
        r = curl(self.url("/e/x", self.http1_port), "--http2-prior-knowledge")
        self.assertNotEqual(r.status, 200)
        self.assertEqual(curl(self.url("/e/x", self.http1_port)).status, 200)

    def test_http2_codec_refuses_http1(self):
        r = curl(self.url("/e/x", self.h2_port))
        self.assertNotEqual(r.status, 200)
        r = curl(self.url("/e/x", self.h2_port), "--http2-prior-knowledge")
        self.assertEqual(r.status, 200)

    def test_nghttp_multiplexes_on_one_connection(self):
        urls = [self.url("/e/%d" % i) for i in range(20)]
        cp = subprocess.run(["nghttp", "-n", "-s", "-m", "1"] + urls, capture_output=True,
                            timeout=30)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(len([r for r in self.echo.requests if r["path"].startswith("/e/")]), 20)
        self.assertEqual(self.proxy.stat("http.auto.downstream_cx_http2_total"), 1)
        self.assertEqual(self.proxy.stat("http.auto.downstream_rq_2xx"), 20)

    def test_h2load_without_errors(self):
        cp = subprocess.run(["h2load", "-n", "2000", "-c", "4", "-m", "10", self.url("/direct")],
                            capture_output=True, timeout=60)
        out = cp.stdout.decode()
        self.assertIn("2000 succeeded, 0 failed, 0 errored", out, out)
        cp = subprocess.run(["h2load", "-n", "400", "-c", "4", "-m", "10", self.url("/e/load")],
                            capture_output=True, timeout=60)
        out = cp.stdout.decode()
        self.assertIn("400 succeeded, 0 failed, 0 errored", out, out)
        self.assertIn("400 2xx", out)
        self.assertEqual(self.proxy.stat("http.auto.downstream_cx_http2_total"), 8)

    # -- bodies and headers

    def test_bodies_both_ways(self):
        body = det_bytes(3 * 1024 * 1024 + 7)
        c = self.h2()
        # Content-Length given: forwarded with it.
        sid = c.request("/post/a", "POST", headers=[("content-length", str(len(body)))], body=body)
        r = c.response(sid)
        self.assertEqual(r["headers"][":status"], "200")
        rec = json.loads(bytes(r["data"]))
        self.assertEqual(rec["body_sha256"], sha256(body))
        self.assertEqual(dict(rec["headers"]).get("content-length"), str(len(body)))
        # No Content-Length: forwarded chunked.
        sid = c.request("/post/b", "POST", body=body)
        rec = json.loads(bytes(c.response(sid)["data"]))
        self.assertEqual(rec["body_sha256"], sha256(body))
        self.assertEqual(dict(rec["headers"]).get("transfer-encoding"), "chunked")
        # A large response.
        n = 4 * 1024 * 1024
        sid = c.request("/bytes/%d" % n)
        r = c.response(sid)
        self.assertEqual(r["headers"][":status"], "200")
        self.assertEqual(r["headers"]["content-length"], str(n))
        self.assertEqual(sha256(bytes(r["data"])), sha256(det_bytes(n)))

    def test_curl_upload_and_head(self):
        body = det_bytes(200000)
        path = os.path.join(self.proxy.dir, "upload.bin")
        with open(path, "wb") as f:
            f.write(body)
        r = curl(self.url("/post/up"), "--http2-prior-knowledge", "--data-binary", "@" + path)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["body_sha256"], sha256(body))
        r = curl(self.url("/bytes/1000"), "--http2-prior-knowledge", "-I")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers.get("content-length"), "1000")
        self.assertEqual(r.info.get("size_download"), 0)

    def test_cookies_joined_and_authority_is_host(self):
        c = self.h2()
        sid = c.request("/e/c", headers=[("cookie", "a=1"), ("cookie", "b=2")],
                        authority="svc.example:8080")
        rec = json.loads(bytes(c.response(sid)["data"]))
        hdrs = rec["headers"]
        self.assertEqual([v for k, v in hdrs if k == "cookie"], ["a=1; b=2"])
        self.assertEqual(dict(hdrs)["host"], "svc.example:8080")

    def test_connection_specific_response_headers_dropped(self):
        c = self.h2()
        sid = c.request("/e/hop")
        r = c.response(sid)
        self.assertEqual(r["headers"][":status"], "200")
        for name in ("connection", "keep-alive", "transfer-encoding"):
            self.assertNotIn(name, r["headers"])

    def test_local_replies(self):
        c = self.h2()
        sid = c.request("/nowhere-routed")
        r = c.response(sid)
        # "/" exact and prefixes above: an unmatched path is a 404 from rpx.
        self.assertEqual(r["headers"][":status"], "404")
        sid = c.request("/none")
        r = c.response(sid)
        self.assertEqual(r["headers"][":status"], "503")

    # -- flow control

    def test_client_that_does_not_read_bounds_rpx_memory(self):
        def rss_kb():
            with open("/proc/%d/status" % self.proxy.proc.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
            return 0
        before = rss_kb()
        c = self.h2(window=65535)
        c.auto_ack = False  # never opens its windows
        n = 48 * 1024 * 1024
        sid = c.request("/bytes/%d" % n)
        c.wait(lambda: len(c.responses[sid]["data"]) >= 65535 - 16384)
        # The upstream has had time to send all it could (rpx stops reading it at the stream's
        # buffer limit); rpx must not be holding the 48 MiB.
        time.sleep(1.0)
        self.assertLess(rss_kb() - before, 24 * 1024)
        self.assertLessEqual(len(c.responses[sid]["data"]), 65535)
        # Opening the windows lets the rest through.
        c.auto_ack = True
        c.conn.increment_flow_control_window(n)
        c.conn.increment_flow_control_window(n, stream_id=sid)
        c.flush()
        r = c.response(sid)
        self.assertTrue(r["ended"])
        self.assertEqual(len(r["data"]), n)

    # -- TLS

    def test_alpn_h2_over_tls(self):
        pki = TestPki()
        self.addCleanup(pki.cleanup)
        cert = pki.cert("h2", ["DNS:h2.example.com"])
        port, port1 = free_port(), free_port()
        vh = virtual_host("all", ["*"], [route(prefix="/", cluster="echo")])
        tls_l = http_listener("tls", port, [vh])
        tls_l["filter_chains"][0]["transport_socket"] = downstream_tls([cert],
                                                                       alpn=["h2", "http/1.1"])
        tls1 = http_listener("tls1", port1, [vh], hcm_extra={"codec_type": "HTTP1"})
        tls1["filter_chains"][0]["transport_socket"] = downstream_tls([cert],
                                                                      alpn=["h2", "http/1.1"])
        proxy = self.start_rpx(bootstrap([tls_l, tls1], [cluster("echo", self.echo.port)]))
        for p, version in ((port, "2"), (port1, "1.1")):
            r = curl("https://h2.example.com:%d/tls" % p, "--http2", "--cacert", pki.ca,
                     "--resolve", "h2.example.com:%d:127.0.0.1" % p)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.info.get("http_version"), version)
            self.assertEqual(dict(self.echo.requests[-1]["headers"])["x-forwarded-proto"],
                             "https")
        self.assertEqual(proxy.stat("http.tls.downstream_cx_http2_total"), 1)

    # -- drain

    def test_drain_sends_goaway_and_finishes_open_streams(self):
        # nghttp (nghttp2's client) keeps serving its open streams after a GOAWAY, as browsers do.
        proc = subprocess.Popen(["nghttp", "-v", self.url("/slow/1")], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        wait_until(lambda: any(r["path"] == "/slow/1" for r in self.echo.requests),
                   timeout=WAIT, what="the slow request upstream")
        status, _ = self.proxy.admin("POST", "/drain_listeners?graceful")
        self.assertEqual(status, 200)
        out, _ = proc.communicate(timeout=30)
        out = out.decode("utf-8", "replace")
        self.assertEqual(proc.returncode, 0, out)
        self.assertIn("recv GOAWAY frame", out)
        sid = re.search(r"send HEADERS frame <[^>]*stream_id=(\d+)>", out).group(1)
        self.assertIn("last_stream_id=%s, error_code=NO_ERROR" % sid, out)
        self.assertIn(":status: 200", out)
        self.assertIn('"path": "/slow/1"', out)  # the echo's body: the stream finished
        self.assertGreaterEqual(self.proxy.stat("http.auto.http2.goaway_sent"), 1)

    # -- gRPC

    @unittest.skipUnless(grpc_available(), "python3-grpcio is not installed")
    def test_grpc_client_reads_local_replies_as_grpc_status(self):
        import grpc
        channel = grpc.insecure_channel("127.0.0.1:%d" % self.port)
        self.addCleanup(channel.close)
        call = channel.unary_unary("/none.Service/Method",
                                   request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        with self.assertRaises(grpc.RpcError) as cm:
            call(b"\x00", timeout=WAIT)
        # No endpoint: a 503 from rpx, which a gRPC client reads as UNAVAILABLE.
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertTrue(cm.exception.details())
        call = channel.unary_unary("/other.Service/Method",
                                   request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        with self.assertRaises(grpc.RpcError) as cm:
            call(b"\x00", timeout=WAIT)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)  # 404: no route

    # -- hardening

    def test_malformed_request_ends_connection_by_default(self):
        c = self.h2(validate=False)
        c.request("/e/x", headers=[("X-Upper", "1")])  # uppercase names are malformed in h2
        c.wait(lambda: c.goaway is not None or c.closed)
        if c.goaway is not None:
            self.assertEqual(c.goaway.error_code, 1)  # PROTOCOL_ERROR
        self.assertFalse(any(r["path"] == "/e/x" for r in self.echo.requests))
        self.assertGreaterEqual(self.proxy.stat("http.auto.http2.rx_messaging_error"), 1)

    def test_malformed_request_resets_only_its_stream_when_configured(self):
        port = free_port()
        vh = virtual_host("all", ["*"], [route(prefix="/", cluster="echo")])
        l = http_listener("lenient", port, [vh], hcm_extra={"http2_protocol_options": {
            "override_stream_error_on_invalid_http_message": True}})
        self.start_rpx(bootstrap([l], [cluster("echo", self.echo.port)]))
        c = self.h2(port, validate=False)
        bad = c.request("/bad", headers=[("connection", "keep-alive")])
        r = c.response(bad)
        self.assertIsNotNone(r["reset"])
        good = c.request("/good")
        self.assertEqual(c.response(good)["headers"][":status"], "200")
        self.assertFalse(any(r["path"] == "/bad" for r in self.echo.requests))

    def test_content_length_disagreeing_with_data_is_not_forwarded_whole(self):
        c = self.h2(validate=False)
        sid = c.request("/post/cl", "POST", headers=[("content-length", "10")],
                        body=b"x" * 20)
        c.wait(lambda: c.responses[sid]["reset"] is not None or c.goaway is not None or
               c.closed)
        done = [r for r in self.echo.requests if r["path"] == "/post/cl"]
        for rec in done:
            self.assertNotEqual(rec["body_length"], 20)

    def test_oversized_header_list_gets_431(self):
        c = self.h2(self.h2_port)  # max_request_headers_kb: 8
        sid = c.request("/e/big", headers=[("x-big-%d" % i, "v" * 1000) for i in range(12)])
        r = c.response(sid)
        self.assertEqual(r["headers"][":status"], "431")
        self.assertFalse(any(r["path"] == "/e/big" for r in self.echo.requests))
        sid = c.request("/e/small")
        self.assertEqual(c.response(sid)["headers"][":status"], "200")

    def test_rapid_reset_is_bounded(self):
        c = self.h2()
        for i in range(3000):
            sid = c.conn.get_next_available_stream_id()
            c.conn.send_headers(sid, [(":method", "GET"), (":path", "/direct"),
                                      (":scheme", "http"), (":authority", "x")])
            c.conn.reset_stream(sid)
            if i % 100 == 99:
                try:
                    c.flush()
                except OSError:
                    break
        try:
            c.flush()
            c.wait(lambda: c.goaway is not None or c.closed)
        except (OSError, AssertionError):
            pass
        self.assertTrue(c.goaway is not None or c.closed)
        # rpx is fine: a new connection is served.
        self.assertEqual(curl(self.url("/direct"), "--http2-prior-knowledge").status, 200)

    def test_ping_flood_closes_connection(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=WAIT)
        self.addCleanup(sock.close)
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
        ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + b"12345678"
        sock.sendall(preface)
        # Never reads: PING ACKs pile up until max_outbound_control_frames ends it.
        sock.settimeout(2.0)
        closed = False
        try:
            for _ in range(200):
                sock.sendall(ping * 100)
        except OSError:
            closed = True
        if not closed:
            sock.settimeout(WAIT)
            try:
                while sock.recv(65536):
                    pass
                closed = True
            except OSError:
                closed = True
        self.assertTrue(closed)
        self.assertGreaterEqual(self.proxy.stat("http.auto.http2.outbound_control_flood") +
                                self.proxy.stat("http.auto.downstream_cx_protocol_error"), 1)


if __name__ == "__main__":
    unittest.main()
