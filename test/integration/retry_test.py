"""Retries (route and virtual host retry_policy, Envoy's semantics) against upstreams that fail on
cue (harness.EchoUpstream: `fail`, `alternate`, /flaky/KEY/N/MODE): 5xx, resets before and after
the response started, connect failures, per-try timeouts, bodies sent again intact, limits (the
buffer, max_retries, the retry budget), the x-envoy-* request headers, attempt counts, and that
nothing leaks (rpx's open descriptors before and after).
"""

import hashlib
import os
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, eds_cluster, free_port,
                     http_listener, load_assignment, make_tmpdir, rds_listener, remove_tmpdir,
                     route, route_configuration, virtual_host, wait_until, xds_bootstrap)

PREVIOUS_HOSTS = [{"name": "envoy.retry_host_predicates.previous_hosts", "typed_config": {
    "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3."
             "PreviousHostsPredicate"}}]


class RetryTest(IntegrationTestCase):

    def start(self, policy, upstreams=("up",), vhost_extra=None, route_policy=True,
              cluster_extra=None):
        """rpx with one route to cluster "c" over `upstreams` (names; dead ports for names
        starting with "dead"), `policy` as the route's retry_policy (or the virtual host's with
        route_policy=False)."""
        self.ups = {}
        ports = []
        for name in upstreams:
            if name.startswith("dead"):
                ports.append(free_port())  # nothing listens there: connect fails
            else:
                self.ups[name] = self.start_echo(name)
                ports.append(self.ups[name].port)
        r = route("/", "c", timeout="20s")
        vh = virtual_host("all", ["*"], [r])
        if policy is not None:
            if route_policy:
                r["route"]["retry_policy"] = policy
            else:
                vh["retry_policy"] = policy
        if vhost_extra:
            vh.update(vhost_extra)
        c = cluster("c", ports)
        if cluster_extra:
            c.update(cluster_extra)
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap([http_listener("l", self.port, [vh])], [c]),
                                    concurrency=1)
        self.fds_before = None

    def open_fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proxy.proc.pid))

    def get(self, path, *args):
        return curl("http://127.0.0.1:%d%s" % (self.port, path), *args, timeout=30)

    def stat(self, name):
        return self.proxy.stat("cluster.c." + name)

    def assert_served_by(self, name, count):
        """`count` GETs of /x, each answered 200 by upstream `name`."""
        for _ in range(count):
            r = self.get("/x")
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["server"], name)

    def baseline_fds(self):
        """Descriptors rpx holds besides pooled upstream connections, after a first request
        (some are opened on first use)."""
        self.assertEqual(self.get("/warm-up").status, 200)
        self.fds_before = self.open_fds() - self.proxy.stat("cluster.c.upstream_cx_active")

    def assert_no_leak(self):
        # Upstream connections may stay pooled; rpx holds no more descriptors than that once
        # the connections it closed are gone.
        wait_until(lambda: self.open_fds() <= self.fds_before +
                   self.proxy.stat("cluster.c.upstream_cx_active"), timeout=10,
                   what="descriptors back to %d + pooled (now %d)" % (self.fds_before,
                                                                     self.open_fds()))

    def test_5xx_retried_and_the_answer_served(self):
        self.start({"retry_on": "5xx", "num_retries": 2})
        self.baseline_fds()
        r = self.get("/flaky/a/2/503")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.ups["up"].request_count(), 4)
        self.assertEqual(self.stat("upstream_rq_retry"), 2)
        self.assertEqual(self.stat("upstream_rq_retry_success"), 1)
        # More failures than retries: the last answer goes to the client as it came.
        r = self.get("/flaky/b/5/503")
        self.assertEqual((r.status, r.body), (503, b"status 503 from up\n"), r)
        self.assertEqual(self.stat("upstream_rq_retry_limit_exceeded"), 1)
        # A 404 is no 5xx: not retried.
        before = self.ups["up"].request_count()
        self.assertEqual(self.get("/flaky/c/1/404").status, 404)
        self.assertEqual(self.ups["up"].request_count(), before + 1)
        self.assert_no_leak()

    def test_an_upstream_failing_every_other_request_is_invisible(self):
        self.start({"retry_on": "5xx"})
        self.ups["up"].alternate = "503"
        statuses = [self.get("/x").status for _ in range(30)]
        self.assertEqual(statuses, [200] * 30)
        self.assertEqual(self.stat("upstream_rq_retry"), 30)
        self.assertEqual(self.stat("upstream_rq_5xx"), 30)  # each failed attempt is counted

    def test_reset_before_the_response_is_retried_after_it_is_not(self):
        self.start({"retry_on": "reset"})
        self.baseline_fds()
        r = self.get("/flaky/a/1/reset")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.stat("upstream_rq_retry"), 1)
        # Half the body already went to the client: the response is cut short, never retried.
        r = self.get("/flaky/b/1/partial")
        self.assertNotEqual(r.status, 0)  # the head arrived
        self.assertEqual(len(r.body), 50, r)
        self.assertEqual(self.stat("upstream_rq_retry"), 1)
        self.assert_no_leak()
        # retry_on without reset: a reset is a 502.
        self.proxy.cleanup()
        self.start({"retry_on": "retriable-4xx"})
        self.assertEqual(self.get("/flaky/c/1/reset").status, 502)

    def test_connect_failure_goes_to_another_host(self):
        self.start({"retry_on": "connect-failure", "num_retries": 3,
                    "retry_host_predicate": PREVIOUS_HOSTS,
                    "host_selection_retry_max_attempts": 5}, upstreams=("dead", "up"))
        self.baseline_fds()
        statuses = [self.get("/x").status for _ in range(12)]
        self.assertEqual(statuses, [200] * 12)
        self.assertGreaterEqual(self.stat("upstream_cx_connect_fail"), 1)
        self.assertEqual(self.stat("upstream_rq_retry"), self.stat("upstream_cx_connect_fail"))
        self.assert_no_leak()

    def test_previous_hosts_sends_the_retry_elsewhere(self):
        self.start({"retry_on": "5xx", "num_retries": 1, "retry_host_predicate": PREVIOUS_HOSTS,
                    "host_selection_retry_max_attempts": 10}, upstreams=("bad", "good"))
        self.ups["bad"].fail = "503"
        self.assert_served_by("good", 10)

    def test_per_try_timeout_moves_on_from_a_stalled_host(self):
        self.start({"retry_on": "5xx", "num_retries": 2, "per_try_timeout": "0.5s",
                    "retry_host_predicate": PREVIOUS_HOSTS,
                    "host_selection_retry_max_attempts": 10}, upstreams=("stuck", "good"))
        self.baseline_fds()
        self.ups["stuck"].fail = "stall"
        self.assert_served_by("good", 4)
        self.assertGreaterEqual(self.stat("upstream_rq_per_try_timeout"), 1)
        self.assert_no_leak()
        # No retry left: 504.
        self.proxy.cleanup()
        self.start({"retry_on": "5xx", "num_retries": 0, "per_try_timeout": "0.3s"},
                   upstreams=("stuck",))
        self.ups["stuck"].fail = "stall"
        r = self.get("/x")
        self.assertEqual(r.status, 504, r)

    def test_per_try_idle_timeout(self):
        """An attempt that gets no response byte for per_try_idle_timeout is given up and
        retried elsewhere (the route's timeout, 20 s, never comes into it)."""
        self.start({"retry_on": "reset", "num_retries": 2, "per_try_idle_timeout": "0.3s",
                    "retry_host_predicate": PREVIOUS_HOSTS,
                    "host_selection_retry_max_attempts": 10}, upstreams=("stuck", "good"))
        self.ups["stuck"].fail = "stall"
        self.assert_served_by("good", 4)
        self.assertGreaterEqual(self.stat("upstream_rq_per_try_timeout"), 1)

    def test_a_policy_pushed_over_xds_is_applied(self):
        """retry_policy in a RouteConfiguration from the control plane (RDS) and health checks and
        outlier detection in a Cluster from CDS are applied, not dropped."""
        up = {n: self.start_echo(n) for n in ("a", "b")}
        port = free_port()
        r = route("/", "c", timeout="20s")
        r["route"]["retry_policy"] = {"retry_on": "5xx", "num_retries": 2,
                                      "retry_host_predicate": PREVIOUS_HOSTS}
        c = eds_cluster("c")
        c["outlier_detection"] = {"consecutive_5xx": 2, "interval": "0.1s",
                                  "base_ejection_time": "30s", "max_ejection_percent": 50}
        xds = self.start_xds_server({"r.yaml": {
            "listeners": [rds_listener("l", port, "routes")],
            "routes": [route_configuration("routes", [virtual_host("all", ["*"], [r])])],
            "clusters": [c],
            "endpoints": [load_assignment("c", [up["a"].port, up["b"].port])]}})
        self.proxy = self.start_rpx(xds_bootstrap(xds.port, node_id="retry-node"))
        xds.wait_ack("RDS", 0, node="retry-node")
        xds.wait_ack("EDS", 0, node="retry-node")
        self.assertFalse(xds.find(r"^NACK "), xds.log_tail())
        up["a"].fail = "503"
        for _ in range(10):
            resp = curl("http://127.0.0.1:%d/x" % port, timeout=20)
            self.assertEqual(resp.status, 200, resp)
            self.assertEqual(resp.json()["server"], "b")
        self.assertGreaterEqual(self.proxy.stat("cluster.c.upstream_rq_retry"), 1)
        wait_until(lambda: self.proxy.stat("cluster.c.outlier_detection.ejections_active") == 1,
                   timeout=10, what="a ejected")
        self.assertEqual(self.proxy.stat("control_plane.ignored_fields"), 0)

    def test_a_request_body_is_sent_again_intact(self):
        self.start({"retry_on": "5xx"},
                   vhost_extra={"per_request_buffer_limit_bytes": 2 * 1024 * 1024})
        tmp = make_tmpdir("rpx-it-retry-")
        self.addCleanup(remove_tmpdir, tmp)
        body = os.urandom(1024 * 1024)
        path = os.path.join(tmp, "body")
        with open(path, "wb") as f:
            f.write(body)
        r = self.get("/flaky/post/1/503", "-X", "POST", "--data-binary", "@" + path,
                     "-H", "Content-Type: application/octet-stream")
        self.assertEqual(r.status, 200, r)
        echo = r.json()
        self.assertEqual(echo["body_length"], len(body))
        self.assertEqual(echo["body_sha256"], hashlib.sha256(body).hexdigest())
        self.assertEqual(self.ups["up"].request_count(), 2)
        # Chunked, too.
        r = self.get("/flaky/te/1/503", "-X", "POST", "--data-binary", "@" + path,
                     "-H", "Transfer-Encoding: chunked")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["body_sha256"], hashlib.sha256(body).hexdigest())

    def test_a_body_over_the_buffer_limit_is_not_retried(self):
        self.start({"retry_on": "5xx"}, vhost_extra={"per_request_buffer_limit_bytes": 1024})
        r = self.get("/flaky/big/1/503", "-X", "POST", "--data-binary", "x" * 65536)
        self.assertEqual(r.status, 503, r)
        self.assertEqual(self.stat("upstream_rq_retry"), 0)
        # A small one still is.
        r = self.get("/flaky/small/1/503", "-X", "POST", "--data-binary", "x" * 100)
        self.assertEqual(r.status, 200, r)

    def test_max_retries_and_the_budget_overflow(self):
        self.start({"retry_on": "5xx"}, cluster_extra={"circuit_breakers": {"thresholds": [
            {"max_retries": 0}]}})
        r = self.get("/flaky/a/1/503")
        self.assertEqual(r.status, 503, r)
        self.assertEqual(self.stat("upstream_rq_retry_overflow"), 1)
        self.assertEqual(self.stat("upstream_rq_retry"), 0)
        self.proxy.cleanup()
        # A budget of 0% with no minimum: no retry either; with the default minimum (3) one is.
        self.start({"retry_on": "5xx"}, cluster_extra={"circuit_breakers": {"thresholds": [
            {"retry_budget": {"budget_percent": {"value": 0}, "min_retry_concurrency": 0}}]}})
        self.assertEqual(self.get("/flaky/b/1/503").status, 503)
        self.assertEqual(self.stat("upstream_rq_retry_overflow"), 1)
        self.proxy.cleanup()
        self.start({"retry_on": "5xx"}, cluster_extra={"circuit_breakers": {"thresholds": [
            {"retry_budget": {"budget_percent": {"value": 0}}}]}})
        self.assertEqual(self.get("/flaky/c/1/503").status, 200)

    def test_request_headers_and_attempt_counts(self):
        self.start(None, vhost_extra={"include_request_attempt_count": True,
                                      "include_attempt_count_in_response": True})
        # No policy: x-envoy-retry-on asks for retries (the client is on loopback: trusted).
        r = self.get("/flaky/a/1/503", "-H", "x-envoy-retry-on: 5xx")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers.get("x-envoy-attempt-count"), "2")
        self.assertIn(["x-envoy-attempt-count", "2"], r.json()["headers"])
        r = self.get("/flaky/b/3/503", "-H", "x-envoy-retry-on: 5xx", "-H",
                     "x-envoy-max-retries: 3")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers.get("x-envoy-attempt-count"), "4")
        r = self.get("/flaky/c/1/503")
        self.assertEqual(r.status, 503)
        self.assertEqual(r.headers.get("x-envoy-attempt-count"), "1")

    def test_status_codes_headers_and_request_methods(self):
        self.start({"retry_on": "retriable-status-codes,retriable-headers",
                    "retriable_status_codes": [418],
                    "retriable_headers": [{"name": "x-failed", "string_match": {"exact": "1"}}],
                    "retriable_request_headers": [{"name": ":method",
                                                   "string_match": {"exact": "GET"}}]})
        self.assertEqual(self.get("/flaky/a/1/418").status, 200)
        self.assertEqual(self.get("/flaky/b/1/500").status, 200)  # its X-Failed: 1 header
        # A POST is not among the retriable requests.
        self.assertEqual(self.get("/flaky/c/1/418", "-X", "POST", "-d", "x").status, 418)

    def test_virtual_host_policy_and_route_override(self):
        self.start({"retry_on": "5xx"}, route_policy=False)
        self.assertEqual(self.get("/flaky/a/1/503").status, 200)

    def test_bad_policies_are_refused_with_the_field(self):
        cases = [
            ({"retry_on": "5xx,sometimes"}, "retry_policy.retry_on: unknown retry condition "
             "'sometimes'"),
            ({"retry_on": "5xx", "retry_priority": {"name": "envoy.retry_priorities."
                                                    "previous_priorities"}},
             "retry_priority"),
        ]
        for policy, want in cases:
            with self.subTest(want=want):
                self.assert_cluster_refused({}, want,
                                            "virtual_hosts[0].routes[0].route.retry_policy",
                                            route_action={"retry_policy": policy})

if __name__ == "__main__":
    unittest.main()
