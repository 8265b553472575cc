"""rpx as a sidecar, proven in network namespaces (issue 34): an "app" namespace whose TCP is
redirected to rpx by iptables as Istio's istio-iptables does (outbound to 15001, inbound to 15006,
rpx's own user exempt), and a "svc" namespace with an HTTP origin, a TCP echo server and an HTTPS
origin. rpx runs in the app namespace as uid 1337 and takes all of its listeners and clusters from
the reference control plane (tools/xds_server, also in the app namespace):

  virtualOutbound 0.0.0.0:15001  original_dst + tls_inspector, use_original_dst; one chain passes
                                 TLS for secure.svc.example through by SNI, the default chain
                                 passes anything else to PassthroughCluster (ORIGINAL_DST)
  10.213.0.2_8080                bind_to_port false: HTTP for the service, routes over RDS
  virtualInbound 0.0.0.0:15006   original_dst; TCP proxy to InboundPassthroughCluster
                                 (ORIGINAL_DST, bound to 127.0.0.6 as Istio does)

Skips with the reason only where the kernel refuses namespaces (or no iptables can be had)."""

import json
import os
import shutil
import tempfile
import unittest

import netns
from harness import (ADS_SOURCE, UPSTREAM_HTTP_OPTIONS, IntegrationTestCase, TestPki, XdsServer,
                     remove_tmpdir, rpx_bin, to_yaml, wait_until, xds_bootstrap)

HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
TCP_PROXY = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
ORIGINAL_DST = "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst"
TLS_INSPECTOR = "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"
FILE_LOG = "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog"
HERE = os.path.dirname(os.path.abspath(__file__))
APP_IP, SVC_IP = "10.213.0.1", "10.213.0.2"
UID = netns.PROXY_UID


def addr(ip, port):
    return {"socket_address": {"address": ip, "port_value": port}}


def file_log(path, fmt):
    return [{"name": "envoy.access_loggers.file",
             "typed_config": {"@type": FILE_LOG, "path": path,
                              "log_format": {"text_format_source": {"inline_string": fmt}}}}]


def tcp_proxy(stat_prefix, cluster, log=None):
    cfg = {"@type": TCP_PROXY, "stat_prefix": stat_prefix, "cluster": cluster}
    if log:
        cfg["access_log"] = log
    return {"filters": [{"name": "envoy.filters.network.tcp_proxy", "typed_config": cfg}]}


SO_MARK = [{"description": "SO_MARK 0x539: the redirect rules let marked traffic pass",
            "level": 1, "name": 36, "int_value": 0x539, "state": "STATE_PREBIND"}]


def sidecar_resources(log_dir, route_version, mark=False, inline_routes=False):
    """The sidecar's listeners, clusters and routes. `mark`: every cluster marks its sockets
    (SO_MARK, through upstream_bind_config.socket_options) instead of relying on rpx's uid;
    `inline_routes`: the service listener carries its route_config (a static bootstrap)."""
    http_log = file_log(os.path.join(log_dir, "http.log"),
                        "%REQ(:PATH)% %RESPONSE_CODE% %UPSTREAM_HOST% %DOWNSTREAM_LOCAL_ADDRESS%\n")
    tcp_log = file_log(os.path.join(log_dir, "tcp.log"),
                       "%UPSTREAM_CLUSTER% %UPSTREAM_HOST% %DOWNSTREAM_LOCAL_ADDRESS% "
                       "%BYTES_RECEIVED% %BYTES_SENT%\n")
    outbound = {
        "name": "virtualOutbound",
        "stat_prefix": "virtualOutbound",
        "address": addr("0.0.0.0", netns.OUTBOUND_PORT),
        "use_original_dst": True,
        "traffic_direction": "OUTBOUND",
        "listener_filters": [
            {"name": "envoy.filters.listener.original_dst", "typed_config": {"@type": ORIGINAL_DST}},
            {"name": "envoy.filters.listener.tls_inspector", "typed_config": {"@type": TLS_INSPECTOR}},
        ],
        "listener_filters_timeout": "1s",
        "continue_on_listener_filters_timeout": True,
        "filter_chains": [dict(tcp_proxy("svc_tls", "svc_tls", tcp_log),
                               filter_chain_match={"server_names": ["secure.svc.example"]})],
        "default_filter_chain": tcp_proxy("PassthroughCluster", "PassthroughCluster", tcp_log),
    }
    service = {
        "name": "%s_8080" % SVC_IP,
        "address": addr(SVC_IP, 8080),
        "bind_to_port": False,
        "traffic_direction": "OUTBOUND",
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": HCM, "stat_prefix": "outbound_svc_8080",
                "rds": {"config_source": ADS_SOURCE, "route_config_name": "svc_8080"},
                "access_log": http_log,
                "http_filters": [{"name": "envoy.filters.http.router",
                                  "typed_config": {"@type": ROUTER}}]}}]}],
    }
    inbound = {
        "name": "virtualInbound",
        "stat_prefix": "virtualInbound",
        "address": addr("0.0.0.0", netns.INBOUND_PORT),
        "traffic_direction": "INBOUND",
        "listener_filters": [{"name": "envoy.filters.listener.original_dst",
                              "typed_config": {"@type": ORIGINAL_DST}}],
        "filter_chains": [tcp_proxy("inbound", "InboundPassthroughCluster", tcp_log)],
    }
    if inline_routes:
        hcm = service["filter_chains"][0]["filters"][0]["typed_config"]
        del hcm["rds"]
        hcm["route_config"] = None  # filled in below, once the routes are built
    http_opts = {UPSTREAM_HTTP_OPTIONS: {"@type": "type.googleapis.com/" + UPSTREAM_HTTP_OPTIONS,
                                         "explicit_http_config": {"http_protocol_options": {}}}}
    clusters = [
        {"name": "PassthroughCluster", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED",
         "connect_timeout": "2s"},
        {"name": "InboundPassthroughCluster", "type": "ORIGINAL_DST",
         "lb_policy": "CLUSTER_PROVIDED", "connect_timeout": "2s",
         "upstream_bind_config": {"source_address": {"address": "127.0.0.6", "port_value": 0}}},
        {"name": "svc_8080", "type": "STATIC", "connect_timeout": "2s",
         "typed_extension_protocol_options": http_opts,
         "load_assignment": {"cluster_name": "svc_8080", "endpoints": [
             {"lb_endpoints": [{"endpoint": {"address": addr(SVC_IP, 8080)}}]}]}},
        {"name": "svc_tls", "type": "STATIC", "connect_timeout": "2s",
         "load_assignment": {"cluster_name": "svc_tls", "endpoints": [
             {"lb_endpoints": [{"endpoint": {"address": addr(SVC_IP, 8443)}}]}]}},
    ]
    routes = [{"name": "svc_8080", "virtual_hosts": [{
        "name": "svc", "domains": ["*"],
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "svc_8080"},
                    "request_headers_to_add": [{"header": {"key": "x-sidecar-route",
                                                           "value": route_version}}]}]}]}]
    if mark:
        for c in clusters:
            c.setdefault("upstream_bind_config", {"source_address": {"address": "0.0.0.0",
                                                                     "port_value": 0}})
            c["upstream_bind_config"]["socket_options"] = SO_MARK
    if inline_routes:
        service["filter_chains"][0]["filters"][0]["typed_config"]["route_config"] = routes[0]
        routes = []
    return {"listeners": [outbound, service, inbound], "clusters": clusters, "routes": routes}


class NetnsSidecarTest(IntegrationTestCase):

    def setUp(self):
        ok, why = netns.available()
        if not ok:
            self.skipTest(why)
        # Under /tmp, not $TMPDIR: Bazel points that into /root, where uid 1337 cannot go.
        self.tmp = tempfile.mkdtemp(prefix="rpx-it-sidecar-", dir="/tmp")
        self.addCleanup(remove_tmpdir, self.tmp)
        # rpx runs as uid 1337, which may not read the test's files where they are (the bazel
        # output tree lives under /root): it gets a copy of its binary, its bootstrap and a log
        # directory of its own.
        os.chmod(self.tmp, 0o755)
        self.logs = os.path.join(self.tmp, "logs")
        os.mkdir(self.logs)
        os.chown(self.logs, UID, UID)
        self.rpx = os.path.join(self.tmp, "rpx")
        shutil.copy(rpx_bin(), self.rpx)
        os.chmod(self.rpx, 0o755)
        self.topo = netns.Topology(app_ip=APP_IP, svc_ip=SVC_IP)
        self.addCleanup(self.topo.close)
        self.app, self.svc = self.topo.app, self.topo.svc
        self.pki = TestPki()
        self.addCleanup(self.pki.cleanup)
        cert, key = self.pki.cert("secure", ["DNS:secure.svc.example"])
        for f in (cert, key):
            os.chmod(f, 0o644)
        peers = os.path.join(HERE, "sidecar_peers.py")
        svc_peers = self.topo.start(self.svc, ["/usr/bin/python3", peers, "svc", SVC_IP, cert, key])
        self.assertEqual(netns.wait_line(svc_peers), "ready")
        app_peer = self.topo.start(self.app, ["/usr/bin/python3", peers, "app", APP_IP])
        self.assertEqual(netns.wait_line(app_peer), "ready")

    def start_with_control_plane(self):
        """rpx as uid 1337 (exempt from capture by the owner rule), every listener and cluster
        from the reference control plane on the app namespace's loopback (never captured)."""
        netns.install_redirect(self.app, proxy_uid=UID,
                               exclude_inbound_ports=[netns.ADMIN_PORT],
                               inbound_interface=self.topo.app_if)
        self.xds = XdsServer(wrap=[netns._ip(), "netns", "exec", self.app], checked=True)
        self.addCleanup(self.xds.cleanup)
        self.xds.start()
        mark = self.xds.write_resources("sidecar.yaml", **sidecar_resources(self.logs, "v1"))
        boot = xds_bootstrap(self.xds.port, admin_port=netns.ADMIN_PORT, node_id="sidecar-1")
        self.start_rpx_in_app(boot, uid=UID)
        self.xds.wait_ack("RDS", mark)

    def start_rpx_in_app(self, boot, uid):
        path = os.path.join(self.tmp, "bootstrap.yaml")
        with open(path, "w") as f:
            f.write(to_yaml(boot))
        os.chmod(path, 0o644)
        self.proxy = self.topo.start(self.app, [self.rpx, "-c", path, "--concurrency", "2",
                                                "-l", "warn"], uid=uid, gid=uid)
        def ready():
            if self.proxy.poll() is not None:
                raise AssertionError("rpx exited %s: %s" % (self.proxy.returncode,
                                                            self.proxy.stderr.read().decode()))
            return self.admin("/ready")[0] == "200"
        wait_until(ready, timeout=20, what="rpx ready")

    def admin(self, path):
        r = netns.exec_in(self.app, ["curl", "-s", "-o", "/dev/stderr", "-w", "%{http_code}",
                                     "--max-time", "5", "http://127.0.0.1:%d%s" %
                                     (netns.ADMIN_PORT, path)], check=False)
        return r.stdout.strip(), r.stderr

    def stats(self):
        code, body = self.admin("/stats")
        self.assertEqual(code, "200")
        out = {}
        for line in body.splitlines():
            if ": " in line:
                k, v = line.rsplit(": ", 1)
                if v.lstrip("-").isdigit():
                    out[k] = int(v)
        return out

    def curl(self, ns, *args):
        r = netns.exec_in(ns, ["curl", "-s", "-S", "--max-time", "10"] + list(args), check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_static_bootstrap_with_marked_sockets(self):
        # The same listeners and clusters from a bootstrap file, and the other loop-safety rule:
        # rpx runs as root, and the rules let through what carries mark 0x539, which every
        # cluster sets on its sockets (SO_MARK through upstream_bind_config.socket_options).
        netns.install_redirect(self.app, proxy_uid=None, mark=0x539,
                               exclude_inbound_ports=[netns.ADMIN_PORT],
                               inbound_interface=self.topo.app_if)
        res = sidecar_resources(self.logs, "static", mark=True, inline_routes=True)
        # A virtual listener on the wildcard address: the hand-off takes it for any address
        # with that port when no listener has the exact one.
        res["listeners"].append({
            "name": "0.0.0.0_9000", "address": addr("0.0.0.0", 9000), "bind_to_port": False,
            "filter_chains": [tcp_proxy("wildcard_9000", "PassthroughCluster")]})
        boot = {"node": {"id": "sidecar-static", "cluster": "app"},
                "admin": {"address": {"socket_address": {"address": "127.0.0.1",
                                                         "port_value": netns.ADMIN_PORT}}},
                "static_resources": {"listeners": res["listeners"], "clusters": res["clusters"]}}
        self.start_rpx_in_app(boot, uid=0)
        body = json.loads(self.curl(self.app, "http://%s:8080/static" % SVC_IP))
        self.assertEqual(body["headers"].get("x-sidecar-route"), "static")
        script = ("import socket\n"
                  "s=socket.create_connection(('%s',9000),timeout=10)\n"
                  "s.sendall(b'marked'); s.shutdown(socket.SHUT_WR)\n"
                  "print(s.recv(100).decode())\n" % SVC_IP)
        self.assertEqual(netns.exec_in(self.app, ["/usr/bin/python3", "-c", script]).stdout.strip(),
                         "marked")
        body = json.loads(self.curl(self.svc, "http://%s:9080/in" % APP_IP))
        self.assertEqual(body["server"], "app")
        s = self.stats()
        self.assertEqual(s["tcp.wildcard_9000.downstream_cx_total"], 1)
        self.assertEqual(s["tcp.PassthroughCluster.downstream_cx_total"], 0)
        # Two client connections captured, and none of rpx's own (marked) came back.
        self.assertEqual(s["listener.virtualOutbound.downstream_cx_total"], 2)
        self.assertEqual(s["listener.virtualInbound.downstream_cx_total"], 1)

    def test_ipv6_capture(self):
        # IPv6: ip6tables REDIRECT to an IPv6 listener; the original destination comes from
        # IP6T_SO_ORIGINAL_DST and the ORIGINAL_DST cluster connects there.
        app6, svc6 = "fd00:213::1", "fd00:213::2"
        for ns, a in ((self.app, app6), (self.svc, svc6)):
            netns.exec_in(ns, [netns._ip(), "-6", "addr", "add", a + "/64", "dev", "eth0",
                               "nodad"])
        ip6 = netns.iptables_bin().replace("iptables", "ip6tables")
        for rule in (["-A", "OUTPUT", "-p", "tcp", "-m", "owner", "--uid-owner", str(UID),
                      "-j", "RETURN"],
                     ["-A", "OUTPUT", "-p", "tcp", "-d", svc6 + "/128", "-j", "REDIRECT",
                      "--to-ports", str(netns.OUTBOUND_PORT)]):
            netns.exec_in(self.app, [ip6, "-t", "nat"] + rule)
        echo = ("import socket\n"
                "l=socket.socket(socket.AF_INET6); l.setsockopt(socket.SOL_SOCKET,"
                "socket.SO_REUSEADDR,1); l.bind(('%s',9006)); l.listen(8); print('ready',"
                "flush=True)\n"
                "while True:\n"
                "  c,_=l.accept(); d=c.recv(1000); c.sendall(b'v6 echo: '+d); c.close()\n" % svc6)
        peer = self.topo.start(self.svc, ["/usr/bin/python3", "-c", echo])
        self.assertEqual(netns.wait_line(peer), "ready")
        res = sidecar_resources(self.logs, "v6")
        outbound = res["listeners"][0]
        outbound["address"] = {"socket_address": {"address": "::",
                                                  "port_value": netns.OUTBOUND_PORT}}
        outbound["use_original_dst"] = False
        boot = {"node": {"id": "sidecar-v6", "cluster": "app"},
                "admin": {"address": {"socket_address": {"address": "127.0.0.1",
                                                         "port_value": netns.ADMIN_PORT}}},
                "static_resources": {"listeners": [outbound],
                                     "clusters": [c for c in res["clusters"]
                                                  if c["name"] in ("PassthroughCluster",
                                                                   "svc_tls")]}}
        self.start_rpx_in_app(boot, uid=UID)
        script = ("import socket\n"
                  "s=socket.create_connection(('%s',9006),timeout=10)\n"
                  "s.sendall(b'hello'); print(s.recv(100).decode())\n" % svc6)
        r = netns.exec_in(self.app, ["/usr/bin/python3", "-c", script])
        self.assertEqual(r.stdout.strip(), "v6 echo: hello")
        s = self.stats()
        self.assertEqual(s["tcp.PassthroughCluster.downstream_cx_total"], 1)
        path = os.path.join(self.logs, "tcp.log")
        wait_until(lambda: os.path.exists(path) and open(path).read(), timeout=10,
                   what="the tcp log line")
        self.assertTrue(open(path).read().startswith(
            "PassthroughCluster [%s]:9006 [%s]:9006 5 " % (svc6, svc6)), open(path).read())

    def test_outbound_inbound_and_passthrough(self):
        self.start_with_control_plane()
        # HTTP to the service's real address: captured, handed to the service's virtual listener,
        # routed by the pushed route, forwarded with rpx's headers.
        body = json.loads(self.curl(self.app, "http://%s:8080/hello" % SVC_IP))
        self.assertEqual(body["server"], "svc-http")
        self.assertEqual(body["headers"].get("x-sidecar-route"), "v1")
        self.assertIn("x-request-id", body["headers"])
        self.assertEqual(body["headers"].get("x-forwarded-proto"), "http")

        # The control plane changes the route: the next request takes it, rpx never restarts.
        pid = self.proxy.pid
        mark = self.xds.write_resources("sidecar.yaml", **sidecar_resources(self.logs, "v2"))
        self.xds.wait_ack("RDS", mark)
        body = json.loads(self.curl(self.app, "http://%s:8080/again" % SVC_IP))
        self.assertEqual(body["headers"].get("x-sidecar-route"), "v2")
        self.assertIsNone(self.proxy.poll())
        self.assertEqual(self.proxy.pid, pid)

        # Raw TCP to a port no listener knows: the passthrough chain carries it byte for byte.
        script = ("import os,socket,hashlib\n"
                  "d=os.urandom(1<<20)\n"
                  "s=socket.create_connection(('%s',9000),timeout=10)\n"
                  "s.sendall(d); s.shutdown(socket.SHUT_WR)\n"
                  "b=b''\n"
                  "while True:\n"
                  "  c=s.recv(65536)\n"
                  "  if not c: break\n"
                  "  b+=c\n"
                  "print('same' if b==d else 'differs %%d' %% len(b))\n" % SVC_IP)
        r = netns.exec_in(self.app, ["/usr/bin/python3", "-c", script])
        self.assertEqual(r.stdout.strip(), "same")

        # TLS passed through by SNI: the backend's own certificate, verified by curl end to end.
        out = self.curl(self.app, "--cacert", self.pki.ca, "--resolve",
                        "secure.svc.example:8443:%s" % SVC_IP, "https://secure.svc.example:8443/tls")
        self.assertEqual(json.loads(out)["server"], "svc-tls")

        # Inbound: a connection from the service to the app is captured and reaches the app
        # through the inbound passthrough, from 127.0.0.6.
        body = json.loads(self.curl(self.svc, "http://%s:9080/inbound" % APP_IP))
        self.assertEqual(body["server"], "app")
        self.assertTrue(body["peer"].startswith("127.0.0.6:"), body["peer"])

        def settled():
            s = self.stats()
            return (s.get("tcp.inbound.downstream_cx_total") == 1 and
                    s.get("cluster.PassthroughCluster.upstream_cx_active") == 0)
        wait_until(settled, timeout=10, what="sessions ended")
        s = self.stats()
        self.assertEqual(s["http.outbound_svc_8080.downstream_rq_total"], 2)
        self.assertEqual(s["tcp.PassthroughCluster.downstream_cx_total"], 1)
        self.assertEqual(s["tcp.PassthroughCluster.downstream_cx_rx_bytes_total"], 1 << 20)
        self.assertEqual(s["tcp.svc_tls.downstream_cx_total"], 1)
        # Loop safety: the capture listener saw the app's four connections and nothing more
        # (rpx's own upstream connections, as uid 1337, were not captured back into it).
        self.assertEqual(s["listener.virtualOutbound.downstream_cx_total"], 4)
        self.assertEqual(s["listener.virtualInbound.downstream_cx_total"], 1)
        self.assertEqual(s["cluster.PassthroughCluster.upstream_cx_total"], 1)

        # The access logs show the original destinations (restored local addresses).
        def lines(name, n):
            path = os.path.join(self.logs, name)
            wait_until(lambda: os.path.exists(path) and len(open(path).read().splitlines()) >= n,
                       timeout=10, what="%d lines in %s" % (n, name))
            return sorted(open(path).read().splitlines())
        self.assertEqual(lines("http.log", 2), ["/again 200 %s:8080 %s:8080" % (SVC_IP, SVC_IP),
                                                "/hello 200 %s:8080 %s:8080" % (SVC_IP, SVC_IP)])
        tcp = lines("tcp.log", 3)
        self.assertTrue(tcp[0].startswith("InboundPassthroughCluster %s:9080 %s:9080 " %
                                          (APP_IP, APP_IP)), tcp[0])
        self.assertEqual(tcp[1], "PassthroughCluster %s:9000 %s:9000 1048576 1048576" %
                         (SVC_IP, SVC_IP))
        self.assertTrue(tcp[2].startswith("svc_tls %s:8443 %s:8443 " % (SVC_IP, SVC_IP)), tcp[2])

if __name__ == "__main__":
    unittest.main()
