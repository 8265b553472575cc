"""Priority levels, localities and endpoint weights (Envoy's LocalityLbEndpoints.priority,
load_balancing_weight, ClusterLoadAssignment.policy and common_lb_config
.locality_weighted_lb_config), statically and over EDS, with real upstreams on loopback: a level
keeps its traffic while its healthy hosts times the overprovisioning factor (1.4) cover it and
passes the rest to the next level; EDS health_status counts the same way as active checks.
"""

import http.client
import json
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, eds_cluster, free_port,
                     http_listener, rds_listener, route, route_configuration, socket_address,
                     virtual_host, wait_until, xds_bootstrap)

NODE = "test-node"
CONFIG_FILE = "config.yaml"


def endpoints(groups):
    """LocalityLbEndpoints from (ports, extra) pairs; a port may be (port, lb_endpoint extra)."""
    out = []
    for ports, extra in groups:
        lbs = []
        for p in ports:
            port, more = (p if isinstance(p, tuple) else (p, {}))
            lb = {"endpoint": {"address": socket_address(port)}}
            lb.update(more)
            lbs.append(lb)
        loc = {"lb_endpoints": lbs}
        loc.update(extra)
        out.append(loc)
    return out


HC = {"timeout": "0.5s", "interval": "0.1s", "no_traffic_interval": "0.1s",
      "unhealthy_threshold": 1, "healthy_threshold": 1,
      "http_health_check": {"path": "/healthz"}}


class PriorityTest(IntegrationTestCase):

    def served(self, count, port=None):
        """Who answered `count` GETs on one keep-alive connection (name -> count); any other
        status than 200 fails the test."""
        conn = http.client.HTTPConnection("127.0.0.1", port or self.port, timeout=20)
        seen = {}
        try:
            for _ in range(count):
                conn.request("GET", "/x")
                resp = conn.getresponse()
                body = resp.read()
                self.assertEqual(resp.status, 200, body)
                name = json.loads(body)["server"]
                seen[name] = seen.get(name, 0) + 1
        finally:
            conn.close()
        return seen

    def start_static(self, groups, lb_policy=None, common_lb_config=None, health=True,
                     policy=None):
        names = sorted({n for ns, _ in groups for n in ns})
        self.ups = {n: self.start_echo(n) for n in names}
        c = cluster("c", [], lb_policy=lb_policy)
        la = {"cluster_name": "c",
              "endpoints": endpoints([([self.ups[n].port for n in ns], extra)
                                      for ns, extra in groups])}
        if policy:
            la["policy"] = policy
        c["load_assignment"] = la
        if health:
            c["health_checks"] = [HC]
        if common_lb_config:
            c["common_lb_config"] = common_lb_config
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap([http_listener("l", self.port, [
            virtual_host("all", ["*"], [route("/", "c")])])], [c]), concurrency=2)
        if health:
            self.wait_healthy(len(names), "the first probes")

    def wait_healthy(self, n, what):
        wait_until(lambda: self.proxy.stat("cluster.c.health_check.healthy") == n, timeout=20,
                   what=what)

    def test_a_level_fails_over_to_the_next_by_the_overprovisioning_factor(self):
        self.start_static([(("a", "b"), {"priority": 0}), (("c",), {"priority": 1})])
        self.assertEqual(set(self.served(60)), {"a", "b"})  # all healthy: P1 takes nothing
        # a fails its checks: P0 is 1.4 x 1/2 = 70% whole, so about 30% goes to P1.
        self.ups["a"].fail = "503"
        self.wait_healthy(2, "a failed")
        seen = self.served(400)
        self.assertNotIn("a", seen)
        self.assertTrue(60 <= seen.get("c", 0) <= 180, seen)
        self.assertTrue(seen.get("b", 0) >= 200, seen)
        status, body = self.proxy.admin("GET", "/clusters")
        self.assertIn("c::127.0.0.1:%d::priority::1" % self.ups["c"].port, body.decode())
        # b too: P1 takes everything (no panic: the levels together are whole).
        self.ups["b"].fail = "503"
        self.wait_healthy(1, "b failed")
        self.assertEqual(self.served(60), {"c": 60})
        self.assertEqual(self.proxy.stats().get("cluster.c.lb_healthy_panic", 0), 0)
        # Both back: P0 again.
        self.ups["a"].fail = None
        self.ups["b"].fail = None
        self.wait_healthy(3, "a and b back")
        self.assertEqual(set(self.served(60)), {"a", "b"})

    def test_every_level_in_panic_spreads_by_host_count(self):
        self.start_static([(("a", "b"), {"priority": 0}), (("c",), {"priority": 1})])
        for n in ("a", "b", "c"):
            self.ups[n].fail = "503"
        self.wait_healthy(0, "all failed")
        # Every level in panic: every host takes traffic, the levels by their host counts
        # (2:1), and the picks are counted.
        probes = lambda n: sum(1 for r in self.ups[n].requests if r["path"] == "/healthz")
        before = {n: self.ups[n].request_count() - probes(n) for n in ("a", "b", "c")}
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        for _ in range(150):
            conn.request("GET", "/x")
            resp = conn.getresponse()
            resp.read()
            self.assertEqual(resp.status, 503)  # the failing hosts answered
        conn.close()
        got = {n: self.ups[n].request_count() - probes(n) - before[n] for n in ("a", "b", "c")}
        for n in ("a", "b", "c"):
            self.assertGreater(got[n], 10, got)
        self.assertGreaterEqual(self.proxy.stat("cluster.c.lb_healthy_panic"), 150)

    def test_localities_share_a_level_by_weight(self):
        groups = [(("a",), {"locality": {"zone": "z1"}, "load_balancing_weight": 1}),
                  (("b",), {"locality": {"zone": "z2"}, "load_balancing_weight": 3})]
        self.start_static(groups, common_lb_config={"locality_weighted_lb_config": {}},
                          health=False)
        seen = self.served(400)
        self.assertTrue(50 <= seen.get("a", 0) <= 150, seen)
        self.proxy.cleanup()
        # Without locality_weighted_lb_config the localities are one pool (round robin: even).
        self.start_static(groups, health=False)
        self.assertEqual(self.served(400), {"a": 200, "b": 200})

    def test_endpoint_weights_hold_for_random_and_least_request(self):
        for policy in ("RANDOM", "LEAST_REQUEST"):
            self.ups = {n: self.start_echo(n) for n in ("a", "b")}
            c = cluster("c", [], lb_policy=policy)
            c["load_assignment"] = {"cluster_name": "c", "endpoints": endpoints([(
                [(self.ups["a"].port, {"load_balancing_weight": 1}),
                 (self.ups["b"].port, {"load_balancing_weight": 3})], {})])}
            self.port = free_port()
            self.proxy = self.start_rpx(bootstrap([http_listener("l", self.port, [
                virtual_host("all", ["*"], [route("/", "c")])])], [c]), concurrency=2)
            seen = self.served(400)
            self.assertTrue(50 <= seen.get("a", 0) <= 150, (policy, seen))
            self.proxy.cleanup()

    def test_refused_by_name(self):
        c = cluster("c", [free_port()])
        boot = bootstrap([http_listener("l", free_port(), [
            virtual_host("all", ["*"], [route("/", "c")])])], [c])
        c["common_lb_config"] = {"zone_aware_lb_config": {"min_cluster_size": 3}}
        self.assert_refused(boot, "zone_aware_lb_config")
        del c["common_lb_config"]
        c["load_assignment"]["policy"] = {"drop_overloads": [{"category": "x"}]}
        self.assert_refused(boot, "drop_overloads")
        c["load_assignment"]["policy"] = {"overprovisioning_factor": 0}
        self.assert_refused(boot, "policy.overprovisioning_factor: must be positive")
        del c["load_assignment"]["policy"]
        c["load_assignment"]["endpoints"][0]["priority"] = 129
        self.assert_refused(boot, "endpoints[0].priority: must be at most 128")


class EdsPriorityTest(IntegrationTestCase):
    """The same over EDS: health_status from the control plane moves traffic between levels."""

    def served(self, count):
        return PriorityTest.served(self, count)

    def cla(self, b_status="HEALTHY", policy=None):
        la = {"cluster_name": "c", "endpoints": endpoints([
            ([self.ups["a"].port, (self.ups["b"].port, {"health_status": b_status})],
             {"priority": 0}),
            ([self.ups["c"].port], {"priority": 1})])}
        if policy:
            la["policy"] = policy
        return la

    def push(self, cla):
        self.state["endpoints"] = [cla]
        return self.xds.write_resources(CONFIG_FILE, **self.state)

    def test_eds_health_status_and_policy(self):
        self.ups = {n: self.start_echo(n) for n in ("a", "b", "c")}
        self.port = free_port()
        self.state = {
            "listeners": [rds_listener("main", self.port, "main_routes")],
            "routes": [route_configuration("main_routes", [
                virtual_host("all", ["*"], [route("/", "c", timeout="15s")])])],
            "clusters": [eds_cluster("c")],
            "endpoints": [self.cla("UNHEALTHY")],
        }
        self.xds = self.start_xds_server({CONFIG_FILE: self.state})
        self.xds.wait_for(r"^snapshot version=1 ", what="the first snapshot")
        self.proxy = self.start_rpx(xds_bootstrap(self.xds.port, node_id=NODE), concurrency=2)
        wait_until(lambda: self.proxy.stats().get("cluster.c.membership_total") == 3,
                   timeout=20, what="the endpoints")
        # b UNHEALTHY: it counts in P0 (1.4 x 1/2 = 70%) but takes nothing; P1 about 30%.
        seen = self.served(400)
        self.assertNotIn("b", seen)
        self.assertTrue(60 <= seen.get("c", 0) <= 180, seen)
        status, body = self.proxy.admin("GET", "/clusters")
        self.assertIn("c::127.0.0.1:%d::health_flags::/failed_eds_health" % self.ups["b"].port,
                      body.decode())
        # overprovisioning_factor 100: P0 half whole, about half goes to P1.
        mark = self.push(self.cla("UNHEALTHY", {"overprovisioning_factor": 100}))
        self.xds.wait_ack("EDS", mark, node=NODE)
        seen = self.served(400)
        self.assertTrue(140 <= seen.get("c", 0) <= 260, seen)
        # A policy rpx cannot honour is NACKed by name and the assignment in service stays.
        mark = self.push(self.cla("UNHEALTHY", {"drop_overloads": [{"category": "x"}]}))
        version, error = self.xds.wait_nack("EDS", mark, node=NODE)
        self.assertIn("drop_overloads", error)
        seen = self.served(200)
        self.assertTrue(50 <= seen.get("c", 0) <= 150, seen)
        # b healthy: P0 whole again, P1 takes nothing.
        mark = self.push(self.cla("HEALTHY"))
        self.xds.wait_ack("EDS", mark, node=NODE)
        self.assertEqual(set(self.served(100)), {"a", "b"})


class SlowStartTest(IntegrationTestCase):
    """round_robin_lb_config.slow_start_config: a host EDS adds later ramps up over the window
    (Envoy's formula: a tenth of its weight for the first seconds of a 60 s window) while the
    hosts already there keep theirs."""

    def served(self, count):
        return PriorityTest.served(self, count)

    def test_a_joining_host_takes_a_small_share_at_first(self):
        self.ups = {n: self.start_echo(n) for n in ("a", "b", "c")}
        self.port = free_port()
        c = eds_cluster("c", extra={"lb_policy": "ROUND_ROBIN", "round_robin_lb_config": {
            "slow_start_config": {"slow_start_window": "60s"}}})
        cla = lambda names: {"cluster_name": "c", "endpoints": endpoints(
            [([self.ups[n].port for n in names], {})])}
        self.state = {
            "listeners": [rds_listener("main", self.port, "main_routes")],
            "routes": [route_configuration("main_routes", [
                virtual_host("all", ["*"], [route("/", "c", timeout="15s")])])],
            "clusters": [c],
            "endpoints": [cla(("a", "b"))],
        }
        self.xds = self.start_xds_server({CONFIG_FILE: self.state})
        self.xds.wait_for(r"^snapshot version=1 ", what="the first snapshot")
        self.proxy = self.start_rpx(xds_bootstrap(self.xds.port, node_id=NODE), concurrency=1)
        wait_until(lambda: self.proxy.stats().get("cluster.c.membership_total") == 2,
                   timeout=20, what="the endpoints")
        self.assertEqual(self.served(100), {"a": 50, "b": 50})
        self.state["endpoints"] = [cla(("a", "b", "c"))]
        mark = self.xds.write_resources(CONFIG_FILE, **self.state)
        self.xds.wait_ack("EDS", mark, node=NODE)
        # Without slow start c would take a third (100 of 300); ramping it takes about 5%.
        seen = self.served(300)
        self.assertTrue(0 < seen.get("c", 0) < 60, seen)
        self.assertTrue(abs(seen.get("a", 0) - seen.get("b", 0)) <= 2, seen)


if __name__ == "__main__":
    unittest.main()
