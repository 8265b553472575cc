"""A 1 GiB response to a slow reader: rpx's memory stays bounded by its watermarks.

An upstream (a thread here) streams a 1 GiB Content-Length response generated on the fly: 16,384
blocks of 64 KiB, each the block's index (8 bytes, big-endian) followed by a fixed filler. The
client first stalls (reads nothing), then reads in small pieces, sampling rpx's VmRSS all the
while; then it reads the rest at full speed. rpx must stop reading from the upstream while the
client does not read (the upstream's sent-byte count stalls too), its RSS must stay far below the
body size, and the client must receive every block, in order, intact.
"""

import select
import socket
import struct
import threading
import time
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, free_port, http_listener, route,
                     virtual_host)

BLOCK = 64 * 1024
BODY = 1 << 30                   # 1 GiB, as the issue says
BLOCKS = BODY // BLOCK
FILLER = bytes((i * 31 + 7) % 256 for i in range(BLOCK - 8))
STALL_SECONDS = 3.0              # the client reads nothing
TRICKLE_SECONDS = 5.0            # then 4 KiB every 50 ms
TRICKLE_READ = 4096
RSS_BOUND_KIB = 64 * 1024        # rpx's RSS above its baseline while the client is slow
UPSTREAM_BOUND = 64 << 20        # bytes the upstream may get rid of while the client is slow
FAST_PHASE_LIMIT = 90.0          # seconds for the rest of the body


def _rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class StreamingUpstream(object):
    """Answers GET /big with the 1 GiB block stream and anything else with 'ok' (keep-alive)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.sent = 0            # body bytes handed to the kernel so far (the /big stream)
        self.finished = False
        self.error = None
        self.stopping = threading.Event()
        self.conns = []
        self.thread = threading.Thread(target=self._accept_loop, daemon=True, name="streaming")
        self.thread.start()

    def _accept_loop(self):
        self.sock.settimeout(0.1)
        while not self.stopping.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    piece = c.recv(65536)
                    if not piece:
                        return
                    buf += piece
                head, buf = buf.split(b"\r\n\r\n", 1)
                path = head.split(b" ")[1]
                if path != b"/big":
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    continue
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                          b"Content-Length: %d\r\n\r\n" % BODY)
                for i in range(BLOCKS):
                    if self.stopping.is_set():
                        return
                    c.sendall(struct.pack(">Q", i) + FILLER)
                    self.sent += BLOCK
                self.finished = True
        except OSError as e:
            if not self.stopping.is_set():
                self.error = repr(e)
        finally:
            c.close()

    def stop(self):
        self.stopping.set()
        self.sock.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(5)


class RssSampler(object):
    def __init__(self, pid, interval=0.05):
        self.pid = pid
        self.samples = []  # (monotonic time, KiB)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self.thread.start()

    def _run(self, interval):
        while not self.stopping.is_set():
            try:
                self.samples.append((time.monotonic(), _rss_kib(self.pid)))
            except OSError:
                return
            self.stopping.wait(interval)

    def max_between(self, t0, t1):
        xs = [k for t, k in self.samples if t0 <= t <= t1]
        return max(xs) if xs else 0

    def stop(self):
        self.stopping.set()
        self.thread.join(5)


class SlowReaderTest(IntegrationTestCase):

    def test_1gib_response_to_a_slow_reader(self):
        # rpx's default: a large Content-Length body is spliced (upstream socket -> pipe ->
        # client socket); the pipe is the buffer.
        self.run_slow_reader([], "splice")

    def test_1gib_response_to_a_slow_reader_without_splice(self):
        # Through userspace buffers: the downstream write buffer's watermarks
        # (per_connection_buffer_limit_bytes, 1 MiB) pause reading from the upstream.
        self.run_slow_reader(["--disable-splice"], "no splice")

    def run_slow_reader(self, extra_args, what):
        up = StreamingUpstream()
        self.addCleanup(up.stop)
        port = free_port()
        proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", port,
                           [virtual_host("all", ["*"], [route("/", "S", timeout="0s")])],
                           hcm_extra={"stream_idle_timeout": "60s"})],
            [cluster("S", up.port)]), concurrency=1, extra_args=extra_args)
        pid = proxy.proc.pid

        # Baseline: rpx after one small proxied request on the same path.
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.addCleanup(c.close)
        c.sendall(b"GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while not got.endswith(b"ok"):
            piece = c.recv(4096)
            self.assertTrue(piece, "connection closed before the small response")
            got += piece
        time.sleep(0.3)
        baseline = _rss_kib(pid)
        sampler = RssSampler(pid)
        self.addCleanup(sampler.stop)

        # The big request; read the response head only.
        t_start = time.monotonic()
        c.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            piece = c.recv(1)
            self.assertTrue(piece, "connection closed before the response head")
            head += piece
        self.assertTrue(head.startswith(b"HTTP/1.1 200 "), head)
        self.assertIn(b"content-length: %d" % BODY, head.lower())

        # Slow phase: stall, then trickle.
        received = bytearray()  # body bytes read during the slow phase (few)
        time.sleep(STALL_SECONDS)
        sent_after_stall = up.sent
        t_trickle = time.monotonic()
        while time.monotonic() - t_trickle < TRICKLE_SECONDS:
            received += c.recv(TRICKLE_READ)
            time.sleep(0.05)
        t_slow_end = time.monotonic()
        sent_after_slow = up.sent
        slow_max = sampler.max_between(t_start, t_slow_end)

        # Fast phase: read and check every block.
        c.setblocking(False)
        block = bytearray(BLOCK)
        view = memoryview(block)
        filled = len(received)
        self.assertLess(filled, BLOCK * 16)
        # Blocks already (partly) received in the slow phase.
        index = 0
        pos = 0
        bad = []
        while filled - pos >= BLOCK:
            self._check_block(received[pos:pos + BLOCK], index, bad)
            index += 1
            pos += BLOCK
        rest = received[pos:]
        view[:len(rest)] = rest
        have = len(rest)
        total = len(received)
        deadline = time.monotonic() + FAST_PHASE_LIMIT
        poller = select.poll()
        poller.register(c.fileno(), select.POLLIN)
        while total < BODY:
            if time.monotonic() > deadline:
                self.fail("only %d of %d bytes after %.0fs of fast reading" %
                          (total, BODY, FAST_PHASE_LIMIT))
            try:
                n = c.recv_into(view[have:])
            except BlockingIOError:
                poller.poll(1000)
                continue
            if n == 0:
                self.fail("rpx closed the connection after %d of %d body bytes (upstream sent "
                          "%d, error %s)" % (total, BODY, up.sent, up.error))
            have += n
            total += n
            if have == BLOCK:
                self._check_block(block, index, bad)
                index += 1
                have = 0
        t_end = time.monotonic()
        sampler.stop()
        fast_max = sampler.max_between(t_slow_end, t_end)

        self.assertFalse(bad, "corrupt or out-of-order blocks (first few): %s" % bad[:5])
        self.assertEqual(index, BLOCKS)
        self.assertEqual(total, BODY)
        self.assertIsNone(up.error)
        # Keep-alive: the connection is still usable after 1 GiB.
        c.setblocking(True)
        c.settimeout(10)
        c.sendall(b"GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while not got.endswith(b"ok"):
            piece = c.recv(4096)
            self.assertTrue(piece, "connection closed after the big response")
            got += piece
        self.assertTrue(got.startswith(b"HTTP/1.1 200 "), got[:100])

        msg = ("rpx RSS baseline %d KiB; max %d KiB (+%d) while the client was slow, max %d KiB "
               "(+%d) while it read at full speed; the upstream had sent %.1f MiB after the "
               "%.0fs stall and %.1f MiB after the %.0fs trickle (client read %d KiB); 1 GiB read "
               "in %.1fs (%.0f MiB/s)" % (
                   baseline, slow_max, slow_max - baseline, fast_max, fast_max - baseline,
                   sent_after_stall / 2.0 ** 20, STALL_SECONDS, sent_after_slow / 2.0 ** 20,
                   TRICKLE_SECONDS, len(received) // 1024, t_end - t_slow_end,
                   (BODY - len(received)) / 2.0 ** 20 / (t_end - t_slow_end)))
        spliced = proxy.stats().get("cluster.S.upstream_rq_body_spliced")
        msg += "; upstream_rq_body_spliced %s" % spliced
        if "--disable-splice" in extra_args:
            self.assertEqual(spliced, 0, "the body was spliced despite --disable-splice")
        print("\nslow_reader (%s): %s" % (what, msg))
        self.assertGreater(len(sampler.samples), 20)
        # Memory stays bounded while the client is slow...
        self.assertLess(slow_max - baseline, RSS_BOUND_KIB, msg)
        # ...because rpx stopped reading from the upstream (backpressure reached it)...
        self.assertLess(sent_after_slow, UPSTREAM_BOUND, msg)
        self.assertLess(sent_after_slow - sent_after_stall, UPSTREAM_BOUND // 4, msg)
        # ...and at full speed too.
        self.assertLess(fast_max - baseline, RSS_BOUND_KIB, msg)

    @staticmethod
    def _check_block(data, index, bad):
        if len(bad) >= 5:
            return
        got = struct.unpack(">Q", bytes(data[:8]))[0]
        if got != index:
            bad.append("block %d: index %d" % (index, got))
        elif data[8:] != FILLER:
            bad.append("block %d: filler differs" % index)


if __name__ == "__main__":
    unittest.main()
