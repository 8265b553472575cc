"""Filter chains chosen by filter_chain_match, from Envoy-format YAML to the chain that serves, with
real clients: one port serving TLS and cleartext (tls_inspector's transport protocol), chains by
ALPN, by destination port and address, and by the client's address, port and type (curl binds
its source with --interface and --local-port; every 127.0.0.0/8 address is loopback).

Each chain routes to a cluster of its own whose echo upstream answers with the chain's name, so
the response says which chain took the connection. The order of the criteria is Envoy's
(destination port, destination IP, server names, transport protocol, application protocols,
direct source IP, source type, source IP, source port); test/network/filter_chain_match_test.cc
checks the order itself on every criterion.
"""

import re
import subprocess
import unittest

from harness import (TLS_INSPECTOR, IntegrationTestCase, TestPki, bootstrap, cluster, curl,
                     downstream_tls, free_port, http_listener, route, socket_address, tls_chain,
                     virtual_host)


def cidr(prefix, length):
    return {"address_prefix": prefix, "prefix_len": length}


class FilterChainMatchTest(IntegrationTestCase):

    @classmethod
    def setUpClass(cls):
        cls.pki = TestPki()
        cls.certs = {n: cls.pki.cert(n, ["DNS:a.example.com"]) for n in ("tls", "custom")}

    @classmethod
    def tearDownClass(cls):
        cls.pki.cleanup()

    def start(self, chains, default=None, inspector=True, port=None):
        """A listener on a free port whose chains are `chains`: (name, match, transport_socket)
        each; `default` (name, transport_socket) is the default chain. Chain `name` routes to
        an upstream that answers with `name`."""
        self.port = port or free_port()
        names = [c[0] for c in chains] + ([default[0]] if default else [])
        clusters = [cluster(n, self.start_echo(n).port) for n in names]

        def chain(name, match, tls):
            base = http_listener(name, self.port, [virtual_host("all", ["*"], [
                route("/", name)])])["filter_chains"][0]
            return tls_chain(base, tls, match, name)
        listener = {"name": "l", "address": socket_address(self.port),
                    "filter_chains": [chain(*c) for c in chains]}
        if default:
            listener["default_filter_chain"] = chain(default[0], None, default[1])
        if inspector:
            listener["listener_filters"] = [TLS_INSPECTOR]
        self.proxy = self.start_rpx(bootstrap([listener], clusters))

    def served_by(self, *args, scheme="http"):
        """Which chain served a GET from curl with `args` (e.g. --interface 127.0.0.2); None
        when the connection was refused or closed."""
        r = curl("%s://a.example.com:%d/" % (scheme, self.port), "--resolve",
                 "a.example.com:%d:127.0.0.1" % self.port, "--cacert", self.pki.ca, *args,
                 timeout=20)
        if r.status == 0:
            return None
        self.assertEqual(r.status, 200, r)
        return r.json()["server"]

    def stat(self, name):
        return self.proxy.stat("listener.127.0.0.1_%d.%s" % (self.port, name))

    def test_one_port_serves_tls_and_cleartext(self):
        self.start([("tls", {"transport_protocol": "tls"}, downstream_tls([self.certs["tls"]])),
                    ("clear", {"transport_protocol": "raw_buffer"}, None)])
        self.assertEqual(self.served_by(), "clear")
        self.assertEqual(self.served_by(scheme="https"), "tls")
        self.assertEqual(self.served_by(), "clear")
        self.assertEqual(self.stat("no_filter_chain_match"), 0)
        self.assertEqual(self.stat("ssl.handshake"), 1)

    def test_cleartext_only_chain_refuses_tls(self):
        """With no chain for tls, a TLS client matches nothing: closed and counted."""
        self.start([("clear", {"transport_protocol": "raw_buffer"}, None)])
        self.assertEqual(self.served_by(), "clear")
        self.assertIsNone(self.served_by(scheme="https"))
        self.proxy.wait_stat("listener.127.0.0.1_%d.no_filter_chain_match" % self.port,
                             lambda v: v == 1)

    def test_application_protocols(self):
        """A chain for clients offering ALPN x-rpx-custom (as Istio picks its chains by
        istio-peer-exchange), another for the rest."""
        self.start([("custom", {"transport_protocol": "tls",
                                "application_protocols": ["x-rpx-custom"]},
                     downstream_tls([self.certs["custom"]], alpn=["x-rpx-custom", "http/1.1"])),
                    ("tls", {"transport_protocol": "tls"}, downstream_tls([self.certs["tls"]]))])

        def cn(*alpn):
            r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.port,
                                "-servername", "a.example.com"] + list(alpn),
                               input=b"", capture_output=True, timeout=20)
            m = re.search(r"^subject=.*CN ?= ?([^,\n/]+)", r.stdout.decode(), re.M)
            return m.group(1).strip() if m else None
        self.assertEqual(cn("-alpn", "x-rpx-custom"), "custom")
        self.assertEqual(cn("-alpn", "http/1.1,x-rpx-custom"), "custom")
        self.assertEqual(cn("-alpn", "http/1.1"), "tls")
        self.assertEqual(cn(), "tls")
        self.assertEqual(self.served_by(scheme="https"), "tls")  # curl offers http/1.1
        # The transport protocol decides before ALPN: a chain matching only on ALPN loses to
        # one that names tls, and Envoy does not go back to it.
        self.start([("custom", {"application_protocols": ["x-rpx-custom"]},
                     downstream_tls([self.certs["custom"]])),
                    ("tls", {"transport_protocol": "tls"}, downstream_tls([self.certs["tls"]]))])
        self.assertEqual(cn("-alpn", "x-rpx-custom"), "tls")

    def test_destination_port_and_address(self):
        # Only the listener's own port and address can match: neither chain does.
        self.start([("other_port", {"destination_port": free_port()}, None),
                    ("other_net", {"prefix_ranges": [cidr("10.0.0.0", 8)]}, None)],
                   default=("fallback", None), inspector=False)
        self.assertEqual(self.served_by(), "fallback")
        # The longest destination prefix wins.
        self.start([("other_net", {"prefix_ranges": [cidr("10.0.0.0", 8)]}, None),
                    ("loopback", {"prefix_ranges": [cidr("127.0.0.0", 8)]}, None),
                    ("exact", {"prefix_ranges": [cidr("127.0.0.1", 32)]}, None)],
                   inspector=False)
        self.assertEqual(self.served_by(), "exact")
        # The destination port decides before the address.
        port = free_port()
        self.start([("exact", {"prefix_ranges": [cidr("127.0.0.1", 32)]}, None),
                    ("this_port", {"destination_port": port}, None)], inspector=False, port=port)
        self.assertEqual(self.served_by(), "this_port")

    def test_source_address_port_and_type(self):
        sport = free_port()
        self.start([("external", {"source_type": "EXTERNAL"}, None),
                    ("from_2", {"source_prefix_ranges": [cidr("127.0.0.2", 32)]}, None),
                    ("direct_3", {"direct_source_prefix_ranges": [cidr("127.0.0.3", 32)]}, None),
                    ("from_port", {"source_ports": [sport]}, None),
                    ("any", {}, None)], inspector=False)
        self.assertEqual(self.served_by("--interface", "127.0.0.2"), "from_2")
        self.assertEqual(self.served_by("--interface", "127.0.0.3"), "direct_3")
        self.assertEqual(self.served_by("--local-port", str(sport)), "from_port")
        # A loopback client is never EXTERNAL.
        self.assertEqual(self.served_by(), "any")
        self.assertEqual(self.served_by("--interface", "127.0.0.4"), "any")
        self.assertEqual(self.stat("no_filter_chain_match"), 0)

if __name__ == "__main__":
    unittest.main()
