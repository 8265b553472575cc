"""TLS termination with real clients: curl and `openssl s_client` against rpx listeners configured
with Envoy's DownstreamTlsContext, filter chains chosen by SNI (tls_inspector), a default chain,
mTLS, session resumption, and what must be refused (old protocol versions, cleartext on a TLS
port, a handshake that never ends). Certificates come from a throwaway CA made with the openssl
command (harness.TestPki).
"""

import os
import re
import socket
import ssl
import subprocess
import time
import unittest

from harness import (TLS_INSPECTOR, UPSTREAM_TLS_TYPE, IntegrationTestCase, TestPki, bootstrap,
                     cluster, curl, downstream_tls, free_port, http_listener, make_tmpdir,
                     remove_tmpdir, repo_file, route, tls_certificate, tls_chain, virtual_host,
                     wait_until, xds_bootstrap)

HOSTS = ("a.example.com", "b.example.com")
# What s_client sends: a request, so it reads on until the close (and takes TLS 1.3 tickets).
REQUEST = b"GET / HTTP/1.1\r\nHost: a.example.com\r\nConnection: close\r\n\r\n"
_counter = [0]


def s_client(port, *args, stdin=b"", timeout=20):
    """Runs `openssl s_client` against 127.0.0.1:port; returns (exit code, stdout+stderr)."""
    cmd = ["openssl", "s_client", "-connect", "127.0.0.1:%d" % port] + list(args)
    if stdin:
        cmd.append("-ign_eof")  # send it all, then read until the server closes
    r = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    return r.returncode, (r.stdout + r.stderr).decode("utf-8", "replace")


def client_hello(sni):
    """The bytes of a real ClientHello (Python's ssl through memory BIOs), for a client that
    then never goes on with the handshake."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def peer_cn(output):
    m = re.search(r"^subject=.*CN ?= ?([^,\n/]+)", output, re.M)
    return m.group(1).strip() if m else None


class TlsTest(IntegrationTestCase):

    @classmethod
    def setUpClass(cls):
        cls.pki = TestPki()
        cls.certs = {h: cls.pki.cert(h, ["DNS:" + h]) for h in HOSTS}
        cls.wild = cls.pki.cert("wild", ["DNS:*.wild.example.com"])
        cls.default_cert = cls.pki.cert("default", ["DNS:default.example.com"])
        cls.rsa = cls.pki.cert("a.example.com", ["DNS:a.example.com"], key="rsa")
        cls.client = cls.pki.cert("client", ["URI:spiffe://rpx/client"])
        cls.other_pki = TestPki("another CA")
        cls.stranger = cls.other_pki.cert("client", ["URI:spiffe://rpx/client"])

    @classmethod
    def tearDownClass(cls):
        cls.pki.cleanup()
        cls.other_pki.cleanup()

    def start(self, chains, listener_extra=None, cluster_name="echo", hcm_extra=None):
        """rpx with one listener whose filter chains are `chains` (each a dict with optional
        "match", "tls" (a transport_socket), "name", "default": True for the default chain),
        all routing to an echo upstream."""
        self.up = self.start_echo("up")
        self.port = free_port()
        base = http_listener("tls", self.port, [virtual_host("all", ["*"], [
            route("/", cluster_name)])], hcm_extra=hcm_extra)
        chain0 = base["filter_chains"][0]
        listener = dict(base)
        listener["filter_chains"] = []
        for c in chains:
            built = tls_chain(chain0, c.get("tls"), c.get("match"), c.get("name"))
            built.update(c.get("extra", {}))
            if c.get("default"):
                listener["default_filter_chain"] = built
            else:
                listener["filter_chains"].append(built)
        if not listener["filter_chains"]:
            del listener["filter_chains"]
        if listener_extra:
            listener.update(listener_extra)
        self.proxy = self.start_rpx(bootstrap([listener], [cluster(cluster_name, self.up.port)]))
        return self.proxy

    def curl_https(self, host, *args, path="/", cacert=True):
        extra = ["--resolve", "%s:%d:127.0.0.1" % (host, self.port)]
        if cacert:
            extra += ["--cacert", self.pki.ca]
        return curl("https://%s:%d%s" % (host, self.port, path), *(extra + list(args)),
                    timeout=20)

    def sni_listener(self, **extra):
        chains = [{"name": "a", "match": {"server_names": ["a.example.com"]},
                   "tls": downstream_tls([self.certs["a.example.com"]], **extra)},
                  {"name": "b", "match": {"server_names": ["b.example.com"]},
                   "tls": downstream_tls([self.certs["b.example.com"]])},
                  {"name": "wild", "match": {"server_names": ["*.wild.example.com"]},
                   "tls": downstream_tls([self.wild])},
                  {"name": "default", "default": True, "tls": downstream_tls([self.default_cert])}]
        return self.start(chains, {"listener_filters": [TLS_INSPECTOR]})

    def test_two_names_on_one_port_get_their_own_certificates(self):
        self.sni_listener()
        for host in HOSTS:
            r = self.curl_https(host, "-H", "x-test: 1")
            self.assertEqual(r.status, 200, r)
            record = r.json()
            self.assertEqual(record["server"], "up")
            headers = dict(record["headers"])
            self.assertEqual(headers.get("x-forwarded-proto"), "https")
            code, out = s_client(self.port, "-servername", host, "-CAfile", self.pki.ca)
            self.assertEqual(peer_cn(out), host, out)
            self.assertIn("Verify return code: 0 (ok)", out)
        # Wildcard chain.
        r = self.curl_https("x.wild.example.com")
        self.assertEqual(r.status, 200, r)
        # A server_names wildcard stands for any number of labels (the certificate's does not).
        code, out = s_client(self.port, "-servername", "deep.x.wild.example.com")
        self.assertEqual(peer_cn(out), "wild", out)
        # No SNI, or a name no chain has: the default chain.
        code, out = s_client(self.port, "-noservername")
        self.assertEqual(peer_cn(out), "default", out)
        code, out = s_client(self.port, "-servername", "unknown.example.org")
        self.assertEqual(peer_cn(out), "default", out)
        stats = self.proxy.stats()
        self.assertGreaterEqual(stats["listener.127.0.0.1_%d.ssl.handshake" % self.port], 5)
        self.assertEqual(stats["listener.127.0.0.1_%d.no_filter_chain_match" % self.port], 0)

    def test_no_matching_chain_closes_and_counts(self):
        self.start([{"match": {"server_names": ["a.example.com"]},
                     "tls": downstream_tls([self.certs["a.example.com"]])}])
        code, out = s_client(self.port, "-servername", "b.example.com")
        self.assertNotEqual(code, 0, out)
        self.assertIsNone(peer_cn(out), out)
        self.proxy.wait_stat("listener.127.0.0.1_%d.no_filter_chain_match" % self.port,
                             lambda v: v == 1)

    def test_alpn_and_protocol_versions(self):
        # h2 is listed (as in Envoy's examples) and the connection manager (AUTO) speaks it.
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]],
                                           alpn=["h2", "http/1.1"])}])
        code, out = s_client(self.port, "-alpn", "h2,http/1.1", "-servername", "a.example.com")
        self.assertIn("ALPN protocol: h2", out)
        code, out = s_client(self.port, "-alpn", "http/1.1")
        self.assertIn("ALPN protocol: http/1.1", out)
        code, out = s_client(self.port, "-alpn", "spdy/3")
        self.assertIn("No ALPN negotiated", out)
        r = self.curl_https("a.example.com", "--http1.1")
        self.assertEqual(r.status, 200, r)
        # TLS 1.0 and 1.1 are refused (the client is allowed every cipher, so only the server's
        # refusal can end it).
        for flag in ("-tls1", "-tls1_1"):
            code, out = s_client(self.port, flag, "-cipher", "DEFAULT@SECLEVEL=0")
            self.assertNotEqual(code, 0, out)
            self.assertIsNone(peer_cn(out), out)
        code, out = s_client(self.port, "-tls1_2", "-servername", "a.example.com")
        self.assertEqual(code, 0, out)
        self.assertIn("Protocol  : TLSv1.2", out)

    def test_tls_params_and_session_timeout(self):
        """tls_params narrow what is negotiated (a client offering only something else is
        refused), and session_timeout is the lifetime the server gives its tickets."""
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]], extra={
            "session_timeout": "300s"}, common_extra={"tls_params": {
                "tls_maximum_protocol_version": "TLSv1_2",
                "cipher_suites": ["ECDHE-ECDSA-AES256-GCM-SHA384"],
                "ecdh_curves": ["P-384"]}})}])
        code, out = s_client(self.port, stdin=REQUEST)
        self.assertIn("New, TLSv1.2, Cipher is ECDHE-ECDSA-AES256-GCM-SHA384", out)
        self.assertRegex(out, r"(Server|Peer) Temp Key: ECDH, secp384r1")
        self.assertIn("TLS session ticket lifetime hint: 300 (seconds)", out)
        self.assertIn("HTTP/1.1 200 OK", out)
        for args in (["-tls1_3"], ["-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"],
                     ["-groups", "P-256"]):
            code, out = s_client(self.port, *args)
            self.assertNotEqual(code, 0, (args, out))
            self.assertIsNone(peer_cn(out), (args, out))
        # The default (no tls_params): TLS 1.3, and the default ticket lifetime isn't 300.
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]])}])
        code, out = s_client(self.port, stdin=REQUEST)
        self.assertIn("New, TLSv1.3", out)
        self.assertNotIn("lifetime hint: 300 ", out)

    def test_renegotiation_is_refused(self):
        """A TLS 1.2 client asking to renegotiate (s_client's R command) gets OpenSSL's
        no_renegotiation alert."""
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]])}])
        p = subprocess.Popen(["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.port,
                              "-tls1_2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        out = b""
        try:
            while b"Verify return code" not in out:  # the handshake is done
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                out += chunk
            p.stdin.write(b"R\n")
            p.stdin.flush()
            deadline = time.monotonic() + 20
            while b"no renegotiation" not in out and time.monotonic() < deadline:
                chunk = os.read(p.stdout.fileno(), 65536)  # s_client exits on the alert
                if not chunk:
                    break
                out += chunk
        finally:
            p.kill()
            p.wait()
        text = out.decode("utf-8", "replace")
        self.assertIn("RENEGOTIATING", text)
        self.assertIn("no renegotiation", text)
        self.assertEqual(self.proxy.stat("listener.127.0.0.1_%d.ssl.handshake" % self.port), 1)

    def test_ecdsa_and_rsa_certificates_side_by_side(self):
        self.start([{"tls": downstream_tls([self.certs["a.example.com"], self.rsa])}])
        code, out = s_client(self.port, "-tls1_2", "-sigalgs", "RSA-PSS+SHA256:RSA+SHA256")
        self.assertIn("Peer signature type: RSA", out)
        code, out = s_client(self.port, "-tls1_2", "-sigalgs", "ECDSA+SHA256")
        self.assertIn("Peer signature type: ECDSA", out)

    def test_cleartext_to_a_tls_port_is_closed(self):
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]])}])
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        data = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass
        s.close()
        self.assertNotIn(b"HTTP/1.1", data)
        self.assertEqual(self.up.request_count(), 0)
        self.proxy.wait_stat("listener.127.0.0.1_%d.ssl.connection_error" % self.port,
                             lambda v: v == 1)

    def test_handshake_timeout_and_listener_filter_timeout(self):
        tls = downstream_tls([self.certs["a.example.com"]])
        chains = [{"match": {"server_names": ["a.example.com"]}, "tls": tls}]
        self.start(chains, {"listener_filters": [TLS_INSPECTOR],
                            "listener_filters_timeout": "1s"})
        prefix = "listener.127.0.0.1_%d." % self.port
        # Half a ClientHello: the inspector waits for the rest, then gives up.
        hello = client_hello("a.example.com")
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        s.sendall(hello[:len(hello) // 2])
        try:
            got = s.recv(100)  # closed by rpx after listener_filters_timeout, answering nothing
        except ConnectionResetError:
            got = b""
        s.close()
        self.assertEqual(got, b"")
        self.assertEqual(self.proxy.stat(prefix + "downstream_pre_cx_timeout"), 1)

    def test_transport_socket_connect_timeout(self):
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]]),
                     "extra": {"transport_socket_connect_timeout": "1s"}}])
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        # The whole ClientHello; the client's Finished never comes.
        s.sendall(client_hello("a.example.com"))
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        s.close()
        self.assertTrue(got, "the server's first flight was expected before the close")
        self.proxy.wait_stat("listener.127.0.0.1_%d.downstream_cx_transport_socket_connect_timeout"
                             % self.port, lambda v: v == 1)

    def test_session_resumption_by_ticket_and_by_session_id(self):
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]])}])
        sess = os.path.join(self.pki.dir, "sess-%d" % self.port)
        for version in ("-tls1_3", "-tls1_2"):
            code, out = s_client(self.port, version, "-sess_out", sess, stdin=REQUEST)
            self.assertIn("New,", out)
            code, out = s_client(self.port, version, "-sess_in", sess, stdin=REQUEST)
            self.assertIn("Reused,", out, version)
            self.assertIn("HTTP/1.1 200 OK", out)
        # TLS 1.2 -reconnect: five reconnections with the first session.
        code, out = s_client(self.port, "-tls1_2", "-reconnect", stdin=b"")
        self.assertGreaterEqual(out.count("Reused, TLSv1.2"), 5, out)
        self.assertGreaterEqual(
            self.proxy.stat("listener.127.0.0.1_%d.ssl.session_reused" % self.port), 7)

    def test_session_resumption_by_session_id_without_tickets(self):
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]], extra={
            "disable_stateless_session_resumption": True})}])
        # Each connection sends a request and reads the response, so the server has finished
        # with it (and cached its session) before the next one offers the session id.
        sess = os.path.join(self.pki.dir, "sid-%d" % self.port)
        code, out = s_client(self.port, "-tls1_2", "-sess_out", sess, stdin=REQUEST)
        self.assertIn("New, TLSv1.2", out)
        self.assertNotIn("TLS session ticket:", out)  # no ticket was issued
        for _ in range(3):
            code, out = s_client(self.port, "-tls1_2", "-sess_in", sess, stdin=REQUEST)
            self.assertIn("Reused, TLSv1.2", out)
            self.assertIn("HTTP/1.1 200 OK", out)

    def test_ticket_key_rotation(self):
        _counter[0] += 1
        keys = [os.path.join(self.pki.dir, "k%d-%d" % (i, _counter[0])) for i in range(2)]
        for i, k in enumerate(keys):
            with open(k, "wb") as f:
                f.write(bytes([0x41 + i]) * 80)

        def with_keys(names):
            return downstream_tls([self.certs["a.example.com"]], extra={
                "session_ticket_keys": {"keys": [{"filename": k} for k in names]}})
        sess = os.path.join(self.pki.dir, "rot-%d" % _counter[0])
        self.start([{"tls": with_keys([keys[0]])}])
        code, out = s_client(self.port, "-tls1_3", "-sess_out", sess, stdin=REQUEST)
        self.assertIn("New,", out)
        port = self.port
        self.proxy.cleanup()

        def restart(names):
            base = http_listener("tls", port, [virtual_host("all", ["*"], [route("/", "echo")])])
            base["filter_chains"] = [tls_chain(base["filter_chains"][0], with_keys(names))]
            return self.start_rpx(bootstrap([base], [cluster("echo", self.up.port)]))
        # A new first key, the old one second: the old ticket still resumes.
        p = restart([keys[1], keys[0]])
        code, out = s_client(port, "-tls1_3", "-sess_in", sess, stdin=REQUEST)
        self.assertIn("Reused,", out)
        p.cleanup()
        # The old key gone: a full handshake.
        restart([keys[1]])
        code, out = s_client(port, "-tls1_3", "-sess_in", sess, stdin=REQUEST)
        self.assertIn("New,", out)

    def test_mutual_tls(self):
        validation = {"validation_context": {
            "trusted_ca": {"filename": self.pki.ca},
            "match_typed_subject_alt_names": [{"san_type": "URI",
                                               "matcher": {"exact": "spiffe://rpx/client"}}]}}
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]], extra={
            "require_client_certificate": True}, common_extra=validation)}])
        # No client certificate.
        r = self.curl_https("a.example.com")
        self.assertNotEqual(r.status, 200, r)
        # One from another CA.
        r = self.curl_https("a.example.com", "--cert", self.stranger[0], "--key", self.stranger[1])
        self.assertNotEqual(r.status, 200, r)
        # The right one, but a SAN the listener does not accept.
        wrong_san = self.pki.cert("client2", ["URI:spiffe://rpx/other"])
        r = self.curl_https("a.example.com", "--cert", wrong_san[0], "--key", wrong_san[1])
        self.assertNotEqual(r.status, 200, r)
        # The right one.
        r = self.curl_https("a.example.com", "--cert", self.client[0], "--key", self.client[1])
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.up.request_count(), 1)
        prefix = "listener.127.0.0.1_%d." % self.port
        self.assertGreaterEqual(self.proxy.stat(prefix + "ssl.connection_error"), 3)

    def test_peer_certificate_facts_in_headers(self):
        """%DOWNSTREAM_PEER_*%, %DOWNSTREAM_TLS_*% and %REQUESTED_SERVER_NAME% in
        request_headers_to_add, as Envoy fills them from the client's certificate and the
        connection."""
        validation = {"validation_context": {"trusted_ca": {"filename": self.pki.ca}}}
        facts = {"x-subject": "%DOWNSTREAM_PEER_SUBJECT%",
                 "x-uri-san": "%DOWNSTREAM_PEER_URI_SAN%",
                 "x-dns-san": "%DOWNSTREAM_PEER_DNS_SAN%",
                 "x-fingerprint": "%DOWNSTREAM_PEER_FINGERPRINT_256%",
                 "x-tls": "%DOWNSTREAM_TLS_VERSION% %DOWNSTREAM_TLS_CIPHER%",
                 "x-sni": "%REQUESTED_SERVER_NAME%"}
        vhost = virtual_host("all", ["*"], [route("/", "echo")])
        vhost["request_headers_to_add"] = [{"header": {"key": k, "value": v}}
                                           for k, v in facts.items()]
        both = self.pki.cert("both", ["URI:spiffe://rpx/both", "DNS:client.example.com",
                                      "DNS:alt.example.com"])
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]],
                                           common_extra=validation)}],
                   hcm_extra={"route_config": {"name": "r", "virtual_hosts": [vhost]}})
        r = self.curl_https("a.example.com", "--cert", both[0], "--key", both[1], "--tlsv1.3",
                            "--tls13-ciphers", "TLS_AES_128_GCM_SHA256")
        self.assertEqual(r.status, 200, r)
        seen = dict(r.json()["headers"])
        self.assertEqual(seen.get("x-subject"), "CN=both")
        self.assertEqual(seen.get("x-uri-san"), "spiffe://rpx/both")
        self.assertEqual(seen.get("x-dns-san"), "client.example.com,alt.example.com")
        fp = subprocess.run(["openssl", "x509", "-in", both[0], "-noout", "-fingerprint",
                             "-sha256"], capture_output=True, text=True, check=True).stdout
        self.assertEqual(seen.get("x-fingerprint"),
                         fp.split("=", 1)[1].strip().replace(":", "").lower())
        self.assertEqual(seen.get("x-tls"), "TLSv1.3 TLS_AES_128_GCM_SHA256")
        self.assertEqual(seen.get("x-sni"), "a.example.com")
        # Without a client certificate the peer facts are absent (Envoy leaves the header
        # empty); the connection's own are there.
        r = self.curl_https("a.example.com")
        self.assertEqual(r.status, 200, r)
        seen = dict(r.json()["headers"])
        for k in ("x-subject", "x-uri-san", "x-dns-san", "x-fingerprint"):
            self.assertIn(seen.get(k), (None, "", "-"), (k, seen))
        self.assertTrue(seen.get("x-tls", "").startswith("TLSv1.3 "), seen)

    def test_routes_by_client_certificate(self):
        """RouteMatch.tls_context: a route for validated client certificates, one for clients
        without a certificate, and the rest (presented, not validated: the listener accepts
        untrusted ones here) falls through to a 403."""
        validation = {"validation_context": {"trusted_ca": {"filename": self.pki.ca},
                                             "trust_chain_verification": "ACCEPT_UNTRUSTED"}}

        def direct(match, status, body):
            m = {"prefix": "/"}
            m.update(match)
            return {"match": m, "direct_response": {"status": status,
                                                    "body": {"inline_string": body}}}
        vhost = {"name": "all", "domains": ["*"], "routes": [
            direct({"tls_context": {"validated": True}}, 200, "validated"),
            direct({"tls_context": {"presented": False}}, 200, "anonymous"),
            direct({}, 403, "untrusted")]}
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]],
                                           common_extra=validation)}],
                   hcm_extra={"route_config": {"name": "r", "virtual_hosts": [vhost]}})
        r = self.curl_https("a.example.com", "--cert", self.client[0], "--key", self.client[1])
        self.assertEqual((r.status, r.body), (200, b"validated"), r)
        r = self.curl_https("a.example.com")
        self.assertEqual((r.status, r.body), (200, b"anonymous"), r)
        r = self.curl_https("a.example.com", "--cert", self.stranger[0], "--key", self.stranger[1])
        self.assertEqual((r.status, r.body), (403, b"untrusted"), r)

    def test_x_forwarded_client_cert(self):
        validation = {"validation_context": {"trusted_ca": {"filename": self.pki.ca}}}
        tls = downstream_tls([self.certs["a.example.com"]], extra={
            "require_client_certificate": True}, common_extra=validation)
        spoof = ("x-forwarded-client-cert", "By=spiffe://evil;Hash=00;Subject=\"CN=admin\"")
        fingerprint = subprocess.run(
            ["openssl", "x509", "-in", self.client[0], "-noout", "-fingerprint", "-sha256"],
            capture_output=True, check=True).stdout.decode()
        digest = fingerprint.split("=", 1)[1].strip().replace(":", "").lower()

        def seen(mode, details=None):
            extra = {"forward_client_cert_details": mode}
            if details:
                extra["set_current_client_cert_details"] = details
            self.start([{"tls": tls}], hcm_extra=extra)
            r = self.curl_https("a.example.com", "--cert", self.client[0], "--key",
                                self.client[1], "-H", "%s: %s" % spoof)
            self.assertEqual(r.status, 200, r)
            self.proxy.cleanup()
            return [v for k, v in r.json()["headers"] if k == "x-forwarded-client-cert"]

        # SANITIZE (the default): the client's header never reaches the upstream.
        self.assertEqual(seen("SANITIZE"), [])
        self.assertEqual(seen("FORWARD_ONLY"), [spoof[1]])
        mine = 'Hash=%s;Subject="CN=client";URI=spiffe://rpx/client' % digest
        details = {"subject": True, "uri": True}
        self.assertEqual(seen("SANITIZE_SET", details), [mine])
        self.assertEqual(seen("APPEND_FORWARD", details), [spoof[1] + "," + mine])
        self.assertEqual(seen("ALWAYS_FORWARD_ONLY"), [spoof[1]])
        cert = seen("SANITIZE_SET", {"cert": True})[0]
        self.assertTrue(cert.startswith('Hash=%s;Cert="-----BEGIN%%20CERTIFICATE-----%%0A' %
                                        digest), cert)

    def test_x_forwarded_client_cert_is_removed_without_mtls(self):
        # Even with FORWARD_ONLY, a connection without a client certificate cannot pass one on.
        self.start([{"tls": downstream_tls([self.certs["a.example.com"]])}],
                   hcm_extra={"forward_client_cert_details": "FORWARD_ONLY"})
        r = self.curl_https("a.example.com", "-H", "x-forwarded-client-cert: Hash=00")
        self.assertEqual(r.status, 200, r)
        self.assertNotIn("x-forwarded-client-cert", [k for k, v in r.json()["headers"]])

    def test_sslscan_finds_nothing_weak(self):
        """An external scanner as a second opinion (Debian's sslscan)."""
        self.start([{"tls": downstream_tls([self.certs["a.example.com"], self.rsa])}])
        r = subprocess.run(["sslscan", "--no-colour", "--show-sigs", "127.0.0.1:%d" % self.port],
                           capture_output=True, timeout=120)
        out = r.stdout.decode("utf-8", "replace")
        self.assertIn("TLSv1.3   enabled", out, out)
        self.assertIn("TLSv1.2   enabled", out, out)
        for old in ("SSLv2", "SSLv3", "TLSv1.0", "TLSv1.1"):
            self.assertIn("%s     disabled" % old if old.startswith("SSL") else
                          "%s   disabled" % old, out, out)
        accepted = [l for l in out.splitlines() if l.startswith(("Preferred", "Accepted"))]
        self.assertTrue(accepted, out)
        for line in accepted:
            for weak in ("NULL", "EXP", "RC4", "DES", "MD5", "CBC", "ADH", "AECDH"):
                self.assertNotIn(weak, line, line)
        self.assertNotIn("Compression enabled", out, out)
        self.assertIn("Session renegotiation not supported", out, out)


class UpstreamTlsTest(IntegrationTestCase):
    """rpx originating TLS to a real TLS origin (nginx with ssl)."""

    @classmethod
    def setUpClass(cls):
        cls.pki = TestPki()
        cls.origin_cert = cls.pki.cert("origin", ["DNS:origin.example.com"])
        cls.expired = cls.pki.cert("origin", ["DNS:origin.example.com"], expired=True)
        cls.client = cls.pki.cert("rpx", ["URI:spiffe://rpx/proxy"])
        cls.other_pki = TestPki("another CA")

    @classmethod
    def tearDownClass(cls):
        cls.pki.cleanup()
        cls.other_pki.cleanup()

    def start_origin(self, cert=None, verify_client=False):
        """nginx on a TLS port: answers with the SNI it got, whether the session was reused
        and the client certificate's subject."""
        client = ("ssl_client_certificate %s; ssl_verify_client on;" % self.pki.ca
                  if verify_client else "")
        self.origin_port = self.start_tls_nginx(
            cert or self.origin_cert,
            "sni=$ssl_server_name reused=$ssl_session_reused client=$ssl_client_s_dn",
            extra=client + " ssl_session_cache shared:s:1m;")

    def start_proxy(self, tls_context, max_requests_per_connection=None):
        self.port = free_port()
        c = cluster("origin", self.origin_port,
                    max_requests_per_connection=max_requests_per_connection)
        c["transport_socket"] = {"name": "envoy.transport_sockets.tls", "typed_config": dict(
            {"@type": UPSTREAM_TLS_TYPE}, **tls_context)}
        self.proxy = self.start_rpx(bootstrap([http_listener("l", self.port, [
            virtual_host("all", ["*"], [route("/", "origin")])])], [c]))

    def get(self):
        return curl("http://127.0.0.1:%d/" % self.port, timeout=20)

    def verified(self, san=None, ca=None):
        v = {"trusted_ca": {"filename": ca or self.pki.ca}}
        if san:
            v["match_typed_subject_alt_names"] = [{"san_type": "DNS", "matcher": {"exact": san}}]
        return {"sni": "origin.example.com", "common_tls_context": {"validation_context": v}}

    def test_verified_with_sni_and_sessions_resumed(self):
        self.start_origin()
        self.start_proxy(self.verified(san="origin.example.com"), max_requests_per_connection=1)
        bodies = [self.get() for _ in range(4)]
        for r in bodies:
            self.assertEqual(r.status, 200, r)
            self.assertIn(b"sni=origin.example.com", r.body)
        # One connection per request; each worker's pool resumes the session of its previous
        # connection to the host. Four requests on two workers: some worker made two.
        self.assertTrue(any(b"reused=r" in r.body for r in bodies[1:]), bodies)
        stats = self.proxy.stats()
        self.assertEqual(stats["cluster.origin.ssl.handshake"], 4)
        self.assertGreaterEqual(stats["cluster.origin.ssl.session_reused"], 1)

    def test_health_checks_speak_tls(self):
        """A TLS cluster's probes go over TLS with its SNI and validation (a cleartext probe to
        nginx's TLS port would get 400): a verified origin is healthy; against a CA that did not
        sign it, the handshake fails and the host is out."""
        self.start_origin()
        check = {"timeout": "1s", "interval": "0.1s", "no_traffic_interval": "0.1s",
                 "unhealthy_threshold": 1, "healthy_threshold": 1,
                 "http_health_check": {"path": "/healthz"}}
        for ca, healthy in ((None, 1), (self.other_pki.ca, 0)):
            self.port = free_port()
            c = cluster("origin", self.origin_port)
            c["transport_socket"] = {"name": "envoy.transport_sockets.tls", "typed_config": dict(
                {"@type": UPSTREAM_TLS_TYPE}, **self.verified(san="origin.example.com", ca=ca))}
            c["health_checks"] = [check]
            self.proxy = self.start_rpx(bootstrap([http_listener("l", self.port, [
                virtual_host("all", ["*"], [route("/", "origin")])])], [c]))
            wait_until(lambda: self.proxy.stats().get("cluster.origin.health_check.attempt", 0)
                       >= 3, timeout=20, what="probes")
            self.assertEqual(self.proxy.stat("cluster.origin.health_check.healthy"), healthy)
            if healthy:
                self.assertGreater(self.proxy.stat("cluster.origin.health_check.success"), 0)
                self.assertEqual(self.get().status, 200)
            else:
                self.assertGreater(
                    self.proxy.stat("cluster.origin.health_check.network_failure"), 0)
            self.proxy.cleanup()

    def test_alpn_offered_to_the_origin(self):
        """alpn_protocols as configured, less what rpx does not speak upstream (h2 until HTTP/2
        lands: offering it would let the origin pick a protocol rpx then misreads); none when
        none is configured."""
        self.origin_port = self.start_tls_nginx(self.origin_cert, "alpn=$ssl_alpn_protocol")
        with_alpn = self.verified()
        with_alpn["common_tls_context"]["alpn_protocols"] = ["h2", "http/1.1"]
        self.start_proxy(with_alpn)
        r = self.get()
        self.assertEqual((r.status, r.body), (200, b"alpn=http/1.1\n"), r)
        self.proxy.cleanup()
        self.start_proxy(self.verified())
        r = self.get()
        self.assertEqual((r.status, r.body), (200, b"alpn=\n"), r)

    def test_verification_failures_are_503s_that_say_why(self):
        self.start_origin()
        cases = [
            (self.verified(ca=self.other_pki.ca),
             "TLS verification failed: certificate verify failed: unable to get local issuer "
             "certificate"),
            (self.verified(san="other.example.com"),
             "TLS verification failed: certificate verify failed: no subject alternative name "
             "matched"),
        ]
        for ctx, why in cases:
            with self.subTest(why=why):
                self.start_proxy(ctx)
                r = self.get()
                self.assertEqual(r.status, 503, r)
                self.assertIn(why.encode(), r.body)
                self.assertEqual(self.proxy.stat("cluster.origin.ssl.fail_verify"), 1)
                self.assertIn("cluster 'origin': TLS handshake with 127.0.0.1:%d failed: %s" %
                              (self.origin_port, why.split(": ", 1)[1]),
                              self.proxy.stderr_text())
                self.proxy.cleanup()

    def test_expired_certificate(self):
        self.start_origin(cert=self.expired)
        self.start_proxy(self.verified())
        r = self.get()
        self.assertEqual(r.status, 503, r)
        self.assertIn(b"TLS verification failed: certificate verify failed: certificate has "
                      b"expired", r.body)
        self.assertEqual(self.proxy.stat("cluster.origin.ssl.fail_verify"), 1)
        self.assertIn("failed: certificate verify failed: certificate has expired",
                      self.proxy.stderr_text())

    def test_mutual_tls_to_the_origin(self):
        self.start_origin(verify_client=True)
        ctx = self.verified()
        self.start_proxy(ctx)
        r = self.get()
        self.assertNotEqual(r.status, 200, r)  # no client certificate: nginx refuses (400)
        self.proxy.cleanup()
        ctx["common_tls_context"]["tls_certificates"] = [tls_certificate(self.client)]
        self.start_proxy(ctx)
        r = self.get()
        self.assertEqual(r.status, 200, r)
        self.assertIn(b"client=CN=rpx", r.body)

    def test_transport_socket_matches_choose_by_endpoint_metadata(self):
        """Istio's pattern: endpoints labelled tlsMode=istio get TLS, the others cleartext."""
        self.start_origin()
        plain = self.start_echo("plain")
        self.port = free_port()
        c = cluster("mixed", [plain.port, self.origin_port])
        c["load_assignment"]["endpoints"][0]["lb_endpoints"][1]["metadata"] = {
            "filter_metadata": {"envoy.transport_socket_match": {"tlsMode": "istio"}}}
        tls = {"name": "envoy.transport_sockets.tls", "typed_config": dict(
            {"@type": UPSTREAM_TLS_TYPE}, **self.verified())}
        c["transport_socket_matches"] = [
            {"name": "mtls", "match": {"tlsMode": "istio"}, "transport_socket": tls},
            {"name": "plain", "match": {}, "transport_socket": {
                "name": "envoy.transport_sockets.raw_buffer", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer."
                             "v3.RawBuffer"}}}]
        self.proxy = self.start_rpx(bootstrap([http_listener("l", self.port, [
            virtual_host("all", ["*"], [route("/", "mixed")])])], [c]))
        answers = set()
        for _ in range(4):
            r = self.get()
            self.assertEqual(r.status, 200, r)
            answers.add("origin" if r.body.startswith(b"sni=origin.example.com") else
                        r.json()["server"])
        self.assertEqual(answers, {"origin", "plain"})
        self.assertGreaterEqual(self.proxy.stat("cluster.mixed.ssl.handshake"), 1)

    def test_auto_sni_and_auto_san_validation(self):
        self.start_origin()
        self.port = free_port()
        c = cluster("origin", self.origin_port)
        opts = c["typed_extension_protocol_options"][
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        opts["upstream_http_protocol_options"] = {"auto_sni": True, "auto_san_validation": True}
        ctx = self.verified()
        del ctx["sni"]
        c["transport_socket"] = {"name": "envoy.transport_sockets.tls", "typed_config": dict(
            {"@type": UPSTREAM_TLS_TYPE}, **ctx)}
        self.proxy = self.start_rpx(bootstrap([http_listener("l", self.port, [
            virtual_host("all", ["*"], [route("/", "origin")])])], [c]))

        def get(host):
            return curl("http://127.0.0.1:%d/" % self.port, "-H", "Host: " + host, timeout=20)
        r = get("origin.example.com:8080")
        self.assertEqual(r.status, 200, r)
        self.assertIn(b"sni=origin.example.com ", r.body)  # the port is not part of the SNI
        # A name the origin's certificate is not valid for: refused, and said so.
        r = get("other.example.com")
        self.assertEqual(r.status, 503, r)
        self.assertIn(b"TLS verification failed: certificate verify failed: hostname mismatch",
                      r.body)
        # The first name's pool still serves.
        r = get("origin.example.com")
        self.assertEqual(r.status, 200, r)

    def test_cleartext_origin_behind_a_tls_cluster_fails_cleanly(self):
        up = self.start_echo("plain")
        self.origin_port = up.port
        self.start_proxy(self.verified())
        r = self.get()
        self.assertEqual(r.status, 503, r)
        self.assertIn(b"upstream connect error: TLS error:", r.body)
        self.assertEqual(up.request_count(), 0)


class TransportSocketsOverXdsTest(IntegrationTestCase):
    """The security rule over xDS: a transport socket or a transport_socket_match rpx cannot
    honour (another transport, or a TLS field it does not implement) is NACKed with its name,
    and the version in service, TLS included, keeps serving; it never becomes cleartext."""

    NODE = "ts-node"

    @classmethod
    def setUpClass(cls):
        cls.pki = TestPki()
        cls.origin_cert = cls.pki.cert("origin", ["DNS:origin.example.com"])
        cls.server_cert = cls.pki.cert("a.example.com", ["DNS:a.example.com"])

    @classmethod
    def tearDownClass(cls):
        cls.pki.cleanup()

    def tls_cluster(self, **common_extra):
        c = cluster("origin", self.origin_port)
        validation = {"trusted_ca": {"filename": self.pki.ca}}
        validation.update(common_extra)
        c["transport_socket"] = {"name": "envoy.transport_sockets.tls", "typed_config": {
            "@type": UPSTREAM_TLS_TYPE, "sni": "origin.example.com",
            "common_tls_context": {"validation_context": validation}}}
        return c

    def tls_listener(self, transport_socket):
        l = http_listener("l", self.port, [virtual_host("all", ["*"], [route("/", "origin")])])
        l["filter_chains"] = [tls_chain(l["filter_chains"][0], transport_socket)]
        return l

    def setUp(self):
        self.origin_port = self.start_tls_nginx(self.origin_cert, "origin ssl=$ssl_protocol")
        self.port = free_port()
        self.files = {"clusters": [self.tls_cluster()],
                      "listeners": [self.tls_listener(downstream_tls([self.server_cert]))]}
        self.xds = self.start_xds_server({"r.yaml": self.files})
        self.proxy = self.start_rpx(xds_bootstrap(self.xds.port, node_id=self.NODE))
        self.xds.wait_ack("CDS", 0, node=self.NODE)
        self.xds.wait_ack("LDS", 0, node=self.NODE)
        self.assert_serving_tls()

    def assert_serving_tls(self):
        r = curl("https://a.example.com:%d/" % self.port, "--resolve",
                 "a.example.com:%d:127.0.0.1" % self.port, "--cacert", self.pki.ca, timeout=20)
        self.assertEqual(r.status, 200, r)
        self.assertRegex(r.body, rb"^origin ssl=TLSv1\.[23]\n$")

    def push(self, **changes):
        files = dict(self.files)
        files.update(changes)
        return self.xds.write_resources("r.yaml", **files)

    def test_a_cluster_transport_rpx_cannot_honour_is_nacked(self):
        alts = {"name": "envoy.transport_sockets.alts"}
        bad = self.tls_cluster()
        bad["transport_socket"] = alts
        version, error = self.xds.wait_nack("CDS", self.push(clusters=[bad]), node=self.NODE)
        self.assertIn("Cluster 'origin'.transport_socket", error)
        self.assertIn("transport socket 'envoy.transport_sockets.alts' is not supported", error)
        self.assert_serving_tls()

        # In transport_socket_matches (as Istio sends mTLS for some endpoints only).
        bad = self.tls_cluster()
        bad["transport_socket_matches"] = [{"name": "mtls", "match": {"tlsMode": "istio"},
                                            "transport_socket": alts}]
        version, error = self.xds.wait_nack("CDS", self.push(clusters=[bad]), node=self.NODE)
        self.assertIn("Cluster 'origin'.transport_socket_matches[0]", error)
        self.assertIn("envoy.transport_sockets.alts", error)
        self.assert_serving_tls()

        # A verification field rpx does not implement: refused, not verified less.
        bad = self.tls_cluster(verify_certificate_hash=["00" * 32])
        version, error = self.xds.wait_nack("CDS", self.push(clusters=[bad]), node=self.NODE)
        self.assertIn("verify_certificate_hash", error)
        self.assert_serving_tls()
        status, body = self.proxy.admin("GET", "/config_summary")
        self.assertIn(b"verify_certificate_hash", body)  # the last NACK, per type

    def test_a_listener_transport_rpx_cannot_honour_is_nacked(self):
        bad = self.tls_listener({"name": "envoy.transport_sockets.alts"})
        version, error = self.xds.wait_nack("LDS", self.push(listeners=[bad]), node=self.NODE)
        self.assertIn("Listener 'l'.filter_chains[0].transport_socket", error)
        self.assertIn("is not supported", error)
        self.assert_serving_tls()
        # Cleartext on that port is still refused: the TLS chain in service stays.
        r = curl("http://127.0.0.1:%d/" % self.port, timeout=20)
        self.assertEqual(r.status, 0, r)


class TlsWalkthroughTest(IntegrationTestCase):
    """docs/tls.md's walkthrough, step by step, with configs/tls-terminate.yaml and
    configs/tls-sds.yaml as checked in (paths and ports rewritten into a temporary place)."""

    def setUp(self):
        self.dir = make_tmpdir("rpx-it-tls-walk-")
        self.addCleanup(remove_tmpdir, self.dir)
        # The walkthrough's certificate commands.
        script = """
set -e
cd "$1"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
  -out ca.pem -days 30 -subj "/CN=rpx demo CA"
for name in a.example.com b.example.com default.example.com origin.example.com; do
  short=${name%%.*}
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $short.key \
    -out $short.csr -subj "/CN=$name"
  printf "subjectAltName=DNS:%s\n" $name > $short.ext
  openssl x509 -req -in $short.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
    -extfile $short.ext -out $short.pem
done
"""
        r = subprocess.run(["bash", "-c", script, "make-certs", self.dir], capture_output=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.ports = {p: free_port() for p in (9901, 10443, 8080, 8443, 18000)}

    def config(self, name):
        with open(repo_file("configs/" + name)) as f:
            text = f.read()
        text = text.replace("/tmp/rpx-tls/", self.dir + "/")
        for old, new in self.ports.items():
            text, n = re.subn(r"port_value: %d\b" % old, "port_value: %d" % new, text)
        return text

    def s_client_cn(self, *args):
        code, out = s_client(self.ports[10443], *args)
        return peer_cn(out)

    def test_terminate_and_originate(self):
        service = self.start_echo("service")
        self.ports[8080] = service.port
        origin = self.start_listening_process(
            ["openssl", "s_server", "-accept", "127.0.0.1:%d" % self.ports[8443], "-cert",
             os.path.join(self.dir, "origin.pem"), "-key", os.path.join(self.dir, "origin.key"),
             "-www", "-quiet"], [self.ports[8443]], "openssl s_server")
        proxy = self.start_rpx(self.config("tls-terminate.yaml"), admin_port=self.ports[9901])
        port = self.ports[10443]
        r = curl("https://a.example.com:%d/" % port, "--cacert", os.path.join(self.dir, "ca.pem"),
                 "--resolve", "a.example.com:%d:127.0.0.1" % port, timeout=20)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(dict(r.json()["headers"])["x-forwarded-proto"], "https")
        self.assertEqual(self.s_client_cn("-servername", "b.example.com"), "b.example.com")
        self.assertEqual(self.s_client_cn("-noservername"), "default.example.com")
        r = curl("https://a.example.com:%d/origin" % port, "--cacert",
                 os.path.join(self.dir, "ca.pem"), "--resolve", "a.example.com:%d:127.0.0.1" % port,
                 timeout=20)
        self.assertEqual(r.status, 200, r)
        self.assertIn(b"<pre>", r.body)  # s_server's status page
        self.assertEqual(proxy.stat("cluster.tls_origin.ssl.handshake"), 1)

    def test_rotate_over_sds(self):
        xds = self.start_xds_server(port=0)
        self.ports[18000] = xds.port

        def secret(short):
            return ("secrets:\n- name: server_cert\n  tls_certificate:\n"
                    "    certificate_chain: {filename: %s/%s.pem}\n"
                    "    private_key: {filename: %s/%s.key}\n" % (self.dir, short, self.dir, short))
        mark = xds.write_file("secrets.yaml", secret("a"))
        self.start_rpx(self.config("tls-sds.yaml"), admin_port=self.ports[9901])
        xds.wait_ack("SDS", mark, node="rpx-node")
        self.assertEqual(self.s_client_cn(), "a.example.com")
        mark = xds.write_file("secrets.yaml", secret("b"))
        xds.wait_ack("SDS", mark, node="rpx-node")
        self.assertEqual(self.s_client_cn(), "b.example.com")


if __name__ == "__main__":
    unittest.main()
