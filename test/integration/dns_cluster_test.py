"""Clusters whose endpoints are DNS names: STRICT_DNS (every address of the answer) and
LOGICAL_DNS (one host: the first address), with dns_lookup_family, as Envoy's examples configure
them ("localhost" here, resolved by the system resolver)."""

import json
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, free_port, http_listener,
                     route, virtual_host)


def dns_cluster(name, port, kind, family=None):
    c = cluster(name, port, extra={"type": kind})
    c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
        "socket_address"]["address"] = "localhost"
    if family:
        c["dns_lookup_family"] = family
    return c


class DnsClusterTest(IntegrationTestCase):

    def setUp(self):
        super().setUp()
        self.up = self.start_echo("up")  # on 127.0.0.1 only
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("l", self.port, [virtual_host("all", ["*"], [
                route("/logical", "logical"),
                route("/strict", "strict"),
                route("/v6", "v6"),
            ])])],
            [dns_cluster("logical", self.up.port, "LOGICAL_DNS", "V4_ONLY"),
             dns_cluster("strict", self.up.port, "strict_dns", "V4_ONLY"),
             dns_cluster("v6", self.up.port, "LOGICAL_DNS", "V6_ONLY")]))

    def test_logical_and_strict_dns_reach_the_upstream(self):
        for path in ("/logical", "/strict"):
            r = curl("http://127.0.0.1:%d%s" % (self.port, path))
            self.assertEqual(r.status, 200, path)
            self.assertEqual(r.json()["server"], "up")
        hosts = self.hosts()
        self.assertEqual(hosts["logical"], ["127.0.0.1:%d" % self.up.port])  # one host, IPv4

    def hosts(self):
        status, body = self.proxy.admin("GET", "/clusters?format=json")
        self.assertEqual(status, 200)
        return {c["name"]: ["%s:%d" % (h["address"]["socket_address"]["address"],
                                      h["address"]["socket_address"]["port_value"])
                            for h in c["host_statuses"]]
                for c in json.loads(body)["cluster_statuses"]}

    def test_lookup_family_is_honoured(self):
        # localhost's IPv6 address (::1, when the machine has one) has no listener: with V6_ONLY
        # the request fails, which shows IPv4 was not used.
        r = curl("http://127.0.0.1:%d/v6" % self.port)
        self.assertEqual(r.status, 503)
        self.assertEqual(self.proxy.stat("cluster.v6.upstream_rq_2xx"), 0)
        # Whatever this machine resolves localhost to, no IPv4 address is in the V6_ONLY
        # cluster, and the V4_ONLY STRICT_DNS one holds only IPv4 (fails if the family is ignored).
        hosts = self.hosts()
        self.assertFalse([h for h in hosts["v6"] if not h.startswith("::")], hosts["v6"])
        self.assertTrue(hosts["strict"])
        self.assertFalse([h for h in hosts["strict"] if not h.startswith("127.")], hosts["strict"])


if __name__ == "__main__":
    unittest.main()
