"""Envoy's socket options on the real binary: a listener's `socket_options` reach the connections
it accepts, and a cluster's `upstream_bind_config` (source address and socket options) reaches
every upstream connection. What the kernel holds is read back with ss(8), as an operator would.
The option used is TCP_CONGESTION (level 6, name 13): visible in `ss -i` and settable by anyone."""

import subprocess
import unittest

from harness import (IntegrationTestCase, Rpx, RpxError, bootstrap, cluster, congestion_option,
                     default_congestion_control, free_port, http_listener, http_request,
                     other_congestion_control, route, tcp_sockets, tcp_algorithm, virtual_host)

SOL_SOCKET, SO_KEEPALIVE = 1, 9


@unittest.skipIf(other_congestion_control() is None,
                 "no second congestion control is allowed on this host")
class SocketOptionsTest(IntegrationTestCase):

    def setUp(self):
        self.cc = other_congestion_control()
        self.default = default_congestion_control()
        self.echo = self.start_echo("E")
        self.port = free_port()
        self.plain_port = free_port()
        vhosts = [virtual_host("all", ["*"], [route("/", "E")])]
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("tuned", self.port, vhosts, listener_extra={"socket_options": [
                congestion_option(self.cc, description="congestion control"),
                {"level": SOL_SOCKET, "name": SO_KEEPALIVE, "int_value": 1,
                 "state": "STATE_LISTENING"}]}),
             http_listener("plain", self.plain_port, vhosts)],
            [cluster("E", self.echo.port, extra={"upstream_bind_config": {
                "source_address": {"address": "127.0.0.2", "port_value": 0},
                "socket_options": [congestion_option(self.cc)]}})]))

    def test_listener_options_reach_accepted_connections(self):
        client = self.raw_client(self.port)
        client.send(http_request("GET", "/tuned"))
        self.assertEqual(client.read_response().status, 200)
        plain = self.raw_client(self.plain_port)
        plain.send(http_request("GET", "/plain"))
        self.assertEqual(plain.read_response().status, 200)

        # rpx's side of each client connection (its local port is the listener's).
        tuned = tcp_sockets("sport = :%d" % self.port)
        self.assertEqual(len(tuned), 1, tuned)
        self.assertEqual(tcp_algorithm(tuned[0][2]), self.cc, tuned)
        self.assertIn("timer:(keepalive", subprocess.run(
            ["ss", "-Htno", "state", "established", "sport = :%d" % self.port],
            capture_output=True, text=True, timeout=10).stdout)
        untouched = tcp_sockets("sport = :%d" % self.plain_port)
        self.assertEqual(len(untouched), 1, untouched)
        self.assertEqual(tcp_algorithm(untouched[0][2]), self.default, untouched)

    def test_upstream_bind_config_reaches_upstream_connections(self):
        client = self.raw_client(self.port)
        for i in range(3):
            client.send(http_request("GET", "/up/%d" % i))
            self.assertEqual(client.read_response().status, 200)
        # rpx's side of its upstream connections: from 127.0.0.2, with the option set.
        upstream = tcp_sockets("dport = :%d" % self.echo.port)
        self.assertGreaterEqual(len(upstream), 1, upstream)
        for local, peer, info in upstream:
            self.assertTrue(local.startswith("127.0.0.2:"), (local, peer))
            self.assertEqual(tcp_algorithm(info), self.cc, info)


class BadSocketOptionsTest(IntegrationTestCase):

    def test_source_address_the_kernel_refuses_fails_requests_and_says_why(self):
        # 192.0.2.1 (TEST-NET-1) is on no interface here: bind(2) refuses it at every connect.
        echo = self.start_echo("E")
        port = free_port()
        proxy = self.start_rpx(bootstrap(
            [http_listener("main", port, [virtual_host("all", ["*"], [route("/", "E")])])],
            [cluster("E", echo.port, extra={"upstream_bind_config": {
                "source_address": {"address": "192.0.2.1", "port_value": 0}}})]))
        for i in range(3):
            client = self.raw_client(port)
            client.send(http_request("GET", "/%d" % i))
            self.assertEqual(client.read_response().status, 503)
        self.assertEqual(echo.request_count(), 0)
        log = proxy.stderr_text()
        self.assertIn("cluster 'E': connect to 127.0.0.1:%d: binding to source address "
                      "192.0.2.1:0: Cannot assign requested address" % echo.port, log)
        self.assertLessEqual(log.count("binding to source address"), 2, log)  # once per worker

    def startup_error(self, listener_extra=None, cluster_extra=None):
        """rpx's startup failure (RpxError text) for a one-listener, one-cluster bootstrap."""
        echo = self.start_echo("E")
        proxy = Rpx(bootstrap(
            [http_listener("main", free_port(), [virtual_host("all", ["*"], [route("/", "E")])],
                           listener_extra=listener_extra)],
            [cluster("E", echo.port, extra=cluster_extra)]))
        self.addCleanup(proxy.cleanup)
        with self.assertRaises(RpxError) as cm:
            proxy.start()
        return str(cm.exception)

    def test_refused_listener_option_stops_startup_with_its_name(self):
        error = self.startup_error(listener_extra={"socket_options": [
            congestion_option("no-such-algorithm", description="my cc")]})
        self.assertIn("setting socket option 'my cc' (level 6, name 13): No such file or directory",
                      error)

    def test_refused_upstream_option_is_a_config_error(self):
        error = self.startup_error(cluster_extra={"upstream_bind_config": {
            "socket_options": [congestion_option("no-such-algorithm")]}})
        self.assertIn("clusters[0].upstream_bind_config: setting socket option (level 6, name 13)",
                      error)


if __name__ == "__main__":
    unittest.main()
