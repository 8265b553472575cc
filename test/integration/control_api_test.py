"""rpx's control API as its users drive it: the reference control plane (tools/xds_server with
--control-port) serving three rpx nodes over ADS, changed only through rpxctl.

Each node has its own static listener whose routes (RouteConfiguration "r") and clusters come
from the control plane; the routes answer directly with a body naming the version of the config
("v1", "v2", ...), so curl on each node shows which config it runs. Nodes "a" and "b" are in
node.cluster "prod", node "c" in "canary".
"""

import glob
import json
import os
import signal
import unittest

from harness import (UPSTREAM_TLS_TYPE, IntegrationTestCase, TestPki, XdsServer, cluster,
                     curl, free_port, rds_listener, repo_file, route, route_configuration,
                     to_yaml, virtual_host, wait_until, with_ports, xds_bootstrap)

NODES = (("node-a", "prod"), ("node-b", "prod"), ("node-c", "canary"))


def routes_answering(body, extra_routes=()):
    return route_configuration("r", [virtual_host("all", ["*"], list(extra_routes) + [
        route("/", direct_response=(200, body))])])


def resource_file(routes=None, clusters=None):
    doc = {}
    if routes is not None:
        doc["routes"] = routes
    if clusters is not None:
        doc["clusters"] = clusters
    return to_yaml(doc)


class ControlApiTest(IntegrationTestCase):

    def setUp(self):
        super().setUp()
        self.xds = self.start_xds_server(
            {"routes.yaml": {"routes": [routes_answering("v1")]},
             "clusters.yaml": {"clusters": [cluster("svc", free_port())]}},
            checked=True, control=True)
        self.xds.wait_for(r"^snapshot version=1 ", what="the first snapshot")
        self.nodes = {}
        for node_id, group in NODES:
            self.start_node(node_id, group, free_port())
        for node_id in self.nodes:
            self.wait_body(node_id, "v1")

    # -- helpers
    def start_node(self, node_id, group, port):
        boot = xds_bootstrap(self.xds.port, node_id=node_id, lds=False, cds=True,
                             listeners=[rds_listener("main", port, "r")])
        boot["node"]["cluster"] = group
        extra = []
        if node_id == "node-a":
            boot["node"]["metadata"] = {"ring": "0"}
        if node_id == "node-b":
            # Identity from the command line, as a pod spec passes it (docs/sidecar.md).
            boot["node"]["id"] = boot["node"]["cluster"] = "from-the-file"
            extra = ["--service-node", node_id, "--service-cluster", group,
                     "--service-zone", "zone-b"]
        proxy = self.start_rpx(boot, concurrency=1, extra_args=extra)
        self.nodes[node_id] = (proxy, port, boot)
        return proxy

    def body(self, node_id):
        return curl("http://127.0.0.1:%d/" % self.nodes[node_id][1]).body.decode()

    def wait_body(self, node_id, want, timeout=10.0):
        wait_until(lambda: self.body(node_id) == want, timeout=timeout,
                   what="%s to answer %r" % (node_id, want))

    def write(self, name, text):
        path = os.path.join(self.xds.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def ctl(self, *args, expect=0, input_text=None):
        cp = self.xds.rpxctl(*args, input_text=input_text)
        self.assertEqual(cp.returncode, expect,
                         "rpxctl %s: exit %d\nstdout:\n%s\nstderr:\n%s\nxds_server log:\n%s" %
                         (" ".join(args), cp.returncode, cp.stdout, cp.stderr,
                          self.xds.log_tail(30)))
        return cp

    def status(self):
        return {n["id"]: n for n in json.loads(self.ctl("status", "-o", "json").stdout)["nodes"]}

    def history(self):
        return json.loads(self.ctl("history", "-o", "json").stdout)

    def resource_files(self):
        d = self.xds.resource_dir
        out = {}
        for name in sorted(os.listdir(d)):
            if name.endswith(".yaml"):
                with open(os.path.join(d, name)) as f:
                    out[name] = f.read()
        return out

    # -- tests
    def test_apply_reaches_every_node_and_status_shows_them_at_the_new_version(self):
        f = self.write("v2.yaml", resource_file(routes=[routes_answering("v2")]))
        cp = self.ctl("apply", "-f", f, "-m", "answer v2", "--author", "ops", "--wait=20")
        self.assertIn("accepted: version 2 (from 1), target all", cp.stdout)
        self.assertIn("changed routes/r", cp.stdout)
        self.assertRegex(cp.stdout,
                         r"running on 3 node\(s\), \d+ ms after the change was accepted\n")
        for node_id in self.nodes:
            self.assertEqual(self.body(node_id), "v2")
        status = self.status()
        self.assertEqual(sorted(status), [n for n, _ in NODES])
        for node_id, group in NODES:
            s = status[node_id]
            self.assertEqual(s["state"], "CONNECTED")
            self.assertEqual(s["cluster"], group)
            self.assertEqual(s["current_version"], "2")
            self.assertEqual(s["assigned_version"], "2")
            self.assertTrue(s["address"].startswith("ipv4:127.0.0.1:"), s["address"])
            acked = {t["type"]: t["acked_version"] for t in s["types"]}
            self.assertEqual(acked["RDS"], "2")
            self.assertEqual(s.get("zone", ""), "zone-b" if node_id == "node-b" else "")
        text = self.ctl("status").stdout
        for node_id, _ in NODES:
            self.assertRegex(text, r"(?m)^%s\s+\S+\s+connected\s+2\s+2\s" % node_id)
        h = self.history()
        self.assertEqual(h["versions"][0]["author"], "ops")
        self.assertEqual(h["versions"][0]["description"], "answer v2")
        # The change is in the directory, in the file the route came from.
        self.assertRegex(self.resource_files()["routes.yaml"], r'inline_string: "?v2"?\n')

    def test_invalid_regex_is_refused_with_the_field_path_and_no_node_sees_it(self):
        mark = self.xds.mark()
        bad = routes_answering("v2", [{"match": {"safe_regex": {"regex": "/a["}},
                                       "direct_response": {"status": 200}}])
        f = self.write("bad.yaml", resource_file(routes=[bad]))
        cp = self.ctl("apply", "-f", f, expect=1)
        self.assertIn("refused: 1 problem (nothing changed)", cp.stdout)
        self.assertIn("routes/r: virtual_hosts[0].routes[0].match.safe_regex.regex: invalid regex",
                      cp.stdout)
        out = json.loads(self.ctl("apply", "-f", f, "-o", "json", expect=1).stdout)
        self.assertFalse(out.get("accepted", False))
        self.assertEqual(out["problems"][0]["resource"], "routes/r")
        self.assertEqual(out["problems"][0]["field"],
                         "virtual_hosts[0].routes[0].match.safe_regex.regex")
        self.assertEqual(self.xds.find(r"^(NACK|push) ", mark), [])
        self.assertEqual(len(self.history()["versions"]), 1)
        for node_id in self.nodes:
            self.assertEqual(self.body(node_id), "v1")

    def test_route_to_a_missing_cluster_is_refused_unless_the_change_adds_it(self):
        to_ghost = routes_answering("v1", [route("/g", "ghost")])
        f = self.write("ghost.yaml", resource_file(routes=[to_ghost]))
        cp = self.ctl("apply", "-f", f, expect=1)
        self.assertIn("routes/r: virtual_hosts[0].routes[0].route.cluster: cluster 'ghost' does "
                      "not exist", cp.stdout)
        # Deleting a cluster a route uses is refused the same way.
        f2 = self.write("svc_route.yaml", resource_file(routes=[routes_answering(
            "v2", [route("/s", "svc")])]))
        self.ctl("apply", "-f", f2)
        cp = self.ctl("delete", "clusters", "svc", expect=1)
        self.assertIn("cluster 'svc' does not exist", cp.stdout)
        # With the cluster in the same change it goes through.
        f3 = self.write("both.yaml", resource_file(routes=[to_ghost],
                                                   clusters=[cluster("ghost", free_port())]))
        cp = self.ctl("apply", "-f", f3, "--wait=20")
        self.assertIn("added clusters/ghost", cp.stdout)

    def test_dry_run_and_diff_change_nothing(self):
        files_before = self.resource_files()
        mark = self.xds.mark()
        f = self.write("v2.yaml", resource_file(routes=[routes_answering("v2")]))
        cp = self.ctl("apply", "-f", f, "--dry-run")
        self.assertIn("dry run: would be accepted (based on version 1, target all)", cp.stdout)
        self.assertRegex(cp.stdout, r"\n-\s+inline_string: v1\n\+\s+inline_string: v2\n")
        cp = self.ctl("diff", "-f", f)
        self.assertIn("--- a/routes/r\n+++ b/routes/r\n", cp.stdout)
        self.assertRegex(cp.stdout, r"\n\+\s+inline_string: v2\n")
        self.assertEqual(self.resource_files(), files_before)
        self.assertEqual(len(self.history()["versions"]), 1)
        self.assertEqual(self.xds.find(r"^push ", mark), [])
        for node_id in self.nodes:
            self.assertEqual(self.body(node_id), "v1")

    def test_rollback_restores_the_old_answer_everywhere(self):
        f = self.write("v2.yaml", resource_file(routes=[routes_answering("v2")]))
        self.ctl("apply", "-f", f, "--wait=20")
        cp = self.ctl("rollback", "1", "-m", "back", "--wait=20")
        self.assertIn("accepted: version 3 (from 2), target all", cp.stdout)
        for node_id in self.nodes:
            self.assertEqual(self.body(node_id), "v1")
        h = self.history()
        self.assertEqual(h["versions"][0]["origin"], "rollback to 1")
        self.assertRegex(self.resource_files()["routes.yaml"], r'inline_string: "?v1"?\n')
        cp = self.ctl("diff", "2", "3")
        self.assertRegex(cp.stdout, r"\n-\s+inline_string: v2\n\+\s+inline_string: v1\n")
        cp = self.ctl("rollback", "42", expect=1)
        self.assertIn("version 42 is not kept", cp.stderr)
        # Any kept version can be read back.
        out = self.ctl("get", "routes", "r", "--version", "2").stdout
        self.assertTrue(out.startswith("# version 2\n"), out)
        self.assertRegex(out, r'inline_string: "?v2"?\n')

    def test_a_canary_group_gets_a_change_while_the_others_keep_theirs(self):
        f = self.write("v2.yaml", resource_file(routes=[routes_answering("v2")]))
        cp = self.ctl("apply", "-f", f, "--to", "canary", "--wait=20")
        self.assertIn("accepted: version 2 (from 1), target cluster=canary", cp.stdout)
        self.assertIn("running on 1 node(s), ", cp.stdout)
        self.assertEqual(self.body("node-c"), "v2")
        self.assertEqual(self.body("node-a"), "v1")
        self.assertEqual(self.body("node-b"), "v1")
        status = self.status()
        self.assertEqual(status["node-c"]["current_version"], "2")
        self.assertEqual(status["node-a"]["current_version"], "1")
        self.assertEqual(status["node-b"]["assigned_version"], "1")
        h = self.ctl("history").stdout
        self.assertIn("serving: all: 1, cluster=canary: 2", h)
        # The directory keeps what every other node runs.
        self.assertRegex(self.resource_files()["routes.yaml"], r'inline_string: "?v1"?\n')
        # Promoted to every node: the group's own version is gone.
        cp = self.ctl("apply", "-f", f, "--wait=20")
        self.assertIn("accepted: version 3 (from 1), target all", cp.stdout)
        for node_id in self.nodes:
            self.assertEqual(self.body(node_id), "v2")
        self.assertIn("serving: all: 3\n", self.ctl("history").stdout)
        # A group by node metadata: node-a alone carries ring=0.
        self.assertIn("running on 1 node(s)", self.ctl(
            "apply", "-f", self.write("v4.yaml", resource_file(routes=[routes_answering("v4")])),
            "--to-metadata", "ring=0", "--wait=20").stdout)
        self.assertIn("serving: all: 3, metadata.ring=0: 4\n", self.ctl("history").stdout)
        self.assertEqual(self.body("node-a"), "v4")
        self.assertEqual(self.body("node-b"), "v2")
        self.assertEqual(self.body("node-c"), "v2")
        self.assertEqual(self.status()["node-a"]["metadata"], {"ring": "0"})

    def test_a_restarted_node_resyncs_and_reappears_in_status(self):
        proxy, port, boot = self.nodes["node-b"]
        proxy.proc.send_signal(signal.SIGTERM)
        proxy.wait_exit(20)
        wait_until(lambda: self.status()["node-b"]["state"] == "GONE", timeout=10,
                   what="node-b to be listed as gone")
        self.assertRegex(self.ctl("status").stdout, r"(?m)^node-b\s+prod\s+gone ")
        f = self.write("v2.yaml", resource_file(routes=[routes_answering("v2")]))
        cp = self.ctl("apply", "-f", f, "--wait=20")
        self.assertIn("running on 2 node(s), ", cp.stdout)
        self.start_node("node-b", "prod", port)
        self.wait_body("node-b", "v2")
        wait_until(lambda: self.status()["node-b"].get("current_version") == "2", timeout=10,
                   what="node-b to run version 2")
        self.assertEqual(self.status()["node-b"]["state"], "CONNECTED")

    def test_hand_edits_are_picked_up_and_checked(self):
        mark = self.xds.mark()
        bad = routes_answering("v9", [route("/x", "ghost")])
        self.xds.write_resources("routes.yaml", routes=[bad])
        self.xds.wait_for(r"^reload error: RouteConfiguration 'r': .*cluster 'ghost' does not "
                          r"exist", mark)
        self.assertEqual(self.xds.find(r"^push ", mark), [])
        self.xds.write_resources("routes.yaml", routes=[routes_answering("v3")])
        self.xds.wait_for(r"^snapshot version=2 ", mark)
        for node_id in self.nodes:
            self.wait_body(node_id, "v3")
        self.assertEqual(self.history()["versions"][0]["origin"], "directory")

    def test_get_output_applies_back_unchanged(self):
        out = self.ctl("get", "routes", "r").stdout
        self.assertTrue(out.startswith("# version 1\nroutes:\n"), out)
        cp = self.ctl("apply", "-f", "-", input_text=out)
        self.assertIn("unchanged: version 1 already has these resources", cp.stdout)
        cp = self.ctl("get", "routes", "nope", expect=1)
        self.assertIn("routes 'nope' does not exist in version 1", cp.stderr)

    def test_update_one_virtual_host(self):
        vh = self.write("vh.yaml", to_yaml(virtual_host("api", ["api.example"], [
            route("/", direct_response=(200, "api"))])))
        self.ctl("set-vhost", "r", "-f", vh, "--wait=20")
        for node_id in self.nodes:
            r = curl("http://127.0.0.1:%d/" % self.nodes[node_id][1], "-H", "Host: api.example")
            self.assertEqual(r.body, b"api")
            self.assertEqual(self.body(node_id), "v1")
        self.ctl("set-vhost", "r", "--remove", "api", "--wait=20")
        cp = self.ctl("set-vhost", "r", "--remove", "api", expect=1)
        self.assertIn("has no virtual host 'api'", cp.stderr)

    def test_usage_and_connection_errors_exit_2(self):
        self.ctl("frobnicate", expect=2)
        self.ctl("apply", expect=2)
        cp = self.ctl("apply", "-f", "/nonexistent.yaml", expect=2)
        self.assertIn("/nonexistent.yaml", cp.stderr)
        # A file that does not fit the schema is a refused change: nothing is sent.
        mark = self.xds.mark()
        typo = self.write("typo.yaml", "routes:\n- name: r\n  virtual_host: []\n")
        cp = self.ctl("apply", "-f", typo, expect=1)
        self.assertIn("refused: 1 problem in %s (nothing was sent)" % typo, cp.stdout)
        self.assertIn("routes[0].virtual_host: unknown field 'virtual_host'", cp.stdout)
        self.assertEqual(self.xds.find(r"^(version|change refused) ", mark), [])
        dead = free_port()
        cp = self.xds.rpxctl("--server", "127.0.0.1:%d" % dead, "--timeout", "2", "status")
        self.assertEqual(cp.returncode, 2, cp.stdout + cp.stderr)


class ControlApiEtcdTest(IntegrationTestCase):
    """Two control-plane replicas sharing their versions through a real etcd (--store etcd://),
    and two rpx nodes whose xDS cluster lists both replicas, the second one first."""

    def start_replica(self, etcd, files=None):
        xds = XdsServer(checked=True, control=True, extra_args=["--store", etcd.url()])
        self.addCleanup(xds.cleanup)
        for name, lists in (files or {}).items():
            xds.write_resources(name, **lists)
        return xds.start()

    def body(self, port):
        return curl("http://127.0.0.1:%d/" % port).body.decode()

    def wait_bodies(self, want):
        for port in self.ports:
            wait_until(lambda: self.body(port) == want, timeout=20,
                       what="the node on %d to answer %r" % (port, want))

    def apply(self, replica, body, *args, expect=0):
        f = os.path.join(replica.dir, "change.yaml")
        with open(f, "w") as out:
            out.write(resource_file(routes=[routes_answering(body)]))
        cp = replica.rpxctl("apply", "-f", f, *args)
        self.assertEqual(cp.returncode, expect, cp.stdout + cp.stderr + replica.log_tail(20))
        return cp

    def test_replicas_share_versions_and_nodes_fail_over(self):
        etcd = self.start_etcd()
        a = self.start_replica(etcd, {"routes.yaml": {"routes": [routes_answering("v1")]}})
        a.wait_for(r"^snapshot version=1 ")
        b = self.start_replica(etcd)  # nothing of its own: it serves what etcd holds
        b.wait_for(r"^snapshot version=1 ")
        self.ports = []
        for i in range(2):
            port = free_port()
            boot = xds_bootstrap(b.port, node_id="node-%d" % i, lds=False, cds=False,
                                 listeners=[rds_listener("main", port, "r")])
            xds_cluster = boot["static_resources"]["clusters"][0]
            xds_cluster["load_assignment"]["endpoints"][0]["lb_endpoints"].append(
                {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1",
                                                             "port_value": a.port}}}})
            self.start_rpx(boot, concurrency=1)
            self.ports.append(port)
        self.wait_bodies("v1")

        # A change through one replica reaches the nodes connected to the other.
        cp = self.apply(a, "v2", "-m", "through a")
        self.assertIn("accepted: version 2 (from 1), target all", cp.stdout)
        b.wait_for(r"^store: changed by another replica, default version=2")
        self.wait_bodies("v2")
        wait_until(lambda: all(n.get("current_version") == "2" for n in json.loads(
            b.rpxctl("status", "-o", "json").stdout)["nodes"]), timeout=20,
            what="both nodes at version 2 in b's status")
        self.assertEqual(json.loads(b.rpxctl("history", "-o", "json").stdout)["versions"][0]
                         ["description"], "through a")

        # The replica the nodes use dies: they move to the other, keeping the latest version.
        b.stop()
        wait_until(lambda: len([n for n in json.loads(a.rpxctl("status", "-o", "json").stdout)
                                .get("nodes", []) if n["state"] == "CONNECTED"]) == 2,
                   timeout=30, what="both nodes connected to replica a")
        for port in self.ports:
            self.assertEqual(self.body(port), "v2")
        cp = self.apply(a, "v3", "--wait=20")
        self.assertIn("running on 2 node(s)", cp.stdout)
        self.wait_bodies("v3")

        # etcd dies: changes are refused with a clear error, nodes keep serving.
        etcd.stop()
        cp = self.apply(a, "v4", expect=2)
        self.assertIn("the change was not stored: etcd unreachable", cp.stderr)
        for port in self.ports:
            self.assertEqual(self.body(port), "v3")
        self.assertEqual(json.loads(a.rpxctl("history", "-o", "json").stdout)["versions"][0]
                         ["version"], "3")


class ControlApiTlsTest(IntegrationTestCase):
    """The control API and the xDS port behind mutual TLS (--tls-cert/--tls-key/--tls-client-ca):
    rpxctl and an rpx node with certificates from the allowed CA get in, others do not."""

    def test_mutual_tls_on_both_ports(self):
        pki = TestPki()
        self.addCleanup(pki.cleanup)
        other = TestPki("someone else's CA")
        self.addCleanup(other.cleanup)
        server = pki.cert("control.example", ["DNS:control.example"])
        ops = pki.cert("ops", [])
        node = pki.cert("node-a", [])
        rogue = other.cert("ops", [])
        xds = XdsServer(checked=True, control=True, extra_args=[
            "--tls-cert", server[0], "--tls-key", server[1], "--tls-client-ca", pki.ca])
        self.addCleanup(xds.cleanup)
        xds.write_resources("routes.yaml", routes=[routes_answering("v1")])
        xds.start()
        self.assertTrue(xds.find(r"^xds_server listening on .* tls=mutual"), xds.log_tail())

        def ctl(cert, *args):
            tls = ["--ca", pki.ca, "--tls-server-name", "control.example"]
            if cert:
                tls += ["--cert", cert[0], "--key", cert[1]]
            return xds.rpxctl(*(tls + list(args)), timeout=30)

        self.assertEqual(ctl(ops, "history").returncode, 0)
        for refused in (ctl(None, "--timeout", "3", "history"),
                        ctl(rogue, "--timeout", "3", "history"),
                        xds.rpxctl("--timeout", "3", "history")):  # cleartext
            self.assertEqual(refused.returncode, 2, refused.stdout + refused.stderr)

        port = free_port()
        boot = xds_bootstrap(xds.port, node_id="node-a", lds=False, cds=False,
                             listeners=[rds_listener("main", port, "r")])
        boot["static_resources"]["clusters"][0]["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": UPSTREAM_TLS_TYPE,
                "sni": "control.example",
                "common_tls_context": {
                    "tls_certificates": [{"certificate_chain": {"filename": node[0]},
                                          "private_key": {"filename": node[1]}}],
                    "validation_context": {"trusted_ca": {"filename": pki.ca}},
                },
            },
        }
        self.start_rpx(boot, concurrency=1)
        url = "http://127.0.0.1:%d/" % port
        wait_until(lambda: curl(url).body == b"v1", timeout=20, what="the node answering v1")
        f = os.path.join(xds.dir, "v2.yaml")
        with open(f, "w") as out:
            out.write(resource_file(routes=[routes_answering("v2")]))
        cp = ctl(ops, "apply", "-f", f, "--wait=20")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("running on 1 node(s)", cp.stdout)
        self.assertEqual(curl(url).body, b"v2")


class ControlWalkthroughTest(IntegrationTestCase):
    """docs/control-api.md's walkthrough as written, on ephemeral ports: tools/xds_server/example
    as the directory, configs/xds-static-listener.yaml edited into two nodes as the doc's sed
    commands do, and tools/rpxctl/example's files."""

    def test_walkthrough(self):
        # The example files are in place before the control plane starts: they are version 1.
        xds = XdsServer(checked=True, control=True)
        self.addCleanup(xds.cleanup)
        for path in sorted(glob.glob(os.path.join(os.path.dirname(
                repo_file("tools/xds_server/example/routes.yaml")), "*.yaml"))):
            with open(path) as f:
                text = f.read()
            if path.endswith("endpoints.yaml"):
                text = with_ports(text, {8080: free_port()}, path)  # nothing listens: 503
            xds.write_file(os.path.basename(path), text)
        xds.start()
        xds.wait_for(r"^snapshot version=\S+ listeners=listener_0 routes=local_route")
        with open(repo_file("configs/xds-static-listener.yaml")) as f:
            node_yaml = f.read()
        ports = {}
        for node, group in (("node-1", "demo"), ("node-2", "canary")):
            port, admin = free_port(), free_port()
            text = with_ports(node_yaml, {10000: port, 9901: admin, 18000: xds.port}, node)
            text = text.replace("id: rpx-node", "id: " + node)
            text = text.replace("cluster: demo", "cluster: " + group)
            self.assertIn("id: %s, cluster: %s" % (node, group), text)
            self.start_rpx(text, admin_port=admin, concurrency=1)
            ports[node] = port

        def ctl(*args, expect=0):
            cp = xds.rpxctl(*args)
            self.assertEqual(cp.returncode, expect, cp.stdout + cp.stderr + xds.log_tail(20))
            return cp.stdout

        def hello(node):
            return curl("http://127.0.0.1:%d/hello" % ports[node], timeout=20)

        wait_until(lambda: all(n["current_version"] == "1" for n in json.loads(
            ctl("status", "-o", "json"))["nodes"]) and len(json.loads(
                ctl("status", "-o", "json"))["nodes"]) == 2, timeout=20,
            what="both nodes running version 1")
        out = ctl("status")
        self.assertRegex(out, r"(?m)^node-1\s+demo\s+connected\s+1\s+1\s")
        self.assertRegex(out, r"(?m)^node-2\s+canary\s+connected\s+1\s+1\s")

        mark = xds.mark()
        out = ctl("apply", "-f", repo_file("tools/rpxctl/example/bad-regex.yaml"), expect=1)
        self.assertEqual(out, "refused: 1 problem (nothing changed)\n"
                              "  routes/local_route: virtual_hosts[0].routes[0].match.safe_regex."
                              "regex: invalid regex '/hello[': missing ]: [\n")
        self.assertEqual(xds.find(r"^(push|NACK) ", mark), [])

        hello_yaml = repo_file("tools/rpxctl/example/hello.yaml")
        self.assertIn("+          prefix: /hello\n", ctl("diff", "-f", hello_yaml))
        out = ctl("apply", "-f", hello_yaml, "--to", "canary", "-m", "add /hello", "--wait")
        self.assertRegex(out, r"^accepted: version 2 \(from 1\), target cluster=canary\n"
                              r"  changed routes/local_route\n"
                              r"running on 1 node\(s\), \d+ ms after the change was accepted\n$")
        self.assertEqual(hello("node-2").body, b"hello from version 2\n")
        self.assertEqual(hello("node-1").status, 503)
        out = ctl("status")
        self.assertRegex(out, r"(?m)^node-1\s+demo\s+connected\s+1\s+1\s")
        self.assertRegex(out, r"(?m)^node-2\s+canary\s+connected\s+2\s+2\s")
        self.assertIn("serving: all: 1, cluster=canary: 2\n", ctl("history"))

        ctl("apply", "-f", hello_yaml, "-m", "add /hello everywhere", "--wait")
        self.assertEqual(hello("node-1").body, b"hello from version 2\n")
        self.assertIn("prefix: /hello", ctl("get", "routes", "local_route"))
        ctl("rollback", "1", "-m", "not yet", "--wait")
        self.assertEqual(hello("node-2").status, 503)
        self.assertEqual(hello("node-1").status, 503)
        with open(os.path.join(xds.resource_dir, "routes.yaml")) as f:
            self.assertNotIn("hello", f.read())


if __name__ == "__main__":
    unittest.main()
