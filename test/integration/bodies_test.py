"""Bodies: large uploads and downloads in every framing, HEAD, 204/304, HTTP/1.0, 100-continue."""

import hashlib
import os
import socket
import threading
import time
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, curl_multi, det_bytes,
                     free_port, http_listener, http_request, make_tmpdir, remove_tmpdir, route,
                     sha256, virtual_host)

BIG = 8 * 1024 * 1024
HUGE = 64 * 1024 * 1024


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS for pid %d" % pid)


class BodiesTest(IntegrationTestCase):
    extra_args = ()  # rpx flags (UnbatchedBodiesTest runs the same cases with others)

    @classmethod
    def setUpClass(cls):
        cls.tmp = make_tmpdir("rpx-it-bodies-")
        cls.big_path = os.path.join(cls.tmp, "big.bin")
        data = os.urandom(BIG)
        with open(cls.big_path, "wb") as f:
            f.write(data)
        cls.big_sha = hashlib.sha256(data).hexdigest()

    @classmethod
    def tearDownClass(cls):
        remove_tmpdir(cls.tmp)

    def setUp(self):
        self.echo = self.start_echo("E")
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port,
                           [virtual_host("all", ["*"], [route("/", "E", timeout="20s")])])],
            [cluster("E", self.echo.port)]), extra_args=self.extra_args)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    # -- uploads
    def test_post_8mib_content_length(self):
        r = curl(self.url("/upload"), "--data-binary", "@" + self.big_path,
                 "-H", "Content-Type: application/octet-stream")
        self.assertEqual(r.status, 200, r)
        rec = r.json()
        self.assertEqual(rec["body_length"], BIG)
        self.assertEqual(rec["body_sha256"], self.big_sha)
        self.assertIn(["content-length", str(BIG)], rec["headers"])

    def test_post_8mib_chunked(self):
        r = curl(self.url("/upload"), "--data-binary", "@" + self.big_path,
                 "-H", "Transfer-Encoding: chunked", "-H", "Content-Type: application/octet-stream")
        self.assertEqual(r.status, 200, r)
        rec = r.json()
        self.assertEqual(rec["body_length"], BIG)
        self.assertEqual(rec["body_sha256"], self.big_sha)
        names = [k for k, _ in rec["headers"]]
        self.assertNotIn("content-length", names)
        self.assertIn(["transfer-encoding", "chunked"], rec["headers"])

    def test_expect_100_continue(self):
        # curl sends Expect: 100-continue for a large upload; make it explicit anyway.
        r = curl(self.url("/upload"), "--data-binary", "@" + self.big_path,
                 "-H", "Expect: 100-continue", "--expect100-timeout", "10")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.interim, [100], r.raw_head)
        rec = r.json()
        self.assertEqual(rec["body_sha256"], self.big_sha)
        # rpx answers the expectation itself; the upstream does not see it.
        self.assertNotIn("expect", [k for k, _ in rec["headers"]])

    def test_expect_100_continue_small_chunked(self):
        r = curl(self.url("/upload"), "--data-binary", "hello", "-H", "Expect: 100-continue",
                 "-H", "Transfer-Encoding: chunked", "--expect100-timeout", "10")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.interim, [100])
        self.assertEqual(r.json()["body_sha256"], sha256(b"hello"))

    def test_empty_post(self):
        r = curl(self.url("/empty"), "-X", "POST", "--data-binary", "")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["body_length"], 0)
        self.assertEqual(r.json()["method"], "POST")

    def test_several_posts_on_one_connection(self):
        urls = [self.url("/p/%d" % i) for i in range(5)]
        responses, _ = curl_multi(urls, "--data-binary", "@" + self.big_path)
        for i, r in enumerate(responses):
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["body_sha256"], self.big_sha)
            self.assertEqual(r.json()["path"], "/p/%d" % i)
        self.assertEqual([r.num_connects for r in responses], [1, 0, 0, 0, 0])

    # -- downloads
    def test_download_8mib_content_length(self):
        r = curl(self.url("/bytes/%d" % BIG))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers.get("content-length"), str(BIG))
        self.assertEqual(len(r.body), BIG)
        self.assertEqual(sha256(r.body), sha256(det_bytes(BIG)))
        # A body this large goes socket to socket with splice(2).
        self.assertEqual(self.proxy.stat("cluster.E.upstream_rq_body_spliced"), 1)

    def test_small_bodies_are_not_spliced(self):
        r = curl(self.url("/bytes/%d" % 20000))
        self.assertEqual(sha256(r.body), sha256(det_bytes(20000)))
        self.assertEqual(self.proxy.stat("cluster.E.upstream_rq_body_spliced"), 0)

    def test_slow_reader_gets_the_whole_response_before_close(self):
        # Connection: close with a client that reads slowly through a tiny receive window: when the
        # response ends, rpx still holds part of it; it must finish writing it before closing,
        # not drop it when the connection's owner goes away.
        import socket as socketlib
        size = BIG
        s = socketlib.socket(socketlib.AF_INET, socketlib.SOCK_STREAM)
        s.setsockopt(socketlib.SOL_SOCKET, socketlib.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect(("127.0.0.1", self.port))
        s.sendall(b"GET /bytes/%d HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n" % size)
        data = bytearray()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            chunk = s.recv(16384)
            if not chunk:
                break
            data += chunk
            time.sleep(0.001)
        s.close()
        head, _, body = bytes(data).partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 200"), head[:100])
        self.assertEqual(len(body), size)
        self.assertEqual(sha256(body), sha256(det_bytes(size)))

    def test_download_8mib_chunked(self):
        r = curl(self.url("/chunked/%d" % BIG))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers.get("transfer-encoding"), "chunked")
        self.assertNotIn("content-length", r.headers)
        self.assertEqual(len(r.body), BIG)
        self.assertEqual(sha256(r.body), sha256(det_bytes(BIG)))

    def test_download_close_delimited_upstream(self):
        # The upstream ends its body by closing; rpx must re-frame it for a keep-alive client.
        n = 3 * 1024 * 1024 + 17
        responses, _ = curl_multi([self.url("/eof/%d" % n), self.url("/after")])
        r = responses[0]
        self.assertEqual(r.status, 200)
        self.assertEqual(len(r.body), n)
        self.assertEqual(sha256(r.body), sha256(det_bytes(n)))
        self.assertEqual(responses[1].status, 200)
        self.assertEqual(responses[1].json()["path"], "/after")

    # -- bodiless responses
    def test_head(self):
        r = curl(self.url("/bytes/1000"), "-I")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers.get("content-length"), "1000")
        self.assertEqual(r.info.get("size_download"), 0)  # (with -I curl writes the head to -o)
        # Framing: after a HEAD, the next response on the connection parses cleanly.
        c = self.raw_client(self.port)
        c.send(http_request("HEAD", "/bytes/1000") + http_request("HEAD", "/chunked/5000") +
               http_request("GET", "/bytes/10"))
        h1 = c.read_response("HEAD")
        self.assertEqual((h1.status, h1.headers.get("content-length")), (200, "1000"))
        h2 = c.read_response("HEAD")
        self.assertEqual(h2.status, 200)
        g = c.read_response("GET")
        self.assertEqual((g.status, g.body), (200, det_bytes(10)))

    def test_204_has_no_body(self):
        c = self.raw_client(self.port)
        c.send(http_request("GET", "/status/204"))
        r = c.read_response()
        self.assertEqual(r.status, 204)
        self.assertNotIn("transfer-encoding", r.headers)
        self.assertIn(r.headers.get("content-length", "0"), ("0",))
        # If rpx had written any body bytes (e.g. a chunked terminator), this would not parse.
        c.send(http_request("GET", "/next"))
        r2 = c.read_response()
        self.assertEqual(r2.status, 200)
        self.assertEqual(r2.json()["path"], "/next")
        r3 = curl(self.url("/status/204"))
        self.assertEqual((r3.status, r3.body), (204, b""))

    def test_304_has_no_body(self):
        c = self.raw_client(self.port)
        c.send(http_request("GET", "/status/304", headers=[("If-None-Match", '"v1"')]))
        r = c.read_response()
        self.assertEqual(r.status, 304)
        self.assertNotIn("transfer-encoding", r.headers)
        self.assertEqual(r.headers.get("etag"), '"v1"')
        c.send(http_request("GET", "/next"))
        r2 = c.read_response()
        self.assertEqual(r2.status, 200)
        self.assertEqual(r2.json()["path"], "/next")

    # -- HTTP/1.0 clients
    def test_http10_client_content_length(self):
        n = 1000003
        r = curl(self.url("/bytes/%d" % n), "-0")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.info.get("http_version"), "1.1")  # rpx answers as HTTP/1.1
        self.assertEqual(sha256(r.body), sha256(det_bytes(n)))
        self.assertEqual(r.headers.get("content-length"), str(n))

    def test_http10_client_chunked_upstream(self):
        # HTTP/1.0 has no chunked encoding: rpx must send the body close-delimited.
        n = 2 * 1024 * 1024 + 5
        r = curl(self.url("/chunked/%d" % n), "-0")
        self.assertEqual(r.status, 200)
        self.assertNotIn("transfer-encoding", r.headers)
        self.assertEqual(len(r.body), n)
        self.assertEqual(sha256(r.body), sha256(det_bytes(n)))
        self.assertEqual(r.exitcode, 0)

    def test_http10_raw_request(self):
        c = self.raw_client(self.port)
        c.send(b"GET /chunked/70000 HTTP/1.0\r\nHost: x\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 200)
        self.assertNotIn("transfer-encoding", r.headers)
        self.assertEqual(r.body, det_bytes(70000))  # read until close
        self.assertTrue(c.at_eof())

    def test_http10_post(self):
        r = curl(self.url("/up10"), "-0", "--data-binary", "@" + self.big_path)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["body_sha256"], self.big_sha)


    # -- flow control: rpx must not buffer a whole body when one side is slow
    def test_slow_reader_download_memory_bounded(self):
        base = rss_mib(self.proxy.proc.pid)
        c = self.raw_client(self.port, timeout=30)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        c.send(http_request("GET", "/bytes/%d" % HUGE))
        time.sleep(1.5)  # read nothing while the upstream pushes 64 MiB
        grown = rss_mib(self.proxy.proc.pid) - base
        r = c.read_response()
        self.assertEqual(r.status, 200)
        self.assertEqual(len(r.body), HUGE)
        self.assertTrue(r.body == det_bytes(HUGE), "downloaded body differs")
        self.assertLess(grown, 32, "rpx grew by %.1f MiB while its client did not read" % grown)

    def test_slow_upstream_upload_memory_bounded(self):
        base = rss_mib(self.proxy.proc.pid)
        c = self.raw_client(self.port, timeout=30)
        body = b"u" * HUGE
        done = threading.Event()

        def send():
            try:
                c.send(http_request("POST", "/slowread/2", headers=[("Content-Length", str(HUGE))]))
                view = memoryview(body)
                for i in range(0, HUGE, 1 << 20):
                    c.sock.sendall(view[i:i + (1 << 20)])
            finally:
                done.set()

        t = threading.Thread(target=send, daemon=True)
        t.start()
        time.sleep(1.5)  # the upstream reads nothing for 2 s
        grown = rss_mib(self.proxy.proc.pid) - base
        self.assertTrue(done.wait(30), "upload did not finish")
        r = c.read_response()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["body_length"], HUGE)
        self.assertEqual(r.json()["body_sha256"], sha256(body))
        self.assertLess(grown, 32, "rpx grew by %.1f MiB while its upstream did not read" % grown)



class SplicedBodyKeepsTheStreamAliveTest(IntegrationTestCase):
    """A spliced body never passes through the codec's EncodeData, yet each piece the splicer
    moves must count as stream activity: a client that keeps reading, slowly, for longer than
    the stream idle timeout gets the whole body."""

    def test_slow_but_steady_reader_outlasts_the_idle_timeout(self):
        import socket as socketlib
        echo = self.start_echo("E")
        port = free_port()
        proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", port,
                           [virtual_host("all", ["*"], [route("/", "E", timeout="0s")])],
                           hcm_extra={"stream_idle_timeout": "1s"})],
            [cluster("E", echo.port)]), concurrency=1)
        s = socketlib.socket(socketlib.AF_INET, socketlib.SOCK_STREAM)
        s.setsockopt(socketlib.SOL_SOCKET, socketlib.SO_RCVBUF, 65536)
        s.settimeout(30)
        s.connect(("127.0.0.1", port))
        self.addCleanup(s.close)
        s.sendall(b"GET /bytes/%d HTTP/1.1\r\nHost: a\r\n\r\n" % BIG)
        data = bytearray()
        start = time.monotonic()
        head_len = None
        while head_len is None or len(data) < head_len + BIG:
            chunk = s.recv(65536)
            self.assertTrue(chunk, "rpx closed the stream after %d bytes" % len(data))
            data += chunk
            if head_len is None and b"\r\n\r\n" in data:
                head_len = data.index(b"\r\n\r\n") + 4
            time.sleep(0.02)  # ~3 MiB/s: the body takes several idle timeouts to arrive
        self.assertGreater(time.monotonic() - start, 1.5, "the reader was not slow enough")
        self.assertEqual(sha256(bytes(data[head_len:])), sha256(det_bytes(BIG)))
        self.assertEqual(proxy.stat("cluster.E.upstream_rq_body_spliced"), 1)
        self.assertEqual(proxy.stat("http.ingress.downstream_rq_idle_timeout"), 0)


class UnbatchedBodiesTest(BodiesTest):
    """Every case above again with each socket read by recv(2) and written by send(2), one by
    one, as where the kernel refuses io_uring: the path the batched reads and sends replace."""
    extra_args = ("--disable-read-batching", "--disable-write-batching")


class CopiedBodiesTest(IntegrationTestCase):
    """With --disable-splice, large bodies take the buffered copy path, intact."""

    def test_download_8mib_copied(self):
        echo = self.start_echo("E")
        port = free_port()
        proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", port,
                           [virtual_host("all", ["*"], [route("/", "E", timeout="20s")])])],
            [cluster("E", echo.port)]), extra_args=("--disable-splice",))
        r = curl("http://127.0.0.1:%d/bytes/%d" % (port, BIG))
        self.assertEqual(sha256(r.body), sha256(det_bytes(BIG)))
        self.assertEqual(proxy.stat("cluster.E.upstream_rq_body_spliced"), 0)


if __name__ == "__main__":
    unittest.main()
