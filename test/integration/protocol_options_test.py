"""common_http_protocol_options of the HTTP connection manager on both codecs (HTTP/1.1 by curl
and a raw socket, HTTP/2 by python3-h2 and curl): max_stream_duration (408, or a reset once the
response started), max_connection_duration (drained: Connection: close on HTTP/1.1, GOAWAY on
h2) and headers_with_underscores_action (REJECT_REQUEST: 400 on HTTP/1.1, a reset on h2;
DROP_HEADER: forwarded without them). Each is checked by what the client sees and by Envoy's
stat for it; nothing waits on a clock but "until it happens", bounded."""

import re
import socket
import unittest

from harness import (H2Client, IntegrationTestCase, bootstrap, cluster, curl, free_port,
                     http_listener, route, virtual_host, wait_until)

WAIT = 10.0


class ProtocolOptionsTest(IntegrationTestCase):

    def start_with(self, common):
        self.echo = self.start_echo()
        self.port = free_port()
        vh = virtual_host("all", ["*"], [route(prefix="/", cluster="echo")])
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("opts", self.port, [vh],
                           hcm_extra={"common_http_protocol_options": common})],
            [cluster("echo", self.echo.port)]))

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def h2(self):
        c = H2Client(self.port)
        self.addCleanup(c.close)
        return c

    @staticmethod
    def request(path):
        return [(":method", "GET"), (":path", path), (":scheme", "http"),
                (":authority", "example")]

    def test_max_stream_duration(self):
        self.start_with({"max_stream_duration": "0.5s"})
        for args in ((), ("--http2-prior-knowledge",)):
            r = curl(self.url("/slow/5"), *args)
            self.assertEqual(r.status, 408, r)
            self.assertIn(b"duration", r.body)
        self.assertEqual(self.proxy.stat("http.opts.downstream_rq_max_duration_reached"), 2)
        # A stream that ends in time is not touched.
        self.assertEqual(curl(self.url("/fast")).status, 200)
        self.assertEqual(curl(self.url("/fast"), "--http2-prior-knowledge").status, 200)

    def test_max_connection_duration_http1(self):
        self.start_with({"max_connection_duration": "0.5s"})
        s = socket.create_connection(("127.0.0.1", self.port), timeout=WAIT)
        self.addCleanup(s.close)
        s.sendall(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while b"\r\n\r\n" not in first:
            first += s.recv(65536)
        self.assertIn(b" 200 ", first.split(b"\r\n")[0])
        head, _, body = first.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        while len(body) < length:  # the whole first response, so what follows is new
            body += s.recv(65536)
        self.assertEqual(len(body), length)
        # Once the duration has passed the idle connection is closed (drained).
        self.proxy.wait_stat("http.opts.downstream_cx_max_duration_reached", lambda v: v >= 1,
                             timeout=WAIT)
        s.settimeout(WAIT)
        rest = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                rest += chunk
        except ConnectionResetError:
            pass
        self.assertEqual(rest, b"")  # closed, with no second response

    def test_max_connection_duration_h2_sends_goaway(self):
        self.start_with({"max_connection_duration": "0.5s"})
        c = self.h2()
        sid = c.request("/one")
        self.assertEqual(c.response(sid)["headers"][":status"], "200")
        c.wait(lambda: c.goaway is not None or c.closed)
        self.assertIsNotNone(c.goaway)
        self.assertEqual(c.goaway.error_code, 0)
        self.assertEqual(c.goaway.last_stream_id, sid)
        self.assertEqual(self.proxy.stat("http.opts.downstream_cx_max_duration_reached"), 1)

    def test_underscores_rejected(self):
        self.start_with({"headers_with_underscores_action": "REJECT_REQUEST"})
        r = curl(self.url("/u1"), "-H", "x_bad: 1")
        self.assertEqual(r.status, 400, r)
        r = curl(self.url("/u2"), "-H", "x-good: 1")
        self.assertEqual(r.status, 200, r)
        c = self.h2()
        sid = c.request("/u3", headers=[("x_bad", "1")])
        self.assertIsNotNone(c.response(sid)["reset"])
        sid = c.request("/u4")
        self.assertEqual(c.response(sid)["headers"][":status"], "200")
        paths = [r["path"] for r in self.echo.requests]
        self.assertNotIn("/u1", paths)
        self.assertNotIn("/u3", paths)
        self.assertEqual(
            self.proxy.stat("http.opts.requests_rejected_with_underscores_in_headers"), 2)

    def test_underscores_dropped(self):
        self.start_with({"headers_with_underscores_action": "DROP_HEADER"})
        r = curl(self.url("/d1"), "-H", "x_bad: 1", "-H", "x-good: 1")
        self.assertEqual(r.status, 200, r)
        hdrs = dict(r.json()["headers"])
        self.assertNotIn("x_bad", hdrs)
        self.assertEqual(hdrs["x-good"], "1")
        r = curl(self.url("/d2"), "--http2-prior-knowledge", "-H", "x_bad: 1")
        self.assertEqual(r.status, 200, r)
        self.assertNotIn("x_bad", dict(r.json()["headers"]))
        self.assertEqual(self.proxy.stat("http.opts.dropped_headers_with_underscores"), 2)

    def test_upstream_durations_refused(self):
        # Downstream only for now: a cluster's are refused by name rather than ignored.
        for field in ("max_connection_duration", "max_stream_duration"):
            self.assert_cluster_refused(
                {"common_http_protocol_options": {field: "1s"}},
                "common_http_protocol_options.%s" % field, "upstream")

    def test_extended_connect_to_upstreams_refused(self):
        # allow_connect is a connection manager's (WebSocket from h2 clients); rpx does not send
        # extended CONNECT to an h2 upstream, so a cluster asking for it is refused by name.
        self.assert_cluster_refused(
            {"typed_extension_protocol_options": {
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                    "@type": "type.googleapis.com/"
                             "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                    "explicit_http_config": {"http2_protocol_options": {"allow_connect": True}}}}},
            "http2_protocol_options.allow_connect", "extended CONNECT to upstreams")

    def test_bad_h2_options_refused_with_their_field(self):
        vh = virtual_host("all", ["*"], [route(prefix="/", direct_response=(200, "x"))])
        for opts, field in (({"initial_stream_window_size": 100}, "initial_stream_window_size"),
                            ({"max_concurrent_streams": 0}, "max_concurrent_streams"),
                            ({"allow_metadata": True}, "allow_metadata")):
            self.assert_refused(bootstrap([http_listener("l", free_port(), [vh], hcm_extra={
                "http2_protocol_options": opts})], []),
                "http2_protocol_options.%s" % field)


if __name__ == "__main__":
    unittest.main()
