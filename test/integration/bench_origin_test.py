"""bench/origin, the lean origin behind every proxy in bench/run.sh (ORIGIN=lean): its figures mean
something only if it answers as nginx would for the bench's requests: the same bytes, the same
header set, keep-alive and pipelining as HTTP/1.1 says, and a clear refusal of anything else."""

import os
import shutil
import socket
import subprocess
import time
import unittest

from harness import (IntegrationTestCase, curl, curl_multi, det_bytes, free_port, make_tmpdir,
                     origin_bin, remove_tmpdir, sha256)

SMALL = b"Hello from the bench origin!\n"
PAGE = b"<html><body>" + b"x" * 16000 + b"</body></html>\n"
BIG = det_bytes(4 << 20)  # over the origin's 256 KiB line: sent with sendfile


def read_response(s, head_only=False):
    """Reads one response from socket s; returns (status line, {lowercase name: value}, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("connection closed before a full head: %r" % data)
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    n = 0 if head_only else int(headers.get("content-length", "0"))
    while len(rest) < n:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("connection closed %d bytes into a %d-byte body" % (len(rest), n))
        rest += chunk
    return lines[0], headers, rest[:n], rest[n:]


class BenchOriginTest(IntegrationTestCase):

    def setUp(self):
        super().setUp()
        self.root = make_tmpdir("rpx-it-origin-")
        self.addCleanup(remove_tmpdir, self.root)
        for name, data in (("small.txt", SMALL), ("page.html", PAGE), ("big.bin", BIG)):
            with open(os.path.join(self.root, name), "wb") as f:
                f.write(data)
        os.mkdir(os.path.join(self.root, "subdir"))  # not a regular file: not served

    def start_origin(self, nports=1):
        ports = [free_port() for _ in range(nports)]
        proc = self.start_listening_process([origin_bin(), self.root] + [str(p) for p in ports],
                                            ports, "origin")
        return ports, proc

    def connect(self, port):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.addCleanup(s.close)
        return s

    def test_serves_every_file_byte_for_byte_on_every_port(self):
        ports, _ = self.start_origin(nports=3)
        for port in ports:
            for path, data, ctype in (("/small.txt", SMALL, "text/plain"),
                                      ("/page.html", PAGE, "text/html"),
                                      ("/big.bin", BIG, "application/octet-stream")):
                r = curl("http://127.0.0.1:%d%s" % (port, path))
                self.assertEqual(r.status, 200, (port, path))
                self.assertEqual(sha256(r.body), sha256(data), (port, path))
                self.assertEqual(r.headers["content-length"], str(len(data)))
                self.assertEqual(r.headers["content-type"], ctype)
                self.assertEqual(r.headers["connection"], "keep-alive")
                self.assertEqual(r.headers["accept-ranges"], "bytes")
                self.assertRegex(r.headers["etag"], r'^"[0-9a-f]+-%x"$' % len(data))
                self.assertTrue(r.headers["date"].endswith(" GMT"), r.headers)
                self.assertTrue(r.headers["last-modified"].endswith(" GMT"), r.headers)

    def test_keep_alive_serves_many_requests_on_one_connection(self):
        (port,), _ = self.start_origin()
        urls = ["http://127.0.0.1:%d/%s" % (port, ("small.txt", "big.bin", "page.html")[i % 3])
                for i in range(30)]
        responses, cp = curl_multi(urls)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual([len(r.body) for r in responses],
                         [(len(SMALL), len(BIG), len(PAGE))[i % 3] for i in range(30)])
        self.assertEqual(sum(r.num_connects for r in responses), 1)

    def test_head_sends_the_head_only(self):
        (port,), _ = self.start_origin()
        for path, data in (("/small.txt", SMALL), ("/big.bin", BIG)):
            s = self.connect(port)
            s.sendall(b"HEAD %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
            status, headers, _, _ = read_response(s, head_only=True)
            self.assertEqual(status, "HTTP/1.1 200 OK")
            self.assertEqual(headers["content-length"], str(len(data)))
            # Then a GET on the same connection: no stray body bytes came before its head.
            s.sendall(b"GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, body, extra = read_response(s)
            self.assertEqual((status, body, extra), ("HTTP/1.1 200 OK", SMALL, b""))

    def test_pipelined_requests_are_answered_in_order(self):
        (port,), _ = self.start_origin()
        s = self.connect(port)
        order = ["/page.html", "/small.txt", "/big.bin", "/small.txt", "/page.html?q=1"]
        s.sendall(b"".join(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % p.encode() for p in order))
        want = {"/page.html": PAGE, "/small.txt": SMALL, "/big.bin": BIG, "/page.html?q=1": PAGE}
        extra = b""
        for p in order:
            status, headers, body, extra = read_response(_Prefixed(s, extra))
            self.assertEqual(status, "HTTP/1.1 200 OK", p)
            self.assertEqual(sha256(body), sha256(want[p]), p)
        self.assertEqual(extra, b"")

    def test_connection_close_and_http10_close_after_the_response(self):
        (port,), _ = self.start_origin()
        for req in (b"GET /small.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"GET /small.txt HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, CLOSE\r\n\r\n",
                    b"GET /small.txt HTTP/1.0\r\n\r\n",
                    b"GET /big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"):
            s = self.connect(port)
            # A second request behind it must not be answered: the first one ends the connection.
            s.sendall(req + b"GET /page.html HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, body, extra = read_response(s)
            self.assertEqual(status, "HTTP/1.1 200 OK", req)
            self.assertEqual(headers["connection"], "close", req)
            self.assertIn(body, (SMALL, BIG))
            rest = extra
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                rest += chunk
            self.assertEqual(rest, b"", req)

    def test_http10_keep_alive_is_honoured(self):
        (port,), _ = self.start_origin()
        s = self.connect(port)
        for _ in range(3):
            s.sendall(b"GET /small.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            status, headers, body, _ = read_response(s)
            self.assertEqual((status, headers["connection"], body),
                             ("HTTP/1.1 200 OK", "keep-alive", SMALL))

    def test_bad_requests_get_a_named_status_and_a_close(self):
        (port,), proc = self.start_origin()
        cases = (
            (b"GET /nope.txt HTTP/1.1\r\nHost: x\r\n\r\n", "404 Not Found"),
            (b"GET /subdir HTTP/1.1\r\nHost: x\r\n\r\n", "404 Not Found"),
            (b"GET /../small.txt HTTP/1.1\r\nHost: x\r\n\r\n", "404 Not Found"),
            (b"POST /small.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
             "405 Method Not Allowed"),
            (b"GET /small.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
             "400 Bad Request"),
            (b"GET /small.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
             "400 Bad Request"),
            (b"GARBAGE\r\n\r\n", "400 Bad Request"),
            (b"GET /small.txt HTTP/2.0\r\nHost: x\r\n\r\n", "505 HTTP Version Not Supported"),
            (b"GET /small.txt HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n",
             "431 Request Header Fields Too Large"),
        )
        for req, want in cases:
            s = self.connect(port)
            s.sendall(req)
            status, headers, body, _ = read_response(s)
            self.assertEqual(status, "HTTP/1.1 " + want, req[:60])
            self.assertEqual(headers["connection"], "close", req[:60])
            self.assertEqual(body, (want + "\n").encode(), req[:60])
            try:
                self.assertEqual(s.recv(65536), b"", req[:60])
            except ConnectionResetError:
                pass  # unread request bytes (the 431 case) make close() send a reset: also closed
        # And it still serves afterwards.
        self.assertEqual(curl("http://127.0.0.1:%d/small.txt" % port).body, SMALL)
        self.assertIsNone(proc.poll())

    def test_slow_reader_of_a_sendfile_body_gets_all_of_it(self):
        (port,), proc = self.start_origin()
        s = self.connect(port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
        # While nothing is read the origin's sendfile comes back short and waits for EPOLLOUT;
        # meanwhile another client must still be served (one thread, nothing blocks).
        time.sleep(0.5)
        self.assertEqual(curl("http://127.0.0.1:%d/small.txt" % port).body, SMALL)
        extra = b""
        for _ in range(2):
            status, _, body, extra = read_response(_Prefixed(s, extra))
            self.assertEqual(status, "HTTP/1.1 200 OK")
            self.assertEqual(sha256(body), sha256(BIG))
        self.assertIsNone(proc.poll())

    @unittest.skipUnless(shutil.which("nginx") or os.access("/usr/sbin/nginx", os.X_OK),
                         "nginx not installed")
    def test_header_set_and_sizes_match_nginx(self):
        # The proxies parse and forward what the origin sends; for the lean origin to stand in
        # for nginx it must send the same header names, in the same order, with values of the
        # same length (only Server's value differs: it names the origin).
        (port,), _ = self.start_origin()
        nport = free_port()
        self.start_nginx("  server { listen 127.0.0.1:%d; root %s; }" % (nport, self.root), [nport])
        for path in ("/small.txt", "/page.html", "/big.bin"):
            for extra in ("", "Connection: close\r\n"):
                heads = []
                for p in (port, nport):
                    s = self.connect(p)
                    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (path, extra)).encode())
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = s.recv(65536)
                        self.assertTrue(chunk, "closed before the head")
                        data += chunk
                    lines = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
                    heads.append([(l.split(":", 1)[0].lower(),
                                   len(l.split(":", 1)[1]) if ":" in l else len(l))
                                  for l in lines])
                ours, theirs = heads
                self.assertEqual([n for n, _ in ours], [n for n, _ in theirs], (path, extra))
                self.assertEqual([x for x in ours if x[0] != "server"],
                                 [x for x in theirs if x[0] != "server"], (path, extra))

    def test_bad_arguments_name_what_is_wrong(self):
        missing = os.path.join(self.root, "missing")
        for args, rc, needle in (([], 2, b"usage: origin"), ([self.root], 2, b"usage: origin"),
                                 ([self.root, "0"], 2, b"'0' is not a port"),
                                 ([self.root, "http"], 2, b"'http' is not a port"),
                                 ([missing, "80"], 1, b"cannot open directory '%s'" %
                                  missing.encode())):
            cp = subprocess.run([origin_bin()] + args, capture_output=True, timeout=10)
            self.assertEqual(cp.returncode, rc, args)
            self.assertIn(needle, cp.stderr, args)

    def test_a_port_in_use_is_named(self):
        (port,), _ = self.start_origin()
        cp = subprocess.run([origin_bin(), self.root, str(port)], capture_output=True, timeout=10)
        self.assertEqual(cp.returncode, 1)
        self.assertIn(b"cannot listen on 127.0.0.1:%d" % port, cp.stderr)


class _Prefixed(object):
    """A socket whose first recv returns bytes already read past the previous response."""

    def __init__(self, s, prefix):
        self.s, self.prefix = s, prefix

    def recv(self, n):
        if self.prefix:
            p, self.prefix = self.prefix, b""
            return p
        return self.s.recv(n)


if __name__ == "__main__":
    unittest.main()
