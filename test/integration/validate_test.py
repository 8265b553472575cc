"""Configuration checking: `--mode validate` and bad configs in serve mode."""

import os
import re
import socket
import subprocess
import unittest

from harness import (IntegrationTestCase, TestPki, bootstrap, cluster, downstream_tls, free_port,
                     http_listener, make_tmpdir, port_is_listening, quickstart_config,
                     remove_tmpdir, route, run_rpx, tls_chain, to_yaml, virtual_host)

BASE = """\
admin:
  address:
    socket_address: { address: 127.0.0.1, port_value: ADMIN_PORT }
static_resources:
  listeners:
  - name: main
    address:
      socket_address: { address: 127.0.0.1, port_value: LISTEN_PORT }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: main
          route_config:
            name: main_routes
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route: { cluster: backend, timeout: 5s }
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: 8080 }
"""

SECOND_CLUSTER = """\
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: 8081 }
"""


def line_of(text, needle):
    """1-based line number of the first line containing needle."""
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise ValueError("%r not in text" % needle)


def col_of(text, needle):
    """1-based column where needle starts on its line."""
    for line in text.splitlines():
        if needle in line:
            return line.index(needle) + 1
    raise ValueError("%r not in text" % needle)


class ValidateTest(IntegrationTestCase):

    def setUp(self):
        self.tmp = make_tmpdir("rpx-it-validate-")
        self.addCleanup(remove_tmpdir, self.tmp)
        self.admin_port = free_port()
        self.listen_port = free_port()

    def base(self):
        return (BASE.replace("ADMIN_PORT", str(self.admin_port))
                .replace("LISTEN_PORT", str(self.listen_port)))

    def write(self, text, name="config.yaml"):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def validate(self, text_or_path, is_path=False):
        path = text_or_path if is_path else self.write(text_or_path)
        return path, run_rpx(["--mode", "validate", "-c", path])

    def assertInvalid(self, cp, path, *needles, errors=1):
        self.assertEqual(cp.returncode, 1, "stdout: %s\nstderr: %s" % (cp.stdout, cp.stderr))
        self.assertNotIn("OK", cp.stdout)
        lines = cp.stderr.splitlines()
        error_lines = [l for l in lines if l.startswith("error: ")]
        self.assertEqual(len(error_lines), errors, cp.stderr)
        for l in error_lines:
            self.assertTrue(l.startswith("error: " + path), "error line does not name the file: %r"
                            % l)
        summary = "%d error%s in configuration '%s'" % (errors, "" if errors == 1 else "s", path)
        self.assertIn(summary, lines, cp.stderr)
        for needle in needles:
            self.assertIn(needle, cp.stderr)
        return error_lines

    # -- valid configs
    def test_quickstart_is_valid(self):
        path = quickstart_config()
        _, cp = self.validate(path, is_path=True)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stdout.strip(), "configuration '%s' OK" % path)
        self.assertEqual(cp.stderr, "")

    def test_base_config_is_valid(self):
        path, cp = self.validate(self.base())
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(cp.stdout.strip(), "configuration '%s' OK" % path)

    def test_generated_config_is_valid(self):
        # Everything the other tests generate, in one file.
        cfg = bootstrap(
            [http_listener("l1", self.listen_port, [
                virtual_host("a", ["a.example.com", "*.b.example.com"], [
                    route("/r/", "c1", timeout="1s", prefix_rewrite="/x/",
                          host_rewrite_literal="h.internal"),
                    route(path="/exact", cluster="c2", timeout="0.5s"),
                    route("/direct", direct_response=(200, "hi\n")),
                ]),
                virtual_host("d", ["*"], [route("/", "c1")]),
            ])],
            [cluster("c1", 8080, max_connections=4, max_pending_requests=1, max_requests=10,
                     idle_timeout="30s", max_requests_per_connection=100),
             cluster("c2", [8081, 8082], connect_timeout="0.25s", lb_policy="LEAST_REQUEST")],
            admin_port=self.admin_port)
        path, cp = self.validate(to_yaml(cfg))
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("OK", cp.stdout)

    def test_xds_bootstrap_with_a_dns_control_plane(self):
        # Validation resolves no names: a STRICT_DNS xDS cluster (Envoy's dynamic-config example
        # reaches its control plane as "go-control-plane") is valid as written.
        text = """\
node: {id: n, cluster: c}
admin: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}
dynamic_resources:
  ads_config:
    api_type: GRPC
    transport_api_version: V3
    grpc_services: [{envoy_grpc: {cluster_name: xds_cluster}}]
  cds_config: {resource_api_version: V3, ads: {}}
  lds_config: {resource_api_version: V3, ads: {}}
static_resources:
  clusters:
  - name: xds_cluster
    type: STRICT_DNS
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: xds_cluster
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address:
        {address: go-control-plane.invalid, port_value: 18000}}}}]}]
""" % self.admin_port
        _, cp = self.validate(text)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("OK", cp.stdout)

    def test_validate_does_not_bind(self):
        # Validation must not need the ports: they may be taken by the running instance.
        s = socket.socket()
        s.bind(("127.0.0.1", self.listen_port))
        s.listen(1)
        self.addCleanup(s.close)
        _, cp = self.validate(self.base())
        self.assertEqual(cp.returncode, 0, cp.stderr)

    # -- schema errors (with line:column)
    def test_unknown_field(self):
        text = self.base().replace("    type: STATIC\n", "    type: STATIC\n    bogus_field: 1\n")
        path, cp = self.validate(text)
        line = line_of(text, "bogus_field")
        self.assertInvalid(cp, path, "error: %s:%d:5: static_resources.clusters[0].bogus_field: "
                           "unknown field 'bogus_field'" % (path, line))

    def test_bad_enum_value(self):
        text = self.base().replace("    type: STATIC\n", "    type: STATIC\n    lb_policy: SOMETIMES\n")
        path, cp = self.validate(text)
        line, col = line_of(text, "SOMETIMES"), col_of(text, "SOMETIMES")
        self.assertInvalid(cp, path, "error: %s:%d:%d: static_resources.clusters[0].lb_policy: "
                           "unknown value 'SOMETIMES'" % (path, line, col), "ROUND_ROBIN")

    def test_wrong_scalar_type(self):
        text = self.base().replace("port_value: 8080", "port_value: http")
        path, cp = self.validate(text)
        line = line_of(text, "port_value: http")
        self.assertInvalid(
            cp, path, "error: %s:%d:" % (path, line),
            "static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint."
            "address.socket_address.port_value: ", "'http'")

    def test_bad_duration(self):
        text = self.base().replace("connect_timeout: 1s", "connect_timeout: fast")
        path, cp = self.validate(text)
        self.assertInvalid(cp, path, "error: %s:%d:" % (path, line_of(text, "fast")),
                           "static_resources.clusters[0].connect_timeout: ", "'fast'")

    def test_invalid_yaml(self):
        text = self.base().replace('domains: ["*"]', 'domains: ["*"')
        path, cp = self.validate(text)
        errs = self.assertInvalid(cp, path, "invalid YAML")
        m = re.match(r"^error: %s:(\d+):(\d+): invalid YAML" % re.escape(path), errs[0])
        self.assertTrue(m, errs[0])
        self.assertGreaterEqual(int(m.group(1)), line_of(text, 'domains: ["*"'))

    def test_empty_file(self):
        path, cp = self.validate("")
        self.assertInvalid(cp, path, "the configuration is empty")

    def test_missing_file(self):
        path = os.path.join(self.tmp, "does-not-exist.yaml")
        _, cp = self.validate(path, is_path=True)
        self.assertInvalid(cp, path, "error: %s: cannot open the file" % path)

    def test_unsupported_envoy_field(self):
        # An Envoy field rpx does not implement is an error, not silently ignored.
        text = "dynamic_resources: { ads_config: { refresh_delay: 1s } }\n" + self.base()
        path, cp = self.validate(text)
        self.assertInvalid(cp, path, "error: %s: dynamic_resources.ads_config.refresh_delay: " % path,
                           "not supported by rpx")

    def test_ads_without_http2_cluster(self):
        text = ("dynamic_resources:\n"
                "  cds_config: { ads: {}, resource_api_version: V3 }\n"
                "  ads_config: { api_type: GRPC, transport_api_version: V3,"
                " grpc_services: [ { envoy_grpc: { cluster_name: nosuch } } ] }\n") + self.base()
        path, cp = self.validate(text)
        self.assertInvalid(cp, path, "dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name",
                           "no static cluster named 'nosuch'")

    def test_tls_certificate_files_are_checked(self):
        """--mode validate reads the certificate and key files, parses them and checks that they
        belong together, naming the field."""
        pki = TestPki()
        self.addCleanup(pki.cleanup)
        good = pki.cert("a", ["DNS:a.example.com"])
        other = pki.cert("b", ["DNS:b.example.com"])
        field = ("static_resources.listeners[0].filter_chains[0].transport_socket.typed_config."
                 "common_tls_context.tls_certificates[0]")

        def config(cert, key):
            l = http_listener("tls", free_port(), [virtual_host("all", ["*"], [
                route("/", "backend")])])
            l["filter_chains"] = [tls_chain(l["filter_chains"][0], downstream_tls([(cert, key)]))]
            return to_yaml(bootstrap([l], [cluster("backend", free_port())]))

        path, cp = self.validate(config(*good))
        self.assertEqual(cp.returncode, 0, cp.stderr)
        path, cp = self.validate(config(good[0], "/nonexistent/key.pem"))
        self.assertInvalid(cp, path, field + ".private_key.filename: cannot read "
                           "'/nonexistent/key.pem': No such file or directory")
        path, cp = self.validate(config(good[0], other[1]))
        self.assertInvalid(cp, path, field + ".private_key: does not match the certificate")
        path, cp = self.validate(config(good[1], good[1]))  # a key where the chain goes
        self.assertInvalid(cp, path, field + ".certificate_chain: no PEM certificate could be read")

    # -- semantic errors (field path, no line)
    def test_duplicate_cluster_names(self):
        path, cp = self.validate(self.base() + SECOND_CLUSTER)
        self.assertInvalid(cp, path, "error: %s: static_resources.clusters[1].name: duplicate "
                           "cluster name 'backend'" % path)

    def test_bad_regex(self):
        text = self.base().replace('match: { prefix: "/" }',
                                   'match: { safe_regex: { regex: "(unclosed" } }')
        path, cp = self.validate(text)
        self.assertInvalid(
            cp, path,
            "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config."
            "virtual_hosts[0].routes[0].match.safe_regex.regex: invalid regex '(unclosed'")

    def test_unknown_cluster_in_route(self):
        text = self.base().replace("cluster: backend, timeout", "cluster: nosuch, timeout")
        path, cp = self.validate(text)
        self.assertInvalid(cp, path, "unknown cluster 'nosuch'")

    def test_unknown_cluster_in_route_names_field_path(self):
        # Every error names the field it is about, as `FILE: field.path: message`.
        text = self.base().replace("cluster: backend, timeout", "cluster: nosuch, timeout")
        path, cp = self.validate(text)
        self.assertInvalid(
            cp, path,
            "error: %s: static_resources.listeners[0].filter_chains[0].filters[0].typed_config."
            "route_config.virtual_hosts[0].routes[0].route.cluster: " % path)

    def test_all_errors_reported(self):
        text = (self.base()
                .replace("    type: STATIC\n", "    type: STATIC\n    lb_policy: SOMETIMES\n")
                .replace("          stat_prefix: main\n",
                         "          stat_prefix: main\n          not_a_field: true\n"))
        path, cp = self.validate(text)
        self.assertInvalid(cp, path, "static_resources.clusters[0].lb_policy",
                           "static_resources.listeners[0].filter_chains[0].filters[0]."
                           "typed_config.not_a_field", errors=2)

    # -- serve mode
    def serve(self, text, timeout=10):
        path = self.write(text)
        try:
            return run_rpx(["-c", path, "--concurrency", "1", "-l", "warn"], timeout=timeout), path
        except subprocess.TimeoutExpired:
            self.fail("rpx kept running on an invalid configuration")

    def test_bad_config_in_serve_mode_exits_and_binds_nothing(self):
        text = self.base().replace("    type: STATIC\n", "    type: STATIC\n    bogus_field: 1\n")
        cp, path = self.serve(text)
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("bogus_field", cp.stderr)
        self.assertFalse(port_is_listening(self.listen_port))
        self.assertFalse(port_is_listening(self.admin_port))

    def test_semantic_error_in_serve_mode_exits_and_binds_nothing(self):
        text = self.base().replace("cluster: backend, timeout", "cluster: nosuch, timeout")
        cp, _ = self.serve(text)
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("unknown cluster 'nosuch'", cp.stderr)
        self.assertFalse(port_is_listening(self.listen_port))
        self.assertFalse(port_is_listening(self.admin_port))

    def test_listener_port_in_use(self):
        s = socket.socket()
        s.bind(("127.0.0.1", self.listen_port))
        s.listen(1)
        self.addCleanup(s.close)
        cp, _ = self.serve(self.base())
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("error: listener 'main'", cp.stderr)
        self.assertFalse(port_is_listening(self.admin_port))

    def test_bad_command_line(self):
        cp = run_rpx(["--concurrency", "0", "-c", "x.yaml"])
        self.assertEqual(cp.returncode, 1)
        self.assertIn("--concurrency", cp.stderr)
        cp = run_rpx(["--mode", "dry-run", "-c", "x.yaml"])
        self.assertEqual(cp.returncode, 1)
        self.assertIn("--mode", cp.stderr)
        cp = run_rpx([])
        self.assertEqual(cp.returncode, 1)
        self.assertIn("-c", cp.stderr)
        for bad in ("-1", "1001", "20us", ""):
            cp = run_rpx(["--batch-wait-us", bad, "-c", "x.yaml"])
            self.assertEqual(cp.returncode, 1, bad)
            self.assertIn("--batch-wait-us must be an integer in [0, 1000], got '%s'" % bad,
                          cp.stderr)


if __name__ == "__main__":
    unittest.main()
