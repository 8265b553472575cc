"""Dynamic configuration over ADS: rpx against the reference control plane (tools/xds_server),
in both protocols (state of the world and delta).

The control plane serves the YAML files of a temporary directory and pushes a new version when one
changes; the tests edit the files (atomically) and wait for the control plane's log to show the
ACK of the new version before looking at traffic. Every test runs once per protocol
(XdsSotwTest, XdsDeltaTest).
"""

import http.client
import json
import re
import socket
import subprocess
import threading
import time
import unittest

from harness import (XDS_TYPE_URLS, IntegrationTestCase, congestion_option, curl, eds_cluster,
                     free_port, http_request, load_assignment, other_congestion_control,
                     rds_listener, route, route_configuration, tcp_algorithm, tcp_sockets,
                     virtual_host, wait_until, xds_bootstrap)

CONFIG_FILE = "config.yaml"
NODE = "test-node"
MAIN_ROUTES = "main_routes"


def connection_refused(port):
    """True if a TCP connect to 127.0.0.1:port is refused (nothing listening)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect(("127.0.0.1", port))
        return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    finally:
        s.close()


def by_name(items, name):
    for item in items:
        if item["name"] == name:
            return item
    return None


CONNECTION_LIMIT_TYPE = ("type.googleapis.com/envoy.extensions.filters.network."
                         "connection_limit.v3.ConnectionLimit")


class XdsTests(object):
    """The tests; mixed into one TestCase per protocol below."""

    API_TYPE = None  # "GRPC" or "DELTA_GRPC"
    MODE = None      # what the control plane logs: "sotw" or "delta"

    # -- setup helpers
    def start_all(self, upstreams=("A",), clusters=None, route_to=None, poll_ms=200,
                  concurrency=2, rpx_args=(), xds_by_dns_name=False):
        """Echo upstreams named `upstreams`; EDS clusters (`clusters`: cluster -> upstream names;
        default one cluster per upstream, named after it); listener "main" on self.port whose
        routes (RDS "main_routes") send everything to `route_to` (default: the first cluster);
        then the control plane and rpx, ready."""
        self.up = {n: self.start_echo(n) for n in upstreams}
        self.clusters = dict(clusters) if clusters else {n: [n] for n in upstreams}
        self.port = free_port()
        self.state = {
            "listeners": [rds_listener("main", self.port, MAIN_ROUTES)],
            "routes": [self.main_routes(route_to or next(iter(self.clusters)))],
            "clusters": [eds_cluster(c) for c in self.clusters],
            "endpoints": [self.cla(c, members) for c, members in self.clusters.items()],
        }
        self.xds = self.start_xds_server({CONFIG_FILE: self.state}, poll_ms=poll_ms)
        self.xds.wait_for(r"^snapshot version=1 listeners=main ", what="the first snapshot")
        boot = xds_bootstrap(self.xds.port, node_id=NODE, delta=self.API_TYPE == "DELTA_GRPC")
        if xds_by_dns_name:
            # The control plane by name, as Envoy's own examples reach theirs.
            xds_cluster = boot["static_resources"]["clusters"][0]
            xds_cluster["type"] = "STRICT_DNS"
            lb = xds_cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
            lb["endpoint"]["address"]["socket_address"]["address"] = "localhost"
        self.proxy = self.start_rpx(boot, concurrency=concurrency, extra_args=list(rpx_args))
        self.xds.wait_for(r"^stream open node=%s mode=%s$" % (NODE, self.MODE),
                          what="a %s stream" % self.MODE)
        return self.proxy

    def cla(self, cluster_name, members):
        return load_assignment(cluster_name, [self.up[m].port for m in members])

    @staticmethod
    def main_routes(cluster_name, routes=None, extra=None):
        return route_configuration(
            MAIN_ROUTES,
            [virtual_host("all", ["*"], routes or [route("/", cluster_name, timeout="15s")])],
            extra)

    def update(self, **changes):
        """Rewrites the resource file with self.state updated by `changes`; returns the log mark
        taken before the write."""
        self.state.update(changes)
        return self.xds.write_resources(CONFIG_FILE, **self.state)

    def wait_ack(self, type_name, mark, timeout=10.0):
        return self.xds.wait_ack(type_name, mark, timeout=timeout, node=NODE)

    def url(self, path, port=None):
        return "http://127.0.0.1:%d%s" % (port or self.port, path)

    def get(self, path, port=None, status=200):
        """One request through rpx with curl; asserts the status and returns the Response."""
        r = curl(self.url(path, port), timeout=20)
        self.assertEqual(r.status, status, "GET %s: %r (curl exit %s)" % (path, r, r.exitcode))
        return r

    def served_by(self, path, port=None):
        return self.get(path, port).json()["server"]

    def type_status(self, dump, type_name):
        return dump["xds"]["types"][XDS_TYPE_URLS[type_name]]

    # -- 1
    def test_initial_sync_and_traffic(self):
        self.start_all(("A",))
        r = self.get("/hello?x=1")
        self.assertEqual(r.json()["server"], "A")
        self.assertEqual(r.json()["path"], "/hello?x=1")

        status, body = self.proxy.admin("GET", "/ready")
        self.assertEqual((status, body.strip()), (200, b"LIVE"))

        # Every type was pushed and ACKed at the first snapshot's version.
        for t in ("CDS", "EDS", "LDS", "RDS"):
            self.assertEqual(self.xds.wait_ack(t, 0, node=NODE), "1", t)
        self.assertFalse(self.xds.find(r"^NACK "), self.xds.log_tail())

        dump = self.proxy.config_summary()
        listener = by_name(dump["listeners"], "main")
        self.assertIsNotNone(listener, dump["listeners"])
        self.assertEqual((listener["version"], listener["state"]), ("1", "active"))
        self.assertGreater(listener["last_updated_ms"], 0)
        rc = by_name(dump["routes"], MAIN_ROUTES)
        self.assertIsNotNone(rc, dump["routes"])
        self.assertEqual((rc["version"], rc["state"]), ("1", "active"))
        self.assertEqual(rc["config"]["virtual_hosts"][0]["routes"][0]["route"]["cluster"], "A")
        c = by_name(dump["clusters"], "A")
        self.assertIsNotNone(c, dump["clusters"])
        self.assertEqual((c["version"], c["state"]), ("1", "active"))
        self.assertEqual(by_name(dump["clusters"], "xds")["state"], "static")
        e = by_name(dump["endpoints"], "A")
        self.assertIsNotNone(e, dump["endpoints"])
        self.assertEqual(e["version"], "1")
        self.assertTrue(dump["xds"]["connected"])
        for t in ("CDS", "EDS", "LDS", "RDS"):
            s = self.type_status(dump, t)
            self.assertEqual(s["version"], "1", t)
            self.assertGreaterEqual(s["updates"], 1, t)
            self.assertEqual(s["nacks"], 0, t)
            self.assertIsNone(s["last_nack"], t)

    def test_xds_cluster_found_by_dns_name(self):
        self.start_all(("A",), xds_by_dns_name=True)
        self.assertEqual(self.served_by("/by-name"), "A")

    # -- 1b
    def test_route_changes_under_h2_load_fail_no_stream(self):
        """h2load keeps 4 HTTP/2 connections x 8 streams busy while the route flips between two
        clusters four times: every stream gets a 2xx, and both clusters serve."""
        self.start_all(("A", "B"))
        load = subprocess.Popen(["h2load", "-c", "4", "-m", "8", "-D", "8", self.url("/load")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.addCleanup(lambda: load.poll() is None and load.kill())
        wait_until(lambda: len(self.up["A"].requests) > 50, timeout=10, what="load on A")
        for target in ("B", "A", "B", "A"):
            mark = self.update(routes=[self.main_routes(target)])
            self.wait_ack("RDS", mark)
            wait_until(lambda: any(r["path"] == "/load" for r in self.up[target].requests[-5:]),
                       timeout=10, what="load on %s" % target)
        out, _ = load.communicate(timeout=60)
        out = out.decode("utf-8", "replace")
        m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, "
                      r"(\d+) failed, (\d+) errored", out)
        self.assertIsNotNone(m, out)
        done, failed, errored = int(m.group(2)), int(m.group(4)), int(m.group(5))
        self.assertGreater(done, 0, out)
        self.assertEqual((failed, errored), (0, 0), out)
        # (h2load's 2xx count can differ from "done" by the streams cut at the deadline.)
        self.assertRegex(out, r"status codes: \d+ 2xx, 0 3xx, 0 4xx, 0 5xx")
        self.assertGreater(len(self.up["B"].requests), 0)

    # -- 2
    def test_route_change_is_applied(self):
        self.start_all(("A", "B"))
        self.assertEqual(self.served_by("/x"), "A")

        mark = self.update(routes=[self.main_routes(None, routes=[
            route("/a/", "A", timeout="15s"),
            route("/", "B", timeout="15s"),
        ], extra={"response_headers_to_add": [{"header": {"key": "x-rds", "value": "v2"}}]})])
        version = self.wait_ack("RDS", mark)

        r = self.get("/x")
        self.assertEqual(r.json()["server"], "B")
        self.assertEqual(r.headers.get("x-rds"), "v2", r)
        r = self.get("/a/y")
        self.assertEqual(r.json()["server"], "A")
        self.assertEqual(r.headers.get("x-rds"), "v2", r)

        dump = self.proxy.config_summary()
        self.assertEqual(by_name(dump["routes"], MAIN_ROUTES)["version"], version)
        self.assertEqual(self.type_status(dump, "RDS")["version"], version)

    # -- 3
    def test_bad_route_is_nacked_and_old_route_keeps_serving(self):
        self.start_all(("A",))
        self.assertEqual(self.served_by("/x"), "A")

        bad = [
            # An invalid RE2 pattern.
            ("safe_regex", {"match": {"safe_regex": {"regex": "(unclosed"}},
                            "route": {"cluster": "A"}}),
            # A field rpx does not implement.
            ("runtime_fraction", {"match": {"prefix": "/", "runtime_fraction": {
                "default_value": {"numerator": 50, "denominator": "HUNDRED"}}},
                "route": {"cluster": "A"}}),
        ]
        nacks = 0
        for field, bad_route in bad:
            with self.subTest(field=field):
                mark = self.update(routes=[self.main_routes(None, routes=[bad_route])])
                kept, error = self.xds.wait_nack("RDS", mark, node=NODE)
                nacks += 1
                self.assertIn(MAIN_ROUTES, error)
                self.assertIn(field, error)
                if self.MODE == "sotw":
                    # A SotW NACK carries the version the client kept.
                    self.assertEqual(kept, "1", error)

                # The old route still serves.
                self.assertEqual(self.served_by("/x"), "A")
                dump = self.proxy.config_summary()
                s = self.type_status(dump, "RDS")
                self.assertEqual(s["version"], "1", s)
                self.assertGreaterEqual(s["nacks"], nacks, s)
                self.assertIsNotNone(s["last_nack"], s)
                self.assertIn(MAIN_ROUTES, s["last_nack"])
                self.assertIn(field, s["last_nack"])
                rc = by_name(dump["routes"], MAIN_ROUTES)
                self.assertEqual(rc["version"], "1", rc)
                self.assertEqual(rc["config"]["virtual_hosts"][0]["routes"][0]["route"]["cluster"],
                                 "A")

        # A good version after the bad ones is accepted.
        mark = self.update(routes=[self.main_routes("A", extra={
            "response_headers_to_add": [{"header": {"key": "x-fixed", "value": "yes"}}]})])
        version = self.wait_ack("RDS", mark)
        r = self.get("/x")
        self.assertEqual(r.json()["server"], "A")
        self.assertEqual(r.headers.get("x-fixed"), "yes", r)
        self.assertEqual(self.type_status(self.proxy.config_summary(), "RDS")["version"], version)

    # -- 4
    def test_control_plane_restart(self):
        self.start_all(("A", "B"))
        self.assertEqual(self.served_by("/x"), "A")
        port = self.xds.port

        self.xds.stop()  # SIGTERM by PID
        self.assertFalse(self.xds.alive())
        wait_until(lambda: not self.proxy.config_summary()["xds"]["connected"], timeout=10,
                   what="config_summary xds.connected to turn false")
        # Without a control plane, rpx keeps serving what it has.
        for i in range(3):
            self.assertEqual(self.served_by("/down/%d" % i), "A")

        mark = self.xds.mark()
        self.xds.start()
        self.assertEqual(self.xds.port, port)
        self.xds.wait_for(r"^stream open node=%s mode=%s$" % (NODE, self.MODE), since=mark,
                          timeout=15, what="rpx's new stream after the restart")
        self.assertEqual(self.served_by("/up"), "A")

        mark = self.update(routes=[self.main_routes("B")])
        self.wait_ack("RDS", mark)
        self.assertEqual(self.served_by("/after"), "B")
        wait_until(lambda: self.proxy.config_summary()["xds"]["connected"], timeout=10,
                   what="config_summary xds.connected to turn true")

    # -- 5
    def test_endpoints_added_and_removed(self):
        # One worker: one upstream pool, so round robin and connection reuse are exact.
        self.start_all(("A", "B"), clusters={"svc": ["A"]}, concurrency=1)
        for i in range(4):
            self.assertEqual(self.served_by("/before/%d" % i), "A")
        a_accepted = self.up["A"].accepted
        self.assertEqual(self.up["B"].accepted, 0)

        # B joins: requests alternate; A's pooled connection is kept.
        mark = self.update(endpoints=[self.cla("svc", ["A", "B"])])
        self.wait_ack("EDS", mark)
        servers = [self.served_by("/both/%d" % i) for i in range(10)]
        self.assertEqual(servers.count("A"), 5, servers)
        self.assertEqual(servers.count("B"), 5, servers)
        self.assertEqual(self.up["A"].accepted, a_accepted,
                         "A's keep-alive connection was not reused across the EDS update")
        self.assertEqual(self.up["B"].accepted, 1)

        # A leaves: everything goes to B.
        mark = self.update(endpoints=[self.cla("svc", ["B"])])
        version = self.wait_ack("EDS", mark)
        a_requests = self.up["A"].request_count()
        servers = [self.served_by("/only-b/%d" % i) for i in range(6)]
        self.assertEqual(servers, ["B"] * 6)
        self.assertEqual(self.up["A"].request_count(), a_requests)

        dump = self.proxy.config_summary()
        e = by_name(dump["endpoints"], "svc")
        self.assertEqual(e["version"], version)
        ports = [ep["endpoint"]["address"]["socket_address"]["port_value"]
                 for ep in e["config"]["endpoints"][0]["lb_endpoints"]]
        self.assertEqual(ports, [self.up["B"].port])

    # -- 6
    def test_listener_added_and_removed_with_draining(self):
        self.start_all(("A",), rpx_args=["--drain-time-s", "10"])
        main = self.state["listeners"][0]
        port2 = free_port()
        mark = self.update(listeners=[main, rds_listener("second", port2, MAIN_ROUTES)])
        self.wait_ack("LDS", mark)
        self.assertEqual(self.served_by("/on-second", port2), "A")
        self.assertEqual(by_name(self.proxy.config_summary()["listeners"], "second")["state"],
                         "active")

        # A slow request in flight on the second listener...
        box = {}

        def slow():
            try:
                box["r"] = curl(self.url("/slow/2", port2), timeout=30)
            except Exception as e:  # reported below
                box["e"] = e
        before = self.up["A"].request_count()
        t = threading.Thread(target=slow, daemon=True)
        t.start()
        self.addCleanup(t.join, 35)
        wait_until(lambda: self.up["A"].request_count() > before and self.up["A"].in_flight > 0,
                   timeout=10, what="the slow request to reach the upstream")

        # ... when the listener is removed.
        mark = self.update(listeners=[main])
        self.wait_ack("LDS", mark)
        wait_until(lambda: connection_refused(port2), timeout=5,
                   what="connections to the removed listener's port to be refused")
        self.assertIsNone(by_name(self.proxy.config_summary()["listeners"], "second"))

        t.join(30)
        self.assertFalse(t.is_alive(), "the in-flight request did not finish")
        self.assertNotIn("e", box, box.get("e"))
        r = box["r"]
        self.assertEqual(r.status, 200, "in-flight request on the drained listener: %r (curl exit "
                         "%s)" % (r, r.exitcode))
        self.assertEqual(r.json()["server"], "A")
        self.assertEqual(r.json()["path"], "/slow/2")
        # The main listener is unaffected.
        self.assertEqual(self.served_by("/still"), "A")

    # -- 6b
    def test_listener_address_change_rebinds(self):
        self.start_all(("A",))
        self.assertEqual(self.served_by("/before"), "A")
        old_port = self.port
        new_port = free_port()
        moved = rds_listener("main", new_port, MAIN_ROUTES)
        mark = self.update(listeners=[moved])
        self.wait_ack("LDS", mark)
        # The same listener now accepts on the new address; the old socket is closed.
        self.assertEqual(self.served_by("/after", new_port), "A")
        wait_until(lambda: connection_refused(old_port), timeout=5,
                   what="the old address to stop accepting")
        dump = by_name(self.proxy.config_summary()["listeners"], "main")
        self.assertEqual(dump["state"], "active")
        self.assertEqual(dump["config"]["address"]["socket_address"]["port_value"], new_port)

    def test_listener_socket_options_change_in_place_and_refusal(self):
        cc = other_congestion_control()
        if cc is None:
            self.skipTest("no second congestion control is allowed on this host")
        self.start_all(("A",))
        self.assertEqual(self.served_by("/before"), "A")
        # Accepted by the old listener, request not sent yet when the listener is replaced.
        early = self.raw_client(self.port)
        wait_until(lambda: self.proxy.stat("http.main.downstream_cx_active") == 1, timeout=5,
                   what="rpx to accept the early connection")
        # New socket options on the same address: new sockets on the same port replace the old.
        tuned = rds_listener("main", self.port, MAIN_ROUTES)
        tuned["socket_options"] = [congestion_option(cc, description="cc")]
        mark = self.update(listeners=[tuned])
        self.wait_ack("LDS", mark)

        def accepted_with_option():
            c = self.raw_client(self.port)
            c.send(http_request("GET", "/tuned"))
            if c.read_response().status != 200:
                return False
            mine = tcp_sockets("sport = :%d and dport = :%d" %
                               (self.port, c.sock.getsockname()[1]))
            return len(mine) == 1 and tcp_algorithm(mine[0][2]) == cc
        wait_until(accepted_with_option, timeout=10,
                   what="connections accepted by the new sockets, with the option")
        # The old listener drains: the early connection's first request is still answered (and
        # the connection then closed), not dropped unanswered.
        early.send(http_request("GET", "/early"))
        r = early.read_response()
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.headers.get("connection"), "close", r)

        # A value the kernel refuses is NACKed, naming the option; the listener keeps serving.
        bad = rds_listener("main", self.port, MAIN_ROUTES)
        bad["socket_options"] = [congestion_option("no-such-algorithm", description="bad cc")]
        mark = self.update(listeners=[bad])
        kept, error = self.xds.wait_nack("LDS", mark, node=NODE)
        self.assertIn("Listener 'main'", error)
        self.assertIn("setting socket option 'bad cc' (level 6, name 13)", error)
        self.assertTrue(accepted_with_option(), "the accepted version stopped serving")

    def test_connection_limit_counts_across_a_listener_update(self):
        # A listener with envoy.filters.network.connection_limit, updated over LDS while
        # connections are open: the connections accepted under the old version keep counting.
        self.start_all(("A",))

        def capped(stat_prefix):
            l = rds_listener("main", self.port, MAIN_ROUTES, stat_prefix=stat_prefix)
            l["filter_chains"][0]["filters"].insert(0, {
                "name": "envoy.filters.network.connection_limit",
                "typed_config": {"@type": CONNECTION_LIMIT_TYPE, "stat_prefix": "cap",
                                 "max_connections": 2}})
            return l

        mark = self.update(listeners=[capped("main")])
        self.wait_ack("LDS", mark)
        clients = [self.raw_client(self.port) for _ in range(2)]
        for c in clients:
            c.send(http_request("GET", "/one"))
            self.assertEqual(c.read_response().status, 200)
        mark = self.update(listeners=[capped("main_v2")])  # a new version, same address
        self.wait_ack("LDS", mark)
        self.proxy.wait_stat("connection_limit.cap.active_connections", lambda v: v == 2)
        extra = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.addCleanup(extra.close)
        try:
            extra.sendall(http_request("GET", "/refused"))
            refused = extra.recv(1024) == b""
        except (ConnectionResetError, BrokenPipeError):
            refused = True
        self.assertTrue(refused, "a third connection was served over a cap of 2")
        self.assertEqual(self.proxy.stat("connection_limit.cap.limited_connections"), 1)
        for c in clients:  # the open ones are unaffected
            c.send(http_request("GET", "/two"))
            self.assertEqual(c.read_response().status, 200)

    # -- 7
    def test_listener_without_routes_serves_404_after_initial_fetch_timeout(self):
        self.start_all(("A",))
        main = self.state["listeners"][0]
        port3 = free_port()
        mark = self.update(listeners=[
            main, rds_listener("warming", port3, "missing_routes", initial_fetch_timeout="1s")])
        self.wait_ack("LDS", mark)

        def state():
            entry = by_name(self.proxy.config_summary()["listeners"], "warming")
            return entry["state"] if entry else None
        wait_until(lambda: state() == "active", timeout=10,
                   what="listener 'warming' to become active after its initial_fetch_timeout")
        r = self.get("/anything", port3, status=404)
        self.assertNotIn("/anything", [x["path"] for x in self.up["A"].requests])
        # The rest is unaffected.
        self.assertEqual(self.served_by("/x"), "A")
        status, body = self.proxy.admin("GET", "/ready")
        self.assertEqual((status, body.strip()), (200, b"LIVE"))

    # -- 8
    def test_route_churn_under_load_has_no_failures(self):
        self.start_all(("A", "B"), poll_ms=50)
        self.assertEqual(self.served_by("/warmup"), "A")
        churn_s, rate = 10.0, 20
        clients = 8

        stop = threading.Event()
        lock = threading.Lock()
        failures = []
        counts = {}
        reconnects = [0]
        writer_errors = []

        def client(i):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            n = 0
            try:
                while not stop.is_set():
                    n += 1
                    path = "/churn/%d/%d" % (i, n)
                    try:
                        conn.request("GET", path)
                        resp = conn.getresponse()
                        body = resp.read()
                    except Exception as e:
                        with lock:
                            failures.append("%s: %r" % (path, e))
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                        continue
                    if resp.status != 200:
                        with lock:
                            failures.append("%s: status %d %r" % (path, resp.status, body[:200]))
                    else:
                        try:
                            server = json.loads(body)["server"]
                        except Exception as e:
                            server = "unparsable: %r (%r)" % (body[:100], e)
                        with lock:
                            counts[server] = counts.get(server, 0) + 1
                    if resp.will_close:  # the server closes: reconnect
                        conn.close()
                        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                        with lock:
                            reconnects[0] += 1
            finally:
                conn.close()

        def writer():
            try:
                start = time.monotonic()
                for k in range(int(churn_s * rate)):
                    target = "B" if k % 2 == 0 else "A"
                    self.update(routes=[self.main_routes(target)])
                    delay = start + (k + 1) / rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
            except Exception as e:
                writer_errors.append(repr(e))

        mark = self.xds.mark()
        threads = [threading.Thread(target=client, args=(i,), daemon=True)
                   for i in range(clients)]
        for t in threads:
            t.start()
        w = threading.Thread(target=writer, daemon=True)
        w.start()
        try:
            w.join(churn_s + 5)
            self.assertFalse(w.is_alive(), "the route writer did not finish")
        finally:
            stop.set()
            for t in threads:
                t.join(15)
        self.assertFalse(any(t.is_alive() for t in threads), "client threads did not finish")
        self.assertEqual(writer_errors, [])

        total = sum(counts.values())
        self.assertEqual(failures, [], "%d failed requests of %d (first: %s)" %
                         (len(failures), total + len(failures), failures[:5]))
        self.assertEqual(set(counts) - {"A", "B"}, set(), counts)
        self.assertGreater(counts.get("A", 0), 0, counts)
        self.assertGreater(counts.get("B", 0), 0, counts)
        acked = {m.group(1) for m in self.xds.find(
            r"^ACK node=%s type=RDS version=(\S+) nonce=" % NODE, mark)}
        self.assertGreaterEqual(len(acked), 5, "RDS versions ACKed during the churn: %s" %
                                sorted(acked))
        self.assertFalse(self.xds.find(r"^NACK ", mark), self.xds.log_tail())

        # A version written after the churn is applied too.
        self.update(routes=[self.main_routes("B", extra={
            "response_headers_to_add": [{"header": {"key": "x-final", "value": "1"}}]})])

        def final_applied():
            rc = by_name(self.proxy.config_summary()["routes"], MAIN_ROUTES)
            return rc and "response_headers_to_add" in rc["config"]
        wait_until(final_applied, timeout=10, what="the route version written after the churn")
        r = self.get("/final")
        self.assertEqual(r.json()["server"], "B")
        self.assertEqual(r.headers.get("x-final"), "1", r)


class XdsSotwTest(XdsTests, IntegrationTestCase):
    API_TYPE = "GRPC"
    MODE = "sotw"


class XdsDeltaTest(XdsTests, IntegrationTestCase):
    API_TYPE = "DELTA_GRPC"
    MODE = "delta"


if __name__ == "__main__":
    unittest.main()
