"""SDS: TLS secrets over the ADS stream (state of the world and delta), from the reference control
plane. A listener's certificate is rotated while a client keeps a connection open: the old
connection keeps working, new handshakes see the new certificate; a bad secret is NACKed and the
old one keeps serving. Certificates come from a throwaway CA (harness.TestPki).
"""

import base64
import os
import re
import socket
import ssl
import subprocess
import unittest

from harness import (ADS_SOURCE, UPSTREAM_TLS_TYPE, IntegrationTestCase, TestPki, cluster, curl,
                     free_port, http_listener, route, tls_chain, virtual_host, wait_until,
                     xds_bootstrap)

NODE = "sds-node"
SECRET = "server_cert"


def peer_cn(port, sni="a.example.com"):
    r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port,
                        "-servername", sni], input=b"", capture_output=True, timeout=20)
    m = re.search(r"^subject=.*CN ?= ?([^,\n/]+)", r.stdout.decode("utf-8", "replace"), re.M)
    return m.group(1).strip() if m else None


def read(path):
    with open(path) as f:
        return f.read()


def sds_tls(fetch_timeout=None, ticket_keys=None):
    """A DownstreamTlsContext whose certificate is the SDS secret SECRET (its sds_config with
    `fetch_timeout` as initial_fetch_timeout), with session ticket keys from the SDS secret
    `ticket_keys` if given."""
    source = dict(ADS_SOURCE)
    if fetch_timeout:
        source["initial_fetch_timeout"] = fetch_timeout
    ctx = {"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3."
                    "DownstreamTlsContext",
           "common_tls_context": {"tls_certificate_sds_secret_configs": [
               {"name": SECRET, "sds_config": source}]}}
    if ticket_keys:
        ctx["session_ticket_keys_sds_secret_config"] = {"name": ticket_keys,
                                                        "sds_config": dict(ADS_SOURCE)}
    return {"name": "envoy.transport_sockets.tls", "typed_config": ctx}


class SdsTests(object):
    DELTA = None

    @classmethod
    def setUpClass(cls):
        cls.pki = TestPki()
        cls.cert_a = cls.pki.cert("first", ["DNS:a.example.com"])
        cls.cert_b = cls.pki.cert("second", ["DNS:a.example.com"])
        cls.origin = cls.pki.cert("origin", ["DNS:origin.example.com"])
        cls.other_pki = TestPki("another CA")

    @classmethod
    def tearDownClass(cls):
        cls.pki.cleanup()
        cls.other_pki.cleanup()

    def secret(self, cert_key=None, chain=None):
        cert, key = cert_key
        return {"name": SECRET, "tls_certificate": {
            "certificate_chain": {"inline_string": chain if chain is not None else read(cert)},
            "private_key": {"inline_string": read(key)}}}

    def setUp(self):
        self.up = self.start_echo("up")
        # A TLS origin whose CA the "origin" cluster takes from an SDS validation context.
        self.origin_port = self.start_tls_nginx(self.origin, "origin")
        origin = cluster("origin", self.origin_port)
        origin["transport_socket"] = {"name": "envoy.transport_sockets.tls", "typed_config": {
            "@type": UPSTREAM_TLS_TYPE, "sni": "origin.example.com",
            "common_tls_context": {"validation_context_sds_secret_config": {
                "name": "origin_ca", "sds_config": dict(ADS_SOURCE)}}}}
        self.port = free_port()
        self.lds_port = free_port()
        base = http_listener("tls", self.port, [virtual_host("all", ["*"], [
            route("/origin", "origin"), route("/", "up")])])
        base["filter_chains"] = [tls_chain(base["filter_chains"][0], sds_tls())]
        dyn = http_listener("dyn", self.lds_port, [virtual_host("all", ["*"], [route("/", "up")])])
        dyn["filter_chains"] = [tls_chain(dyn["filter_chains"][0], sds_tls())]
        self.files = {"secrets": [self.secret(self.cert_a), self.ca_secret(self.pki.ca)],
                      "listeners": [dyn]}
        self.xds = self.start_xds_server({"sds.yaml": self.files})
        self.proxy = self.start_rpx(xds_bootstrap(
            self.xds.port, node_id=NODE, delta=self.DELTA, cds=False, listeners=[base],
            clusters=[cluster("up", self.up.port), origin]))
        self.xds.wait_ack("SDS", 0, node=NODE)
        self.xds.wait_ack("LDS", 0, node=NODE)

    def ca_secret(self, path):
        return {"name": "origin_ca", "validation_context": {"trusted_ca": {
            "inline_string": read(path)}}}

    def update(self, **changes):
        self.files.update(changes)
        return self.xds.write_resources("sds.yaml", **self.files)

    def https_connection(self, port):
        ctx = ssl.create_default_context(cafile=self.pki.ca)
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        return ctx.wrap_socket(s, server_hostname="a.example.com")

    def request(self, conn):
        conn.sendall(b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            self.assertTrue(chunk, "closed before a response")
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))
        while len(body) < length:
            body += conn.recv(65536)
        return head.split(b"\r\n")[0]

    def test_certificate_rotation_over_sds(self):
        self.assertTrue(self.xds.find(r"^subscribe node=%s type=SDS names=origin_ca,%s$" %
                                      (NODE, SECRET)), self.xds.log_tail())
        for port in (self.port, self.lds_port):
            self.assertEqual(peer_cn(port), "first")
        kept = self.https_connection(self.port)
        self.assertEqual(self.request(kept), b"HTTP/1.1 200 OK")

        mark = self.update(secrets=[self.secret(self.cert_b)])
        self.xds.wait_ack("SDS", mark, node=NODE)
        for port in (self.port, self.lds_port):
            self.assertEqual(peer_cn(port), "second", port)
        # The connection made before the rotation goes on.
        self.assertEqual(self.request(kept), b"HTTP/1.1 200 OK")
        self.assertEqual(kept.getpeercert()["subject"][0][0][1], "first")

        # A secret that does not parse is NACKed; the one in use keeps serving.
        mark = self.update(secrets=[self.secret(self.cert_a, chain="not a certificate")])
        kept_version, error = self.xds.wait_nack("SDS", mark, node=NODE)
        self.assertIn("Secret '%s'" % SECRET, error)
        self.assertIn("no PEM certificate could be read", error)
        self.assertEqual(peer_cn(self.port), "second")
        self.assertEqual(self.request(kept), b"HTTP/1.1 200 OK")
        kept.close()

        dump = self.proxy.config_summary()
        secrets = {s["name"]: s for s in dump["secrets"]}
        self.assertEqual(secrets[SECRET]["config"], {"type": "tls_certificate"})
        self.assertNotIn("BEGIN", str(dump["secrets"]))

    def test_upstream_validation_context_over_sds(self):
        r = curl("https://a.example.com:%d/origin" % self.port, "--resolve",
                 "a.example.com:%d:127.0.0.1" % self.port, "--cacert", self.pki.ca, timeout=20)
        self.assertEqual((r.status, r.body), (200, b"origin\n"), r)
        # Another CA for the origin: the cluster's new context refuses it, and says why.
        mark = self.update(secrets=[self.secret(self.cert_a), self.ca_secret(self.other_pki.ca)])
        self.xds.wait_ack("SDS", mark, node=NODE)
        r = curl("https://a.example.com:%d/origin" % self.port, "--resolve",
                 "a.example.com:%d:127.0.0.1" % self.port, "--cacert", self.pki.ca, timeout=20)
        self.assertEqual(r.status, 503, r)
        self.assertIn(b"TLS verification failed", r.body)
        mark = self.update(secrets=[self.secret(self.cert_a), self.ca_secret(self.pki.ca)])
        self.xds.wait_ack("SDS", mark, node=NODE)
        r = curl("https://a.example.com:%d/origin" % self.port, "--resolve",
                 "a.example.com:%d:127.0.0.1" % self.port, "--cacert", self.pki.ca, timeout=20)
        self.assertEqual(r.status, 200, r)


class SdsWarmingTests(object):
    """A listener whose certificate has not arrived: it warms (not ready, not serving) until the
    secret comes, or until its sds_config's initial_fetch_timeout, after which its TLS chain
    refuses connections (never cleartext) until the secret comes. Ticket keys over SDS."""
    DELTA = None

    @classmethod
    def setUpClass(cls):
        cls.pki = TestPki()
        cls.cert = cls.pki.cert("first", ["DNS:a.example.com"])

    @classmethod
    def tearDownClass(cls):
        cls.pki.cleanup()

    def start(self, secrets, tls):
        self.up = self.start_echo("up")
        self.port = free_port()
        listener = http_listener("tls", self.port, [virtual_host("all", ["*"], [
            route("/", "up")])])
        listener["filter_chains"] = [tls_chain(listener["filter_chains"][0], tls)]
        self.files = {"secrets": secrets}
        self.xds = self.start_xds_server({"sds.yaml": self.files})
        # LDS's own wait is long, so what ends a secret's wait below is its sds_config's.
        self.proxy = self.start_rpx(xds_bootstrap(
            self.xds.port, node_id=NODE, delta=self.DELTA, cds=False, listeners=[listener],
            clusters=[cluster("up", self.up.port)], initial_fetch_timeout="120s"),
            wait_ready=False)
        self.xds.wait_for(r"^subscribe node=%s type=SDS names=.*%s" % (NODE, SECRET),
                          what="the SDS subscription")

    def update(self, **changes):
        self.files.update(changes)
        return self.xds.write_resources("sds.yaml", **self.files)

    def secret(self):
        cert, key = self.cert
        return {"name": SECRET, "tls_certificate": {
            "certificate_chain": {"inline_string": read(cert)},
            "private_key": {"inline_string": read(key)}}}

    def listener_state(self):
        return {l["name"]: l["state"] for l in self.proxy.config_summary()["listeners"]}["tls"]

    def test_listener_warms_until_its_secret_arrives(self):
        self.start([], sds_tls())
        self.assertEqual(self.listener_state(), "warming")
        status, body = self.proxy.admin("GET", "/ready")
        self.assertEqual(status, 503, body)
        mark = self.update(secrets=[self.secret()])
        self.xds.wait_ack("SDS", mark, node=NODE)
        self.assertEqual(peer_cn(self.port), "first")
        self.assertEqual(self.listener_state(), "static")
        status, body = self.proxy.admin("GET", "/ready")
        self.assertEqual(status, 200, body)

    def test_after_its_fetch_timeout_a_chain_without_its_secret_refuses_connections(self):
        self.start([], sds_tls(fetch_timeout="1s"))
        wait_until(lambda: "did not arrive in time" in self.proxy.stderr_text(), timeout=30,
                   what="the secret's initial_fetch_timeout")
        self.assertIn("secret 'server_cert' did not arrive in time", self.proxy.stderr_text())
        self.assertEqual(self.listener_state(), "static")  # no longer warming
        self.assertIsNone(peer_cn(self.port))
        r = curl("http://127.0.0.1:%d/" % self.port, timeout=20)
        self.assertEqual(r.status, 0, r)  # closed: never served in cleartext
        self.assertEqual(self.up.request_count(), 0)
        self.proxy.wait_stat("listener.127.0.0.1_%d.ssl.connection_error" % self.port,
                             lambda v: v >= 2)
        mark = self.update(secrets=[self.secret()])
        self.xds.wait_ack("SDS", mark, node=NODE)
        self.assertEqual(peer_cn(self.port), "first")

    def test_session_ticket_keys_over_sds(self):
        """The first key encrypts, every key decrypts: a ticket made under key A still resumes
        after [B, A] arrives, and no longer after [B]."""
        def keys(*seeds):
            return {"name": "stek", "session_ticket_keys": {"keys": [
                {"inline_bytes": base64.b64encode(bytes([seed]) * 80).decode()}
                for seed in seeds]}}
        self.start([self.secret(), keys(0x41)], sds_tls(ticket_keys="stek"))
        self.xds.wait_ack("SDS", 0, node=NODE)
        sess = os.path.join(self.pki.dir, "sess-%s-%d" % (self.DELTA, self.port))
        request = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"

        def s_client(*args):
            r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.port,
                                "-tls1_3", "-ign_eof"] + list(args), input=request,
                               capture_output=True, timeout=20)
            return r.stdout.decode("utf-8", "replace")
        self.assertIn("New,", s_client("-sess_out", sess))
        self.assertIn("Reused,", s_client("-sess_in", sess))
        mark = self.update(secrets=[self.secret(), keys(0x42, 0x41)])
        self.xds.wait_ack("SDS", mark, node=NODE)
        out = s_client("-sess_in", sess)
        self.assertIn("Reused,", out)
        self.assertIn("HTTP/1.1 200 OK", out)
        mark = self.update(secrets=[self.secret(), keys(0x42)])
        self.xds.wait_ack("SDS", mark, node=NODE)
        self.assertIn("New,", s_client("-sess_in", sess))


class SdsWarmingSotwTest(SdsWarmingTests, IntegrationTestCase):
    DELTA = False


class SdsWarmingDeltaTest(SdsWarmingTests, IntegrationTestCase):
    DELTA = True


class SdsSotwTest(SdsTests, IntegrationTestCase):
    DELTA = False


class SdsDeltaTest(SdsTests, IntegrationTestCase):
    DELTA = True


if __name__ == "__main__":
    unittest.main()
