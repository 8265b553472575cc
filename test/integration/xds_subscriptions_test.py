"""What rpx subscribes to over ADS, checked in the reference control plane's log, which has a line
for every request and for every change of a stream's subscription (tools/xds_server/
ads_service.cc, DESIGN). Every test runs once per protocol (state of the world and delta).

The rule, as Envoy keeps it: RouteConfiguration names are the union over all listeners, static
and from LDS; ClusterLoadAssignment names the union over all EDS clusters, static and from CDS; a
type nobody names is never requested (an empty first request would be a wildcard subscription:
every route table or endpoint set the control plane has); names that go away are unsubscribed.

Absence is checked without waiting: rpx sets the RDS (EDS) names while it applies a listener
(cluster) update, before it ACKs that update on the same stream, so once the ACK is in the log
any request those names caused is there too.
"""

import glob
import os
import re
import unittest

from harness import (IntegrationTestCase, cluster, curl, eds_cluster, free_port,
                     http_listener, load_assignment, rds_listener, repo_file, route,
                     route_configuration, virtual_host, with_ports, xds_bootstrap)

NODE = "sub-node"
FILE = "resources.yaml"


def routes_to_all(clusters):
    """One virtual host: /<cluster>/ goes to that cluster."""
    return [virtual_host("all", ["*"], [route("/%s/" % c, c, timeout="10s") for c in clusters])]


class SubscriptionTests(object):
    """Mixed into one TestCase per protocol below."""

    DELTA = None
    MODE = None

    def start(self, resources, lds=True, cds=True, listeners=(), clusters=(),
              initial_fetch_timeout="10s"):
        self.resources = dict(resources)
        self.xds = self.start_xds_server({FILE: self.resources})
        self.xds.wait_for(r"^snapshot version=1 ", what="the first snapshot")
        self.proxy = self.start_rpx(
            xds_bootstrap(self.xds.port, node_id=NODE, delta=self.DELTA, lds=lds, cds=cds,
                          listeners=listeners, clusters=clusters,
                          initial_fetch_timeout=initial_fetch_timeout),
            concurrency=2)
        self.xds.wait_for(r"^stream open node=%s mode=%s$" % (NODE, self.MODE),
                          what="a %s stream" % self.MODE)
        return self.proxy

    def update(self, **changes):
        self.resources.update(changes)
        return self.xds.write_resources(FILE, **self.resources)

    def ack(self, type_name, mark):
        return self.xds.wait_ack(type_name, mark, node=NODE)

    def served_by(self, port, path):
        r = curl("http://127.0.0.1:%d%s" % (port, path), timeout=20)
        self.assertEqual(r.status, 200, "GET :%d%s: %r" % (port, path, r))
        return r.json()["server"]

    def requests(self, type_name, since=0):
        """The requests of `type_name` after log mark `since`, as dicts of their fields."""
        out = []
        for m in self.xds.find(r"^request node=%s type=%s (.*)$" % (NODE, type_name), since):
            out.append(dict(re.findall(r"(\w+)=(\S*)", m.group(1))))
        return out

    def subscription(self, type_name, since=0):
        """The names a stream's subscription to `type_name` holds after the log's subscribe and
        unsubscribe lines (after mark `since`)."""
        names = set()
        for m in self.xds.find(r"^(un)?subscribe node=%s type=%s names=(.*)$" %
                               (NODE, type_name), since):
            changed = set(m.group(2).split(","))
            names = names - changed if m.group(1) else names | changed
        return names

    def assert_never_empty_when_nothing_named(self, since=0):
        """No RDS or EDS request asked for nothing. In SotW every request lists the names (an
        empty list only after names, to unsubscribe from all: that has its own test); in delta
        a stream's first request of a type (no nonce yet) must subscribe to something."""
        for t in ("RDS", "EDS"):
            for r in self.requests(t, since):
                if self.DELTA:
                    if not r["nonce"]:
                        self.assertNotEqual(r["subscribe"], "", (t, r, self.xds.log_tail()))
                else:
                    self.assertNotEqual(r["names"], "", (t, r, self.xds.log_tail()))

    # -- the whole matrix in one run
    def test_static_and_dynamic_listeners_and_clusters_get_their_routes_and_endpoints(self):
        """static or LDS listener x inline routes or RDS; static or CDS cluster x inline
        endpoints or EDS: each of the four listeners reaches each of the four clusters."""
        up = {n: self.start_echo(n) for n in ("u_static", "u_static_eds", "u_cds", "u_cds_eds")}
        names = ["c_static", "c_static_eds", "c_cds", "c_cds_eds"]
        ports = {n: free_port() for n in ("l_static", "l_static_rds", "l_lds", "l_lds_rds")}
        vhosts = routes_to_all(names)
        static_listeners = [
            http_listener("l_static", ports["l_static"], vhosts),
            rds_listener("l_static_rds", ports["l_static_rds"], "r_static"),
        ]
        static_clusters = [cluster("c_static", up["u_static"].port), eds_cluster("c_static_eds")]
        self.start({
            "listeners": [http_listener("l_lds", ports["l_lds"], vhosts),
                          rds_listener("l_lds_rds", ports["l_lds_rds"], "r_lds")],
            "routes": [route_configuration("r_static", vhosts),
                       route_configuration("r_lds", vhosts),
                       route_configuration("r_nobody_names", vhosts)],
            "clusters": [cluster("c_cds", up["u_cds"].port), eds_cluster("c_cds_eds")],
            "endpoints": [load_assignment("c_static_eds", [up["u_static_eds"].port]),
                          load_assignment("c_cds_eds", [up["u_cds_eds"].port]),
                          load_assignment("c_nobody_names", [up["u_cds"].port])],
        }, listeners=static_listeners, clusters=static_clusters)
        for t in ("CDS", "EDS", "LDS", "RDS"):
            self.ack(t, 0)
        status, body = self.proxy.admin("GET", "/ready")
        self.assertEqual(status, 200, body)

        for listener, port in sorted(ports.items()):
            for c in names:
                with self.subTest(listener=listener, cluster=c):
                    self.assertEqual(self.served_by(port, "/%s/x" % c), "u" + c[1:])

        self.assertEqual(self.subscription("RDS"), {"r_static", "r_lds"})
        self.assertEqual(self.subscription("EDS"), {"c_static_eds", "c_cds_eds"})
        self.assertFalse(self.xds.find(r"^unsubscribe "), self.xds.log_tail())
        self.assertFalse(self.xds.find(r"^push node=%s type=(RDS|EDS) .*nobody_names" % NODE),
                         self.xds.log_tail())
        self.assert_never_empty_when_nothing_named()
        # The static listener's routes were asked for in the stream's first RDS request.
        first_rds = self.requests("RDS")[0]
        self.assertIn("r_static", first_rds["subscribe" if self.DELTA else "names"].split(","))

        # A route pushed for the static listener is served (the shortest way to push routes).
        mark = self.update(routes=[
            route_configuration("r_static", [virtual_host("all", ["*"], [
                route("/", "c_cds", timeout="10s")])]),
            route_configuration("r_lds", vhosts)])
        self.ack("RDS", mark)
        self.assertEqual(self.served_by(ports["l_static_rds"], "/c_static/x"), "u_cds")
        self.assertEqual(self.served_by(ports["l_lds_rds"], "/c_static/x"), "u_static")
        # And endpoints pushed for the static EDS cluster.
        moved = self.start_echo("u_moved")
        mark = self.update(endpoints=[load_assignment("c_static_eds", [moved.port]),
                                      load_assignment("c_cds_eds", [up["u_cds_eds"].port])])
        self.ack("EDS", mark)
        self.assertEqual(self.served_by(ports["l_static"], "/c_static_eds/x"), "u_moved")

        dump = self.proxy.config_summary()
        self.assertEqual(sorted(r["name"] for r in dump["routes"]), ["r_lds", "r_static"])
        self.assertEqual(sorted(e["name"] for e in dump["endpoints"]),
                         ["c_cds_eds", "c_static_eds"])
        self.assertNotIn("ignoring a response", self.proxy.stderr_text())

        # A new stream (control plane restarted) asks for the same names at once.
        mark = self.xds.mark()
        self.xds.restart()
        self.xds.wait_for(r"^stream open node=%s " % NODE, since=mark)
        # rpx keeps its names across the reconnect: each type's first request has them all.
        self.xds.wait_for(r"^subscribe node=%s type=RDS " % NODE, since=mark)
        self.xds.wait_for(r"^subscribe node=%s type=EDS " % NODE, since=mark)
        self.assertEqual(self.subscription("RDS", mark), {"r_static", "r_lds"})
        self.assertEqual(self.subscription("EDS", mark), {"c_static_eds", "c_cds_eds"})
        self.assert_never_empty_when_nothing_named(mark)
        self.assertEqual(self.served_by(ports["l_static_rds"], "/c_static/x"), "u_cds")

    def test_nothing_named_nothing_requested(self):
        """LDS listeners with inline routes and CDS clusters with inline endpoints: no RDS or
        EDS request at all, so no wildcard that would pull the mesh's every route and endpoint."""
        up = self.start_echo("u")
        port = free_port()
        self.start({
            "listeners": [http_listener("l", port, routes_to_all(["c"]))],
            "routes": [route_configuration("r", routes_to_all(["c"]))],
            "clusters": [cluster("c", up.port)],
            "endpoints": [load_assignment("c", [up.port])],
        })
        self.ack("CDS", 0)
        self.ack("LDS", 0)
        self.assertEqual(self.served_by(port, "/c/x"), "u")
        # A listener and a cluster change later: still nothing to ask for.
        mark = self.update(listeners=[http_listener("l", port, routes_to_all(["c"]),
                                                    stat_prefix="again")],
                           clusters=[cluster("c", up.port, connect_timeout="2s")])
        self.ack("CDS", mark)
        self.ack("LDS", mark)
        self.assertEqual(self.requests("RDS"), [], self.xds.log_tail())
        self.assertEqual(self.requests("EDS"), [], self.xds.log_tail())
        self.assertFalse(self.xds.find(r"^push node=%s type=(RDS|EDS) " % NODE))
        self.assertNotIn("ignoring a response", self.proxy.stderr_text())

    def test_static_listener_with_rds_and_clusters_over_ads_serves_pushed_routes(self):
        """The issue's setup: a static listener whose routes come over RDS, cds_config over ADS,
        no lds_config. No LDS request; the routes arrive and are served."""
        a, b = self.start_echo("A"), self.start_echo("B")
        port = free_port()
        self.start({
            "routes": [route_configuration("r", routes_to_all(["A"]))],
            "clusters": [eds_cluster("A"), eds_cluster("B")],
            "endpoints": [load_assignment("A", [a.port]), load_assignment("B", [b.port])],
        }, lds=False, listeners=[rds_listener("local", port, "r")])
        self.ack("RDS", 0)
        self.assertEqual(self.served_by(port, "/A/x"), "A")
        mark = self.update(routes=[route_configuration("r", [virtual_host("all", ["*"], [
            route("/", "B", timeout="10s")])])])
        self.ack("RDS", mark)
        self.assertEqual(self.served_by(port, "/A/x"), "B")
        self.assertEqual(self.requests("LDS"), [])
        self.assert_never_empty_when_nothing_named()

    def test_routes_only_over_ads(self):
        """Only a static listener's RDS uses the stream (no lds_config, no cds_config)."""
        a = self.start_echo("A")
        port = free_port()
        self.start({"routes": [route_configuration("r", routes_to_all(["A"]))]},
                   lds=False, cds=False, listeners=[rds_listener("local", port, "r")],
                   clusters=[cluster("A", a.port)])
        self.ack("RDS", 0)
        self.assertEqual(self.served_by(port, "/A/x"), "A")
        for t in ("LDS", "CDS", "EDS"):
            self.assertEqual(self.requests(t), [], t)
        status, body = self.proxy.admin("GET", "/ready")
        self.assertEqual(status, 200, body)

    def test_bundled_configs_with_the_example_directory(self):
        """docs/xds.md's two walkthroughs, as written: configs/xds-bootstrap.yaml (LDS and CDS)
        and configs/xds-static-listener.yaml (a static listener with RDS, CDS, no LDS), each
        with tools/xds_server/example as the control plane's directory (ports made
        ephemeral)."""
        examples = sorted(glob.glob(os.path.join(os.path.dirname(
            repo_file("tools/xds_server/example/routes.yaml")), "*.yaml")))
        self.assertEqual([os.path.basename(e) for e in examples],
                         ["clusters.yaml", "endpoints.yaml", "listeners.yaml", "routes.yaml"])
        for config in ("xds-bootstrap.yaml", "xds-static-listener.yaml"):
            with self.subTest(config=config):
                service = self.start_echo("service")
                port, admin = free_port(), free_port()
                xds = self.start_xds_server()
                for path in examples:
                    with open(path) as f:
                        text = f.read()
                    if path.endswith("endpoints.yaml"):
                        text = with_ports(text, {8080: service.port}, path)
                    if path.endswith("listeners.yaml"):
                        text = with_ports(text, {10000: port}, path)
                    xds.write_file(os.path.basename(path), text)
                xds.wait_for(r"^snapshot version=\S+ listeners=listener_0 routes=local_route "
                             r"clusters=service endpoints=service")
                with open(repo_file("configs/" + config)) as f:
                    text = f.read()
                ports = {9901: admin, 18000: xds.port}
                if "static-listener" in config:
                    ports[10000] = port
                text = with_ports(text, ports, config)
                if self.DELTA:
                    text = text.replace("api_type: GRPC", "api_type: DELTA_GRPC")
                self.start_rpx(text, admin_port=admin)
                node = "rpx-node"
                xds.wait_for(r"^ACK node=%s type=RDS " % node)
                r = curl("http://127.0.0.1:%d/" % port, timeout=20)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json()["server"], "service")
                lds = xds.find(r"^request node=%s type=LDS " % node)
                if "static-listener" in config:
                    self.assertEqual(lds, [], xds.log_tail())
                else:
                    self.assertNotEqual(lds, [], xds.log_tail())
                xds.wait_for(r"^subscribe node=%s type=RDS names=local_route$" % node)
                xds.wait_for(r"^subscribe node=%s type=EDS names=service$" % node)
                self.assertFalse(xds.find(r"^NACK "), xds.log_tail())

                # The walkthrough's route edit.
                with open(os.path.join(xds.resource_dir, "routes.yaml")) as f:
                    text = f.read()
                self.assertIn('    domains: ["*"]\n', text)
                mark = xds.write_file("routes.yaml", text.replace(
                    '    domains: ["*"]\n', '    domains: ["*"]\n    response_headers_to_add: '
                    '[{header: {key: x-demo, value: "v2"}}]\n'))
                xds.wait_ack("RDS", mark, node=node)
                r = curl("http://127.0.0.1:%d/" % port, timeout=20)
                self.assertEqual(r.headers.get("x-demo"), "v2", r)

    def test_names_added_and_removed_at_runtime_are_subscribed_and_unsubscribed(self):
        up = {n: self.start_echo(n) for n in ("A", "B", "S")}
        port = free_port()

        def routes(name, to):
            return route_configuration(name, [virtual_host("all", ["*"], [
                route("/", to, timeout="10s")])])
        self.start({
            "listeners": [rds_listener("main", port, "ra")],
            "routes": [routes("ra", "A"), routes("rb", "B")],
            "clusters": [eds_cluster("A"), eds_cluster("B")],
            "endpoints": [load_assignment("A", [up["A"].port]),
                          load_assignment("B", [up["B"].port])],
        })
        self.ack("RDS", 0)
        self.assertEqual(self.served_by(port, "/"), "A")
        self.assertEqual(self.subscription("RDS"), {"ra"})
        self.assertEqual(self.subscription("EDS"), {"A", "B"})

        # The listener switches its route_config_name: rb is subscribed, ra unsubscribed.
        mark = self.update(listeners=[rds_listener("main", port, "rb")])
        self.ack("LDS", mark)
        self.ack("RDS", mark)
        self.xds.wait_for(r"^subscribe node=%s type=RDS names=rb$" % NODE, since=mark)
        self.xds.wait_for(r"^unsubscribe node=%s type=RDS names=ra$" % NODE, since=mark)
        self.assertEqual(self.served_by(port, "/"), "B")
        self.assertEqual([r["name"] for r in self.proxy.config_summary()["routes"]], ["rb"])

        # A cluster is removed: its endpoints are unsubscribed.
        mark = self.update(clusters=[eds_cluster("B")])
        self.ack("CDS", mark)
        self.xds.wait_for(r"^unsubscribe node=%s type=EDS names=A$" % NODE, since=mark)
        self.assertEqual(self.subscription("EDS"), {"B"})

        # The last EDS cluster goes (B becomes STATIC): EDS is unsubscribed from all.
        mark = self.update(clusters=[cluster("B", up["B"].port)])
        self.ack("CDS", mark)
        self.xds.wait_for(r"^unsubscribe node=%s type=EDS names=B$" % NODE, since=mark)
        self.assertEqual(self.subscription("EDS"), set())
        last = self.requests("EDS", mark)[-1]
        if self.DELTA:
            self.assertEqual((last["subscribe"], last["unsubscribe"]), ("", "B"))
        else:
            self.assertEqual(last["names"], "")  # after names: unsubscribe from all
        self.assertEqual(self.served_by(port, "/"), "B")

        # The listener takes inline routes: RDS is unsubscribed from all too.
        mark = self.update(listeners=[http_listener("main", port, routes_to_all(["B"]))])
        self.ack("LDS", mark)
        self.xds.wait_for(r"^unsubscribe node=%s type=RDS names=rb$" % NODE, since=mark)
        self.assertEqual(self.subscription("RDS"), set())
        self.assertEqual(self.served_by(port, "/B/x"), "B")
        self.assertEqual(self.proxy.config_summary()["routes"], [])

        # Both come back: subscribed again, and served.
        mark = self.update(listeners=[rds_listener("main", port, "ra")],
                           clusters=[eds_cluster("A")])
        self.ack("RDS", mark)
        self.ack("EDS", mark)
        self.assertEqual(self.subscription("RDS"), {"ra"})
        self.assertEqual(self.subscription("EDS"), {"A"})
        self.assertEqual(self.served_by(port, "/"), "A")
        self.assertFalse(self.xds.find(r"^NACK "), self.xds.log_tail())


class XdsSubscriptionsSotwTest(SubscriptionTests, IntegrationTestCase):
    DELTA = False
    MODE = "sotw"


class XdsSubscriptionsDeltaTest(SubscriptionTests, IntegrationTestCase):
    DELTA = True
    MODE = "delta"


if __name__ == "__main__":
    unittest.main()
