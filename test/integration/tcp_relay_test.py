"""bench/tcp_relay, the benchmark's floor: it must relay bytes faithfully for its figures to mean
anything. One upstream connection per client connection, kept for its lifetime; parked bytes
when a reader is slow; both sides closed when either ends; bad arguments refused by name."""

import os
import socket
import subprocess
import time
import unittest

from harness import (IntegrationTestCase, curl, curl_multi, det_bytes, free_port, sha256,
                     tcp_relay_bin, wait_until)


class TcpRelayTest(IntegrationTestCase):

    def start_relay(self, upstream_port):
        port = free_port()
        proc = self.start_listening_process([tcp_relay_bin(), str(port), str(upstream_port)],
                                            [port], "tcp_relay")
        return port, proc

    @staticmethod
    def open_fds(proc):
        return len(os.listdir("/proc/%d/fd" % proc.pid))

    def test_keep_alive_client_gets_one_upstream_connection(self):
        echo = self.start_echo("E")
        port, _ = self.start_relay(echo.port)
        # start_relay's readiness probe was a client too: its upstream connection comes first.
        wait_until(lambda: echo.accepted == 1, what="the probe's upstream connection")
        before = echo.accepted
        urls = ["http://127.0.0.1:%d/r/%d" % (port, i) for i in range(20)]
        responses, cp = curl_multi(urls)
        self.assertEqual(cp.returncode, 0, cp.stderr_text)
        self.assertEqual([r.json()["path"] for r in responses], ["/r/%d" % i for i in range(20)])
        self.assertEqual(sum(r.num_connects for r in responses), 1)
        self.assertEqual(len({r.json()["conn_id"] for r in responses}), 1)
        self.assertEqual(echo.accepted - before, 1)

    def test_large_body_to_a_slow_reader_arrives_intact(self):
        echo = self.start_echo("E")
        port, proc = self.start_relay(echo.port)
        # More than the client's receive buffer and the relay's send buffer hold: while the client
        # reads nothing the relay's sends come back short and the rest waits in its parked buffer.
        size = 16 << 20
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /bytes/%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % size)
        time.sleep(1.0)
        data = bytearray()
        s.settimeout(30)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        head, _, body = bytes(data).partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 200"), head[:100])
        self.assertEqual(len(body), size)
        self.assertEqual(sha256(body), sha256(det_bytes(size)))
        base = 5  # stdin, stdout, stderr, the listener and the epoll set
        wait_until(lambda: self.open_fds(proc) == base, what="relay closed both sides")

    def test_upstream_close_closes_the_client_after_the_body(self):
        echo = self.start_echo("E")
        port, proc = self.start_relay(echo.port)
        r = curl("http://127.0.0.1:%d/eof/100000" % port)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, det_bytes(100000))
        wait_until(lambda: self.open_fds(proc) == 5, what="relay closed both sides")

    def test_refused_upstream_closes_the_client(self):
        dead = free_port()  # nothing listens there
        port, proc = self.start_relay(dead)
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            self.assertEqual(s.recv(100), b"")
        except ConnectionResetError:
            pass
        s.close()
        wait_until(lambda: self.open_fds(proc) == 5, what="relay closed both sides")
        self.assertIsNone(proc.poll())

    def test_bad_arguments_name_what_is_wrong(self):
        for args, needle in (([], b"usage: tcp_relay"), (["80"], b"usage: tcp_relay"),
                             (["0", "80"], b"'0' is not a port"),
                             (["80", "http"], b"'http' is not a port")):
            cp = subprocess.run([tcp_relay_bin()] + args, capture_output=True, timeout=10)
            self.assertEqual(cp.returncode, 2, args)
            self.assertIn(needle, cp.stderr, args)


if __name__ == "__main__":
    unittest.main()
