"""The sidecar deployment examples in deploy/ (issue 34) are well-formed and agree with each other:
every YAML parses (PyYAML, Debian's python3-yaml); the Kubernetes objects have the fields
Kubernetes requires and the ones the sidecar pattern needs (init container with NET_ADMIN,
readiness on /ready, preStop drain); the ConfigMaps hold deploy/sidecar-bootstrap.yaml and
deploy/vm/rpx-redirect.sh verbatim; kubectl's client-side dry run accepts every file (against a
stand-in API server that only answers discovery, since there is no cluster here); the redirect
script passes `bash -n`, says the same rules as test/integration/netns.py, and, in a network
namespace of its own, installs them, captures traffic with them and removes them again.
rpx itself is not started here.

Parts that need something this host may lack skip with the reason: PyYAML, kubectl,
systemd-analyze, and (for the namespace tests) root and a kernel that allows network
namespaces."""

import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import unittest

import netns
from harness import repo_file, run_rpx

try:
    import yaml
except ImportError:  # Debian: apt-get install python3-yaml
    yaml = None

NO_YAML = "PyYAML is not installed (Debian: apt-get install python3-yaml)"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
POD_KINDS = ("Pod",)
TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")


def deploy_dir():
    """deploy/ in the source tree (by hand) or in the runfiles (under Bazel, which needs the
    files in the test's data)."""
    try:
        return os.path.dirname(repo_file("deploy/sidecar-bootstrap.yaml"))
    except RuntimeError as e:
        raise AssertionError("%s: under Bazel, deploy/ must be in the data of "
                             "//test/integration:deploy_test" % e)


def deploy_files(ext):
    out = []
    for root, _, files in os.walk(deploy_dir()):
        out += [os.path.join(root, f) for f in files if f.endswith(ext)]
    return sorted(out)


def kube_files():
    return [f for f in deploy_files(".yaml") if os.sep + "kubernetes" + os.sep in f]


def read(path):
    with open(path) as f:
        return f.read()


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def pod_spec(obj):
    if obj["kind"] in POD_KINDS:
        return obj["spec"]
    if obj["kind"] in TEMPLATE_KINDS:
        return obj["spec"]["template"]["spec"]
    return None


def arg_value(args, name):
    """The value of option `name` in a container's args ("--name=v" or "--name v"), or None."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return str(args[i + 1])
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def redirect_script():
    return os.path.join(deploy_dir(), "vm", "rpx-redirect.sh")


class DeployFilesTest(unittest.TestCase):

    def test_the_expected_files_are_there(self):
        d = deploy_dir()
        for rel in ("README.md", "sidecar-bootstrap.yaml", "kubernetes/sidecar-pod.yaml",
                    "vm/rpx-sidecar.service", "vm/rpx-redirect.sh"):
            self.assertTrue(os.path.isfile(os.path.join(d, rel)), rel)

    @unittest.skipIf(yaml is None, NO_YAML)
    def test_every_yaml_parses(self):
        files = deploy_files(".yaml") + deploy_files(".yml")
        self.assertGreaterEqual(len(files), 2, files)
        for path in files:
            with self.subTest(path=path):
                docs = load_all(path)
                self.assertTrue(docs, "%s holds no document" % path)
                for d in docs:
                    self.assertIsInstance(d, dict, path)

    @unittest.skipIf(yaml is None, NO_YAML)
    def test_kubernetes_objects_have_the_required_fields(self):
        files = kube_files()
        self.assertTrue(files)
        for path in files:
            docs = load_all(path)
            configmaps = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ConfigMap"}
            for obj in docs:
                where = "%s: %s/%s" % (os.path.basename(path), obj.get("kind"),
                                       (obj.get("metadata") or {}).get("name"))
                with self.subTest(obj=where):
                    self.assertIsInstance(obj.get("apiVersion"), str, where)
                    self.assertIsInstance(obj.get("kind"), str, where)
                    name = (obj.get("metadata") or {}).get("name")
                    self.assertIsInstance(name, str, where + ": metadata.name")
                    self.assertRegex(name, DNS1123_SUBDOMAIN, where)
                    self.assertLessEqual(len(name), 253, where)
                    if obj["kind"] == "ConfigMap":
                        for k, v in obj.get("data", {}).items():
                            self.assertRegex(k, r"^[-._a-zA-Z0-9]+$", where)
                            self.assertIsInstance(v, str, where + ": data." + k)
                    spec = pod_spec(obj)
                    if spec is not None:
                        self.check_pod_spec(where, spec, configmaps)

    def check_pod_spec(self, where, spec, configmaps):
        containers = spec.get("containers")
        self.assertIsInstance(containers, list, where + ": spec.containers")
        self.assertTrue(containers, where + ": spec.containers is empty")
        inits = spec.get("initContainers") or []
        names = []
        for c in inits + containers:
            self.assertIsInstance(c.get("name"), str, where + ": a container without name")
            self.assertRegex(c["name"], DNS1123_LABEL, where)
            self.assertIsInstance(c.get("image"), str, where + ": %s has no image" % c["name"])
            self.assertTrue(c["image"], where)
            names.append(c["name"])
            for p in c.get("ports") or []:
                self.assertIsInstance(p["containerPort"], int, where)
            for r in ("requests", "limits"):
                for k in (c.get("resources") or {}).get(r) or {}:
                    self.assertIn(k, ("cpu", "memory", "ephemeral-storage"), where)
        self.assertEqual(len(names), len(set(names)), where + ": container names repeat")

        # Volumes: every mount names a volume, every ConfigMap volume one in this file.
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for c in inits + containers:
            for m in c.get("volumeMounts") or []:
                self.assertIn(m["name"], volumes, where + ": " + c["name"])
                self.assertTrue(m["mountPath"].startswith("/"), where)
        for v in volumes.values():
            if "configMap" in v:
                self.assertIn(v["configMap"]["name"], configmaps, where)

        # The sidecar pattern.
        init = [c for c in inits if c["name"] == "rpx-init"]
        self.assertEqual(len(init), 1, where + ": no init container rpx-init")
        init = init[0]
        caps = init["securityContext"]["capabilities"]["add"]
        self.assertIn("NET_ADMIN", caps, where)
        self.assertIn("NET_RAW", caps, where)
        rpx = [c for c in containers if c["name"] == "rpx"]
        self.assertEqual(len(rpx), 1, where + ": no container rpx")
        rpx = rpx[0]
        probe = rpx["readinessProbe"]["httpGet"]
        self.assertEqual(probe["path"], "/ready", where)
        self.assertEqual(probe["port"], 15000, where)
        uid = rpx["securityContext"]["runAsUser"]
        self.assertEqual(uid, 1337, where)
        init_args = [str(a) for a in (init.get("command") or []) + (init.get("args") or [])]
        self.assertEqual(arg_value(init_args, "--proxy-uid"), str(uid),
                         where + ": the init container must exempt rpx's runAsUser")
        self.assertIn(str(probe["port"]),
                      arg_value(init_args, "--exclude-inbound-ports").split(","),
                      where + ": the readiness probe's port must not be captured")
        self.assertIn("rpx-redirect.sh", " ".join(init_args), where)
        # Identity from the downward API, passed on the command line.
        env = {e["name"]: e for e in rpx.get("env") or []}
        for var, field in (("POD_NAME", "metadata.name"),
                           ("POD_NAMESPACE", "metadata.namespace"),
                           ("INSTANCE_IP", "status.podIP")):
            self.assertEqual(env[var]["valueFrom"]["fieldRef"]["fieldPath"], field, where)
        args = [str(a) for a in rpx.get("args") or []]
        self.assertEqual(arg_value(args, "-c"), "/etc/rpx/bootstrap.yaml", where)
        self.assertIn("$(POD_NAME)", arg_value(args, "--service-node"), where)
        self.assertTrue(arg_value(args, "--service-cluster"), where)
        mounts = {m["mountPath"]: m["name"] for m in rpx.get("volumeMounts") or []}
        cm = configmaps[volumes[mounts["/etc/rpx"]]["configMap"]["name"]]
        self.assertIn("bootstrap.yaml", cm["data"], where)
        # Graceful stop: a preStop drain, and time for it plus rpx's drain on SIGTERM.
        pre_stop = " ".join(rpx["lifecycle"]["preStop"]["exec"]["command"])
        self.assertIn("/drain_listeners", pre_stop, where)
        sleep = re.search(r"sleep (\d+)", pre_stop)
        drain = int(arg_value(args, "--drain-time-s") or 5)
        self.assertGreater(spec["terminationGracePeriodSeconds"],
                           (int(sleep.group(1)) if sleep else 0) + drain, where)
        for r in ("requests", "limits"):
            self.assertIn("cpu" if r == "requests" else "memory", rpx["resources"][r], where)

    @unittest.skipIf(yaml is None, NO_YAML)
    def test_configmaps_hold_the_bootstrap_and_the_script_verbatim(self):
        bootstrap = read(os.path.join(deploy_dir(), "sidecar-bootstrap.yaml"))
        script = read(redirect_script())
        seen = set()
        for path in kube_files():
            for obj in load_all(path):
                if obj.get("kind") != "ConfigMap":
                    continue
                data = obj.get("data") or {}
                if "bootstrap.yaml" in data:
                    self.assertEqual(data["bootstrap.yaml"], bootstrap,
                                     "%s: %s differs from deploy/sidecar-bootstrap.yaml" %
                                     (path, obj["metadata"]["name"]))
                    seen.add("bootstrap")
                if "rpx-redirect.sh" in data:
                    self.assertEqual(data["rpx-redirect.sh"], script,
                                     "%s: %s differs from deploy/vm/rpx-redirect.sh" %
                                     (path, obj["metadata"]["name"]))
                    seen.add("script")
        self.assertEqual(seen, {"bootstrap", "script"})

    @unittest.skipIf(yaml is None, NO_YAML)
    def test_rpx_accepts_the_bootstrap(self):
        # rpx's own check of every field (--mode validate): the example is runnable as written.
        path = os.path.join(deploy_dir(), "sidecar-bootstrap.yaml")
        r = run_rpx(["--mode", "validate", "-c", path, "--service-node", "app-0.default",
                     "--service-cluster", "app"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_bootstrap_has_the_sidecar_listeners_and_clusters(self):
        b = load_all(os.path.join(deploy_dir(), "sidecar-bootstrap.yaml"))[0]
        self.assertNotIn("id", b.get("node") or {}, "node.id comes from --service-node")
        self.assertEqual(b["admin"]["address"]["socket_address"],
                         {"address": "0.0.0.0", "port_value": 15000})
        ads = b["dynamic_resources"]["ads_config"]
        self.assertEqual((ads["api_type"], ads["transport_api_version"]), ("GRPC", "V3"))
        self.assertEqual(ads["grpc_services"], [{"envoy_grpc": {"cluster_name": "xds_cluster"}}])
        for t in ("lds_config", "cds_config"):
            self.assertEqual(b["dynamic_resources"][t], {"ads": {}, "resource_api_version": "V3"})

        listeners = {l["name"]: l for l in b["static_resources"]["listeners"]}
        clusters = {c["name"]: c for c in b["static_resources"]["clusters"]}
        od = "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst"
        hi = ("type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3."
              "HttpInspector")
        tcp = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
        for name, port, direction, filters, cluster in (
                ("virtualOutbound", 15001, "OUTBOUND", [od, hi], "PassthroughCluster"),
                ("virtualInbound", 15006, "INBOUND", [od], "InboundPassthroughCluster")):
            l = listeners[name]
            self.assertEqual(l["address"]["socket_address"],
                             {"address": "0.0.0.0", "port_value": port})
            self.assertEqual(l["traffic_direction"], direction)
            self.assertEqual([f["typed_config"]["@type"] for f in l["listener_filters"]], filters)
            self.assertEqual([f["name"] for f in l["listener_filters"]],
                             ["envoy.filters.listener." + t.rsplit(".", 3)[1]
                              for t in filters])
            (f,) = l["default_filter_chain"]["filters"]
            self.assertEqual(f["name"], "envoy.filters.network.tcp_proxy")
            self.assertEqual(f["typed_config"]["@type"], tcp)
            self.assertEqual(f["typed_config"]["cluster"], cluster)
            self.assertIn(cluster, clusters)
        self.assertIs(listeners["virtualOutbound"]["use_original_dst"], True)

        for name in ("PassthroughCluster", "InboundPassthroughCluster"):
            c = clusters[name]
            self.assertEqual((c["type"], c["lb_policy"]), ("ORIGINAL_DST", "CLUSTER_PROVIDED"))
            self.assertNotIn("load_assignment", c)
        self.assertEqual(clusters["InboundPassthroughCluster"]["upstream_bind_config"],
                         {"source_address": {"address": "127.0.0.6", "port_value": 0}})
        x = clusters["xds_cluster"]
        self.assertEqual(x["type"], "STRICT_DNS")
        opts = x["typed_extension_protocol_options"][
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        self.assertEqual(opts["@type"], "type.googleapis.com/envoy.extensions.upstreams.http.v3."
                                        "HttpProtocolOptions")
        self.assertEqual(opts["explicit_http_config"], {"http2_protocol_options": {}})
        (ep,) = x["load_assignment"]["endpoints"][0]["lb_endpoints"]
        self.assertEqual(ep["endpoint"]["address"]["socket_address"],
                         {"address": "rpx-control-plane.rpx-system.svc.cluster.local",
                          "port_value": 18000})

    def test_systemd_unit(self):
        unit = read(os.path.join(deploy_dir(), "vm", "rpx-sidecar.service"))
        sections, current = {}, None
        for line in unit.splitlines():
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            m = re.match(r"^\[(\w+)\]$", line)
            if m:
                current = sections.setdefault(m.group(1), {})
                continue
            self.assertIsNotNone(current, "a setting before any section: %r" % line)
            k, _, v = line.partition("=")
            current.setdefault(k, []).append(v)
        self.assertEqual(set(sections), {"Unit", "Service", "Install"})
        s = sections["Service"]
        self.assertEqual(s["User"], ["rpx"])
        self.assertEqual(s["KillSignal"], ["SIGTERM"])
        self.assertIn("TimeoutStopSec", s)
        self.assertRegex(s["ExecStartPre"][0], r"^\+\S*rpx-redirect\.sh install$")
        self.assertRegex(s["ExecStopPost"][0], r"^\+\S*rpx-redirect\.sh remove$")
        self.assertIn("-c /etc/rpx/bootstrap.yaml", s["ExecStart"][0])
        self.assertIn("--service-node", s["ExecStart"][0])
        env = dict(e.partition("=")[::2] for e in s["Environment"])
        self.assertEqual(env["RPX_PROXY_UID"], "rpx")

        analyze = shutil.which("systemd-analyze")
        if not analyze:
            self.skipTest("systemd-analyze is not installed: the unit was only parsed here")
        # verify wants the binaries: point the unit at /bin/true for the check.
        tmp = tempfile.mkdtemp(prefix="rpx-it-unit-")
        try:
            path = os.path.join(tmp, "rpx-sidecar.service")
            with open(path, "w") as f:
                f.write(re.sub(r"/usr/local/s?bin/rpx(-redirect\.sh)?", "/bin/true", unit))
            p = subprocess.run([analyze, "verify", "--man=no", path], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn("rpx-sidecar.service", p.stderr, p.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# kubectl's client-side dry run
# ---------------------------------------------------------------------------------------------

# What kubectl create --dry-run=client asks of the API server: discovery only (the kinds and
# their resources), to map each object's kind. No object is sent.
_CORE = [("pods", "Pod"), ("configmaps", "ConfigMap"), ("services", "Service"),
         ("serviceaccounts", "ServiceAccount"), ("secrets", "Secret"),
         ("namespaces", "Namespace")]
_GROUPS = {"apps/v1": [("deployments", "Deployment"), ("statefulsets", "StatefulSet"),
                       ("daemonsets", "DaemonSet"), ("replicasets", "ReplicaSet")],
           "batch/v1": [("jobs", "Job")],
           "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget")],
           "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy")]}


def _resources(gv, items):
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": [{"name": n, "singularName": k.lower(), "kind": k,
                           "namespaced": k != "Namespace", "verbs": ["create", "get", "list"]}
                          for n, k in items]}


class _DiscoveryHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/api":
            body = {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
        elif path == "/apis":
            body = {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": gv.split("/")[0],
                 "versions": [{"groupVersion": gv, "version": gv.split("/")[1]}],
                 "preferredVersion": {"groupVersion": gv, "version": gv.split("/")[1]}}
                for gv in _GROUPS]}
        elif path == "/api/v1":
            body = _resources("v1", _CORE)
        elif path.startswith("/apis/") and path[len("/apis/"):] in _GROUPS:
            gv = path[len("/apis/"):]
            body = _resources(gv, _GROUPS[gv])
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # a dry run must never send an object
        self.server.posted.append(self.path)
        self.send_error(500)

    def log_message(self, *args):
        pass


@unittest.skipIf(yaml is None, NO_YAML)
class KubectlDryRunTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.kubectl = shutil.which("kubectl")
        if not cls.kubectl:
            raise unittest.SkipTest(
                "kubectl is not installed (Debian: apt-get install kubernetes-client): the "
                "manifests were only checked field by field")
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DiscoveryHandler)
        cls.server.posted = []
        cls.thread = threading.Thread(target=cls.server.serve_forever, daemon=True)
        cls.thread.start()
        cls.tmp = tempfile.mkdtemp(prefix="rpx-it-kubectl-")
        cls.kubeconfig = os.path.join(cls.tmp, "kubeconfig")
        with open(cls.kubeconfig, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config",
                       "clusters": [{"name": "stand-in", "cluster": {
                           "server": "http://127.0.0.1:%d" % cls.server.server_address[1]}}],
                       "users": [{"name": "nobody", "user": {}}],
                       "contexts": [{"name": "stand-in", "context": {
                           "cluster": "stand-in", "user": "nobody", "namespace": "default"}}],
                       "current-context": "stand-in"}, f)

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()
        cls.thread.join(5)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def kubectl_run(self, args, input=None):
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["HOME"] = self.tmp
        return subprocess.run([self.kubectl, "--kubeconfig", self.kubeconfig, "--cache-dir",
                               os.path.join(self.tmp, "cache")] + args, capture_output=True,
                              text=True, timeout=120, env=env, input=input)

    def test_client_dry_run_accepts_every_manifest(self):
        for path in kube_files():
            with self.subTest(path=path):
                p = self.kubectl_run(["create", "--dry-run=client", "-f", path, "-o", "yaml",
                                      "--validate=false"])
                self.assertEqual(p.returncode, 0, p.stderr)
                out = []
                for d in yaml.safe_load_all(p.stdout):
                    if d:
                        out += d["items"] if d.get("kind") == "List" else [d]
                want = [(d["kind"], d["metadata"]["name"]) for d in load_all(path)]
                self.assertEqual([(d["kind"], d["metadata"]["name"]) for d in out], want)
        self.assertEqual(self.server.posted, [])

    def test_pod_specs_decode_into_kubernetes_types(self):
        # --validate=false above reads objects as untyped maps; `set env --local` decodes each
        # pod-bearing object into its Go type, so a wrong type (a port as a string, a list where
        # a map goes) is an error.
        for path in kube_files():
            for obj in load_all(path):
                if pod_spec(obj) is None:
                    continue
                with self.subTest(obj="%s/%s" % (obj["kind"], obj["metadata"]["name"])):
                    p = self.kubectl_run(["set", "env", "--local", "-f", "-", "-o", "json",
                                          "RPX_DEPLOY_TEST=1"], input=json.dumps(obj))
                    self.assertEqual(p.returncode, 0, p.stderr)
                    typed = json.loads(p.stdout)
                    self.assertEqual(
                        [c["name"] for c in pod_spec(typed)["containers"]],
                        [c["name"] for c in pod_spec(obj)["containers"]])

    def test_a_wrong_type_is_caught(self):
        # The check above can fail: a port given as a string does not decode.
        bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"},
               "spec": {"containers": [{"name": "a", "image": "b",
                                        "ports": [{"containerPort": "http"}]}]}}
        p = self.kubectl_run(["set", "env", "--local", "-f", "-", "-o", "json", "X=1"],
                             input=json.dumps(bad))
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn("containerPort", p.stderr)


# ---------------------------------------------------------------------------------------------
# rpx-redirect.sh
# ---------------------------------------------------------------------------------------------

class RedirectScriptTest(unittest.TestCase):

    def script(self, *args, **kwargs):
        return subprocess.run(["bash", redirect_script()] + list(args), capture_output=True,
                              text=True, timeout=60, **kwargs)

    def test_bash_syntax(self):
        p = subprocess.run(["bash", "-n", redirect_script()], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        head = read(redirect_script()).splitlines()[:60]
        self.assertEqual(head[0], "#!/usr/bin/env bash")
        self.assertIn("set -euo pipefail", head)
        self.assertTrue(os.access(redirect_script(), os.X_OK), "rpx-redirect.sh is not executable")
        if shutil.which("shellcheck"):
            p = subprocess.run(["shellcheck", "-S", "warning", redirect_script()],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_dry_run_says_the_same_rules_as_the_test_module(self):
        for opts, kwargs in (
                ([], {}),
                (["--proxy-uid", "", "--mark", "0x539", "--inbound-interface", "eth0"],
                 {"proxy_uid": None, "mark": 0x539, "inbound_interface": "eth0"}),
                (["--proxy-gid=1338", "--exclude-inbound-ports", "15000,15090",
                  "--exclude-outbound-ports=3306", "--exclude-outbound-cidrs",
                  "169.254.169.254/32, 10.0.0.0/8", "--outbound-port", "16001",
                  "--inbound-port", "16006"],
                 {"proxy_gid": 1338, "exclude_inbound_ports": [15000, 15090],
                  "exclude_outbound_ports": [3306],
                  "exclude_outbound_cidrs": ["169.254.169.254/32", "10.0.0.0/8"],
                  "outbound_port": 16001, "inbound_port": 16006}),
                (["--outbound-port", "", "--proxy-uid", ""], {"outbound_port": None,
                                                              "proxy_uid": None})):
            with self.subTest(opts=opts):
                p = self.script("install", "--dry-run", "--iptables", "IPT", *opts,
                                env=dict(os.environ, PATH=os.environ.get("PATH", "")))
                self.assertEqual(p.returncode, 0, p.stderr)
                cmds = [l.split()[4:] for l in p.stdout.splitlines()
                        if l.startswith("IPT -w -t nat ") and l.split()[4] in ("-N", "-A")]
                self.assertEqual(cmds, netns.redirect_rules(**kwargs))

    def test_bad_options_are_refused_with_a_reason(self):
        for args, why in ((["--outbound-port", "70000"], "not a port"),
                          (["--exclude-inbound-ports", "15000,x"], "not a port"),
                          (["--exclude-outbound-cidrs", "10.0.0.0/8,example.com"], "not an IPv4"),
                          (["--mark", "zz"], "not a number"),
                          (["--proxy-uid", "", "--proxy-gid", ""], "no loop-safety rule"),
                          (["--proxy-uid", "no-such-user-rpx"], "no user"),
                          (["--frobnicate", "1"], "unknown option"),
                          (["--inbound-port"], "needs a value")):
            with self.subTest(args=args):
                p = self.script("install", "--dry-run", *args)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                self.assertIn(why, p.stderr)
        p = self.script("uninstall")
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown action", p.stderr)
        self.assertEqual(self.script("--help").returncode, 0)


class RedirectScriptInNamespaceTest(unittest.TestCase):
    """rpx-redirect.sh for real, in network namespaces made for the test (netns.py)."""

    @classmethod
    def setUpClass(cls):
        netns.require()
        cls.iptables = netns.iptables_bin()

    def script_in(self, ns, *args):
        return netns.exec_in(ns, ["env", "IPTABLES=" + self.iptables, "bash", redirect_script()]
                             + list(args))

    def test_install_then_remove(self):
        opts = ["--proxy-uid", "1337", "--exclude-inbound-ports", "15000,15090",
                "--exclude-outbound-cidrs", "169.254.169.254/32"]
        with netns.namespace("deploy") as ns, netns.namespace("deploy") as ref:
            pristine = netns.nat_rules(ns)
            self.assertFalse([l for l in pristine if "RPX_" in l])

            self.script_in(ns, "install", *opts)
            rules = netns.nat_rules(ns)
            for chain in netns.CHAINS:
                self.assertIn("-N " + chain, rules)
            for want in ("-A PREROUTING -p tcp -j RPX_INBOUND",
                         "-A OUTPUT -p tcp -j RPX_OUTPUT",
                         "-A RPX_INBOUND -p tcp -m tcp --dport 15000 -j RETURN",
                         "-A RPX_INBOUND -p tcp -m tcp --dport 15090 -j RETURN",
                         "-A RPX_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006",
                         "-A RPX_OUTPUT -m owner --uid-owner 1337 -j RETURN",
                         "-A RPX_OUTPUT -d 127.0.0.1/32 -j RETURN",
                         "-A RPX_OUTPUT -d 169.254.169.254/32 -j RETURN",
                         "-A RPX_REDIRECT -p tcp -j REDIRECT --to-ports 15001"):
                self.assertIn(want, rules)
            # The same rule set as the test module's, in the same order.
            netns.install_redirect(ref, proxy_uid=1337, exclude_inbound_ports=[15000, 15090],
                                   exclude_outbound_cidrs=["169.254.169.254/32"])
            self.assertEqual(rules, netns.nat_rules(ref))
            shown = self.script_in(ns, "show").stdout.splitlines()
            self.assertEqual(shown, [l for l in rules if "RPX_" in l])

            # Idempotent: installing again (even with other options) replaces, never adds.
            self.script_in(ns, "install", *opts)
            self.assertEqual(netns.nat_rules(ns), rules)
            self.script_in(ns, "install", "--inbound-port", "16006")
            again = netns.nat_rules(ns)
            self.assertIn("-A RPX_IN_REDIRECT -p tcp -j REDIRECT --to-ports 16006", again)
            self.assertEqual(len([l for l in again if l.startswith("-A PREROUTING")]), 1, again)

            self.script_in(ns, "remove")
            self.assertEqual(netns.nat_rules(ns), pristine)
            self.script_in(ns, "remove")  # nothing to remove is fine
            self.assertEqual(netns.nat_rules(ns), pristine)

    def test_installed_rules_capture_traffic(self):
        with netns.topology() as t:
            self.script_in(t.app, "install", "--proxy-uid", "1337")
            t.start_listener(t.app, "outbound", "0.0.0.0", netns.OUTBOUND_PORT)
            t.start_listener(t.app, "inbound", "0.0.0.0", netns.INBOUND_PORT)
            t.start_listener(t.app, "admin", "0.0.0.0", netns.ADMIN_PORT)
            t.start_listener(t.svc, "svc", t.svc_ip, 8080)
            dst = "%s:8080" % t.svc_ip
            self.assertEqual(t.connect(t.app, t.svc_ip, 8080).split()[:2], ["outbound", dst])
            self.assertEqual(t.connect(t.app, t.svc_ip, 8080, uid=1337).split()[0], "svc")
            self.assertEqual(t.connect(t.svc, t.app_ip, 9080).split()[:2],
                             ["inbound", "%s:9080" % t.app_ip])
            self.assertEqual(t.connect(t.svc, t.app_ip, netns.ADMIN_PORT).split()[0], "admin")
            self.script_in(t.app, "remove")
            self.assertEqual(t.connect(t.app, t.svc_ip, 8080).split()[0], "svc")
            self.assertFalse([l for l in netns.nat_rules(t.app) if "RPX_" in l])

    def test_a_failed_install_leaves_nothing(self):
        # A mark wider than 32 bits passes the script's check but not iptables': the install
        # fails midway (after the chains and the inbound rules) and takes back what it did.
        with netns.namespace("deploy") as ns:
            pristine = netns.nat_rules(ns)
            p = netns.exec_in(ns, ["env", "IPTABLES=" + self.iptables, "bash", redirect_script(),
                                   "install", "--mark", "0x1ffffffff"], check=False)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("install failed; removing what was installed", p.stderr)
            self.assertEqual(netns.nat_rules(ns), pristine)


if __name__ == "__main__":
    unittest.main()
