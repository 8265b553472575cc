"""xDS without ADS, as Envoy's examples configure it: api_config_source with api_type GRPC or
DELTA_GRPC for LDS, CDS, RDS and EDS (one stream per type, on each type's own service of the
reference control plane), and path_config_source files watched with inotify (Envoy's
dynamic-config-fs example): replaced with mv or rewritten in place, a bad file changes nothing."""

import json
import os
import unittest

from harness import (IntegrationTestCase, free_port, load_assignment, make_tmpdir, rds_listener,
                     remove_tmpdir, route, route_configuration, socket_address, to_yaml,
                     virtual_host, wait_until, xds_bootstrap, curl)

NODE = "test-node"
LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
HCM = ("type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
       "HttpConnectionManager")
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"


def grpc_source(api_type):
    return {"api_config_source": {"api_type": api_type, "transport_api_version": "V3",
                                  "grpc_services": [{"envoy_grpc": {"cluster_name": "xds"}}]},
            "resource_api_version": "V3"}


class GrpcSourcesTest(IntegrationTestCase):
    API_TYPE = "GRPC"
    MODE = "sotw"

    def start_all(self):
        self.up = {n: self.start_echo(n) for n in ("A", "B")}
        self.port = free_port()
        source = grpc_source(self.API_TYPE)
        listener = rds_listener("main", self.port, "main_routes")
        listener["filter_chains"][0]["filters"][0]["typed_config"]["rds"]["config_source"] = \
            dict(source)
        self.state = {
            "listeners": [listener],
            "routes": [route_configuration("main_routes", [virtual_host("all", ["*"], [
                route("/", "svc")])])],
            "clusters": [{"name": "svc", "type": "EDS", "connect_timeout": "1s",
                          "eds_cluster_config": {"eds_config": dict(source)}}],
            "endpoints": [load_assignment("svc", [self.up["A"].port])],
        }
        self.xds = self.start_xds_server({"config.yaml": self.state})
        boot = xds_bootstrap(self.xds.port, node_id=NODE)
        del boot["dynamic_resources"]["ads_config"]
        boot["dynamic_resources"]["lds_config"] = dict(source)
        boot["dynamic_resources"]["cds_config"] = dict(source)
        self.proxy = self.start_rpx(boot)

    def served_by(self, path="/x"):
        r = curl("http://127.0.0.1:%d%s" % (self.port, path))
        self.assertEqual(r.status, 200, r)
        return json.loads(r.body)["server"]

    def test_one_stream_per_type_on_its_own_service(self):
        self.start_all()
        self.assertEqual(self.served_by(), "A")
        for service in ("LDS", "CDS", "RDS", "EDS"):
            self.xds.wait_for(r"^stream open node=%s mode=%s service=%s$" %
                              (NODE, self.MODE, service), what="the %s stream" % service)
        self.assertEqual(self.xds.find(r"^stream open node=%s mode=%s$" % (NODE, self.MODE)), [],
                         "an ADS stream was opened")
        # Updates flow on each type's stream: new endpoints, then new routes.
        mark = self.xds.mark()
        self.state["endpoints"] = [load_assignment("svc", [self.up["B"].port])]
        self.xds.write_resources("config.yaml", **self.state)
        self.xds.wait_for(r"^ACK node=%s type=EDS " % NODE, since=mark, what="EDS ACK")
        wait_until(lambda: self.served_by() == "B", timeout=10, what="traffic to B")
        mark = self.xds.mark()
        self.state["routes"] = [route_configuration("main_routes", [virtual_host("all", ["*"], [
            route("/v2", "svc", prefix_rewrite="/rewritten"), route("/", "svc")])])]
        self.xds.write_resources("config.yaml", **self.state)
        self.xds.wait_for(r"^ACK node=%s type=RDS " % NODE, since=mark, what="RDS ACK")
        self.assertEqual(self.served_by("/v2/a"), "B")
        dump = self.proxy.config_summary()
        self.assertTrue(dump["xds"]["connected"])
        for t in (LISTENER, CLUSTER):
            self.assertEqual(dump["xds"]["types"][t]["nacks"], 0)
        self.assertEqual(self.proxy.stat("control_plane.connected"), 1)

    def test_a_resource_naming_another_source_is_refused(self):
        self.start_all()
        mark = self.xds.mark()
        # RDS over ADS, where routes come from their own stream: NACKed, naming both sources;
        # the old listeners keep serving.
        bad = rds_listener("other", free_port(), "main_routes")
        self.state["listeners"].append(bad)
        self.xds.write_resources("config.yaml", **self.state)
        m = self.xds.wait_for(r"^NACK node=%s type=LDS .*error=(.*)$" % NODE, since=mark,
                              what="the LDS NACK")
        self.assertIn("rds.config_source: takes type.googleapis.com/envoy.config.route.v3."
                      "RouteConfiguration from ads, but rpx takes it from %s to cluster 'xds' "
                      "(one source per type)" % self.API_TYPE, m[0].group(1))
        self.assertIn("Listener 'other'", m[0].group(1))
        self.assertEqual(curl("http://127.0.0.1:%d/x" % self.port).status, 200)


class DeltaGrpcSourcesTest(GrpcSourcesTest):
    API_TYPE = "DELTA_GRPC"
    MODE = "delta"


def fs_listener(port):
    return {"@type": LISTENER, "name": "listener_0", "address": socket_address(port),
            "filter_chains": [{"filters": [{
                "name": "envoy.http_connection_manager",
                "typed_config": {"@type": HCM, "stat_prefix": "ingress_http",
                                 "http_filters": [{"name": "envoy.router",
                                                   "typed_config": {"@type": ROUTER}}],
                                 "route_config": {"name": "local_route", "virtual_hosts": [{
                                     "name": "local_service", "domains": ["*"],
                                     "routes": [{"match": {"prefix": "/"},
                                                 "route": {"cluster": "example_proxy_cluster"}}]}]}},
            }]}]}


def fs_cluster(port):
    return {"@type": CLUSTER, "name": "example_proxy_cluster", "type": "STATIC",
            "connect_timeout": "1s",
            "load_assignment": {"cluster_name": "example_proxy_cluster", "endpoints": [{
                "lb_endpoints": [{"endpoint": {"address": socket_address(port)}}]}]}}


class PathSourcesTest(IntegrationTestCase):
    """Envoy's dynamic-config-fs example: lds.yaml and cds.yaml, changed with mv."""

    def setUp(self):
        super().setUp()
        self.dir = make_tmpdir("rpx-it-fs-")
        self.addCleanup(remove_tmpdir, self.dir)
        self.up = {n: self.start_echo(n) for n in ("A", "B")}
        self.port = free_port()
        self.write("lds.yaml", {"resources": [fs_listener(self.port)]})
        self.write("cds.yaml", {"resources": [fs_cluster(self.up["A"].port)]})
        boot = {
            "node": {"id": "fs", "cluster": "test"},
            "admin": {"address": socket_address(free_port())},
            "dynamic_resources": {
                "cds_config": {"path_config_source": {"path": os.path.join(self.dir, "cds.yaml")},
                               "resource_api_version": "V3"},
                "lds_config": {"path_config_source": {"path": os.path.join(self.dir, "lds.yaml")},
                               "resource_api_version": "V3"},
            },
        }
        self.proxy = self.start_rpx(boot)

    def write(self, name, doc, in_place=False, text=None):
        body = text if text is not None else to_yaml(doc)
        path = os.path.join(self.dir, name)
        if in_place:
            with open(path, "w") as f:
                f.write(body)
            return
        tmp = os.path.join(self.dir, "." + name + ".tmp")
        with open(tmp, "w") as f:
            f.write(body)
        os.rename(tmp, path)  # mv, as Envoy's example does

    def upstream(self):
        r = curl("http://127.0.0.1:%d/x" % self.port)
        self.assertEqual(r.status, 200, r)
        return json.loads(r.body)["server"]

    def updates(self):
        return self.proxy.stat("control_plane.Cluster.update_success")

    def test_files_load_and_moves_apply(self):
        self.assertEqual(self.upstream(), "A")
        before = self.updates()
        self.write("cds.yaml", {"version_info": "2",
                                "resources": [fs_cluster(self.up["B"].port)]})
        wait_until(lambda: self.updates() > before, timeout=10, what="the moved file applied")
        self.assertEqual(self.upstream(), "B")
        # Rewritten in place (closed after writing): applied too.
        before = self.updates()
        self.write("cds.yaml", {"version_info": "3",
                                "resources": [fs_cluster(self.up["A"].port)]}, in_place=True)
        wait_until(lambda: self.updates() > before, timeout=10, what="the rewritten file applied")
        self.assertEqual(self.upstream(), "A")
        dump = self.proxy.config_dump()
        clusters = [c for c in dump["configs"] if c["@type"].endswith("ClustersConfigDump")][0]
        self.assertEqual(clusters["version_info"], "3")

    def test_a_bad_file_changes_nothing(self):
        rejected = self.proxy.stat("control_plane.Cluster.update_rejected")
        bad = fs_cluster(self.up["B"].port)
        bad["lb_policy"] = "FASTEST"
        self.write("cds.yaml", {"resources": [bad]})
        wait_until(lambda: self.proxy.stat("control_plane.Cluster.update_rejected") > rejected,
                   timeout=10, what="the bad file rejected")
        s = self.proxy.config_summary()["xds"]["types"][CLUSTER]
        self.assertIn("FASTEST", s["last_nack"])
        self.assertIn("cds.yaml", s["last_nack"])
        self.assertEqual(self.upstream(), "A")
        # A listener file holding a cluster is refused too, naming what is wrong.
        self.write("lds.yaml", {"resources": [fs_cluster(self.up["B"].port)]})
        wait_until(lambda: self.proxy.stat("control_plane.Listener.update_rejected") > 0,
                   timeout=10, what="the mixed-up file rejected")
        self.assertEqual(self.upstream(), "A")

    def test_routes_from_a_file_a_listener_file_names(self):
        # The listener arrives from lds.yaml naming rds.yaml: the RDS file source starts while
        # that listener update is being applied.
        route_type = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"

        def routes(status):
            return {"resources": [{"@type": route_type, "name": "r", "virtual_hosts": [{
                "name": "all", "domains": ["*"], "routes": [{"match": {"prefix": "/"},
                "direct_response": {"status": status}}]}]}]}
        self.write("rds.yaml", routes(418))
        listener = fs_listener(self.port)
        hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
        del hcm["route_config"]
        hcm["rds"] = {"route_config_name": "r", "config_source": {
            "path_config_source": {"path": os.path.join(self.dir, "rds.yaml")},
            "resource_api_version": "V3"}}
        self.write("lds.yaml", {"version_info": "2", "resources": [listener]})
        wait_until(lambda: curl("http://127.0.0.1:%d/" % self.port).status == 418, timeout=10,
                   what="routes from rds.yaml")
        self.write("rds.yaml", routes(204))
        wait_until(lambda: curl("http://127.0.0.1:%d/" % self.port).status == 204, timeout=10,
                   what="rds.yaml replaced")



class WatchedDirectoryTest(IntegrationTestCase):
    """path_config_source.watched_directory with a Kubernetes ConfigMap's layout: the file is a
    symlink through `..data`, and an update swaps `..data` to a new directory (a rename in the
    watched directory; the file's own name never changes)."""

    def setUp(self):
        super().setUp()
        self.root = make_tmpdir("rpx-it-cm-")
        self.addCleanup(remove_tmpdir, self.root)
        self.dir = os.path.join(self.root, "config")
        os.mkdir(self.dir)
        self.up = {n: self.start_echo(n) for n in ("A", "B")}
        self.port = free_port()
        self.generation = 0
        self.publish({"lds.yaml": {"resources": [fs_listener(self.port)]},
                      "cds.yaml": {"resources": [fs_cluster(self.up["A"].port)]}})
        os.symlink("..data/lds.yaml", os.path.join(self.dir, "lds.yaml"))
        os.symlink("..data/cds.yaml", os.path.join(self.dir, "cds.yaml"))

        def source(name):
            return {"path_config_source": {"path": os.path.join(self.dir, name),
                                           "watched_directory": {"path": self.dir}},
                    "resource_api_version": "V3"}
        self.proxy = self.start_rpx({
            "node": {"id": "cm", "cluster": "test"},
            "admin": {"address": socket_address(free_port())},
            "dynamic_resources": {"cds_config": source("cds.yaml"),
                                  "lds_config": source("lds.yaml")}})

    def publish(self, files):
        """Writes `files` into a new timestamped directory and swaps ..data to it, as the
        kubelet does."""
        self.generation += 1
        gen = "..2026_12_07_%02d" % self.generation
        os.mkdir(os.path.join(self.dir, gen))
        for name, doc in files.items():
            with open(os.path.join(self.dir, gen, name), "w") as f:
                f.write(to_yaml(doc))
        tmp = os.path.join(self.dir, "..data_tmp")
        os.symlink(gen, tmp)
        os.rename(tmp, os.path.join(self.dir, "..data"))

    def upstream(self):
        r = curl("http://127.0.0.1:%d/x" % self.port)
        self.assertEqual(r.status, 200, r)
        return json.loads(r.body)["server"]

    def test_a_symlink_swap_reloads(self):
        self.assertEqual(self.upstream(), "A")
        before = self.proxy.stat("control_plane.Cluster.update_success")
        self.publish({"lds.yaml": {"resources": [fs_listener(self.port)]},
                      "cds.yaml": {"version_info": "2",
                                   "resources": [fs_cluster(self.up["B"].port)]}})
        wait_until(lambda: self.proxy.stat("control_plane.Cluster.update_success") > before,
                   timeout=10, what="the swapped ConfigMap applied")
        self.assertEqual(self.upstream(), "B")
        self.assertEqual(self.proxy.stat("control_plane.Cluster.update_rejected"), 0)

if __name__ == "__main__":
    unittest.main()
