"""A per-listener cap on downstream connections (envoy.filters.network.connection_limit): beyond it
new connections are closed before any byte is read, counted in connection_limit.<prefix>.*, and
the connections already open keep working. Counted across workers (rpx runs two here)."""

import socket
import subprocess
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, free_port, http_listener,
                     http_request, refused_by_peer, route, virtual_host)

LIMIT_TYPE = "type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit"


def limited_listener(name, port, cluster_name, max_connections, delay=None):
    listener = http_listener(name, port, [virtual_host("all", ["*"], [route("/", cluster_name)])])
    limit = {"@type": LIMIT_TYPE, "stat_prefix": name, "max_connections": max_connections}
    if delay:
        limit["delay"] = delay
    filters = listener["filter_chains"][0]["filters"]
    filters.insert(0, {"name": "envoy.filters.network.connection_limit", "typed_config": limit})
    return listener


class ConnectionLimitTest(IntegrationTestCase):

    def setUp(self):
        self.echo = self.start_echo("E")
        self.port = free_port()
        self.delay_port = free_port()
        self.proxy = self.start_rpx(bootstrap(
            [limited_listener("capped", self.port, "E", 3),
             limited_listener("slowcap", self.delay_port, "E", 1, delay="0.2s")],
            [cluster("E", self.echo.port)]), concurrency=2)

    def test_cap_refuses_new_connections_and_spares_open_ones(self):
        clients = [self.raw_client(self.port) for _ in range(3)]
        for c in clients:
            c.send(http_request("GET", "/first"))
            self.assertEqual(c.read_response().status, 200)
        self.assertEqual(self.proxy.stat("connection_limit.capped.active_connections"), 3)

        extra = socket.create_connection(("127.0.0.1", self.port))
        self.addCleanup(extra.close)
        self.assertTrue(refused_by_peer(extra), "a connection over the cap was served")
        self.assertEqual(self.proxy.stat("connection_limit.capped.limited_connections"), 1)
        # A real client sees an empty reply, not a hang.
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "--max-time", "10",
                            "http://127.0.0.1:%d/curl" % self.port])
        self.assertIn(r.returncode, (52, 56), "curl exit %d" % r.returncode)
        self.assertEqual(self.proxy.stat("connection_limit.capped.limited_connections"), 2)

        # The connections already open are unaffected.
        for c in clients:
            c.send(http_request("GET", "/second"))
            self.assertEqual(c.read_response().status, 200)

        # Closing one frees a slot for a new connection.
        clients[0].close()
        self.proxy.wait_stat("connection_limit.capped.active_connections", lambda v: v == 2)
        again = self.raw_client(self.port)
        again.send(http_request("GET", "/again"))
        self.assertEqual(again.read_response().status, 200)
        self.assertEqual(self.echo.request_count(), 7)

    def test_refusal_after_a_delay(self):
        first = self.raw_client(self.delay_port)
        first.send(http_request("GET", "/first"))
        self.assertEqual(first.read_response().status, 200)
        extra = socket.create_connection(("127.0.0.1", self.delay_port))
        self.addCleanup(extra.close)
        self.assertTrue(refused_by_peer(extra))
        self.assertEqual(self.proxy.stat("connection_limit.slowcap.limited_connections"), 1)
        first.send(http_request("GET", "/second"))
        self.assertEqual(first.read_response().status, 200)


if __name__ == "__main__":
    unittest.main()
