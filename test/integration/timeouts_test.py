"""Downstream timeouts and limits of the HTTP connection manager: idle_timeout,
request_headers_timeout, stream_idle_timeout, max_requests_per_connection."""

import time
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, curl_multi, free_port,
                     http_listener, http_request, route, virtual_host)


class DownstreamTimeoutsTest(IntegrationTestCase):

    def setUp(self):
        self.echo = self.start_echo("E")
        self.port = free_port()
        hcm = {
            "common_http_protocol_options": {"idle_timeout": "0.4s",
                                             "max_requests_per_connection": 3},
            "request_headers_timeout": "0.3s",
            "stream_idle_timeout": "0.5s",
        }
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port,
                           [virtual_host("all", ["*"], [route("/", "E", timeout="5s")])],
                           hcm_extra=hcm)],
            [cluster("E", self.echo.port)]), concurrency=1)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def test_idle_connection_is_closed(self):
        c = self.raw_client(self.port)
        start = time.monotonic()
        self.assertTrue(c.at_eof(3.0), "rpx did not close an idle connection")
        self.assertGreaterEqual(time.monotonic() - start, 0.35)
        self.assertEqual(self.proxy.stat("http.ingress.downstream_cx_idle_timeout"), 1)

    def test_idle_after_a_request(self):
        c = self.raw_client(self.port)
        c.send(http_request("GET", "/one"))
        self.assertEqual(c.read_response().status, 200)
        self.assertTrue(c.at_eof(3.0), "rpx did not close the idle keep-alive connection")

    def test_request_headers_timeout_408(self):
        c = self.raw_client(self.port)
        c.send(b"GET / HTTP/1.1\r\nHo")  # and nothing more
        start = time.monotonic()
        r = c.read_response()
        self.assertEqual(r.status, 408)
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertTrue(c.at_eof())
        self.assertEqual(self.proxy.stat("http.ingress.downstream_cx_headers_timeout"), 1)
        self.assertEqual(self.echo.request_count(), 0)

    def test_stream_idle_timeout_on_stalled_body(self):
        c = self.raw_client(self.port)
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")  # 7 bytes short
        start = time.monotonic()
        r = c.read_response()
        self.assertEqual(r.status, 408)
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertTrue(c.at_eof())
        self.assertEqual(self.proxy.stat("http.ingress.downstream_rq_idle_timeout"), 1)

    def test_stream_idle_timeout_on_silent_upstream(self):
        start = time.monotonic()
        r = curl(self.url("/slow/2"))
        self.assertEqual(r.status, 408)
        self.assertLess(time.monotonic() - start, 1.8)

    def test_max_requests_per_connection(self):
        responses, _ = curl_multi([self.url("/r/%d" % i) for i in range(5)])
        self.assertEqual([r.status for r in responses], [200] * 5)
        self.assertEqual(responses[2].headers.get("connection"), "close")
        self.assertEqual([r.num_connects for r in responses], [1, 0, 0, 1, 0])
        self.assertEqual(self.proxy.stat("http.ingress.downstream_cx_total"), 2)


if __name__ == "__main__":
    unittest.main()
