"""/config_dump in Envoy's ConfigDump shape, parsed by protobuf's JSON parser against Envoy's
canonical messages (not rpx's subset): static and xDS resources, ?resource=, ?mask=,
?include_eds, and private keys redacted everywhere."""

import os
import subprocess
import unittest

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

from harness import (IntegrationTestCase, TestPki, bootstrap, cluster, eds_cluster, free_port,
                     http_listener, load_assignment, make_tmpdir, rds_listener, remove_tmpdir,
                     repo_file, route, route_configuration, tls_chain, virtual_host, wait_until,
                     xds_bootstrap)

ADMIN = "type.googleapis.com/envoy.admin.v3."
SECRET_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
DOWNSTREAM_TLS = ("type.googleapis.com/envoy.extensions.transport_sockets.tls.v3."
                  "DownstreamTlsContext")


class Canonical(object):
    """Envoy's canonical protos (test/api/canonical_protos.sh) in a descriptor pool."""
    pool = None

    @classmethod
    def load(cls):
        if cls.pool is not None:
            return
        d = make_tmpdir("rpx-it-canonical-")
        try:
            out = os.path.join(d, "canonical.pb")
            subprocess.run(["bash", repo_file("test/api/canonical_protos.sh"), out], check=True,
                           timeout=300)
            fds = descriptor_pb2.FileDescriptorSet.FromString(open(out, "rb").read())
        finally:
            remove_tmpdir(d)
        pool = descriptor_pool.DescriptorPool()
        for f in fds.file:
            pool.Add(f)
        cls.pool = pool
        cls.factory = message_factory.MessageFactory(pool)

    @classmethod
    def parse(cls, text, full_name="envoy.admin.v3.ConfigDump"):
        """Strict: a field, enum value or Any type the canonical protos lack is an error."""
        msg = cls.factory.GetPrototype(cls.pool.FindMessageTypeByName(full_name))()
        try:
            json_format.Parse(text, msg, descriptor_pool=cls.pool)
        except json_format.ParseError as e:
            raise AssertionError("%s\n%s" % (e, text[:4000]))
        return msg


class ConfigDumpTest(IntegrationTestCase):

    @classmethod
    def setUpClass(cls):
        Canonical.load()

    def get(self, query=""):
        status, body = self.proxy.admin("GET", "/config_dump" + query)
        return status, body.decode()

    def dump(self, query=""):
        status, text = self.get(query)
        self.assertEqual(status, 200, text)
        self.assertNotIn("PRIVATE KEY", text)  # never key material
        return Canonical.parse(text), text

    def configs_by_type(self, dump):
        return {c.type_url[len(ADMIN):]: c for c in dump.configs}

    def unpack(self, any_msg):
        name = any_msg.type_url.split("/")[-1]
        msg = Canonical.factory.GetPrototype(Canonical.pool.FindMessageTypeByName(name))()
        self.assertTrue(any_msg.Unpack(msg))
        return msg

    def start_static(self):
        pki = TestPki()
        self.addCleanup(pki.cleanup)
        cert, key = pki.cert("a.example.com", ["DNS:a.example.com"])
        key_pem = open(key).read()
        self.up_port = free_port()
        self.port, self.tls_port = free_port(), free_port()
        plain = http_listener("plain", self.port, [virtual_host("all", ["*"], [
            route("/", "up")])])
        tls = http_listener("secure", self.tls_port, [virtual_host("all", ["*"], [
            route("/", "up")])])
        chain = tls["filter_chains"][0]
        chain["transport_socket"] = {"name": "envoy.transport_sockets.tls", "typed_config": {
            "@type": DOWNSTREAM_TLS, "common_tls_context": {"tls_certificates": [{
                "certificate_chain": {"filename": cert},
                "private_key": {"inline_string": key_pem}}]}}}
        cfg = bootstrap([plain, tls], [cluster("up", self.up_port)])
        cfg["static_resources"]["secrets"] = [{"name": "spare", "tls_certificate": {
            "certificate_chain": {"filename": cert},
            "private_key": {"inline_string": key_pem}}}]
        self.proxy = self.start_rpx(cfg)

    def test_static_resources_in_envoys_shape(self):
        self.start_static()
        dump, text = self.dump()
        self.assertEqual([c.type_url[len(ADMIN):] for c in dump.configs],
                         ["BootstrapConfigDump", "ClustersConfigDump", "ListenersConfigDump",
                          "RoutesConfigDump", "SecretsConfigDump"])
        by = self.configs_by_type(dump)
        boot = self.unpack(by["BootstrapConfigDump"])
        self.assertEqual(len(boot.bootstrap.static_resources.listeners), 2)
        self.assertGreater(boot.last_updated.seconds, 0)
        clusters = self.unpack(by["ClustersConfigDump"])
        self.assertEqual([self.unpack(c.cluster).name for c in clusters.static_clusters], ["up"])
        listeners = self.unpack(by["ListenersConfigDump"])
        self.assertEqual(sorted(self.unpack(l.listener).name for l in listeners.static_listeners),
                         ["plain", "secure"])
        routes = self.unpack(by["RoutesConfigDump"])
        self.assertEqual(sorted(self.unpack(r.route_config).name
                                for r in routes.static_route_configs),
                         ["plain_routes", "secure_routes"])
        secrets = self.unpack(by["SecretsConfigDump"])
        self.assertEqual([s.name for s in secrets.static_secrets], ["spare"])
        spare = self.unpack(secrets.static_secrets[0].secret)
        self.assertEqual(spare.tls_certificate.private_key.inline_string, "[redacted]")
        # Inside the listener's Any-packed TLS context too, and in the bootstrap.
        secure = [self.unpack(l.listener) for l in listeners.static_listeners
                  if self.unpack(l.listener).name == "secure"][0]
        ctx = self.unpack(secure.filter_chains[0].transport_socket.typed_config)
        key = ctx.common_tls_context.tls_certificates[0].private_key
        self.assertEqual(key.inline_string, "[redacted]")
        self.assertTrue(ctx.common_tls_context.tls_certificates[0].certificate_chain.filename)
        self.assertGreaterEqual(text.count("[redacted]"), 3)

    def test_resource_mask_and_include_eds(self):
        self.start_static()
        dump, _ = self.dump("?resource=static_listeners")
        self.assertEqual(len(dump.configs), 2)
        for c in dump.configs:
            self.assertEqual(c.type_url, ADMIN + "ListenersConfigDump.StaticListener")
        dump, _ = self.dump("?resource=static_clusters&mask=last_updated")
        (only,) = dump.configs
        sc = self.unpack(only)
        self.assertTrue(sc.HasField("last_updated"))
        self.assertFalse(sc.HasField("cluster"))
        # A mask without resource trims every dump it fits.
        dump, _ = self.dump("?mask=static_listeners")
        listeners = self.unpack(self.configs_by_type(dump)["ListenersConfigDump"])
        self.assertEqual(len(listeners.static_listeners), 2)
        # Endpoints only when asked, as Envoy.
        dump, _ = self.dump()
        self.assertNotIn("EndpointsConfigDump", self.configs_by_type(dump))
        dump, _ = self.dump("?include_eds")
        eds = self.unpack(self.configs_by_type(dump)["EndpointsConfigDump"])
        (cla,) = [self.unpack(e.endpoint_config) for e in eds.static_endpoint_configs]
        self.assertEqual(cla.cluster_name, "up")
        port = cla.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value
        self.assertEqual(port, self.up_port)
        # Bad queries name what is wrong.
        status, text = self.get("?resource=no_such_field")
        self.assertEqual(status, 404)
        self.assertIn("no_such_field", text)
        status, text = self.get("?resource=static_clusters&mask=nope")
        self.assertEqual(status, 400)
        self.assertIn("nope", text)

    def test_xds_resources_with_versions(self):
        up = self.start_echo("A")
        port = free_port()
        state = {
            "listeners": [rds_listener("main", port, "main_routes")],
            "routes": [route_configuration("main_routes", [virtual_host("all", ["*"], [
                route("/", "svc")])])],
            "clusters": [eds_cluster("svc")],
            "endpoints": [load_assignment("svc", [up.port])],
        }
        xds = self.start_xds_server({"config.yaml": state})
        self.proxy = self.start_rpx(xds_bootstrap(xds.port))
        dump, _ = self.dump("?include_eds")
        by = self.configs_by_type(dump)
        listeners = self.unpack(by["ListenersConfigDump"])
        self.assertEqual(listeners.version_info, "1")
        (main,) = listeners.dynamic_listeners
        self.assertEqual(main.name, "main")
        self.assertEqual(main.active_state.version_info, "1")
        self.assertEqual(self.unpack(main.active_state.listener).name, "main")
        self.assertFalse(main.HasField("warming_state"))
        clusters = self.unpack(by["ClustersConfigDump"])
        self.assertEqual([self.unpack(c.cluster).name for c in clusters.dynamic_active_clusters],
                         ["svc"])
        self.assertEqual(len(clusters.dynamic_warming_clusters), 0)
        routes = self.unpack(by["RoutesConfigDump"])
        (rc,) = routes.dynamic_route_configs
        self.assertEqual(self.unpack(rc.route_config).name, "main_routes")
        self.assertEqual(rc.version_info, "1")
        eds = self.unpack(by["EndpointsConfigDump"])
        self.assertEqual([self.unpack(e.endpoint_config).cluster_name
                          for e in eds.dynamic_endpoint_configs], ["svc"])
        # An update: the new version shows.
        state["routes"] = [route_configuration("main_routes", [virtual_host("all", ["*"], [
            route("/v2", "svc"), route("/", "svc")])])]
        xds.write_resources("config.yaml", **state)

        def route_version():
            routes = self.unpack(self.configs_by_type(self.dump()[0])["RoutesConfigDump"])
            return routes.dynamic_route_configs[0].version_info
        wait_until(lambda: route_version() == "2", timeout=10, what="routes version 2")


if __name__ == "__main__":
    unittest.main()
