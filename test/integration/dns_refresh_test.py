"""DNS clusters resolved asynchronously and refreshed, against a fake DNS server (harness
FakeDnsServer) whose answers change under the running proxy: the host set follows a changed
answer, a failed resolution keeps the last good hosts, respect_dns_ttl and
dns_failure_refresh_rate pick the next refresh, LOGICAL_DNS follows the newest answer,
dns_lookup_family picks A or AAAA, CDS clusters are refreshed too, and a DNS server that never
answers stalls nothing.

Two upstreams share a port on two loopback addresses (127.0.0.1 and 127.0.0.2), so a DNS answer
alone decides which one a request reaches. No assertion is on a duration: "eventually" is
wait_until with generous bounds."""

import json
import socket
import time
import unittest

from harness import (IntegrationTestCase, EchoUpstream, FakeDnsServer, bootstrap, cluster, curl,
                     dns_resolver_config, free_port, http_listener, route, virtual_host,
                     wait_until, xds_bootstrap)


def dns_cluster(name, hostname, port, dns_port, kind="STRICT_DNS", family="V4_ONLY",
                refresh="0.2s", extra=None):
    c = cluster(name, port, extra={"type": kind})
    c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
        "socket_address"]["address"] = hostname
    c["dns_lookup_family"] = family
    if refresh:
        c["dns_refresh_rate"] = refresh
    c["typed_dns_resolver_config"] = dns_resolver_config(dns_port)
    c.update(extra or {})
    return c


def has_ipv6_loopback():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        try:
            s.bind(("::1", 0))
            return True
        finally:
            s.close()
    except OSError:
        return False


class DnsRefreshTest(IntegrationTestCase):

    def setUp(self):
        super().setUp()
        self.dns = self.start_dns_server()
        self.a = self.start_echo("a")  # 127.0.0.1:P
        self.b = EchoUpstream("b", host="127.0.0.2", port=self.a.port)  # 127.0.0.2:P
        self.addCleanup(self.b.stop)
        self.port = free_port()

    def start(self, *clusters):
        routes = [route("/" + c["name"], c["name"]) for c in clusters]
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("l", self.port, [virtual_host("all", ["*"], routes)])], list(clusters)))
        return self.proxy

    def server(self, cluster_name):
        """Which upstream answered a request through `cluster_name` (None: no 200)."""
        r = curl("http://127.0.0.1:%d/%s" % (self.port, cluster_name))
        return r.json()["server"] if r.status == 200 else None

    def hosts(self, cluster_name):
        status, body = self.proxy.admin("GET", "/clusters?format=json")
        self.assertEqual(status, 200)
        for c in json.loads(body)["cluster_statuses"]:
            if c["name"] == cluster_name:
                return sorted("%s:%d" % (h["address"]["socket_address"]["address"],
                                         h["address"]["socket_address"]["port_value"])
                              for h in c.get("host_statuses", []))
        return None

    def stat(self, cluster_name, name):
        return self.proxy.stats().get("cluster.%s.%s" % (cluster_name, name), 0)

    def test_host_set_follows_a_changed_answer(self):
        self.dns.set("svc.test", [("127.0.0.1", 30)])
        self.start(dns_cluster("svc", "svc.test", self.a.port, self.dns.port))
        self.assertEqual(self.server("svc"), "a")
        self.assertEqual(self.hosts("svc"), ["127.0.0.1:%d" % self.a.port])
        # Unchanged answers are counted, not published again.
        wait_until(lambda: self.stat("svc", "update_no_rebuild") >= 2, timeout=20,
                   what="refreshes that change nothing")
        self.dns.set("svc.test", [("127.0.0.2", 30)])
        wait_until(lambda: self.server("svc") == "b", timeout=20, what="requests reaching b")
        self.assertEqual(self.hosts("svc"), ["127.0.0.2:%d" % self.a.port])
        # Both: every address of the answer.
        self.dns.set("svc.test", [("127.0.0.1", 30), ("127.0.0.2", 30)])
        wait_until(lambda: len(self.hosts("svc")) == 2, timeout=20, what="two hosts")
        self.assertGreaterEqual(self.stat("svc", "update_attempt"),
                                self.stat("svc", "update_success"))
        self.assertEqual(self.stat("svc", "update_failure"), 0)
        # Envoy's names, in the Prometheus output too, tagged with the cluster.
        status, body = self.proxy.admin("GET", "/stats/prometheus")
        self.assertEqual(status, 200)
        self.assertIn(b'envoy_cluster_update_success{envoy_cluster_name="svc"}', body)
        self.assertIn(b'envoy_cluster_update_no_rebuild{envoy_cluster_name="svc"}', body)

    def test_failed_resolution_keeps_the_last_good_hosts(self):
        self.dns.set("svc.test", [("127.0.0.1", 30)])
        self.start(dns_cluster("svc", "svc.test", self.a.port, self.dns.port))
        good = self.hosts("svc")
        for mode in ("servfail", "nxdomain"):
            failures = self.stat("svc", "update_failure")
            self.dns.mode = mode
            wait_until(lambda: self.stat("svc", "update_failure") >= failures + 2, timeout=30,
                       what="failed refreshes (%s)" % mode)
            self.assertEqual(self.hosts("svc"), good, mode)
            self.assertEqual(self.server("svc"), "a", mode)
        # A name with no address of the family asked for is a failure too.
        failures = self.stat("svc", "update_failure")
        self.dns.mode = "answer"
        self.dns.set("svc.test", [("::1", 30)])
        wait_until(lambda: self.stat("svc", "update_failure") >= failures + 2, timeout=30,
                   what="failed refreshes (no A record)")
        self.assertEqual(self.hosts("svc"), good)
        # Recovery.
        self.dns.set("svc.test", [("127.0.0.2", 30)])
        wait_until(lambda: self.server("svc") == "b", timeout=20, what="requests reaching b")

    def test_respect_dns_ttl_refreshes_when_the_answer_expires(self):
        # dns_refresh_rate is an hour: only the answer's TTL (1 s) brings the change in.
        self.dns.set("svc.test", [("127.0.0.1", 1)])
        self.start(dns_cluster("svc", "svc.test", self.a.port, self.dns.port, refresh="3600s",
                               extra={"respect_dns_ttl": True}))
        self.assertEqual(self.server("svc"), "a")
        self.dns.set("svc.test", [("127.0.0.2", 1)])
        wait_until(lambda: self.server("svc") == "b", timeout=30, what="requests reaching b")

    def test_failure_refresh_rate_retries_soon_and_recovers(self):
        # dns_refresh_rate is an hour; after a failure dns_failure_refresh_rate (200 ms, backing
        # off to 1 s) asks again soon.
        self.dns.mode = "servfail"
        self.start(dns_cluster("svc", "svc.test", self.a.port, self.dns.port, refresh="3600s",
                               extra={"dns_failure_refresh_rate": {"base_interval": "0.2s",
                                                                   "max_interval": "1s"}}))
        self.assertEqual(self.hosts("svc"), [])  # ready after its first (failed) round
        self.assertGreaterEqual(self.stat("svc", "update_failure"), 1)
        asked = self.dns.queries("svc.test")
        wait_until(lambda: self.dns.queries("svc.test") > asked, timeout=30,
                   what="another query after the failure")
        self.dns.mode = "answer"
        self.dns.set("svc.test", [("127.0.0.1", 30)])
        wait_until(lambda: self.server("svc") == "a", timeout=30, what="requests reaching a")
        self.assertGreaterEqual(self.stat("svc", "update_success"), 1)

    def test_logical_dns_uses_one_address_and_follows_the_newest_answer(self):
        self.dns.set("svc.test", [("127.0.0.1", 30), ("127.0.0.2", 30)])
        self.start(dns_cluster("svc", "svc.test", self.a.port, self.dns.port, kind="LOGICAL_DNS"))
        self.assertEqual(self.hosts("svc"), ["127.0.0.1:%d" % self.a.port])
        self.assertEqual(self.server("svc"), "a")
        self.dns.set("svc.test", [("127.0.0.2", 30), ("127.0.0.1", 30)])
        wait_until(lambda: self.hosts("svc") == ["127.0.0.2:%d" % self.a.port], timeout=20,
                   what="the logical host following the answer")
        # New connections go to the newest answer's first address.
        wait_until(lambda: self.server("svc") == "b", timeout=20, what="requests reaching b")

    def test_lookup_family_asks_for_a_or_aaaa(self):
        if not has_ipv6_loopback():
            raise unittest.SkipTest("no IPv6 loopback on this machine")
        v6 = EchoUpstream("v6", host="::1", port=self.a.port)
        self.addCleanup(v6.stop)
        self.dns.set("v4.test", [("127.0.0.1", 30), ("::1", 30)])
        self.dns.set("v6.test", [("127.0.0.1", 30), ("::1", 30)])
        self.start(dns_cluster("v4", "v4.test", self.a.port, self.dns.port, family="V4_ONLY"),
                   dns_cluster("v6", "v6.test", self.a.port, self.dns.port, family="V6_ONLY"))
        self.assertEqual(self.hosts("v4"), ["127.0.0.1:%d" % self.a.port])
        self.assertEqual(self.hosts("v6"), ["::1:%d" % self.a.port])
        self.assertEqual(self.server("v4"), "a")
        self.assertEqual(self.server("v6"), "v6")
        self.assertEqual(self.dns.queries("v4.test", FakeDnsServer.AAAA), 0)
        self.assertEqual(self.dns.queries("v6.test", FakeDnsServer.A), 0)

    def test_resolution_over_tcp(self):
        self.dns.set("svc.test", [("127.0.0.1", 30)])
        c = dns_cluster("svc", "svc.test", self.a.port, self.dns.port)
        c["typed_dns_resolver_config"] = dns_resolver_config(self.dns.port, use_tcp=True)
        self.start(c)
        # Listeners open after at most 5 s of waiting for the first round; on a loaded machine
        # (the whole suite at once) the TCP round once took longer, so wait for its answer.
        wait_until(lambda: self.server("svc") == "a", timeout=20, what="requests reaching a")

    def test_a_silent_dns_server_stalls_nothing(self):
        self.dns.set("svc.test", [("127.0.0.1", 30)])
        self.start(dns_cluster("svc", "svc.test", self.a.port, self.dns.port))
        good = self.hosts("svc")
        self.dns.mode = "drop"
        asked = self.dns.queries("svc.test")
        wait_until(lambda: self.dns.queries("svc.test") > asked + 1, timeout=20,
                   what="queries to the silent server")
        # A round is waiting for its answer, and the main thread still answers.
        wait_until(lambda: self.stat("svc", "update_attempt") >
                   self.stat("svc", "update_success") + self.stat("svc", "update_failure"),
                   timeout=20, what="a round in flight")
        for _ in range(3):
            self.assertEqual(self.proxy.admin("GET", "/ready")[0], 200)
            self.assertEqual(self.proxy.admin("GET", "/stats")[0], 200)
        self.assertEqual(self.hosts("svc"), good)
        self.assertEqual(self.server("svc"), "a")

    def test_a_dead_dns_server_does_not_hold_startup_forever(self):
        # No answer ever: /ready turns 200 once the bounded wait for the first round is over
        # (the harness waits for it), with no hosts.
        self.dns.mode = "drop"
        self.start(dns_cluster("svc", "svc.test", self.a.port, self.dns.port))
        self.assertEqual(self.hosts("svc"), [])
        self.assertEqual(self.stat("svc", "update_success"), 0)

    def test_validate_mode_resolves_nothing_and_bad_values_name_the_field(self):
        self.dns.set("svc.test", [("127.0.0.1", 30)])
        config = bootstrap(
            [http_listener("l", self.port, [virtual_host("all", ["*"], [route("/", "svc")])])],
            [dns_cluster("svc", "svc.test", self.a.port, self.dns.port)])
        cp = self.validate(config)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertEqual(self.dns.queries("svc.test"), 0)

        bad = dns_cluster("svc", "svc.test", self.a.port, self.dns.port, refresh="0.0001s")
        config["static_resources"]["clusters"] = [bad]
        self.assert_refused(config, "clusters[0].dns_refresh_rate: must be at least 1ms")
        bad = dns_cluster("svc", "svc.test", self.a.port, self.dns.port)
        bad["typed_dns_resolver_config"]["typed_config"]["resolvers"][0]["socket_address"][
            "address"] = "ns.example.com"
        config["static_resources"]["clusters"] = [bad]
        self.assert_refused(config, "typed_dns_resolver_config.typed_config.resolvers[0]."
                                    "socket_address.address: 'ns.example.com' is not an IP")


class CdsDnsClusterTest(IntegrationTestCase):
    NODE = "dns-node"

    def setUp(self):
        super().setUp()
        self.dns = self.start_dns_server()
        self.a = self.start_echo("a")
        self.b = EchoUpstream("b", host="127.0.0.2", port=self.a.port)
        self.addCleanup(self.b.stop)
        self.port = free_port()
        self.listener = http_listener("l", self.port, [virtual_host("all", ["*"], [
            route("/", "svc")])])

    def test_a_cds_strict_dns_cluster_warms_is_refreshed_and_bad_values_are_nacked(self):
        self.dns.set("svc.test", [("127.0.0.1", 30)])
        files = {"clusters": [dns_cluster("svc", "svc.test", self.a.port, self.dns.port)],
                 "listeners": [self.listener]}
        xds = self.start_xds_server({"r.yaml": files})
        proxy = self.start_rpx(xds_bootstrap(xds.port, node_id=self.NODE))
        xds.wait_ack("CDS", 0, node=self.NODE)
        xds.wait_ack("LDS", 0, node=self.NODE)

        def server():
            r = curl("http://127.0.0.1:%d/" % self.port)
            return r.json()["server"] if r.status == 200 else None

        wait_until(lambda: server() == "a", timeout=20, what="requests reaching a")
        self.dns.set("svc.test", [("127.0.0.2", 30)])
        wait_until(lambda: server() == "b", timeout=20, what="requests reaching b")
        stats = proxy.stats()
        self.assertGreaterEqual(stats.get("cluster.svc.update_success", 0), 2)

        # Over xDS the same checks NACK the cluster; the accepted one keeps serving.
        bad = dns_cluster("svc", "svc.test", self.a.port, self.dns.port, refresh="0.0001s")
        mark = xds.write_resources("r.yaml", clusters=[bad], listeners=[self.listener])
        version, error = xds.wait_nack("CDS", mark, node=self.NODE)
        self.assertIn("Cluster 'svc'.dns_refresh_rate: must be at least 1ms", error)
        self.assertEqual(server(), "b")

        # Removed: its refresher stops asking.
        mark = xds.write_resources("r.yaml", clusters=[], listeners=[self.listener])
        xds.wait_ack("CDS", mark, node=self.NODE)
        wait_until(lambda: "cluster.svc.update_attempt" not in proxy.stats(), timeout=20,
                   what="the removed cluster's stats gone")
        asked = self.dns.queries("svc.test")
        # Five of its refresh periods bring no query (one already on its way may still land).
        time.sleep(1.0)
        self.assertLessEqual(self.dns.queries("svc.test"), asked + 1)


if __name__ == "__main__":
    unittest.main()
