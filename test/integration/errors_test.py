"""Error paths: circuit-breaker overflow, route timeout, upstream resets, garbage, unreachable
upstreams, connect timeouts, truncated responses, malformed requests. After a local error reply the
client connection must stay usable."""

import threading
import time
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, curl_multi, free_port,
                     http_listener, route, virtual_host, wait_until)


class ErrorsTest(IntegrationTestCase):

    def setUp(self):
        self.echo = self.start_echo("E")
        self.limited = self.start_echo("L")
        self.reset = self.start_reset()
        self.rst = self.start_reset(rst=True)
        self.garbage = self.start_garbage()
        self.blackhole = self.start_blackhole()
        self.down_port = free_port()  # nothing listens here
        self.port = free_port()
        routes = [
            route("/limited/", "limited", timeout="10s"),
            route("/onereq/", "onereq", timeout="10s"),
            route("/timeout/", "E", timeout="0.5s", prefix_rewrite="/"),
            route("/reset/", "reset"),
            route("/rst/", "rst"),
            route("/garbage/", "garbage"),
            route("/down/", "down"),
            route("/blackhole/", "blackhole"),
            route("/", "E", timeout="10s"),
        ]
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port, [virtual_host("all", ["*"], routes)])],
            [
                cluster("E", self.echo.port),
                cluster("limited", self.limited.port, max_connections=1, max_pending_requests=1),
                cluster("onereq", self.limited.port, max_requests=1),
                cluster("reset", self.reset.port),
                cluster("rst", self.rst.port),
                cluster("garbage", self.garbage.port),
                cluster("down", self.down_port, connect_timeout="2s"),
                cluster("blackhole", self.blackhole.port, connect_timeout="0.25s"),
            ]))

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def background(self, path):
        box = {}

        def run():
            box["response"] = curl(self.url(path))
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t, box

    def assertQuiescent(self):
        """Once every request is answered, no request or pending slot may stay accounted for."""
        def active():
            stats = self.proxy.stats()
            return {k: v for k, v in stats.items()
                    if v and (k.endswith(".upstream_rq_active") or
                              k.endswith(".upstream_rq_pending_active") or
                              k.endswith(".downstream_rq_active") or
                              k.endswith(".rq_pending_open_count"))}
        try:
            wait_until(lambda: not active(), timeout=3, what="no active requests")
        except AssertionError:
            self.fail("requests still accounted as active after all were answered: %s" % active())

    def assertConnectionReused(self, responses):
        self.assertEqual([r.num_connects for r in responses], [1] + [0] * (len(responses) - 1),
                         "the client connection was not kept after the error reply")
        self.assertEqual(self.proxy.stat("http.ingress.downstream_cx_total"), 1)

    # -- circuit breakers
    def test_pending_overflow_503(self):
        # One connection (busy with a slow request) and one pending slot (taken): the third
        # request overflows at once.
        t1, b1 = self.background("/limited/slow/2")
        wait_until(lambda: self.limited.in_flight == 1, what="the slow request at the upstream")
        t2, b2 = self.background("/limited/second")
        self.proxy.wait_stat("cluster.limited.upstream_rq_pending_active", lambda v: v == 1)
        start = time.monotonic()
        r = curl(self.url("/limited/third"))
        elapsed = time.monotonic() - start
        self.assertEqual(r.status, 503, r)
        self.assertTrue(r.body.startswith(b"upstream overflow: "), r.body)
        self.assertLess(elapsed, 1.0, "the overflow reply was not immediate")
        self.assertGreaterEqual(self.proxy.stat("cluster.limited.upstream_rq_pending_overflow"), 1)
        t1.join(10)
        t2.join(10)
        self.assertEqual(b1["response"].status, 200)
        self.assertEqual(b2["response"].status, 200)
        self.assertEqual(b2["response"].json()["path"], "/limited/second")
        self.assertEqual(self.limited.peak_open, 1)
        self.assertEqual(self.limited.request_count(), 2)
        self.assertQuiescent()

    def test_max_requests_overflow_503(self):
        t1, b1 = self.background("/onereq/slow/1.5")
        wait_until(lambda: self.limited.in_flight == 1, what="the slow request at the upstream")
        r = curl(self.url("/onereq/second"))
        self.assertEqual(r.status, 503, r)
        self.assertTrue(r.body.startswith(b"upstream overflow: "), r.body)
        self.assertGreaterEqual(self.proxy.stat("cluster.onereq.upstream_rq_pending_overflow"), 1)
        t1.join(10)
        self.assertEqual(b1["response"].status, 200)
        # The slot is free again.
        self.assertEqual(curl(self.url("/onereq/third")).status, 200)
        self.assertQuiescent()

    # -- timeouts

    def test_route_timeout_504_and_connection_reused(self):
        start = time.monotonic()
        responses, _ = curl_multi([self.url("/timeout/slow/3"), self.url("/after")])
        elapsed = time.monotonic() - start
        r = responses[0]
        self.assertEqual(r.status, 504, r)
        self.assertEqual(r.body, b"upstream request timeout\n")
        self.assertGreaterEqual(r.info["time_total"], 0.45)
        self.assertLess(r.info["time_total"], 2.0)
        self.assertLess(elapsed, 2.9, "the route timeout did not cut the slow request short")
        self.assertEqual(responses[1].status, 200)
        self.assertEqual(responses[1].json()["path"], "/after")
        self.assertConnectionReused(responses)
        self.assertEqual(self.proxy.stat("cluster.E.upstream_rq_timeout"), 1)
        self.assertQuiescent()

    def test_route_timeout_after_response_started_resets(self):
        # The head (and some body) came through: rpx cannot send a 504, it must reset.
        start = time.monotonic()
        r = curl(self.url("/timeout/stall/3"))
        elapsed = time.monotonic() - start
        self.assertEqual(r.status, 200)
        self.assertNotEqual(r.exitcode, 0, "curl got a complete response from a stalled upstream")
        self.assertLess(elapsed, 2.5)
        self.assertEqual(self.proxy.stat("cluster.E.upstream_rq_timeout"), 1)
        self.assertQuiescent()

    def test_connect_timeout_503(self):
        responses, _ = curl_multi([self.url("/blackhole/x"), self.url("/after")])
        r = responses[0]
        self.assertEqual(r.status, 503, r)
        self.assertEqual(r.body, b"upstream connect timeout\n")
        self.assertLess(r.info["time_total"], 1.5)
        self.assertEqual(responses[1].status, 200)
        self.assertConnectionReused(responses)
        stats = self.proxy.stats()
        self.assertEqual(stats["cluster.blackhole.upstream_cx_connect_timeout"], 1)
        self.assertEqual(stats["cluster.blackhole.upstream_cx_connect_fail"], 1)
        self.assertQuiescent()

    # -- upstream failures

    def test_upstream_reset_502_and_connection_reused(self):
        responses, _ = curl_multi([self.url("/reset/x"), self.url("/after")])
        r = responses[0]
        self.assertEqual(r.status, 502, r)
        self.assertEqual(r.body, b"upstream closed the connection before responding\n")
        self.assertEqual(self.reset.requests, 1)
        self.assertEqual(responses[1].status, 200)
        self.assertEqual(responses[1].json()["path"], "/after")
        self.assertConnectionReused(responses)
        self.assertEqual(self.proxy.stat("cluster.reset.upstream_cx_destroy_remote"), 1)
        self.assertQuiescent()

    def test_upstream_rst_502_and_connection_reused(self):
        responses, _ = curl_multi([self.url("/rst/x"), self.url("/after")])
        self.assertEqual(responses[0].status, 502, responses[0])
        self.assertEqual(self.rst.requests, 1)
        self.assertEqual(responses[1].status, 200)
        self.assertConnectionReused(responses)
        self.assertQuiescent()

    def test_upstream_garbage_502_and_connection_reused(self):
        responses, _ = curl_multi([self.url("/garbage/x"), self.url("/after")])
        r = responses[0]
        self.assertEqual(r.status, 502, r)
        self.assertTrue(r.body.startswith(b"upstream sent a malformed response ("), r.body)
        self.assertTrue(r.body.endswith(b")\n"), r.body)
        self.assertEqual(responses[1].status, 200)
        self.assertConnectionReused(responses)
        self.assertEqual(self.proxy.stat("http.ingress.downstream_rq_5xx"), 1)
        self.assertQuiescent()

    def test_unreachable_upstream_503_and_connection_reused(self):
        responses, _ = curl_multi([self.url("/down/x"), self.url("/down/y"), self.url("/after")])
        for r in responses[:2]:
            self.assertEqual(r.status, 503, r)
            self.assertTrue(r.body.startswith(b"upstream connect error: "), r.body)
        self.assertEqual(responses[2].status, 200)
        self.assertConnectionReused(responses)
        stats = self.proxy.stats()
        self.assertEqual(stats["cluster.down.upstream_cx_connect_fail"], 2)
        self.assertEqual(stats["cluster.down.upstream_cx_active"], 0)
        self.assertQuiescent()

    def test_truncated_upstream_response_resets_client(self):
        # The upstream sends its head and half the body, then closes. rpx has already forwarded
        # (or buffered for the client) the head and some body: the client must get them, then a
        # close, i.e. a visibly truncated response. An empty reply instead would look like a
        # dead keep-alive connection, which clients retry silently. Timing decides how much rpx
        # has flushed, so try several times.
        outcomes = []
        for _ in range(20):
            r = curl(self.url("/truncate/100000"))
            outcomes.append((r.status, r.exitcode, len(r.body), r.info.get("errormsg")))
        bad = [o for o in outcomes if o[0] != 200 or o[1] == 0 or o[2] >= 100000]
        if bad:
            self.fail("%d of 20 truncated responses were not delivered as a 200 with a short "
                      "body; e.g. (status, curl exit, body bytes, error): %s" % (len(bad), bad[:3]))
        # rpx is fine afterwards.
        self.assertEqual(curl(self.url("/fine")).status, 200)
        self.assertQuiescent()

    def test_several_errors_in_a_row_on_one_connection(self):
        urls = [self.url(p) for p in ("/reset/1", "/garbage/2", "/down/3", "/timeout/slow/2",
                                      "/rst/5", "/ok")]
        responses, _ = curl_multi(urls)
        self.assertEqual([r.status for r in responses], [502, 502, 503, 504, 502, 200])
        self.assertConnectionReused(responses)

    # -- malformed requests

    def test_malformed_request_400_and_close(self):
        c = self.raw_client(self.port)
        c.send(b"THIS IS NOT HTTP\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 400)
        self.assertEqual(r.headers.get("connection"), "close")
        self.assertTrue(c.at_eof())
        self.assertEqual(self.proxy.stat("http.ingress.downstream_cx_protocol_error"), 1)
        self.assertEqual(self.echo.request_count(), 0)

    def test_bad_content_length_400(self):
        c = self.raw_client(self.port)
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 400)
        self.assertTrue(c.at_eof())
        self.assertEqual(self.echo.request_count(), 0)


class PendingAbortTest(IntegrationTestCase):
    """A request waiting for a connection slot whose client goes away (one worker, so that only
    the pending-request accounting is under test)."""

    def setUp(self):
        self.limited = self.start_echo("L")
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port, [virtual_host("all", ["*"], [
                route("/", "limited", timeout="5s")])])],
            [cluster("limited", self.limited.port, max_connections=1, max_pending_requests=1)]),
            concurrency=1)

    url = ErrorsTest.url
    background = ErrorsTest.background

    def test_aborted_pending_request_releases_its_slot(self):
        # The single connection is busy; a second request waits for it, and its client goes away.
        t1, b1 = self.background("/limited/slow/1")
        wait_until(lambda: self.limited.in_flight == 1, what="the slow request at the upstream")
        c = self.raw_client(self.port)
        c.send(b"GET /limited/pending HTTP/1.1\r\nHost: x\r\n\r\n")
        self.proxy.wait_stat("cluster.limited.upstream_rq_pending_active", lambda v: v == 1)
        c.close()
        self.proxy.wait_stat("cluster.limited.upstream_rq_pending_active", lambda v: v == 0)
        t1.join(10)
        self.assertEqual(b1["response"].status, 200)
        # The aborted request never reached the upstream, and the pending slot is free again.
        responses, _ = curl_multi([self.url("/limited/after")])
        self.assertEqual(responses[0].status, 200, responses[0])
        self.assertEqual([r["path"] for r in self.limited.requests],
                         ["/limited/slow/1", "/limited/after"])
        ErrorsTest.assertQuiescent(self)
        ErrorsTest.assertQuiescent(self)


if __name__ == "__main__":
    unittest.main()
