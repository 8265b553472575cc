"""Envoy's admin paths as their consumers read them: /stats with filter, usedonly and JSON,
/stats/prometheus through prometheus_client's parser (the Debian package), /listeners and
/clusters as text and JSON."""

import json
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, free_port, http_listener,
                     route, virtual_host)

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # reported by the test that needs it
    text_string_to_metric_families = None


class AdminTest(IntegrationTestCase):

    def setUp(self):
        super().setUp()
        self.up = self.start_echo("up")
        self.port = free_port()
        cfg = bootstrap(
            [http_listener("front", self.port, [virtual_host("all", ["*"], [
                route("/", "web.v1")])], stat_prefix="ingress")],
            [cluster("web.v1", self.up.port, max_connections=7, max_pending_requests=8,
                     max_requests=9),
             cluster("idle", [self.up.port, free_port()])])
        self.proxy = self.start_rpx(cfg)
        for i in range(3):
            self.assertEqual(curl("http://127.0.0.1:%d/r%d" % (self.port, i)).status, 200)

    def get(self, path):
        status, body = self.proxy.admin("GET", path)
        return status, body.decode()

    def test_stats_filter_usedonly_and_json(self):
        status, body = self.get("/stats?filter=%5Ecluster%5C.web%5C.v1%5C.upstream_rq_")
        self.assertEqual(status, 200)
        lines = dict(l.split(": ") for l in body.splitlines())
        self.assertEqual(lines["cluster.web.v1.upstream_rq_total"], "3")
        self.assertEqual(lines["cluster.web.v1.upstream_rq_2xx"], "3")
        self.assertTrue(all(k.startswith("cluster.web.v1.upstream_rq_") for k in lines), lines)
        status, body = self.get("/stats?usedonly")
        used = dict(l.split(": ") for l in body.splitlines())
        self.assertNotIn("cluster.idle.upstream_rq_total", used)
        self.assertEqual(used["http.ingress.downstream_rq_2xx"], "3")
        self.assertTrue(all(v != "0" for v in used.values()))
        status, body = self.get("/stats?format=json&filter=downstream_rq_total")
        self.assertEqual(status, 200)
        stats = {s["name"]: s["value"] for s in json.loads(body)["stats"]}
        self.assertEqual(stats["http.ingress.downstream_rq_total"], 3)
        status, body = self.get("/stats?filter=(unclosed")
        self.assertEqual(status, 400)
        self.assertIn("invalid filter regex", body)

    def test_prometheus_parses_with_envoys_tags(self):
        if text_string_to_metric_families is None:
            self.fail("python3-prometheus-client is not installed (tools/setup.sh installs it)")
        status, body = self.get("/stats/prometheus")
        self.assertEqual(status, 200)
        families = {f.name: f for f in text_string_to_metric_families(body)}
        rq = families["envoy_cluster_upstream_rq_xx"]
        self.assertEqual(rq.type, "counter")
        samples = {(s.labels["envoy_cluster_name"], s.labels["envoy_response_code_class"]): s.value
                   for s in rq.samples if not s.name.endswith("_created")}
        self.assertEqual(samples[("web.v1", "2")], 3)
        drq = families["envoy_http_downstream_rq_xx"]
        vals = {(s.labels["envoy_http_conn_manager_prefix"], s.labels["envoy_response_code_class"]):
                s.value for s in drq.samples}
        self.assertEqual(vals[("ingress", "2")], 3)
        self.assertEqual(families["envoy_cluster_upstream_cx_active"].type, "gauge")
        self.assertEqual(families["envoy_server_live"].samples[0].value, 1)
        # Histograms in Envoy's buckets: three requests through web.v1.
        for name in ("envoy_cluster_upstream_rq_time", "envoy_http_downstream_rq_time",
                     "envoy_cluster_upstream_cx_connect_ms"):
            fam = families[name]
            self.assertEqual(fam.type, "histogram", name)
            les = [s.labels["le"] for s in fam.samples if s.name.endswith("_bucket") and
                   s.labels.get("envoy_cluster_name", "web.v1") == "web.v1" and
                   s.labels.get("envoy_http_conn_manager_prefix", "ingress") == "ingress"]
            self.assertEqual(les[:3], ["0.5", "1", "5"], name)
            self.assertEqual(les[-1], "+Inf")
        counts = {s.labels.get("envoy_cluster_name"): s.value
                  for s in families["envoy_cluster_upstream_rq_time"].samples
                  if s.name.endswith("_count")}
        self.assertEqual(counts["web.v1"], 3)
        self.assertEqual(counts["idle"], 0)
        dcount = [s.value for s in families["envoy_http_downstream_rq_time"].samples
                  if s.name.endswith("_count")]
        self.assertEqual(dcount, [3])
        # The same through /stats?format=prometheus, and filtered.
        status, body = self.get("/stats?format=prometheus&filter=upstream_cx_total")
        names = {f.name for f in text_string_to_metric_families(body)}
        # (the parser names a counter family without its "_total")
        self.assertEqual(names, {"envoy_cluster_upstream_cx"})

    def test_listeners_and_clusters(self):
        status, body = self.get("/listeners")
        self.assertEqual((status, body), (200, "front::127.0.0.1:%d\n" % self.port))
        status, body = self.get("/listeners?format=json")
        self.assertEqual(json.loads(body), {"listener_statuses": [{
            "name": "front",
            "local_address": {"socket_address": {"address": "127.0.0.1",
                                                 "port_value": self.port}}}]})
        status, body = self.get("/clusters")
        self.assertIn("web.v1::default_priority::max_connections::7\n", body)
        self.assertIn("web.v1::127.0.0.1:%d::health_flags::healthy\n" % self.up.port, body)
        status, body = self.get("/clusters?format=json")
        statuses = {c["name"]: c for c in json.loads(body)["cluster_statuses"]}
        self.assertEqual(set(statuses), {"web.v1", "idle"})
        web = statuses["web.v1"]
        self.assertEqual(web["circuit_breakers"]["thresholds"][0]["max_requests"], 9)
        self.assertEqual([h["address"]["socket_address"]["port_value"]
                          for h in web["host_statuses"]], [self.up.port])
        self.assertEqual(len(statuses["idle"]["host_statuses"]), 2)

    def test_clusters_counts_per_host(self):
        # Another proxy: two hosts (one dead), a route with a timeout.
        dead = free_port()
        port = free_port()
        cfg = bootstrap(
            [http_listener("hosts", port, [virtual_host("all", ["*"], [
                route("/slow", "live", timeout="0.5s"), route("/dead", "dead"),
                route("/", "live")])])],
            [cluster("live", self.up.port), cluster("dead", dead)])
        proxy = self.start_rpx(cfg, concurrency=2)
        for i in range(5):
            self.assertEqual(curl("http://127.0.0.1:%d/ok%d" % (port, i)).status, 200)
        self.assertEqual(curl("http://127.0.0.1:%d/status/503" % port).status, 503)
        self.assertEqual(curl("http://127.0.0.1:%d/slow/3" % port).status, 504)
        self.assertEqual(curl("http://127.0.0.1:%d/dead" % port).status, 503)
        status, body = proxy.admin("GET", "/clusters")
        text = body.decode()
        live = "live::127.0.0.1:%d::" % self.up.port
        stat = {l[len(live):].split("::")[0]: l.split("::")[-1]
                for l in text.splitlines() if l.startswith(live)}
        self.assertEqual(stat["rq_total"], "7", text)
        self.assertEqual(stat["rq_success"], "5")
        self.assertEqual(stat["rq_error"], "1")
        self.assertEqual(stat["rq_timeout"], "1")
        self.assertEqual(stat["cx_connect_fail"], "0")
        self.assertGreaterEqual(int(stat["cx_total"]), 1)
        self.assertIn("dead::127.0.0.1:%d::cx_connect_fail::1\n" % dead, text)
        # Envoy's order: counters and gauges first, then the host's attributes.
        keys = list(stat)
        self.assertEqual(keys[:8], ["cx_active", "cx_connect_fail", "cx_total", "rq_active",
                                    "rq_error", "rq_success", "rq_timeout", "rq_total"])
        status, body = proxy.admin("GET", "/clusters?format=json")
        statuses = {c["name"]: c for c in json.loads(body)["cluster_statuses"]}
        (host,) = statuses["live"]["host_statuses"]
        metrics = {m["name"]: m for m in host["stats"]}
        self.assertEqual(metrics["rq_total"]["value"], "7")
        self.assertEqual(metrics["rq_error"]["value"], "1")
        self.assertEqual(metrics["cx_active"]["type"], "GAUGE")
        proxy.check_clean_exit()

    def test_logging_memory_and_server_info(self):
        self.assertEqual(self.get("/logging"), (200, "active loggers:\n  rpx: warning\n"))
        self.assertEqual(self.get("/logging?level=debug")[0], 405)  # changing it needs POST
        status, body = self.proxy.admin("POST", "/logging?level=debug")
        self.assertEqual((status, body), (200, b"active loggers:\n  rpx: debug\n"))
        self.assertEqual(self.proxy.admin("POST", "/logging?http=debug")[0], 404)
        self.assertEqual(self.proxy.admin("POST", "/logging?level=loud")[0], 400)
        info = json.loads(self.get("/server_info")[1])
        self.assertEqual(info["state"], "LIVE")
        self.assertEqual(info["command_line_options"]["log_level"], "debug")
        self.assertRegex(info["uptime_current_epoch"], r"^\d+s$")
        memory = json.loads(self.get("/memory")[1])
        for key in ("allocated", "heap_size", "pageheap_free", "total_physical_bytes"):
            self.assertGreaterEqual(int(memory[key]), 0, key)
        # malloc's counters read 0 under ASan (its own allocator); the RSS is always there.
        self.assertGreater(int(memory["total_physical_bytes"]), 1 << 20)


if __name__ == "__main__":
    unittest.main()
