"""Outlier detection (Cluster.outlier_detection, Envoy's fields) against real upstreams that fail
on cue: ejection after consecutive 5xx (and refused connections, counted as 5xx or, split, as
local-origin failures), the return after base_ejection_time and the longer ejection the next
time, max_ejection_percent, failure-percentage ejection, /clusters and the outlier stats.
"""

import os
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, free_port, http_listener,
                     route, virtual_host, wait_until)


def outlier(**extra):
    o = {"consecutive_5xx": 3, "interval": "0.1s", "base_ejection_time": "1s",
         "max_ejection_percent": 50}
    o.update(extra)
    return o


class OutlierDetectionTest(IntegrationTestCase):

    def start(self, names, detection):
        self.ups = {}
        ports = []
        for n in names:
            if n.startswith("dead"):
                ports.append(free_port())
            else:
                self.ups[n] = self.start_echo(n)
                ports.append(self.ups[n].port)
        c = cluster("c", ports)
        c["outlier_detection"] = detection
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap([http_listener("l", self.port, [
            virtual_host("all", ["*"], [route("/", "c")])])], [c]), concurrency=2)

    def stat(self, name):
        return self.proxy.stat("cluster.c.outlier_detection." + name)

    def get(self):
        return curl("http://127.0.0.1:%d/x" % self.port, timeout=20)

    def until(self, predicate, what, limit=200):
        """Sends requests until `predicate()` holds (at most `limit`)."""
        for _ in range(limit):
            if predicate():
                return
            self.get()
        self.assertTrue(predicate(), what)

    def served(self, count):
        seen = {}
        for _ in range(count):
            r = self.get()
            self.assertEqual(r.status, 200, r)
            name = r.json()["server"]
            seen[name] = seen.get(name, 0) + 1
        return seen

    def open_fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proxy.proc.pid))

    def test_consecutive_5xx_ejects_and_the_host_comes_back(self):
        self.start(("a", "b", "c"), outlier())
        self.served(3)
        fds_before = self.open_fds() - self.proxy.stat("cluster.c.upstream_cx_active")
        self.ups["b"].fail = "503"
        self.until(lambda: self.stat("ejections_active") == 1, "b ejected")
        self.assertEqual(self.stat("ejections_enforced_consecutive_5xx"), 1)
        status, body = self.proxy.admin("GET", "/clusters")
        self.assertIn("c::127.0.0.1:%d::health_flags::/failed_outlier_check" % self.ups["b"].port,
                      body.decode())
        self.assertEqual(set(self.served(12)), {"a", "c"})
        # Back after base_ejection_time (1 s), still failing: ejected again. (How long the
        # second ejection lasts depends on whether an interval in service passed in between, which
        # this test does not control: outlier_detector_test checks the growth.)
        wait_until(lambda: self.stat("ejections_active") == 0, timeout=10, what="b back")
        self.until(lambda: self.stat("ejections_enforced_total") == 2, "b ejected again")
        self.assertRegex(self.proxy.stderr_text(),
                         r"host 127\.0\.0\.1:%d ejected for 1000 ms \(consecutive_5xx, "
                         r"ejection 1 in a row\)" % self.ups["b"].port)
        # Healthy again: back in the rotation once its time is up.
        self.ups["b"].fail = None
        wait_until(lambda: self.stat("ejections_active") == 0, timeout=10, what="b back")
        self.assertIn("b", self.served(12))
        # No descriptor leaked through the ejections (pooled connections may stay).
        wait_until(lambda: self.open_fds() <= fds_before +
                   self.proxy.stat("cluster.c.upstream_cx_active"), timeout=10,
                   what="descriptors back to %d + pooled (now %d)" % (fds_before,
                                                                     self.open_fds()))

    def test_max_ejection_percent(self):
        self.start(("a", "b", "c"), outlier(base_ejection_time="30s"))
        self.ups["b"].fail = "503"
        self.ups["c"].fail = "503"
        self.until(lambda: self.stat("ejections_overflow") >= 1, "the second ejection refused")
        self.assertEqual(self.stat("ejections_active"), 1)  # 50% of 3: one host, not two

    def test_refused_connections_count_as_5xx_or_as_local_origin_failures(self):
        self.start(("a", "dead"), outlier(consecutive_5xx=2))
        self.assertEqual(self.get().status in (200, 503), True)
        fds_before = self.open_fds() - self.proxy.stat("cluster.c.upstream_cx_active")
        self.until(lambda: self.stat("ejections_active") == 1, "the dead host ejected")
        self.assertEqual(self.stat("ejections_enforced_consecutive_5xx"), 1)
        self.assertEqual(set(self.served(10)), {"a"})
        wait_until(lambda: self.open_fds() <= fds_before +
                   self.proxy.stat("cluster.c.upstream_cx_active"), timeout=10,
                   what="descriptors back (refused connects leave none)")
        self.proxy.cleanup()
        # Split: they count as local-origin failures, and 5xx streaks are their own.
        self.start(("a", "dead"), outlier(split_external_local_origin_errors=True,
                                          consecutive_local_origin_failure=2))
        self.until(lambda: self.stat("ejections_active") == 1, "the dead host ejected")
        self.assertEqual(self.stat("ejections_enforced_consecutive_local_origin_failure"), 1)
        self.assertEqual(self.stat("ejections_enforced_consecutive_5xx"), 0)

    def test_failure_percentage(self):
        # b fails every other request: never 3 in a row, but 50% of them.
        self.start(("a", "b", "c"), outlier(
            consecutive_5xx=1000, failure_percentage_threshold=40, enforcing_failure_percentage=100,
            failure_percentage_minimum_hosts=3, failure_percentage_request_volume=5,
            interval="0.5s"))
        self.ups["b"].alternate = "503"
        self.until(lambda: self.stat("ejections_active") == 1, "b ejected", limit=400)
        self.assertEqual(self.stat("ejections_enforced_failure_percentage"), 1)
        self.assertEqual(self.stat("ejections_enforced_consecutive_5xx"), 0)
        self.assertEqual(set(self.served(10)), {"a", "c"})

    def test_enforcing_zero_detects_without_ejecting(self):
        self.start(("a", "b"), outlier(consecutive_5xx=2, enforcing_consecutive_5xx=0,
                                       max_ejection_percent=100))
        self.ups["b"].fail = "503"
        self.until(lambda: self.stat("ejections_detected_consecutive_5xx") >= 1, "detected")
        self.assertEqual(self.stat("ejections_active"), 0)

    def test_bad_settings_are_refused_with_the_field(self):
        for detection, want in [
                ({"max_ejection_percent": 150},
                 "clusters[0].outlier_detection.max_ejection_percent: must be within [0, 100]"),
                ({"interval": "0s"}, "clusters[0].outlier_detection.interval: must be at least 1ms"),
                ({"enforcing_local_origin_success_rate": 100},
                 "outlier_detection.enforcing_local_origin_success_rate: success rates of "
                 "local-origin errors are not judged separately yet")]:
            with self.subTest(want=want):
                self.assert_cluster_refused({"outlier_detection": detection}, want)


if __name__ == "__main__":
    unittest.main()
