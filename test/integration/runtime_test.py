"""layered_runtime: static layers as Envoy's examples write them load; the keys rpx reads take
effect (overload.global_downstream_max_connections caps connections across every listener and
worker), and the others are listed at /runtime and counted."""

import json
import socket
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, free_port, http_listener,
                     http_request, refused_by_peer, route, virtual_host)


class RuntimeTest(IntegrationTestCase):

    def setUp(self):
        super().setUp()
        self.echo = self.start_echo("E")
        self.ports = [free_port(), free_port()]
        cfg = bootstrap(
            [http_listener("a", self.ports[0], [virtual_host("all", ["*"], [route("/", "E")])]),
             http_listener("b", self.ports[1], [virtual_host("all", ["*"], [route("/", "E")])])],
            [cluster("E", self.echo.port)])
        # As in Envoy's edge best-practices example.
        cfg["layered_runtime"] = {"layers": [
            {"name": "static_layer_0", "static_layer": {
                "envoy": {"resource_limits": {"listener": {"a": {"connection_limit": 100}}}},
                "overload": {"global_downstream_max_connections": 10}}},
            {"name": "static_layer_1", "static_layer": {
                "overload": {"global_downstream_max_connections": 3}}},
            {"name": "admin_layer_0", "admin_layer": {}},
        ]}
        self.proxy = self.start_rpx(cfg, concurrency=2)

    def test_global_connection_cap_spans_listeners(self):
        clients = [self.raw_client(self.ports[i % 2]) for i in range(3)]
        for c in clients:
            c.send(http_request("GET", "/held"))
            self.assertEqual(c.read_response().status, 200)
        for port in self.ports:
            extra = socket.create_connection(("127.0.0.1", port))
            self.addCleanup(extra.close)
            self.assertTrue(refused_by_peer(extra), "a connection over the global cap was served")
        total = (self.proxy.stat("listener.127.0.0.1_%d.downstream_global_cx_overflow" %
                                 self.ports[0]) +
                 self.proxy.stat("listener.127.0.0.1_%d.downstream_global_cx_overflow" %
                                 self.ports[1]))
        self.assertEqual(total, 2)
        # The open ones keep working; closing one frees a place.
        clients[0].send(http_request("GET", "/again"))
        self.assertEqual(clients[0].read_response().status, 200)
        clients[1].close()
        self.proxy.wait_stat("http.b.downstream_cx_active", lambda v: v == 0)
        late = self.raw_client(self.ports[1])
        late.send(http_request("GET", "/late"))
        self.assertEqual(late.read_response().status, 200)

    def test_runtime_lists_every_key(self):
        status, body = self.proxy.admin("GET", "/runtime")
        self.assertEqual(status, 200)
        rt = json.loads(body)
        self.assertEqual(rt["layers"], ["static_layer_0", "static_layer_1", "admin_layer_0"])
        e = rt["entries"]["overload.global_downstream_max_connections"]
        self.assertEqual(e["final_value"], "3")
        self.assertEqual(e["layer_values"], ["10", "3", ""])
        self.assertEqual(rt["unused_keys"],
                         ["envoy.resource_limits.listener.a.connection_limit"])
        self.assertEqual(self.proxy.stat("runtime.num_keys"), 2)
        self.assertEqual(self.proxy.stat("runtime.unused_keys"), 1)

    def test_runtime_modify_writes_the_admin_layer(self):
        self.assertEqual(self.proxy.admin("GET", "/runtime_modify?a=1")[0], 405)
        # A bad value for a key rpx reads is refused, naming it; nothing changes.
        status, body = self.proxy.admin(
            "POST", "/runtime_modify?overload.global_downstream_max_connections=lots&x.y=1")
        self.assertEqual(status, 400)
        self.assertIn(b"overload.global_downstream_max_connections", body)
        self.assertIn(b"'lots'", body)
        rt = json.loads(self.proxy.admin("GET", "/runtime")[1])
        self.assertNotIn("x.y", rt["entries"])
        # Raise the cap from 3 to 5 in the admin layer: 5 connections are served.
        status, body = self.proxy.admin(
            "POST", "/runtime_modify?overload.global_downstream_max_connections=5&x.y=1")
        self.assertEqual((status, body), (200, b"OK\n"))
        rt = json.loads(self.proxy.admin("GET", "/runtime")[1])
        e = rt["entries"]["overload.global_downstream_max_connections"]
        self.assertEqual(e["final_value"], "5")
        self.assertEqual(e["layer_values"], ["10", "3", "5"])
        self.assertEqual(rt["entries"]["x.y"]["final_value"], "1")
        clients = [self.raw_client(self.ports[i % 2]) for i in range(5)]
        for c in clients:
            c.send(http_request("GET", "/held"))
            self.assertEqual(c.read_response().status, 200)
        extra = socket.create_connection(("127.0.0.1", self.ports[0]))
        self.addCleanup(extra.close)
        self.assertTrue(refused_by_peer(extra), "a connection over the new cap was served")
        # An empty value removes the override: the static layers' 3 applies again.
        self.assertEqual(self.proxy.admin(
            "POST", "/runtime_modify?overload.global_downstream_max_connections=")[0], 200)
        rt = json.loads(self.proxy.admin("GET", "/runtime")[1])
        self.assertEqual(
            rt["entries"]["overload.global_downstream_max_connections"]["final_value"], "3")

    def test_runtime_modify_needs_an_admin_layer(self):
        other = self.start_rpx(bootstrap([http_listener("c", free_port(), [virtual_host(
            "all", ["*"], [route("/", "E")])])], [cluster("E", self.echo.port)]))
        status, body = other.admin("POST", "/runtime_modify?a=1")
        self.assertEqual(status, 400)
        self.assertIn(b"no admin layer", body)


if __name__ == "__main__":
    unittest.main()
