"""Envoy's socket options on the real binary: a listener's `socket_options` reach the connections
it accepts, and a cluster's `upstream_bind_config` (source address and socket options) reaches
every upstream connection. What the kernel holds is read back with ss(8), as an operator would.
The option used is TCP_CONGESTION (level 6, name 13): visible in `ss -i` and settable by anyone.
Also rpx's own choice for HTTP listeners: accepted sockets start out of quick-ACK mode (read back
from /proc/net/tcp), and TCP proxy listeners keep the kernel's default."""

import subprocess
import unittest

from harness import (IntegrationTestCase, Rpx, RpxError, bootstrap, cluster, congestion_option,
                     default_congestion_control, free_port, http_listener, http_request,
                     other_congestion_control, route, socket_address, tcp_sockets, tcp_algorithm,
                     virtual_host)

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


def listening_pingpong(port):
    """The listening socket's delayed-ACK ("pingpong") bit on 127.0.0.1:`port`, from
    /proc/net/tcp: the field after rto and ato is (quick << 1) | pingpong. Accepted sockets
    inherit it."""
    with open("/proc/net/tcp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if fields[1] == "0100007F:%04X" % port and fields[3] == "0A":  # LISTEN
                return int(fields[14]) & 1
    raise AssertionError("no listening socket on 127.0.0.1:%d in /proc/net/tcp" % port)


class DelayedAckTest(IntegrationTestCase):
    """HTTP listeners' accepted sockets start out of quick-ACK mode (HAProxy does the same for
    its HTTP frontends): a new connection's request is acknowledged by the response instead of
    by a pure ACK ahead of it. A listener with a TCP proxy chain keeps quick ACKs (an interactive
    protocol's small writes must not wait on a delayed ACK)."""

    def test_http_listeners_delay_acks_and_tcp_proxy_listeners_do_not(self):
        echo = self.start_echo("E")
        http_port, tcp_port = free_port(), free_port()
        tcp_proxy = {"@type": "type.googleapis.com/"
                              "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                     "stat_prefix": "raw", "cluster": "raw"}
        raw = cluster("raw", echo.port)
        del raw["typed_extension_protocol_options"]
        proxy = self.start_rpx(bootstrap(
            [http_listener("web", http_port, [virtual_host("all", ["*"], [route("/", "E")])]),
             {"name": "raw", "address": socket_address(tcp_port), "filter_chains": [
                 {"filters": [{"name": "envoy.filters.network.tcp_proxy",
                               "typed_config": tcp_proxy}]}]}],
            [cluster("E", echo.port), raw]))
        self.assertEqual(listening_pingpong(http_port), 1)
        self.assertEqual(listening_pingpong(tcp_port), 0)
        client = self.raw_client(http_port)
        client.send(http_request("GET", "/x", headers=[("Connection", "close")]))
        self.assertEqual(client.read_response().status, 200)
        self.assertEqual(proxy.stat("listener.127.0.0.1_%d.downstream_cx_total" % http_port), 1)


if __name__ == "__main__":
    unittest.main()
