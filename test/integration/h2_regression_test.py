"""Runs every HTTP/2 protocol regression case in test/regression/h2 against the real rpx binary.

Each case is one Python file (one attack or edge case, kept forever) with a docstring saying what
it proves and a run(t) function; it becomes its own test method here, named after its file. `t`
is the test case: it starts rpx with an echo upstream and gives the cases their vocabulary
(a scripted client, raw frames, "the connection must end", "nothing was forwarded")."""

import importlib.util
import os
import socket
import struct
import unittest

from harness import (H2Client, IntegrationTestCase, bootstrap, cluster, curl, free_port,
                     http_listener, route, virtual_host, wait_until)

HERE = os.path.dirname(os.path.abspath(__file__))
WAIT = 10.0


def cases_dir():
    for d in (os.path.join(HERE, "..", "regression", "h2"),
              os.path.join(os.environ.get("TEST_SRCDIR", ""), "rpx", "test", "regression", "h2")):
        if os.path.isdir(d):
            return d
    raise RuntimeError("test/regression/h2 not found")


class H2RegressionTest(IntegrationTestCase):

    def setUp(self):
        self.echo = self.start_echo()
        self.port = free_port()
        self.lenient_port = free_port()
        vh = virtual_host("all", ["*"], [route(prefix="/direct", direct_response=(200, "ok\n")),
                                         route(prefix="/", cluster="echo")])
        common = {"stream_idle_timeout": "1s"}
        lenient = dict(common, http2_protocol_options={
            "override_stream_error_on_invalid_http_message": True})
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("main", self.port, [vh], hcm_extra=common),
             http_listener("lenient", self.lenient_port, [vh], hcm_extra=lenient)],
            [cluster("echo", self.echo.port)]))

    # -- the cases' vocabulary

    def h2(self, port=None, **kwargs):
        c = H2Client(port or self.port, **kwargs)
        self.addCleanup(c.close)
        return c

    @staticmethod
    def request(path, method="GET"):
        return [(":method", method), (":path", path), (":scheme", "http"),
                (":authority", "example")]

    @staticmethod
    def frame(ftype, flags, sid, payload=b""):
        return (struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) +
                struct.pack(">I", sid) + payload)

    def send(self, c):
        """Flushes what the client's state machine queued; False once rpx has closed."""
        try:
            c.flush()
            return True
        except OSError:
            return False

    def send_raw(self, c, data):
        try:
            c.sock.sendall(data)
            return True
        except OSError:
            return False

    def _frames(self, c, what):
        """Yields (type, flags, stream id, payload) for each frame rpx sends until the socket's
        EOF (or a reset). Read raw: the cases send what the client's state machine would not,
        so it cannot follow them."""
        c.sock.settimeout(WAIT)
        buf = b""
        while True:
            try:
                data = c.sock.recv(65536)
            except ConnectionResetError:
                return
            except socket.timeout:
                raise AssertionError("%s within %ss" % (what, WAIT))
            if not data:
                return
            buf += data
            while len(buf) >= 9:
                length = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + length:
                    break
                sid = struct.unpack(">I", buf[5:9])[0] & 0x7FFFFFFF
                yield buf[3], buf[4], sid, buf[9:9 + length]
                buf = buf[9 + length:]

    def _drain_until_end(self, c):
        """Reads until rpx ends the connection: returns the GOAWAY error code or None (a close
        without one). A graceful GOAWAY may be followed by streams finishing; an error one ends
        it."""
        for ftype, _, _, payload in self._frames(c, "rpx did not end the connection"):
            if ftype == 7:  # GOAWAY
                code = struct.unpack(">I", payload[4:8])[0]
                if code != 0:
                    return code
        return None

    def expect_connection_end(self, c, error_code=None):
        code = self._drain_until_end(c)
        if error_code is not None and code is not None:
            self.assertEqual(code, error_code)

    def flood(self, c, frame, count):
        """Sends `count` copies of `frame` without reading; rpx must end the connection."""
        c.sock.settimeout(2.0)
        ended = False
        try:
            for _ in range(count // 100):
                c.sock.sendall(frame * 100)
        except OSError:
            ended = True
        if not ended:
            self._drain_until_end(c)

    def status_or_end(self, c, sid):
        """For a stream opened with raw frames (the client's state machine does not know it):
        the :status rpx answered it with, "reset" for an RST_STREAM, or None if rpx ended the
        connection."""
        for ftype, _, fsid, payload in self._frames(c, "no answer on stream %d" % sid):
            if ftype == 1:  # HEADERS: rpx sends no padding or priority
                fields = dict(c.conn.decoder.decode(payload))
                if fsid == sid:
                    status = fields.get(b":status", fields.get(":status"))
                    return status.decode() if isinstance(status, bytes) else status
            elif ftype == 3 and fsid == sid:
                return "reset"
            elif ftype == 7:
                return None
        return None

    def rss_kib(self):
        with open("/proc/%d/status" % self.proxy.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def forwarded(self, path):
        return [r for r in self.echo.requests if r["path"] == path]

    def assert_not_forwarded(self, path):
        self.assertEqual(self.forwarded(path), [], "%s reached the upstream" % path)

    def assert_serving(self):
        """rpx still serves a new client (h2 and HTTP/1.1)."""
        r = curl("http://127.0.0.1:%d/direct" % self.port, "--http2-prior-knowledge")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(curl("http://127.0.0.1:%d/direct" % self.port).status, 200)


def _add_cases():
    for name in sorted(os.listdir(cases_dir())):
        if not name.endswith(".py"):
            continue
        path = os.path.join(cases_dir(), name)
        spec = importlib.util.spec_from_file_location("h2case_" + name[:-3], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

        def test(self, module=module):
            module.run(self)
        test.__doc__ = (module.__doc__ or "").strip().split("\n")[0]
        setattr(H2RegressionTest, "test_" + name[:-3], test)


_add_cases()

if __name__ == "__main__":
    unittest.main()
