"""Consistent hashing (lb_policy RING_HASH and MAGLEV with the route's hash_policy): the same key
reaches the same host over any connection (so on either worker) and after a restart; taking one
host out of ten moves its keys and no others on the ring (about a tenth; a few more with
Maglev); adding one moves about 1/11, all to the new host; header, cookie (made with a ttl), source IP and query parameter
policies; configurations rpx refuses by name.
"""

import http.client
import json
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, free_port, http_listener, route,
                     virtual_host)

KEYS = ["user-%d" % i for i in range(1000)]


class HashingTest(IntegrationTestCase):

    def setUp(self):
        super().setUp()
        self.ups = []

    def upstreams(self, n):
        while len(self.ups) < n:
            self.ups.append(self.start_echo("u%d" % len(self.ups)))
        return self.ups[:n]

    def start(self, ups, policy="RING_HASH", hash_policy=None, extra=None):
        c = cluster("c", [u.port for u in ups], lb_policy=policy)
        if extra:
            c.update(extra)
        r = route("/", "c")
        r["route"]["hash_policy"] = hash_policy if hash_policy is not None else [
            {"header": {"header_name": "x-user"}}]
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap([http_listener("l", self.port, [
            virtual_host("all", ["*"], [r])])], [c]), concurrency=2)
        return self.proxy

    def placement(self, keys, connections=4):
        """key -> the upstream that served it, each key asked over two different connections
        (spread over the workers by SO_REUSEPORT), which must agree."""
        conns = [http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
                 for _ in range(connections)]
        out = {}
        try:
            for i, k in enumerate(keys):
                seen = set()
                for c in (conns[i % connections], conns[(i + 1) % connections]):
                    c.request("GET", "/x", headers={"x-user": k})
                    resp = c.getresponse()
                    body = resp.read()
                    self.assertEqual(resp.status, 200, body)
                    seen.add(json.loads(body)["server"])
                self.assertEqual(len(seen), 1, (k, seen))
                out[k] = seen.pop()
        finally:
            for c in conns:
                c.close()
        return out

    def moved(self, before, after):
        return [k for k in before if before[k] != after[k]]

    def test_ring_hash_is_stable_and_moves_only_what_it_must(self):
        ten = self.upstreams(10)
        self.start(ten)
        first = self.placement(KEYS)
        self.assertEqual(len(set(first.values())), 10)  # every host has keys
        self.assertEqual(self.placement(KEYS), first)  # again
        self.proxy.cleanup()
        self.start(ten)  # a restart
        self.assertEqual(self.placement(KEYS), first)
        self.proxy.cleanup()
        # One host out: its keys move, no other (the other hosts keep their ring points).
        self.start(ten[:9])
        nine = self.placement(KEYS)
        moved = self.moved(first, nine)
        self.assertEqual(sorted(moved), sorted(k for k in KEYS if first[k] == "u9"))
        self.assertTrue(0.04 <= len(moved) / len(KEYS) <= 0.16, len(moved))
        self.proxy.cleanup()
        # One host in (11): about 1/11 move, all of them to the new host.
        self.start(self.upstreams(11))
        eleven = self.placement(KEYS)
        moved = self.moved(first, eleven)
        self.assertTrue(all(eleven[k] == "u10" for k in moved), moved[:5])
        self.assertTrue(0.04 <= len(moved) / len(KEYS) <= 0.15, len(moved))

    def test_maglev_is_stable_with_little_disruption(self):
        ten = self.upstreams(10)
        self.start(ten, policy="MAGLEV", extra={"maglev_lb_config": {"table_size": 65537}})
        first = self.placement(KEYS)
        self.assertEqual(len(set(first.values())), 10)
        self.proxy.cleanup()
        self.start(ten, policy="MAGLEV")
        self.assertEqual(self.placement(KEYS), first)  # across a restart (default table size)
        self.proxy.cleanup()
        self.start(ten[:9], policy="MAGLEV")
        nine = self.placement(KEYS)
        moved = self.moved(first, nine)
        self.assertTrue(all(k in moved for k in KEYS if first[k] == "u9"))
        self.assertLessEqual(len(moved) / len(KEYS), 0.2, len(moved))

    def test_cookie_source_ip_and_query_parameter_policies(self):
        ten = self.upstreams(10)
        self.start(ten, hash_policy=[{"cookie": {"name": "sticky", "ttl": "3600s",
                                                  "path": "/"}}])
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        c.request("GET", "/x")
        resp = c.getresponse()
        first = json.loads(resp.read())["server"]
        cookie = resp.getheader("set-cookie")
        self.assertRegex(cookie, r'^sticky="[0-9a-f]{16}"; Max-Age=3600; Path=/; HttpOnly$')
        value = cookie.split(";")[0]
        for _ in range(10):
            c.request("GET", "/x", headers={"cookie": "other=1; " + value})
            resp = c.getresponse()
            self.assertEqual(json.loads(resp.read())["server"], first)
            self.assertIsNone(resp.getheader("set-cookie"))  # it has one now
        c.close()
        self.proxy.cleanup()
        # A query parameter, and the source address after it when the parameter is absent.
        self.start(ten, hash_policy=[{"query_parameter": {"name": "id"}, "terminal": True},
                                     {"connection_properties": {"source_ip": True}}])
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        by_id = {}
        for i in range(40):
            c.request("GET", "/x?a=1&id=%d" % (i % 20))
            by_id.setdefault(i % 20, set()).add(json.loads(c.getresponse().read())["server"])
        self.assertTrue(all(len(s) == 1 for s in by_id.values()), by_id)
        self.assertGreater(len({s.pop() for s in by_id.values()}), 3)
        servers = set()
        for _ in range(10):
            c.request("GET", "/x")
            servers.add(json.loads(c.getresponse().read())["server"])
        self.assertEqual(len(servers), 1)  # one client address, one host
        c.close()

    def test_without_a_hash_any_host(self):
        self.start(self.upstreams(3), hash_policy=[])
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        servers = set()
        for _ in range(60):
            c.request("GET", "/x")
            servers.add(json.loads(c.getresponse().read())["server"])
        c.close()
        self.assertEqual(servers, {"u0", "u1", "u2"})

    def test_refused_configurations_name_the_field(self):
        cases = [
            ({"lb_policy": "MAGLEV", "maglev_lb_config": {"table_size": 100}},
             "clusters[0].maglev_lb_config.table_size: must be a prime"),
            ({"ring_hash_lb_config": {"minimum_ring_size": 64}},
             "clusters[0].ring_hash_lb_config: needs lb_policy RING_HASH"),
            ({"lb_policy": "RING_HASH", "ring_hash_lb_config": {"hash_function": "MURMUR_HASH_2"}},
             "ring_hash_lb_config.hash_function: only XX_HASH is supported"),
        ]
        for extra, want in cases:
            with self.subTest(want=want):
                self.assert_cluster_refused(extra, want)

if __name__ == "__main__":
    unittest.main()
