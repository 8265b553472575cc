"""Graceful shutdown: SIGTERM stops accepting, fails /ready, lets requests in flight finish and
closes connections once idle, then exits 0; a second signal stops at once. The admin's
/drain_listeners and /healthcheck/fail|ok."""

import http.client
import signal
import socket
import threading
import time
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, free_port, http_listener,
                     http_request, route, virtual_host, wait_until)


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


class ShutdownTest(IntegrationTestCase):

    def start(self, *extra_args):
        self.up = self.start_echo("up")
        self.port = free_port()
        cfg = bootstrap([http_listener("l", self.port, [virtual_host("all", ["*"], [
            route("/", "up", timeout="20s")])])], [cluster("up", self.up.port)])
        self.proxy = self.start_rpx(cfg, extra_args=list(extra_args), log_level="info")
        return self.proxy

    def ready(self):
        return self.proxy.admin("GET", "/ready")

    def test_sigterm_lets_requests_in_flight_finish(self):
        self.start("--drain-time-s", "30")
        results = []

        def get():
            results.append(curl("http://127.0.0.1:%d/slow/1" % self.port, timeout=30))
        threads = [threading.Thread(target=get) for _ in range(5)]
        for t in threads:
            t.start()
        wait_until(lambda: self.up.in_flight == 5, timeout=10, what="5 requests in flight")
        self.proxy.proc.send_signal(signal.SIGTERM)  # by PID
        wait_until(lambda: self.ready() == (503, b"DRAINING\n"), timeout=5, what="/ready DRAINING")
        wait_until(lambda: refused(self.port), timeout=5, what="the listener to close")
        for t in threads:
            t.join(30)
        self.assertEqual([r.status for r in results], [200] * 5, results)
        # Everything finished long before the drain time: rpx stops now, and cleanly.
        self.assertEqual(self.proxy.wait_exit(20), 0)

    def test_keepalive_connections_are_told_to_close(self):
        self.start("--drain-time-s", "30", "--drain-strategy", "immediate")
        idle = self.raw_client(self.port)
        idle.send(http_request("GET", "/x"))
        self.assertEqual(idle.read_response().status, 200)  # kept alive, now idle
        busy = self.raw_client(self.port)
        busy.send(http_request("GET", "/first"))
        self.assertEqual(busy.read_response().status, 200)
        busy.send(http_request("GET", "/slow/1"))
        wait_until(lambda: self.up.in_flight == 1, timeout=10, what="the slow request in flight")
        self.proxy.proc.send_signal(signal.SIGTERM)
        self.assertTrue(idle.at_eof(10), "the idle connection was not closed")
        r = busy.read_response()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers.get("connection"), "close", r.headers)
        self.assertTrue(busy.at_eof(10))
        self.assertEqual(self.proxy.wait_exit(20), 0)

    def test_gradual_drain_closes_every_idle_connection(self):
        # The default strategy asks idle connections to close in steps over the drain time;
        # every one is closed in the end (each before the deadline: rpx exits once none is left).
        self.start("--drain-time-s", "3")
        clients = []
        for i in range(30):
            c = self.raw_client(self.port)
            c.send(http_request("GET", "/c%d" % i))
            self.assertEqual(c.read_response().status, 200)
            clients.append(c)
        self.proxy.proc.send_signal(signal.SIGTERM)
        for c in clients:
            self.assertTrue(c.at_eof(15), "an idle connection was never closed")
        self.assertEqual(self.proxy.wait_exit(20), 0)
        self.assertIn("draining: gradually", self.proxy.stderr_text())

    def test_a_second_signal_stops_at_once(self):
        self.start("--drain-time-s", "600")
        half = self.raw_client(self.port)
        half.send(b"GET / HTTP/1.1\r\nHo")  # a request that will never complete
        time.sleep(0.2)
        self.proxy.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: self.ready()[0] == 503, timeout=5, what="/ready to fail")
        self.assertIsNone(self.proxy.proc.poll())  # still draining
        self.proxy.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proxy.wait_exit(20), 0)

    def test_drain_listeners_and_health_checks_from_the_admin(self):
        self.start()
        self.assertEqual(self.ready(), (200, b"LIVE\n"))
        self.assertEqual(self.proxy.admin("POST", "/healthcheck/fail")[0], 200)
        self.assertEqual(self.ready(), (503, b"DRAINING\n"))  # Envoy's word for it
        # Traffic is still served: only the health answer changed.
        self.assertEqual(curl("http://127.0.0.1:%d/" % self.port).status, 200)
        self.assertEqual(self.proxy.admin("POST", "/healthcheck/ok")[0], 200)
        self.assertEqual(self.ready(), (200, b"LIVE\n"))
        self.assertEqual(self.proxy.admin("GET", "/drain_listeners")[0], 405)
        self.assertEqual(self.proxy.admin("POST", "/drain_listeners?graceful")[0], 200)
        wait_until(lambda: refused(self.port), timeout=5, what="the listener to close")
        self.assertEqual(self.ready(), (503, b"DRAINING\n"))
        self.assertIsNone(self.proxy.proc.poll())  # the server itself stays up

    def test_drain_listeners_inbound_only(self):
        # Istio drains a sidecar's inbound listener before the pod stops; outbound keeps serving.
        self.up = self.start_echo("up")
        self.port, out_port = free_port(), free_port()
        inbound = http_listener("in", self.port, [virtual_host("all", ["*"], [
            route("/", "up")])], listener_extra={"traffic_direction": "INBOUND"})
        outbound = http_listener("out", out_port, [virtual_host("all", ["*"], [
            route("/", "up")])], listener_extra={"traffic_direction": "OUTBOUND"})
        self.proxy = self.start_rpx(bootstrap([inbound, outbound], [cluster("up", self.up.port)]))
        kept = self.raw_client(out_port)
        kept.send(http_request("GET", "/before"))
        self.assertEqual(kept.read_response().status, 200)
        self.assertEqual(self.proxy.admin("POST", "/drain_listeners?inboundonly&bogus")[0], 400)
        self.assertEqual(self.proxy.admin("POST", "/drain_listeners?inboundonly")[0], 200)
        wait_until(lambda: refused(self.port), timeout=5, what="the inbound listener to close")
        self.assertEqual(curl("http://127.0.0.1:%d/" % out_port).status, 200)
        kept.send(http_request("GET", "/after"))  # an outbound connection is not asked to close
        r = kept.read_response()
        self.assertEqual(r.status, 200)
        self.assertNotEqual(r.headers.get("connection"), "close")


if __name__ == "__main__":
    unittest.main()
