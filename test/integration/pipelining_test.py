"""HTTP/1.1 pipelining over a raw socket: requests sent in one write are answered in order."""

import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, free_port, http_listener,
                     http_request, route, sha256, virtual_host)


class PipeliningTest(IntegrationTestCase):

    def setUp(self):
        self.echo = self.start_echo("E")
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port, [
                virtual_host("app", ["app"], [route("/", "E", timeout="10s")]),
            ])],
            [cluster("E", self.echo.port)]))

    def pipeline(self, requests, methods=None):
        c = self.raw_client(self.port, timeout=15)
        c.send(b"".join(requests))
        return c, [c.read_response(m) for m in (methods or ["GET"] * len(requests))]

    def test_three_pipelined_gets_in_order(self):
        reqs = [http_request("GET", "/p/%d" % i, host="app") for i in (1, 2, 3)]
        c, responses = self.pipeline(reqs)
        self.assertEqual([r.status for r in responses], [200, 200, 200])
        self.assertEqual([r.json()["path"] for r in responses], ["/p/1", "/p/2", "/p/3"])
        self.assertEqual(self.proxy.stat("http.ingress.downstream_cx_total"), 1)
        self.assertEqual(self.proxy.stat("http.ingress.downstream_rq_total"), 3)
        # The connection stays open for more.
        c.send(http_request("GET", "/p/4", host="app"))
        self.assertEqual(c.read_response().json()["path"], "/p/4")

    def test_slow_first_request_keeps_order(self):
        reqs = [http_request("GET", "/slow/0.5", host="app"),
                http_request("GET", "/fast/2", host="app"),
                http_request("GET", "/fast/3", host="app")]
        _, responses = self.pipeline(reqs)
        self.assertEqual([r.json()["path"] for r in responses], ["/slow/0.5", "/fast/2", "/fast/3"])

    def test_local_reply_between_proxied_requests(self):
        reqs = [http_request("GET", "/p/1", host="app"),
                http_request("GET", "/p/2", host="unknown.example"),
                http_request("GET", "/p/3", host="app")]
        _, responses = self.pipeline(reqs)
        self.assertEqual([r.status for r in responses], [200, 404, 200])
        self.assertEqual(responses[1].body, b"")
        self.assertEqual(responses[0].json()["path"], "/p/1")
        self.assertEqual(responses[2].json()["path"], "/p/3")

    def test_pipelined_requests_with_bodies(self):
        chunked = (b"POST /c HTTP/1.1\r\nHost: app\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        reqs = [http_request("POST", "/a", host="app", body=b"x" * 100000),
                chunked,
                http_request("HEAD", "/bytes/10", host="app"),
                http_request("GET", "/g", host="app")]
        _, responses = self.pipeline(reqs, ["POST", "POST", "HEAD", "GET"])
        self.assertEqual([r.status for r in responses], [200, 200, 200, 200])
        self.assertEqual(responses[0].json()["body_sha256"], sha256(b"x" * 100000))
        self.assertEqual(responses[1].json()["body_sha256"], sha256(b"hello world"))
        self.assertEqual(responses[2].headers.get("content-length"), "10")
        self.assertEqual(responses[3].json()["path"], "/g")

    def test_connection_close_on_last_pipelined_request(self):
        reqs = [http_request("GET", "/p/1", host="app"),
                http_request("GET", "/p/2", host="app"),
                http_request("GET", "/p/3", host="app", headers=[("Connection", "close")])]
        c, responses = self.pipeline(reqs)
        self.assertEqual([r.json()["path"] for r in responses], ["/p/1", "/p/2", "/p/3"])
        self.assertEqual(responses[2].headers.get("connection"), "close")
        self.assertTrue(c.at_eof(), "rpx kept the connection open after Connection: close")

    def test_many_pipelined_requests_beyond_buffer_limit(self):
        # ~300 requests of ~400 bytes: more than rpx buffers at once (64 KiB), so it must stop
        # and resume reading without losing or reordering requests.
        pad = "p" * 300
        n = 300
        reqs = [http_request("GET", "/many/%d" % i, host="app", headers=[("X-Pad", pad)])
                for i in range(n)]
        c = self.raw_client(self.port, timeout=30)
        c.send(b"".join(reqs))
        paths = [c.read_response().json()["path"] for _ in range(n)]
        self.assertEqual(paths, ["/many/%d" % i for i in range(n)])
        self.assertEqual(self.proxy.stat("http.ingress.downstream_rq_2xx"), n)


if __name__ == "__main__":
    unittest.main()
