"""Unusual but legal (or recoverable) upstream behaviour: interim responses, HTTP/1.0 upstreams,
stray bytes, oversized heads, early responses, clients that give up mid-request."""

import os
import socket
import threading
import time
import unittest

from harness import (IntegrationTestCase, RawUpstream, bootstrap, cluster, curl, curl_multi,
                     free_port, http_listener, http_request, make_tmpdir, remove_tmpdir, route,
                     sha256, virtual_host, wait_until)


class UpstreamQuirksTest(IntegrationTestCase):

    def setUp(self):
        self.echo = self.start_echo("E")
        self.early_hints = self.start_garbage(
            b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: 1\r\n\r\nok")
        self.http10 = self.start_garbage(b"HTTP/1.0 200 OK\r\nX-Old: 1\r\n\r\nold-style body",
                                         close_after_reply=True)
        self.stray = self.start_garbage(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA")
        self.big_head = self.start_garbage(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 100000 +
                                           b"\r\nContent-Length: 2\r\n\r\nok")
        # Answers at once and never reads the body, so rpx cannot have taken all of it: a
        # draining upstream let rpx read a 4 MiB body whole before the 413 arrived, and then
        # keeping the client connection was right (a CI run saw exactly that).
        self.early_413_release = threading.Event()
        self.addCleanup(self.early_413_release.set)

        def early_413(conn, head, rest):
            conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\n\r\nbig!")
            self.early_413_release.wait(20)

        self.early_413 = RawUpstream("script", serve=early_413)
        self.addCleanup(self.early_413.stop)
        self.cookies = self.start_garbage(b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\n"
                                          b"Set-Cookie: b=2\r\nContent-Length: 0\r\n\r\n")
        # A large response that comes late: too big to read for nothing once its client is gone.
        self.big_late_closed = threading.Event()

        def big_late(conn, head, rest):
            time.sleep(0.3)
            n = 1024 * 1024
            conn.settimeout(5.0)
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n + b"x" * n)
                while conn.recv(65536):
                    pass
                self.big_late_closed.set()  # EOF: rpx closed
            except socket.timeout:
                pass  # still open after 5 s: the test fails
            except OSError:
                self.big_late_closed.set()  # reset by rpx's close

        self.big_late = RawUpstream("script", serve=big_late)
        self.addCleanup(self.big_late.stop)
        self.port = free_port()
        routes = [route("/big-late", "big_late"), route("/cookies", "cookies"), route("/early-hints", "early_hints"), route("/http10", "http10"),
                  route("/stray", "stray"), route("/big-head", "big_head"),
                  route("/413", "early_413"), route("/", "E", timeout="10s")]
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port, [virtual_host("all", ["*"], routes)])],
            [cluster("E", self.echo.port), cluster("cookies", self.cookies.port),
             cluster("early_hints", self.early_hints.port),
             cluster("http10", self.http10.port), cluster("stray", self.stray.port),
             cluster("big_head", self.big_head.port), cluster("early_413", self.early_413.port),
             cluster("big_late", self.big_late.port)]),
            concurrency=1)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def abandon(self, path, reached_upstream):
        """Sends GET `path` and hangs up once `reached_upstream()` says the upstream has it."""
        c = self.raw_client(self.port)
        c.send(http_request("GET", path))
        wait_until(reached_upstream, what="the request at the upstream")
        c.close()

    def test_repeated_response_headers_kept_apart(self):
        r = curl(self.url("/cookies"))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header_values("set-cookie"), ["a=1", "b=2"])

    def test_interim_response_is_skipped(self):
        responses, _ = curl_multi([self.url("/early-hints"), self.url("/after")])
        r = responses[0]
        self.assertEqual((r.status, r.body), (200, b"ok"))
        self.assertEqual(r.headers.get("x-final"), "1")
        self.assertNotIn("link", r.headers, "a header of the 103 leaked into the final response")
        self.assertEqual(responses[1].json()["path"], "/after")
        self.assertEqual([x.num_connects for x in responses], [1, 0])

    def test_http10_upstream_close_delimited(self):
        responses, _ = curl_multi([self.url("/http10"), self.url("/after")])
        r = responses[0]
        self.assertEqual((r.status, r.body), (200, b"old-style body"))
        self.assertEqual(r.headers.get("x-old"), "1")
        self.assertEqual(r.exitcode, 0)
        self.assertEqual(responses[1].status, 200)
        self.assertEqual([x.num_connects for x in responses], [1, 0])

    def test_stray_bytes_after_response(self):
        # Bytes after a complete response: forward the response, never reuse that connection.
        responses, _ = curl_multi([self.url("/stray"), self.url("/stray")])
        self.assertEqual([(r.status, r.body) for r in responses], [(200, b"ok"), (200, b"ok")])
        self.assertEqual(self.stray.accepted, 2)

    def test_oversized_upstream_head_is_502(self):
        responses, _ = curl_multi([self.url("/big-head"), self.url("/after")])
        r = responses[0]
        self.assertEqual(r.status, 502)
        self.assertTrue(r.body.startswith(b"upstream sent a malformed response ("), r.body)
        self.assertEqual(responses[1].status, 200)

    def test_oversized_upstream_head_message_names_the_response(self):
        # The detail is about the upstream's *response* headers.
        r = curl(self.url("/big-head"))
        self.assertEqual(r.status, 502)
        self.assertNotIn(b"request headers", r.body, r.body)

    def test_early_response_before_request_body(self):
        tmp = make_tmpdir()
        self.addCleanup(remove_tmpdir, tmp)
        path = os.path.join(tmp, "body")
        # More than the socket buffers between curl and a non-reading upstream can hold: the 413
        # only reaches curl if rpx forwards it without waiting for the body to end.
        n = 16 * 1024 * 1024
        with open(path, "wb") as f:
            f.write(b"b" * n)
        responses, _ = curl_multi([self.url("/413"), self.url("/after")],
                                  "--data-binary", "@" + path, "-H", "Expect:")
        self.assertEqual((responses[0].status, responses[0].body), (413, b"big!"))
        self.assertEqual(responses[0].headers.get("connection"), "close")
        # The rest of the first body was not read: a new connection for the next request.
        self.assertEqual(responses[1].status, 200)
        self.assertEqual(responses[1].num_connects, 1)
        self.assertEqual(responses[1].json()["body_sha256"], sha256(b"b" * n))

    def test_client_abort_does_not_poison_the_pool(self):
        self.abandon("/slow/0.6?aborted", lambda: self.echo.in_flight == 1)
        self.proxy.wait_stat("cluster.E.upstream_rq_reset", lambda v: v == 1)
        # The next requests must get their own responses, never the aborted one's.
        for i in range(3):
            r = curl(self.url("/next/%d" % i))
            self.assertEqual(r.status, 200)
            self.assertEqual(r.json()["path"], "/next/%d" % i)
        time.sleep(0.8)  # the aborted response would arrive now
        r = curl(self.url("/last"))
        self.assertEqual(r.json()["path"], "/last")
        self.assertEqual(self.proxy.stat("http.ingress.downstream_rq_rx_reset"), 1)

    def test_client_abort_keeps_the_upstream_connection_for_a_small_response(self):
        # The response of an abandoned request is read and dropped, and the connection is
        # reused, instead of one reconnect per client that hangs up.
        self.abandon("/slow/0.3?aborted", lambda: self.echo.in_flight == 1)
        self.proxy.wait_stat("cluster.E.upstream_cx_kept_after_reset", lambda v: v == 1)
        r = curl(self.url("/after"))
        self.assertEqual((r.status, r.json()["path"]), (200, "/after"))
        self.assertEqual(self.proxy.stat("cluster.E.upstream_rq_reset"), 1)
        self.assertEqual(self.proxy.stat("cluster.E.upstream_cx_total"), 1)

    def test_client_abort_closes_the_upstream_connection_for_a_large_response(self):
        self.abandon("/big-late", lambda: self.big_late.request_count() == 1)
        self.proxy.wait_stat("cluster.big_late.upstream_rq_reset", lambda v: v == 1)
        self.assertTrue(self.big_late_closed.wait(5.0), "rpx kept reading a 1 MiB abandoned body")
        self.assertEqual(self.proxy.stat("cluster.big_late.upstream_cx_kept_after_reset"), 0)


if __name__ == "__main__":
    unittest.main()
