"""Active health checks (Cluster.health_checks, Envoy's fields): HTTP and TCP probes from rpx to
real upstreams that fail on cue (harness.EchoUpstream.fail) or are stopped, hosts leaving and
rejoining the rotation after unhealthy_threshold / healthy_threshold probes, Envoy's panic
threshold, /clusters and /stats showing it, and configurations rpx refuses by name.
"""

import http.client
import json
import os
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, free_port, http_listener,
                     route, virtual_host, wait_until)


def http_check(**extra):
    hc = {"timeout": "0.5s", "interval": "0.1s", "no_traffic_interval": "0.1s",
          "unhealthy_threshold": 2, "healthy_threshold": 2,
          "http_health_check": {"path": "/healthz"}}
    hc.update(extra)
    return hc


class HealthCheckTest(IntegrationTestCase):

    def start(self, names, check, panic=None):
        self.ups = {n: self.start_echo(n) for n in names}
        c = cluster("c", [self.ups[n].port for n in names])
        c["health_checks"] = [check]
        if panic is not None:
            c["common_lb_config"] = {"healthy_panic_threshold": {"value": panic}}
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap([http_listener("l", self.port, [
            virtual_host("all", ["*"], [route("/", "c")])])], [c]), concurrency=2)

    def healthy(self):
        return self.proxy.stat("cluster.c.health_check.healthy")

    def wait_healthy(self, n, what):
        wait_until(lambda: self.healthy() == n, timeout=20, what=what)

    def served(self, count):
        """Who answered `count` GETs (name -> count); any non-200 fails the test."""
        seen = {}
        for _ in range(count):
            r = curl("http://127.0.0.1:%d/x" % self.port, timeout=20)
            self.assertEqual(r.status, 200, r)
            name = r.json()["server"]
            seen[name] = seen.get(name, 0) + 1
        return seen

    def open_fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proxy.proc.pid))

    def baseline_fds(self):
        """Descriptors rpx holds besides pooled upstream connections and probes in flight."""
        self.served(3)
        self.fds_before = self.open_fds() - self.proxy.stat("cluster.c.upstream_cx_active")

    def assert_no_leak(self):
        # Pooled connections may stay, and one probe per host may be in flight.
        slack = len(self.ups)
        wait_until(lambda: self.open_fds() <= self.fds_before + slack +
                   self.proxy.stat("cluster.c.upstream_cx_active"), timeout=10,
                   what="descriptors back to %d + pooled (now %d)" % (self.fds_before,
                                                                     self.open_fds()))

    def probes_of(self, name):
        return sum(1 for r in self.ups[name].requests if r["path"] == "/healthz")

    def test_a_failing_host_leaves_the_rotation_and_comes_back(self):
        self.start(("a", "b", "c"), http_check())
        self.wait_healthy(3, "the first probes")
        self.assertEqual(set(self.served(12)), {"a", "b", "c"})
        # b answers 503 to everything: out after its first failed probe (a status outside
        # expected_statuses does not wait for unhealthy_threshold), no client sees it.
        self.ups["b"].fail = "503"
        self.wait_healthy(2, "b failed")
        status, body = self.proxy.admin("GET", "/clusters")
        self.assertIn("c::127.0.0.1:%d::health_flags::/failed_active_hc" % self.ups["b"].port,
                      body.decode())
        self.assertIn("c::127.0.0.1:%d::health_flags::healthy" % self.ups["a"].port,
                      body.decode())
        self.assertEqual(set(self.served(20)), {"a", "c"})
        # Back: healthy again after healthy_threshold passing probes.
        self.ups["b"].fail = None
        self.wait_healthy(3, "b healthy again")
        self.assertEqual(set(self.served(12)), {"a", "b", "c"})
        stats = self.proxy.stats()
        self.assertGreater(stats["cluster.c.health_check.attempt"], 6)
        self.assertGreaterEqual(stats["cluster.c.health_check.failure"], 1)
        # The probe is Envoy's: GET path with the cluster's name as Host, Envoy/HC agent.
        probe = [r for r in self.ups["a"].requests if r["path"] == "/healthz"][0]
        headers = dict(probe["headers"])
        self.assertEqual((probe["method"], headers["host"], headers["user-agent"]),
                         ("GET", "c", "Envoy/HC"))

    def test_a_stopped_host_is_taken_out_after_unhealthy_threshold(self):
        self.start(("a", "b", "c"), http_check())
        self.wait_healthy(3, "the first probes")
        self.baseline_fds()
        self.ups["c"].stop()  # connection refused from now on
        self.wait_healthy(2, "c failed")
        self.assertGreaterEqual(self.proxy.stat("cluster.c.health_check.network_failure"), 2)
        self.assertEqual(set(self.served(20)), {"a", "b"})
        self.assert_no_leak()

    def test_with_retries_a_host_dying_under_load_costs_no_request(self):
        """Retries cover the window before the probes notice: a host stopped in the middle of
        a stream of requests (keep-alive, one at a time) costs none of them."""
        policy = {"retry_on": "5xx,reset,connect-failure", "num_retries": 3,
                  "retry_host_predicate": [{"name": "envoy.retry_host_predicates.previous_hosts"}],
                  "host_selection_retry_max_attempts": 5}
        self.ups = {n: self.start_echo(n) for n in ("a", "b", "c")}
        c = cluster("c", [self.ups[n].port for n in ("a", "b", "c")])
        c["health_checks"] = [http_check()]
        r = route("/", "c", timeout="20s")
        r["route"]["retry_policy"] = policy
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap([http_listener("l", self.port, [
            virtual_host("all", ["*"], [r])])], [c]), concurrency=2)
        self.wait_healthy(3, "the first probes")
        self.baseline_fds()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        statuses, servers = [], {}
        for i in range(400):
            if i == 100:
                self.ups["b"].stop()
            conn.request("GET", "/x")
            resp = conn.getresponse()
            body = resp.read()
            statuses.append(resp.status)
            if resp.status == 200:
                name = json.loads(body)["server"]
                servers[name] = servers.get(name, 0) + 1
        conn.close()
        self.assertEqual([s for s in statuses if s != 200], [])
        self.wait_healthy(2, "b failed")
        self.assertEqual(sum(servers.values()), 400)
        self.assertGreater(servers.get("a", 0), 100)
        self.assertGreater(servers.get("c", 0), 100)
        self.assert_no_leak()

    def test_panic_threshold(self):
        # Two of three failed: 33% healthy is under the default 50%, so all three take traffic.
        self.start(("a", "b", "c"), http_check(unhealthy_threshold=1))
        self.wait_healthy(3, "the first probes")
        self.ups["b"].fail = "503"
        self.ups["c"].fail = "503"
        self.wait_healthy(1, "b and c failed")
        before = {n: self.ups[n].request_count() - self.probes_of(n) for n in ("b", "c")}
        statuses = [curl("http://127.0.0.1:%d/x" % self.port, timeout=20).status
                    for _ in range(30)]
        self.assertIn(503, statuses)  # the failed hosts answered some
        for n in ("b", "c"):
            self.assertGreater(self.ups[n].request_count() - self.probes_of(n), before[n], n)
        self.proxy.cleanup()
        # healthy_panic_threshold 0: no panic, only a serves.
        self.start(("a", "b", "c"), http_check(unhealthy_threshold=1), panic=0)
        self.wait_healthy(3, "the first probes")
        self.ups["b"].fail = "503"
        self.ups["c"].fail = "503"
        self.wait_healthy(1, "b and c failed")
        self.assertEqual(set(self.served(20)), {"a"})

    def test_expected_statuses_and_request_headers(self):
        self.start(("a", "b"), http_check(http_health_check={
            "path": "/healthz", "host": "health.example", "expected_statuses": [
                {"start": 200, "end": 300}, {"start": 418, "end": 419}],
            "request_headers_to_add": [{"header": {"key": "x-probe", "value": "1"}}]}))
        self.wait_healthy(2, "the first probes")
        self.ups["b"].fail = "418"  # expected: stays healthy
        self.ups["a"].fail = "404"
        self.wait_healthy(1, "a failed")
        status, body = self.proxy.admin("GET", "/clusters?format=json")
        hosts = {h["address"]["socket_address"]["port_value"]: h["health_status"]
                 for h in json.loads(body)["cluster_statuses"][0]["host_statuses"]}
        self.assertTrue(hosts[self.ups["a"].port].get("failed_active_health_check"), hosts)
        self.assertNotIn("failed_active_health_check", hosts[self.ups["b"].port])
        probe = [r for r in self.ups["b"].requests if r["path"] == "/healthz"][-1]
        headers = dict(probe["headers"])
        self.assertEqual((headers["host"], headers["x-probe"]), ("health.example", "1"))

    def test_alt_port_probes_another_port(self):
        probe = self.start_echo("probe")
        self.start(("a", "b"), http_check(alt_port=probe.port))
        self.wait_healthy(2, "the first probes")
        self.assertGreaterEqual(sum(1 for r in probe.requests if r["path"] == "/healthz"), 2)
        self.assertEqual((self.probes_of("a"), self.probes_of("b")), (0, 0))
        probe.fail = "503"  # the probe port answers for both hosts
        self.wait_healthy(0, "both failed through the probe port")

    def test_tcp_checks(self):
        # Plain connect.
        self.start(("a", "b"), {"timeout": "0.5s", "interval": "0.1s",
                                "no_traffic_interval": "0.1s", "unhealthy_threshold": 1,
                                "healthy_threshold": 1, "tcp_health_check": {}})
        self.wait_healthy(2, "the first probes")
        self.ups["b"].stop()
        self.wait_healthy(1, "b failed")
        self.assertEqual(set(self.served(6)), {"a"})
        self.proxy.cleanup()
        # Send and receive (hex): an HTTP/1.0 request, "200 OK" expected back.
        send = "GET /healthz HTTP/1.0\r\n\r\n".encode().hex()
        self.start(("a", "b"), {"timeout": "0.5s", "interval": "0.1s",
                                "no_traffic_interval": "0.1s", "unhealthy_threshold": 1,
                                "healthy_threshold": 1, "tcp_health_check": {
                                    "send": {"text": send},
                                    "receive": [{"text": b"200".hex()},
                                                {"text": b"OK".hex()}]}})
        self.wait_healthy(2, "the first probes")
        self.ups["a"].fail = "500"
        self.wait_healthy(1, "a failed")
        self.assertEqual(set(self.served(6)), {"b"})

    def test_refused_configurations_name_the_field(self):
        cases = [
            ({"health_checks": [{"interval": "1s", "unhealthy_threshold": 1,
                                 "healthy_threshold": 1, "http_health_check": {"path": "/"}}]},
             "clusters[0].health_checks[0].timeout: is required"),
            ({"health_checks": [http_check(http_health_check={"path": "/",
                                                              "codec_client_type": "HTTP2"})]},
             "health_checks[0].http_health_check.codec_client_type: only HTTP1"),
            ({"health_checks": [{"timeout": "1s", "interval": "1s", "unhealthy_threshold": 1,
                                 "healthy_threshold": 1,
                                 "grpc_health_check": {"service_name": "x"}}]},
             "health_checks[0].grpc_health_check: gRPC health checks are not supported yet"),
            ({"outlier_detection": {"enforcing_failure_percentage_local_origin": 100}},
             "outlier_detection.enforcing_failure_percentage_local_origin: failure percentages "
             "of local-origin errors are not judged separately yet"),
            ({"common_lb_config": {"healthy_panic_threshold": {"value": 150}}},
             "common_lb_config.healthy_panic_threshold: must be within [0, 100]"),
        ]
        for extra, want in cases:
            with self.subTest(want=want):
                self.assert_cluster_refused(extra, want)


if __name__ == "__main__":
    unittest.main()
