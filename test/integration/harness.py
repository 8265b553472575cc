"""Shared helpers for the rpx integration tests.

Everything here is Python 3 standard library. The tests start the real rpx binary on 127.0.0.1 with
generated Envoy v3 bootstrap files, real upstream servers (threads in this process) and the real
`curl` client.

Where things come from (set by integration_test.sh under Bazel, or by hand):
  RPX_BIN                 the rpx binary (default: <repo>/bazel-bin/source/exe/rpx)
  RPX_QUICKSTART_CONFIG   configs/quickstart.yaml (default: <repo>/configs/quickstart.yaml)
  XDS_SERVER_BIN          the reference control plane tools/xds_server/xds_server
                          (default: <repo>/bazel-bin/tools/xds_server/xds_server)
  RPXCTL_BIN              its command line tools/rpxctl/rpxctl
                          (default: <repo>/bazel-bin/tools/rpxctl/rpxctl)
  RPX_TEST_KEEP_TMP=1     keep the temporary directories (configs, rpx logs) for debugging
"""

import base64
import fcntl
import hashlib
import http.client
import http.server
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

try:  # Debian python3-h2: only the HTTP/2 tests need it (H2Client)
    import h2.config
    import h2.connection
    import h2.errors
    import h2.events
    import h2.exceptions
    import h2.settings
except ImportError:
    h2 = None

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

# Time limits (seconds).
READY_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
CURL_TIMEOUT = 30.0


# ---------------------------------------------------------------------------------------------
# Locations
# ---------------------------------------------------------------------------------------------

def _runfiles_candidates(rel):
    out = []
    for var in ("TEST_SRCDIR", "RUNFILES_DIR"):
        base = os.environ.get(var)
        if base:
            for ws in ("rpx", "_main", "__main__"):
                out.append(os.path.join(base, ws, rel))
    return out


def _find_bin(env_var, rel):
    """`env_var` if set (it must be executable), else the Bazel runfile or bazel-bin/`rel`."""
    env = os.environ.get(env_var)
    if env:
        if not os.access(env, os.X_OK):
            raise RuntimeError("%s=%s is not an executable file" % (env_var, env))
        return env
    for c in _runfiles_candidates(rel) + [os.path.join(REPO_ROOT, "bazel-bin", rel)]:
        if os.access(c, os.X_OK):
            return c
    raise RuntimeError("cannot find %s: set %s" % (rel, env_var))


def rpx_bin():
    """Path of the rpx binary under test."""
    return _find_bin("RPX_BIN", "source/exe/rpx")


def xds_server_bin():
    """Path of the reference control plane (tools/xds_server)."""
    return _find_bin("XDS_SERVER_BIN", "tools/xds_server/xds_server")


def rpxctl_bin():
    """Path of the control API's command line (tools/rpxctl)."""
    return _find_bin("RPXCTL_BIN", "tools/rpxctl/rpxctl")


def tcp_relay_bin():
    """Path of bench/tcp_relay (the benchmark's floor relay)."""
    return _find_bin("TCP_RELAY_BIN", "bench/tcp_relay")


def origin_bin():
    """Path of bench/origin (the benchmark's lean origin)."""
    return _find_bin("ORIGIN_BIN", "bench/origin")


def repo_file(rel, env_var=None):
    """Path of a checked-in file (`rel` from the repository root): `env_var` if set, else the
    Bazel runfile, else the source tree's copy. The target needs the file in its data."""
    env = os.environ.get(env_var) if env_var else None
    if env:
        return env
    for c in _runfiles_candidates(rel) + [os.path.join(REPO_ROOT, rel)]:
        if os.path.isfile(c):
            return c
    raise RuntimeError("cannot find %s%s" % (rel, (": set %s" % env_var) if env_var else ""))


def quickstart_config():
    """Path of configs/quickstart.yaml."""
    return repo_file("configs/quickstart.yaml", "RPX_QUICKSTART_CONFIG")


def make_tmpdir(prefix="rpx-it-"):
    return tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("TEST_TMPDIR") or None)


def remove_tmpdir(path):
    if path and os.environ.get("RPX_TEST_KEEP_TMP") != "1":
        shutil.rmtree(path, ignore_errors=True)


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


# Ports free_port() handed out: a port is given once per process, and, through a byte-range lock
# on one shared file, to one process at a time. Without this, two picks that nobody had bound yet
# (a listener pushed later over xDS and the admin port, or two tests running side by side) could
# get the same port: xds_test once reached rpx's admin listener instead of its own.
_given_ports = set()
_port_lock_fd = None


def _reserve_port(port):
    """True if no other process holding the lock file has this port (and we now hold it)."""
    global _port_lock_fd
    if _port_lock_fd is None:
        try:
            _port_lock_fd = os.open(os.path.join(tempfile.gettempdir(), "rpx-test-ports.lock"),
                                    os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            _port_lock_fd = -1  # no shared temp dir: in-process uniqueness only
    if _port_lock_fd < 0:
        return True
    try:
        # Held until the process exits (fcntl locks go with the process).
        fcntl.lockf(_port_lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
        return True
    except OSError:
        return False


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago, never handed out before (see
    _given_ports), below the ephemeral range: a port from bind(0) is an ephemeral one, which any
    outgoing connection (curl, rpx's upstream connections) may take before rpx binds it
    ("Address already in use")."""
    def bound_port(port):  # the port bind() got, or None if it was taken
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
            return s.getsockname()[1]
        except OSError:
            return None
        finally:
            s.close()

    def take(port):
        if port is None or port in _given_ports or not _reserve_port(port):
            return None
        _given_ports.add(port)
        return port

    lo, _ = _ephemeral_range()
    if lo > 11000:
        rng = random.Random()
        for _ in range(200):
            port = rng.randrange(10000, lo)
            if port not in _given_ports and take(bound_port(port)):
                return port
    for _ in range(20):
        port = take(bound_port(0))
        if port:
            return port
    raise OSError("no free port on 127.0.0.1")


def port_is_listening(port, timeout=0.5):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def refused_by_peer(sock, timeout=10.0):
    """True if the peer closes the connection without answering a request sent on it."""
    sock.settimeout(timeout)
    try:
        sock.sendall(http_request("GET", "/refused"))
        return sock.recv(1024) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def det_bytes(n):
    """n deterministic bytes (what the EchoUpstream's /bytes/N, /chunked/N and /eof/N send)."""
    pattern = bytes((i * 7 + 3) % 251 for i in range(251))
    reps = n // len(pattern) + 1
    return (pattern * reps)[:n]


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def wait_until(predicate, timeout=5.0, interval=0.02, what="condition"):
    """Polls predicate() until it returns a true value; returns that value or raises."""
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------
# Bootstrap YAML
# ---------------------------------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def _yaml_scalar(v):
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid YAML double-quoted scalar
    raise TypeError("cannot render %r as YAML" % (v,))


def _yaml_key(k):
    return k if _PLAIN_KEY.match(k) else json.dumps(k)


def _yaml_lines(obj, indent):
    pad = " " * indent
    lines = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                lines.append("%s%s:" % (pad, _yaml_key(k)))
                lines.extend(_yaml_lines(v, indent + 2))
            elif isinstance(v, dict):
                lines.append("%s%s: {}" % (pad, _yaml_key(k)))
            elif isinstance(v, list):
                lines.append("%s%s: []" % (pad, _yaml_key(k)))
            else:
                lines.append("%s%s: %s" % (pad, _yaml_key(k), _yaml_scalar(v)))
    elif isinstance(obj, list):
        for item in obj:
            if isinstance(item, (dict, list)) and item:
                sub = _yaml_lines(item, indent + 2)
                sub[0] = pad + "- " + sub[0][indent + 2:]
                lines.extend(sub)
            elif isinstance(item, dict):
                lines.append(pad + "- {}")
            elif isinstance(item, list):
                lines.append(pad + "- []")
            else:
                lines.append(pad + "- " + _yaml_scalar(item))
    else:
        lines.append(pad + _yaml_scalar(obj))
    return lines


def to_yaml(obj):
    """Renders dicts/lists/scalars as block-style YAML text."""
    return "\n".join(_yaml_lines(obj, 0)) + "\n"


HCM_TYPE = ("type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
            "HttpConnectionManager")
ROUTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
UPSTREAM_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def socket_address(port, address="127.0.0.1"):
    return {"socket_address": {"address": address, "port_value": port}}


def with_ports(text, ports, what):
    """`text` (a checked-in config) with each `port_value: OLD` replaced by `port_value: NEW`
    (ports: OLD -> NEW); every OLD must occur, so a config that changed shape fails loudly."""
    for old, new in ports.items():
        rx = r"port_value: %d\b" % old
        if not re.search(rx, text):
            raise AssertionError("%s changed shape: no port_value %d" % (what, old))
        text = re.sub(rx, "port_value: %d" % new, text)
    return text


def route(prefix=None, cluster=None, path=None, timeout=None, prefix_rewrite=None,
          host_rewrite_literal=None, direct_response=None, headers=None):
    """One route. Give `cluster` (optionally timeout/rewrites) or `direct_response=(status, body)`."""
    match = {}
    if path is not None:
        match["path"] = path
    else:
        match["prefix"] = "/" if prefix is None else prefix
    if headers:
        match["headers"] = headers
    r = {"match": match}
    if direct_response is not None:
        status, body = direct_response
        r["direct_response"] = {"status": status, "body": {"inline_string": body}}
        return r
    action = {"cluster": cluster}
    if timeout is not None:
        action["timeout"] = timeout
    if prefix_rewrite is not None:
        action["prefix_rewrite"] = prefix_rewrite
    if host_rewrite_literal is not None:
        action["host_rewrite_literal"] = host_rewrite_literal
    r["route"] = action
    return r


def virtual_host(name, domains, routes):
    return {"name": name, "domains": list(domains), "routes": list(routes)}


def http_listener(name, port, virtual_hosts, stat_prefix=None, hcm_extra=None,
                  listener_extra=None):
    hcm = {
        "@type": HCM_TYPE,
        "stat_prefix": stat_prefix or name,
        "route_config": {"name": name + "_routes", "virtual_hosts": list(virtual_hosts)},
        "http_filters": [{"name": "envoy.filters.http.router",
                          "typed_config": {"@type": ROUTER_TYPE}}],
    }
    if hcm_extra:
        hcm.update(hcm_extra)
    listener = {
        "name": name,
        "address": socket_address(port),
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": hcm,
        }]}],
    }
    if listener_extra:
        listener.update(listener_extra)
    return listener


def cluster(name, ports, connect_timeout="1s", max_connections=None, max_pending_requests=None,
            max_requests=None, idle_timeout=None, max_requests_per_connection=None,
            lb_policy=None, extra=None):
    """A STATIC cluster of 127.0.0.1 endpoints (`ports`: an int or a list of ints)."""
    if isinstance(ports, int):
        ports = [ports]
    c = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": connect_timeout,
    }
    if lb_policy:
        c["lb_policy"] = lb_policy
    thresholds = {}
    if max_connections is not None:
        thresholds["max_connections"] = max_connections
    if max_pending_requests is not None:
        thresholds["max_pending_requests"] = max_pending_requests
    if max_requests is not None:
        thresholds["max_requests"] = max_requests
    if thresholds:
        c["circuit_breakers"] = {"thresholds": [thresholds]}
    common = {}
    if idle_timeout is not None:
        common["idle_timeout"] = idle_timeout
    if max_requests_per_connection is not None:
        common["max_requests_per_connection"] = max_requests_per_connection
    opts = {"@type": "type.googleapis.com/" + UPSTREAM_HTTP_OPTIONS,
            "explicit_http_config": {"http_protocol_options": {}}}
    if common:
        opts["common_http_protocol_options"] = common
    c["typed_extension_protocol_options"] = {UPSTREAM_HTTP_OPTIONS: opts}
    c["load_assignment"] = {
        "cluster_name": name,
        "endpoints": [{"lb_endpoints": [{"endpoint": {"address": socket_address(p)}}
                                        for p in ports]}],
    }
    if extra:
        c.update(extra)
    return c


def bootstrap(listeners, clusters, admin_port=None):
    """A bootstrap dict; the admin listener gets `admin_port` (a free port if None)."""
    return {
        "admin": {"address": socket_address(admin_port or free_port())},
        "static_resources": {"listeners": list(listeners), "clusters": list(clusters)},
    }


def listener_yaml(*args, **kwargs):
    return to_yaml(http_listener(*args, **kwargs))


def cluster_yaml(*args, **kwargs):
    return to_yaml(cluster(*args, **kwargs))


# ---------------------------------------------------------------------------------------------
# TLS: a throwaway PKI made with OpenSSL's command line, and TLS contexts in Envoy's shape
# ---------------------------------------------------------------------------------------------

DOWNSTREAM_TLS_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
UPSTREAM_TLS_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
TLS_INSPECTOR = {"name": "envoy.filters.listener.tls_inspector", "typed_config": {
    "@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"}}


class TestPki(object):
    """A CA in a temporary directory and the certificates a test asks it for, all made by the
    openssl command. pki.cert("a", ["DNS:a.example.com"]) returns (cert_path, key_path)."""

    _CA_CNF = """[ca]
default_ca = d
[d]
database = {dir}/db/index.txt
serial = {dir}/db/serial
new_certs_dir = {dir}/db
default_md = sha256
policy = p
copy_extensions = copy
unique_subject = no
[p]
commonName = supplied
"""

    def __init__(self, name="rpx test CA", key="ec"):
        self.dir = make_tmpdir("rpx-it-pki-")
        os.mkdir(os.path.join(self.dir, "db"))
        open(os.path.join(self.dir, "db", "index.txt"), "w").close()
        with open(os.path.join(self.dir, "db", "serial"), "w") as f:
            f.write("1000\n")
        with open(os.path.join(self.dir, "ca.cnf"), "w") as f:
            f.write(self._CA_CNF.format(dir=self.dir))
        self.ca = os.path.join(self.dir, "ca.pem")
        self.ca_key = os.path.join(self.dir, "ca.key")
        self._openssl(["req", "-x509"] + self._newkey(key) + [
            "-nodes", "-keyout", self.ca_key, "-out", self.ca, "-days", "30",
            "-subj", "/CN=" + name, "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign"])

    @staticmethod
    def _newkey(key):
        return ["-newkey", "rsa:2048"] if key == "rsa" else [
            "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]

    def _openssl(self, args):
        r = subprocess.run(["openssl"] + args, cwd=self.dir, capture_output=True, timeout=60)
        if r.returncode != 0:
            raise AssertionError("openssl %s failed: %s" % (" ".join(args), r.stderr.decode()))
        return r

    def cert(self, name, sans, key="ec", expired=False):
        """A leaf for subject CN=`name` with subjectAltNames `sans` ("DNS:x", "URI:y"), signed by
        this CA; `expired`: valid only in January 2020. Returns (cert path, key path)."""
        base = os.path.join(self.dir, "%s-%s%s" % (name.replace("*", "star"), key,
                                                 "-expired" if expired else ""))
        ext = base + ".ext"
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n")
            if sans:
                f.write("subjectAltName=%s\n" % ",".join(sans))
        self._openssl(["req"] + self._newkey(key) + ["-nodes", "-keyout", base + ".key",
                                                      "-out", base + ".csr", "-subj", "/CN=" + name])
        if expired:
            self._openssl(["ca", "-batch", "-config", os.path.join(self.dir, "ca.cnf"),
                           "-cert", self.ca, "-keyfile", self.ca_key, "-in", base + ".csr",
                           "-out", base + ".pem", "-startdate", "20200101000000Z",
                           "-enddate", "20200201000000Z", "-extfile", ext])
        else:
            self._openssl(["x509", "-req", "-in", base + ".csr", "-CA", self.ca, "-CAkey",
                           self.ca_key, "-CAcreateserial", "-out", base + ".pem", "-days", "30",
                           "-extfile", ext])
        return base + ".pem", base + ".key"

    def cleanup(self):
        remove_tmpdir(self.dir)


def tls_certificate(cert_key):
    cert, key = cert_key
    return {"certificate_chain": {"filename": cert}, "private_key": {"filename": key}}


def downstream_tls(certs, alpn=None, extra=None, common_extra=None):
    """A transport_socket for a filter chain: envoy.transport_sockets.tls with a
    DownstreamTlsContext serving `certs` ((cert, key) pairs)."""
    common = {"tls_certificates": [tls_certificate(c) for c in certs]}
    if alpn:
        common["alpn_protocols"] = list(alpn)
    if common_extra:
        common.update(common_extra)
    ctx = {"@type": DOWNSTREAM_TLS_TYPE, "common_tls_context": common}
    if extra:
        ctx.update(extra)
    return {"name": "envoy.transport_sockets.tls", "typed_config": ctx}


def tls_chain(base_listener_chain, transport_socket=None, match=None, name=None):
    """A copy of a filter chain (from http_listener) with a transport socket and a match."""
    chain = json.loads(json.dumps(base_listener_chain))
    if transport_socket:
        chain["transport_socket"] = transport_socket
    if match:
        chain["filter_chain_match"] = match
    if name:
        chain["name"] = name
    return chain


# ---------------------------------------------------------------------------------------------
# rpx process
# ---------------------------------------------------------------------------------------------

def _pdeathsig_prefix():
    # rpx dies with this process even if the test runner is killed (setpriv is util-linux).
    setpriv = shutil.which("setpriv")
    if setpriv:
        try:
            r = subprocess.run([setpriv, "--pdeathsig", "KILL", "true"], capture_output=True,
                               timeout=5)
            if r.returncode == 0:
                return [setpriv, "--pdeathsig", "KILL"]
        except (OSError, subprocess.SubprocessError):
            pass
    return []


_PREFIX = None


def run_rpx(args, timeout=15.0):
    """Runs rpx to completion (e.g. --mode validate). Returns CompletedProcess (text)."""
    return subprocess.run([rpx_bin()] + list(args), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


class RpxError(Exception):
    pass


class Rpx(object):
    """Runs the real rpx binary on a bootstrap (a dict from bootstrap() or YAML text).

        with Rpx(bootstrap(...)) as proxy:
            proxy.stats()["cluster.x.upstream_cx_total"]
    """

    def __init__(self, config, admin_port=None, concurrency=2, log_level="warn", extra_args=(),
                 wait_ready=True):
        if isinstance(config, dict):
            self.yaml = to_yaml(config)
            if admin_port is None:
                admin_port = config["admin"]["address"]["socket_address"]["port_value"]
        else:
            self.yaml = config
        if admin_port is None:
            raise ValueError("admin_port is required with a YAML text config")
        self.admin_port = admin_port
        self.concurrency = concurrency
        self.log_level = log_level
        self.extra_args = list(extra_args)
        # False: start() returns once the process runs (a hot-restart successor shares the admin
        # port with its parent, so /ready cannot tell which one answered).
        self.wait_ready = wait_ready
        self.dir = None
        self.proc = None
        self.returncode = None
        self.exited_early = False  # rpx exited on its own before stop()
        self.stop_method = None

    # -- lifecycle
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False

    def start(self):
        global _PREFIX
        if _PREFIX is None:
            _PREFIX = _pdeathsig_prefix()
        self.dir = make_tmpdir("rpx-it-proxy-")
        self.config_path = os.path.join(self.dir, "bootstrap.yaml")
        with open(self.config_path, "w") as f:
            f.write(self.yaml)
        self._stdout = open(os.path.join(self.dir, "stdout.log"), "wb")
        self._stderr = open(os.path.join(self.dir, "stderr.log"), "wb")
        cmd = _PREFIX + [rpx_bin(), "-c", self.config_path, "--concurrency",
                         str(self.concurrency), "-l", self.log_level] + self.extra_args
        self.proc = subprocess.Popen(cmd, stdout=self._stdout, stderr=self._stderr,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_TIMEOUT
        while self.wait_ready:
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                self._close_logs()
                raise RpxError("rpx exited with %s during startup; stderr:\n%s" %
                               (rc, self.stderr_text()))
            try:
                status, body = self.admin("GET", "/ready", timeout=0.5)
                if status == 200 and body.strip() == b"LIVE":
                    return self
            except OSError:
                pass
            if time.monotonic() >= deadline:
                self._kill()
                raise RpxError("rpx was not ready within %.0fs; stderr:\n%s" %
                               (READY_TIMEOUT, self.stderr_text()))
            time.sleep(0.02)
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """Stops rpx (POST /quitquitquit, then SIGTERM, then SIGKILL, all by PID)."""
        if self.proc is None:
            return self.returncode
        if self.returncode is not None:
            return self.returncode
        if self.proc.poll() is not None:
            self.exited_early = True
            self.stop_method = "exited on its own"
        else:
            self.stop_method = "quitquitquit"
            try:
                self.admin("POST", "/quitquitquit", timeout=2.0)
            except OSError:
                pass  # rpx may close before answering; the wait below decides
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.stop_method = "SIGTERM"
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self._kill()
                    self.stop_method = "SIGKILL"
        self.returncode = self.proc.returncode
        self._close_logs()
        return self.returncode

    def wait_exit(self, timeout):
        """Waits for rpx to exit after a test signalled it (by PID) itself; returns its status.
        The exit counts as a clean stop when the status is 0."""
        rc = self.proc.wait(timeout)
        self.stop_method = "SIGTERM"
        self.returncode = rc
        self._close_logs()
        return rc

    def check_clean_exit(self):
        """Raises if rpx crashed during the test or did not stop cleanly."""
        rc = self.stop()
        if self.exited_early:
            raise AssertionError("rpx (pid %d) exited by itself during the test with status %s; "
                                 "stderr:\n%s" % (self.proc.pid, rc, self.stderr_text()))
        if rc != 0 or self.stop_method not in ("quitquitquit", "SIGTERM"):
            raise AssertionError("rpx (pid %d) did not stop cleanly: status %s after %s; "
                                 "stderr:\n%s" % (self.proc.pid, rc, self.stop_method,
                                                  self.stderr_text()))

    def cleanup(self):
        try:
            self.stop()
        finally:
            remove_tmpdir(self.dir)

    def _kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # by PID
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass

    def _close_logs(self):
        for f in (getattr(self, "_stdout", None), getattr(self, "_stderr", None)):
            if f and not f.closed:
                f.close()

    def stderr_text(self):
        try:
            with open(os.path.join(self.dir, "stderr.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")[-8000:]
        except OSError:
            return ""

    # -- admin
    def admin(self, method, path, timeout=5.0):
        conn = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=timeout)
        try:
            conn.request(method, path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def stats(self):
        status, body = self.admin("GET", "/stats")
        if status != 200:
            raise RpxError("GET /stats returned %d" % status)
        out = {}
        for line in body.decode().splitlines():
            if ": " not in line:
                continue
            k, v = line.rsplit(": ", 1)
            try:
                out[k] = int(v)
            except ValueError:
                pass
        return out

    def stat(self, name):
        s = self.stats()
        if name not in s:
            raise KeyError("no stat %r (have: %s)" % (name, ", ".join(sorted(s))))
        return s[name]

    def wait_stat(self, name, predicate, timeout=5.0):
        """Waits until predicate(value of stat `name`) holds; returns the value."""
        box = {}

        def check():
            box["v"] = self.stat(name)
            return predicate(box["v"])
        try:
            wait_until(check, timeout=timeout, what="stat %s" % name)
        except AssertionError:
            raise AssertionError("stat %s is %s after %.1fs" % (name, box.get("v"), timeout))
        return box["v"]

    def config_summary(self):
        """GET /config_summary (rpx's compact view: resources with name, version and state, and
        the xDS stream's state per type), parsed."""
        status, body = self.admin("GET", "/config_summary")
        if status != 200:
            raise RpxError("GET /config_summary returned %d" % status)
        return json.loads(body)

    def config_dump(self, query=""):
        """GET /config_dump (Envoy's ConfigDump JSON), parsed."""
        status, body = self.admin("GET", "/config_dump" + query)
        if status != 200:
            raise RpxError("GET /config_dump%s returned %d: %s" % (query, status, body))
        return json.loads(body)


# ---------------------------------------------------------------------------------------------
# xDS: resources, bootstrap and the reference control plane (tools/xds_server)
# ---------------------------------------------------------------------------------------------

ADS_SOURCE = {"ads": {}, "resource_api_version": "V3"}
XDS_TYPE_URLS = {
    "SDS": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
    "LDS": "type.googleapis.com/envoy.config.listener.v3.Listener",
    "RDS": "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
    "CDS": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
    "EDS": "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
}


def xds_bootstrap(xds_port, admin_port=None, node_id="test-node", delta=False,
                  initial_fetch_timeout="2s", lds=True, cds=True, listeners=(), clusters=()):
    """A bootstrap with one ADS stream to 127.0.0.1:xds_port (api_type GRPC, or DELTA_GRPC with
    delta=True), taking listeners (`lds`) and clusters (`cds`) from it, and through them routes
    and endpoints; `listeners` and `clusters` are added to static_resources (which may take their
    own routes and endpoints over the same stream)."""
    xds_cluster = {
        "name": "xds",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {UPSTREAM_HTTP_OPTIONS: {
            "@type": "type.googleapis.com/" + UPSTREAM_HTTP_OPTIONS,
            "explicit_http_config": {"http2_protocol_options": {}},
        }},
        "load_assignment": {
            "cluster_name": "xds",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": socket_address(xds_port)}}]}],
        },
    }
    dynamic = {
        "ads_config": {
            "api_type": "DELTA_GRPC" if delta else "GRPC",
            "transport_api_version": "V3",
            "grpc_services": [{"envoy_grpc": {"cluster_name": "xds"}}],
        },
    }
    if lds:
        dynamic["lds_config"] = dict(ADS_SOURCE)
        if initial_fetch_timeout:
            dynamic["lds_config"]["initial_fetch_timeout"] = initial_fetch_timeout
    if cds:
        dynamic["cds_config"] = dict(ADS_SOURCE)
    static = {"clusters": [xds_cluster] + list(clusters)}
    if listeners:
        static["listeners"] = list(listeners)
    return {
        "node": {"id": node_id, "cluster": "test"},
        "admin": {"address": socket_address(admin_port or free_port())},
        "dynamic_resources": dynamic,
        "static_resources": static,
    }


def rds_listener(name, port, route_config_name, initial_fetch_timeout=None, stat_prefix=None):
    """An HTTP listener whose RouteConfiguration `route_config_name` comes over ADS."""
    source = dict(ADS_SOURCE)
    if initial_fetch_timeout:
        source["initial_fetch_timeout"] = initial_fetch_timeout
    return {
        "name": name,
        "address": socket_address(port),
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": HCM_TYPE,
                "stat_prefix": stat_prefix or name,
                "rds": {"config_source": source, "route_config_name": route_config_name},
                "http_filters": [{"name": "envoy.filters.http.router",
                                  "typed_config": {"@type": ROUTER_TYPE}}],
            },
        }]}],
    }


def route_configuration(name, virtual_hosts, extra=None):
    rc = {"name": name, "virtual_hosts": list(virtual_hosts)}
    if extra:
        rc.update(extra)
    return rc


def eds_cluster(name, connect_timeout="1s", extra=None):
    """A cluster whose endpoints come over ADS (a ClusterLoadAssignment named `name`)."""
    c = {
        "name": name,
        "type": "EDS",
        "connect_timeout": connect_timeout,
        "eds_cluster_config": {"eds_config": dict(ADS_SOURCE)},
    }
    if extra:
        c.update(extra)
    return c


def load_assignment(cluster_name, ports):
    """A ClusterLoadAssignment of 127.0.0.1 endpoints."""
    return {
        "cluster_name": cluster_name,
        "endpoints": [{"lb_endpoints": [{"endpoint": {"address": socket_address(p)}}
                                        for p in ports]}],
    }


class Etcd(object):
    """A real etcd (Debian's etcd-server) on two free loopback ports, with its data in a temporary
    directory; started and stopped by PID. Requests may be up to 32 MiB (a control-plane version
    holds a whole snapshot)."""

    def __init__(self):
        self.dir = make_tmpdir("rpx-it-etcd-")
        self.port = free_port()
        self.peer_port = free_port()
        self.proc = None
        self.log_path = os.path.join(self.dir, "etcd.log")

    def start(self, timeout=READY_TIMEOUT):
        global _PREFIX
        if _PREFIX is None:
            _PREFIX = _pdeathsig_prefix()
        client = "http://127.0.0.1:%d" % self.port
        peer = "http://127.0.0.1:%d" % self.peer_port
        cmd = _PREFIX + ["etcd", "--name", "it", "--data-dir", os.path.join(self.dir, "data"),
                         "--listen-client-urls", client, "--advertise-client-urls", client,
                         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                         "--initial-cluster", "it=" + peer, "--max-request-bytes", "33554432"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while b"ready to serve client requests" not in self._log():
            if self.proc.poll() is not None or time.monotonic() >= deadline:
                self.stop()
                raise AssertionError("etcd did not start; log:\n%s" %
                                     self._log()[-3000:].decode("utf-8", "replace"))
            time.sleep(0.05)
        return self

    def _log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def url(self):
        return "etcd://127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)

    def cleanup(self):
        try:
            self.stop()
        finally:
            remove_tmpdir(self.dir)


class XdsServerError(Exception):
    pass


class XdsServer(object):
    """Runs tools/xds_server (by PID) on a temporary resource directory.

        with XdsServer() as xds:
            mark = xds.write_resources("config.yaml", routes=[...])
            version = xds.wait_ack("RDS", mark)

    Every start appends to one log (stdout of each run, after a "=== harness: start #N ===" line),
    so a mark (a line count) stays valid across restart(). After the first start the port is
    fixed: a restart listens on the same one.

    By default it serves what the files say without checking it (`--unchecked`), so tests can
    see how rpx handles bad resources; `checked=True` runs it as users do. `control=True` serves
    the control API too (see rpxctl()).
    """

    _LISTENING = re.compile(r"^xds_server listening on .*:(\d+) dir=")
    _CONTROL = re.compile(r"^control API listening on .*:(\d+)$")

    def __init__(self, port=0, poll_ms=200, checked=False, control=False, extra_args=(),
                 wrap=()):
        self.wrap = list(wrap)  # a command prefix, e.g. ["ip", "netns", "exec", NS] (it must exec)
        self.port = port
        self.poll_ms = poll_ms
        self.checked = checked
        self.control = control
        self.control_port = 0
        self.extra_args = list(extra_args)
        self.dir = make_tmpdir("rpx-it-xds-")
        self.resource_dir = os.path.join(self.dir, "resources")
        os.mkdir(self.resource_dir)
        self.log_path = os.path.join(self.dir, "xds_server.log")
        self.stderr_path = os.path.join(self.dir, "xds_server.stderr")
        self.proc = None
        self.starts = 0
        self.returncodes = []
        self._files = []

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False

    # -- lifecycle
    def start(self, timeout=READY_TIMEOUT):
        global _PREFIX
        if _PREFIX is None:
            _PREFIX = _pdeathsig_prefix()
        if self.alive():
            raise XdsServerError("xds_server already running (pid %d)" % self.proc.pid)
        deadline = time.monotonic() + timeout
        while True:
            self.starts += 1
            with open(self.log_path, "ab") as f:
                f.write(b"=== harness: start #%d ===\n" % self.starts)
            mark = self.mark()
            out = open(self.log_path, "ab")
            err = open(self.stderr_path, "ab")
            self._files = [out, err]
            cmd = _PREFIX + self.wrap + [xds_server_bin(), "--port", str(self.port), "--dir",
                             self.resource_dir, "--poll-ms", str(self.poll_ms)]
            if not self.checked:
                cmd.append("--unchecked")
            if self.control:
                cmd += ["--control-port", str(self.control_port)]
            cmd += self.extra_args
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            while True:
                m = self.find(self._LISTENING, mark)
                c = self.find(self._CONTROL, mark) if self.control else True
                if m and c:
                    self.port = int(m[-1].group(1))
                    if self.control:
                        self.control_port = int(c[-1].group(1))
                    return self
                if self.proc.poll() is not None:
                    break
                if time.monotonic() >= deadline:
                    self.stop()
                    raise XdsServerError("xds_server did not start within %.0fs; log:\n%s" %
                                         (timeout, self.log_tail()))
                time.sleep(0.02)
            # Exited during startup. A fixed port may still be held for a moment after a
            # restart: retry until the deadline.
            self._record_exit()
            if self.port == 0 or time.monotonic() >= deadline:
                raise XdsServerError("xds_server exited with %s during startup; stderr:\n%s" %
                                     (self.proc.returncode, self.stderr_text()))
            time.sleep(0.1)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM):
        """Stops this run (signal by PID, then SIGKILL). Returns its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                try:
                    self.proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    pass
        rc = self.proc.returncode
        self._record_exit()
        return rc

    def restart(self, timeout=READY_TIMEOUT):
        self.stop()
        return self.start(timeout)

    def cleanup(self):
        try:
            self.stop()
        finally:
            remove_tmpdir(self.dir)

    def _record_exit(self):
        if self.proc is not None and self.proc.returncode is not None:
            if not self.returncodes or self.returncodes[-1][0] != self.proc.pid:
                self.returncodes.append((self.proc.pid, self.proc.returncode))
        for f in self._files:
            if not f.closed:
                f.close()
        self._files = []

    # -- resource files
    def write_file(self, filename, text):
        """Replaces resources/<filename> atomically (a hidden temp file, then rename). Returns the
        log mark taken before the write (for wait_ack and friends)."""
        mark = self.mark()
        tmp = os.path.join(self.resource_dir, ".%s.tmp" % filename)
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.resource_dir, filename))
        return mark

    def write_resources(self, filename, listeners=None, routes=None, clusters=None,
                        endpoints=None, secrets=None):
        """Writes one resource file with the given lists (None: the key is left out)."""
        doc = {}
        for key, value in (("listeners", listeners), ("routes", routes), ("clusters", clusters),
                           ("endpoints", endpoints), ("secrets", secrets)):
            if value is not None:
                doc[key] = list(value)
        return self.write_file(filename, to_yaml(doc) if doc else "{}\n")

    def rpxctl(self, *args, input_text=None, timeout=60):
        """Runs rpxctl against this server's control API. Returns the CompletedProcess (text)."""
        cmd = [rpxctl_bin(), "--server", "127.0.0.1:%d" % self.control_port] + list(args)
        return subprocess.run(cmd, input=input_text, capture_output=True, text=True,
                              timeout=timeout)

    def remove_file(self, filename):
        mark = self.mark()
        os.remove(os.path.join(self.resource_dir, filename))
        return mark

    # -- log
    def lines(self):
        try:
            with open(self.log_path, "rb") as f:
                data = f.read()
        except OSError:
            return []
        text = data.decode("utf-8", "replace")
        if not text.endswith("\n"):
            text = text[:text.rfind("\n") + 1]  # a line being written is not there yet
        return text.splitlines()

    def mark(self):
        """The number of log lines so far: pass it as `since` to look only at what follows."""
        return len(self.lines())

    def find(self, pattern, since=0):
        """re.Match objects of the log lines after `since` that match `pattern` (re.search)."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        out = []
        for line in self.lines()[since:]:
            m = rx.search(line)
            if m:
                out.append(m)
        return out

    def log_tail(self, n=60):
        return "\n".join(self.lines()[-n:])

    def stderr_text(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def wait_for(self, pattern, since=0, timeout=10.0, count=1, what=None):
        """Waits until `count` log lines after `since` match `pattern`; returns the matches."""
        box = {}

        def check():
            box["m"] = self.find(pattern, since)
            return len(box["m"]) >= count
        try:
            wait_until(check, timeout=timeout, interval=0.02)
        except AssertionError:
            raise AssertionError("timed out after %.1fs waiting for %s in the xds_server log "
                                 "(%d of %d lines); log tail:\n%s" %
                                 (timeout, what or repr(pattern if isinstance(pattern, str)
                                                        else pattern.pattern),
                                  len(box.get("m", [])), count, self.log_tail()))
        return box["m"]

    def latest_snapshot_version(self, since=0):
        m = self.find(r"^snapshot version=(\S+)", since)
        return m[-1].group(1) if m else None

    def wait_ack(self, type_name, since, timeout=10.0, node=None, version=None):
        """After a write (`since` = its mark): waits until the control plane has loaded a new
        snapshot and the client ACKed `type_name` ("LDS", "RDS", "CDS", "EDS") at the newest
        snapshot version (or at `version`, when given). Returns that version."""
        node_rx = re.escape(node) if node else r"\S+"
        box = {}

        def check():
            v = version if version is not None else self.latest_snapshot_version(since)
            box["v"] = v
            if v is None:
                return False
            rx = r"^ACK node=%s type=%s version=%s nonce=" % (node_rx, type_name, re.escape(v))
            return bool(self.find(rx, since))
        try:
            wait_until(check, timeout=timeout, interval=0.02)
        except AssertionError:
            raise AssertionError("timed out after %.1fs waiting for the ACK of %s version %s; "
                                 "xds_server log tail:\n%s" %
                                 (timeout, type_name, box.get("v"), self.log_tail()))
        return box["v"]

    def wait_nack(self, type_name, since, timeout=10.0, node=None):
        """Waits for a NACK of `type_name` after `since`; returns (version, error)."""
        node_rx = re.escape(node) if node else r"\S+"
        m = self.wait_for(r"^NACK node=%s type=%s version=(\S*) nonce=\S+ error=(.*)$" %
                          (node_rx, type_name), since, timeout, what="a NACK of " + type_name)
        return m[0].group(1), m[0].group(2)


# ---------------------------------------------------------------------------------------------
# Upstream servers
# ---------------------------------------------------------------------------------------------

class _ConnTracker(object):
    """Counts accepted connections and the peak number open at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.accepted = 0
        self.open = {}  # socket -> connection id
        self.peak_open = 0

    @staticmethod
    def _peer_closed(sock):
        # poll() for POLLRDHUP: never blocks, never consumes data.
        try:
            fd = sock.fileno()
            if fd < 0:
                return True
            p = select.poll()
            p.register(fd, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
            for _, ev in p.poll(0):
                if ev & (select.POLLRDHUP | select.POLLHUP | select.POLLERR):
                    return True
            return False
        except (OSError, ValueError):
            return True

    def on_accept(self, sock):
        with self.lock:
            # A socket whose peer already closed is gone even if its thread has not noticed yet.
            for s in [s for s in self.open if self._peer_closed(s)]:
                del self.open[s]
            self.accepted += 1
            self.open[sock] = self.accepted
            self.peak_open = max(self.peak_open, len(self.open))
            return self.accepted

    def on_close(self, sock):
        with self.lock:
            self.open.pop(sock, None)

    def conn_id(self, sock):
        with self.lock:
            return self.open.get(sock, 0)

    def open_sockets(self):
        with self.lock:
            return list(self.open)


class _EchoHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, owner, host="127.0.0.1", port=0):
        self.owner = owner
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _EchoHandler)

    def get_request(self):
        sock, addr = super().get_request()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.owner.tracker.on_accept(sock)
        return sock, addr

    def shutdown_request(self, request):
        self.owner.tracker.on_close(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address):
        self.owner.errors += 1  # broken pipes etc. after rpx gave up on a request


class _EchoHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "echo-upstream"
    sys_version = ""

    def setup(self):
        self.timeout = self.server.owner.keepalive_timeout
        super().setup()

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        self._handle()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_GET

    # -- request body
    def _read_body(self):
        h = hashlib.sha256()
        total = 0
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            while True:
                line = self.rfile.readline(1024)
                if not line:
                    raise ConnectionError("eof in chunk size")
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while True:  # trailers
                        t = self.rfile.readline(8192)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    break
                remaining = size
                while remaining:
                    piece = self.rfile.read(min(remaining, 65536))
                    if not piece:
                        raise ConnectionError("eof in chunk")
                    h.update(piece)
                    total += len(piece)
                    remaining -= len(piece)
                self.rfile.readline(16)
        else:
            remaining = int(self.headers.get("Content-Length") or 0)
            while remaining:
                piece = self.rfile.read(min(remaining, 65536))
                if not piece:
                    raise ConnectionError("eof in body")
                h.update(piece)
                total += len(piece)
                remaining -= len(piece)
        return h.hexdigest(), total

    # -- helpers
    def _send(self, status, body, content_type="application/octet-stream", headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self._write(body)

    def _write(self, data):
        view = memoryview(data)
        for i in range(0, len(view), 65536):
            self.wfile.write(view[i:i + 65536])
        self.wfile.flush()

    def _sleep(self, seconds):
        # Interruptible, so that shutting the upstream down does not wait for sleepers.
        return not self.server.owner.stopping.wait(seconds)

    # -- dispatch
    def _handle(self):
        owner = self.server.owner
        conn_id = owner.tracker.conn_id(self.connection)
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        if "slowread" in parts[:-1]:
            # Lets the request body pile up before reading it (flow-control tests).
            self._sleep(float(parts[parts.index("slowread") + 1]))
        body_sha, body_len = self._read_body()
        path = self.path
        bare = path.split("?", 1)[0]
        record = {
            "server": owner.name,
            "method": self.command,
            "path": path,
            "version": self.request_version,
            "headers": [[k.lower(), v] for k, v in self.headers.items()],
            "body_sha256": body_sha,
            "body_length": body_len,
            "conn_id": conn_id,
        }
        with owner.lock:
            owner.requests.append(record)
            record["index"] = len(owner.requests)
            owner.in_flight += 1
            # Failures on cue: the whole upstream (fail), every other request (alternate), or
            # the first N requests of a /flaky/KEY/N/MODE path.
            mode = owner.fail
            if mode is None and owner.alternate and record["index"] % 2 == 1:
                mode = owner.alternate
            if mode is None and len(parts) >= 4 and parts[0] == "flaky":
                seen = owner.flaky.get(parts[1], 0)
                owner.flaky[parts[1]] = seen + 1
                if seen < int(parts[2]):
                    mode = parts[3]
        try:
            if mode is not None:
                self._fail(mode)
            else:
                self._route(bare, record)
        finally:
            with owner.lock:
                owner.in_flight -= 1

    def _fail(self, mode):
        """One failure: a status code ("503"), "reset" (closes without answering), "partial"
        (a head and half the body, then closes), "stall" (answers nothing for 30 s)."""
        if mode == "reset":
            self.close_connection = True
        elif mode == "partial":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self._write(b"x" * 50)
            self.close_connection = True
        elif mode == "stall":
            self._sleep(30)
            self.close_connection = True
        else:
            code = int(mode)
            self._send(code, b"status %d from %s\n" % (code, self.server.owner.name.encode()),
                       "text/plain", [("X-Failed", "1")])

    def _route(self, bare, record):
        parts = bare.strip("/").split("/")
        # Paths may carry a prefix (e.g. /limited/slow/2): act on the last matching keyword.
        kw, arg = None, None
        for i, p in enumerate(parts):
            if p in ("bytes", "chunked", "eof", "slow", "status", "close", "hop", "truncate",
                     "stall") and i + 1 < len(parts):
                kw, arg = p, parts[i + 1]
            elif p in ("close", "hop") and i + 1 == len(parts):
                kw, arg = p, None
        if kw == "bytes":
            self._send(200, det_bytes(int(arg)))
        elif kw == "chunked":
            n = int(arg)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if self.command != "HEAD":
                data = det_bytes(n)
                for i in range(0, n, 65536):
                    piece = data[i:i + 65536]
                    self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        elif kw == "eof":
            # An HTTP/1.1 response without a length: the body ends when we close.
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            if self.command != "HEAD":
                self._write(det_bytes(int(arg)))
        elif kw == "slow":
            if self._sleep(float(arg)):
                self._echo(record)
        elif kw == "status":
            code = int(arg)
            if code in (204, 304):
                self.send_response(code)
                if code == 304:
                    self.send_header("ETag", '"v1"')
                self.end_headers()
            else:
                self._send(code, b"status %d\n" % code, "text/plain")
        elif kw == "close":
            self._echo(record, headers=[("Connection", "close")])
            self.close_connection = True
        elif kw == "hop":
            self._echo(record, headers=[("Connection", "X-Hop-Resp"), ("X-Hop-Resp", "1"),
                                        ("Keep-Alive", "timeout=5"),
                                        ("Proxy-Connection", "keep-alive"),
                                        ("X-End-To-End", "kept")])
        elif kw == "truncate":
            # Promises N bytes, sends half, closes.
            n = int(arg)
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            self._write(det_bytes(n // 2))
            self.close_connection = True
        elif kw == "stall":
            # Sends the head and part of the body, then stalls for `arg` seconds.
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self._write(b"x" * 10)
            self._sleep(float(arg))
            self.close_connection = True
        else:
            self._echo(record)

    def _echo(self, record, headers=()):
        body = json.dumps(record).encode()
        self._send(200, body, "application/json", headers)


class EchoUpstream(object):
    """A threaded HTTP/1.1 keep-alive upstream on 127.0.0.1.

    Default: answers 200 with a JSON body describing the request (method, path, version, headers,
    body_sha256, body_length, conn_id, server). Special paths (the keyword may follow a prefix):
      /bytes/N    N bytes of det_bytes() with Content-Length
      /chunked/N  N bytes chunked
      /eof/N      N bytes, no length, Connection: close (close-delimited)
      /slow/S     sleeps S seconds, then echoes
      /status/C   status C (204/304 without a body)
      /close      echoes with Connection: close
      /hop        echoes with hop-by-hop response headers (Connection: X-Hop-Resp, ...)
      /truncate/N Content-Length N, sends N/2 bytes, closes
      /stall/S    Content-Length 100, sends 10 bytes, stalls S seconds
      /slowread/S waits S seconds before reading the request body, then echoes
      /flaky/KEY/N/MODE  the first N requests with this KEY fail as MODE says (see _fail), the
                  rest are served as the path after MODE says
    Set `fail` to a mode to fail every request, `alternate` to fail every other one.
    """

    def __init__(self, name="echo", keepalive_timeout=30.0, host="127.0.0.1", port=0):
        """`host` and `port`: where to listen (another loopback address such as 127.0.0.2 or
        ::1, and a port another upstream uses there, for DNS clusters)."""
        self.name = name
        self.fail = None
        self.alternate = None
        self.flaky = {}
        self.keepalive_timeout = keepalive_timeout
        self.tracker = _ConnTracker()
        self.lock = threading.Lock()
        self.requests = []
        self.in_flight = 0
        self.errors = 0
        self.stopping = threading.Event()
        self.server = _EchoHTTPServer(self, host, port)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05},
                                       name="echo-%s" % name, daemon=True)
        self.thread.start()

    @property
    def accepted(self):
        return self.tracker.accepted

    @property
    def peak_open(self):
        return self.tracker.peak_open

    def request_count(self):
        with self.lock:
            return len(self.requests)

    def stop(self):
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        for s in self.tracker.open_sockets():
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(5)


class RawUpstream(object):
    """A raw-socket upstream: for each connection, reads a request head, then acts:
         mode "reset":    closes without answering (FIN; rst=True sends a RST instead)
         mode "garbage":  sends `reply` (default b"not http\\r\\n\\r\\n"), then waits for the
                          peer to close (or closes at once with close_after_reply=True)
         mode "script":   calls serve(conn, head, rest) (head: the request head as text, rest:
                          bytes read after it) and closes when it returns
    Each connection serves one request; `heads` keeps every request head, in order.
    """

    def __init__(self, mode, rst=False, reply=b"not http\r\n\r\n", close_after_reply=False,
                 serve=None):
        self.mode = mode
        self.rst = rst
        self.reply = reply
        self.close_after_reply = close_after_reply
        self.script = serve
        self.accepted = 0
        self.requests = 0
        self.heads = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.thread = threading.Thread(target=self._accept_loop, daemon=True,
                                       name="raw-%s" % mode)
        self.thread.start()

    def _accept_loop(self):
        while not self.stopping.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            c.settimeout(5.0)
            data = b""
            while b"\r\n\r\n" not in data:
                piece = c.recv(65536)
                if not piece:
                    return
                data += piece
            head, _, rest = data.partition(b"\r\n\r\n")
            with self.lock:
                self.requests += 1
                self.heads.append(head.decode("latin-1"))
            if self.mode == "script":
                self.script(c, self.heads[-1], rest)
            elif self.mode == "garbage":
                c.sendall(self.reply)
                if self.close_after_reply:
                    return
                c.settimeout(2.0)
                while c.recv(65536):
                    pass
            elif self.rst:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass

    def request_count(self):
        with self.lock:
            return self.requests

    def stop(self):
        self.stopping.set()
        try:
            self.sock.close()
        except OSError:
            pass
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(5)


def ResetUpstream(rst=False):
    return RawUpstream("reset", rst=rst)


def GarbageUpstream(reply=b"not http\r\n\r\n", close_after_reply=False):
    return RawUpstream("garbage", reply=reply, close_after_reply=close_after_reply)


def CannedUpstream(reply, close_after_reply=False):
    """Answers every request with the exact bytes `reply`."""
    return RawUpstream("garbage", reply=reply, close_after_reply=close_after_reply)


class BlackholeUpstream(object):
    """A listening socket whose accept queue is full: connects to it hang (SYNs are dropped)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.fillers = []
        for _ in range(4):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", self.port))
            except (BlockingIOError, OSError):
                pass
            self.fillers.append(s)
        time.sleep(0.1)

    def stop(self):
        for s in self.fillers + [self.sock]:
            try:
                s.close()
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------
# curl
# ---------------------------------------------------------------------------------------------

class Response(object):
    """One HTTP response. Unpacks as (status, headers, body)."""

    def __init__(self, status, header_list, body, info=None, interim=None, raw_head=""):
        self.status = status
        self.header_list = header_list  # [(lowercase name, value)] in order
        self.headers = {}
        for k, v in header_list:
            self.headers[k] = v if k not in self.headers else self.headers[k] + ", " + v
        self.body = body
        self.info = info or {}  # curl's --write-out %{json}
        self.interim = interim or []  # 1xx status codes seen before this response
        self.raw_head = raw_head

    def __iter__(self):
        return iter((self.status, self.headers, self.body))

    @property
    def num_connects(self):
        return self.info.get("num_connects")

    @property
    def exitcode(self):
        return self.info.get("exitcode")

    def json(self):
        return json.loads(self.body)

    def header_values(self, name):
        return [v for k, v in self.header_list if k == name.lower()]

    def __repr__(self):
        return "<Response %s %r body=%r>" % (self.status, self.header_list, self.body[:200])


def _parse_head(block):
    lines = block.split("\r\n")
    status_line = lines[0]
    parts = status_line.split(" ", 2)
    status = int(parts[1])
    headers = []
    for line in lines[1:]:
        if not line or ":" not in line:
            continue
        k, v = line.split(":", 1)
        headers.append((k.strip().lower(), v.strip()))
    return status, headers


def curl_multi(urls, *args, timeout=CURL_TIMEOUT, input_data=None):
    """Runs ONE curl process fetching every URL in order (curl reuses the connection between
    them). Returns (responses, completed_process)."""
    tmp = make_tmpdir("rpx-it-curl-")
    try:
        hdr = os.path.join(tmp, "headers")
        cmd = ["curl", "-q", "-s", "-S", "--noproxy", "*", "-D", hdr, "-w", "%{json}\\n",
               "--max-time", str(timeout)] + list(args)
        outs = []
        for i, u in enumerate(urls):
            out = os.path.join(tmp, "body%d" % i)
            outs.append(out)
            cmd += ["-o", out, u]
        env = {k: v for k, v in os.environ.items()
               if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
        cp = subprocess.run(cmd, capture_output=True, timeout=timeout + 10, env=env,
                            input=input_data, stdin=None if input_data else subprocess.DEVNULL)
        infos = []
        for line in cp.stdout.decode("utf-8", "replace").splitlines():
            if line.startswith("{"):
                infos.append(json.loads(line))
        blocks = []
        if os.path.exists(hdr):
            with open(hdr, "rb") as f:
                text = f.read().decode("latin-1")
            for b in text.split("\r\n\r\n"):
                b = b.strip("\r\n")
                if b.startswith("HTTP/"):
                    blocks.append(b)
        responses = []
        bi = 0
        for i, u in enumerate(urls):
            info = infos[i] if i < len(infos) else {"exitcode": cp.returncode, "http_code": 0}
            status, headers, interim, raw = 0, [], [], ""
            if info.get("http_code"):
                while bi < len(blocks):
                    st, hs = _parse_head(blocks[bi])
                    raw += blocks[bi] + "\r\n\r\n"
                    bi += 1
                    if 100 <= st < 200 and st != 101:
                        interim.append(st)
                        continue
                    status, headers = st, hs
                    break
            body = b""
            if os.path.exists(outs[i]):
                with open(outs[i], "rb") as f:
                    body = f.read()
            responses.append(Response(status, headers, body, info, interim, raw))
        cp.stderr_text = cp.stderr.decode("utf-8", "replace")
        return responses, cp
    finally:
        remove_tmpdir(tmp)


def curl(url, *args, timeout=CURL_TIMEOUT):
    """One request with curl (-s -S; headers via -D). Returns a Response (status, headers, body)."""
    responses, _ = curl_multi([url], *args, timeout=timeout)
    return responses[0]


# ---------------------------------------------------------------------------------------------
# TCP sockets as the kernel holds them (ss), and socket options to set on them
# ---------------------------------------------------------------------------------------------

IPPROTO_TCP, TCP_CONGESTION = 6, 13


def default_congestion_control():
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        return f.read().strip()


def other_congestion_control():
    """An algorithm that is not the default and that an unprivileged process may pick: reno is
    always allowed; when it is the default, any other allowed one."""
    default = default_congestion_control()
    if default != "reno":
        return "reno"
    with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as f:
        for name in f.read().split():
            if name != default:
                return name
    return None


def congestion_option(name, **extra):
    o = {"level": IPPROTO_TCP, "name": TCP_CONGESTION,
         "buf_value": base64.b64encode(name.encode()).decode()}
    o.update(extra)
    return o


def tcp_sockets(filter_expr):
    """(local address, peer address, info line) of the established TCP sockets matching an ss
    filter, e.g. "sport = :8080"."""
    out = subprocess.run(["ss", "-Htin", "state", "established", filter_expr],
                         capture_output=True, text=True, timeout=10).stdout
    lines = out.splitlines()
    found = []
    # ss -i prints each socket on one line and its details, indented, on the next.
    for i, line in enumerate(lines):
        if line.startswith((" ", "\t")):
            continue
        fields = line.split()
        info = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith((" ", "\t")) else ""
        found.append((fields[-2], fields[-1], info))
    return found


def tcp_algorithm(info):
    """The congestion control named in an `ss -i` details line."""
    m = re.search(r"\b(reno|cubic|bbr|bbr2|vegas|westwood|htcp|dctcp|bic|highspeed|hybla|"
                  r"illinois|lp|scalable|veno|yeah|cdg|nv)\b", info)
    return m.group(1) if m else None


# ---------------------------------------------------------------------------------------------
# Raw HTTP/1.1 on a socket
# ---------------------------------------------------------------------------------------------

class RawClient(object):
    """A plain socket to rpx, for what curl cannot express (pipelining, exact framing)."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.rfile = self.sock.makefile("rb")

    def send(self, data):
        self.sock.sendall(data)

    def read_response(self, method="GET"):
        """Reads one response (skipping 1xx). Body framing per RFC 9112."""
        while True:
            line = self.rfile.readline(65536)
            if not line:
                raise ConnectionError("connection closed before a response")
            status_line = line.decode("latin-1").rstrip("\r\n")
            parts = status_line.split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/"):
                raise ValueError("bad status line %r" % status_line)
            status = int(parts[1])
            headers = []
            raw = status_line + "\r\n"
            while True:
                h = self.rfile.readline(65536)
                if not h:
                    raise ConnectionError("connection closed in the response head")
                raw += h.decode("latin-1")
                if h in (b"\r\n", b"\n"):
                    break
                k, v = h.decode("latin-1").split(":", 1)
                headers.append((k.strip().lower(), v.strip()))
            if 100 <= status < 200:
                continue
            break
        hmap = {}
        for k, v in headers:
            hmap[k] = v if k not in hmap else hmap[k] + ", " + v
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif "chunked" in hmap.get("transfer-encoding", "").lower():
            body = b""
            while True:
                size_line = self.rfile.readline(1024)
                if not size_line:
                    raise ConnectionError("eof in chunked body")
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                body += self._read_exact(size)
                self.rfile.readline(16)
        elif "content-length" in hmap:
            body = self._read_exact(int(hmap["content-length"]))
        else:
            body = self.rfile.read()
        return Response(status, headers, body, raw_head=raw)

    def _read_exact(self, n):
        data = self.rfile.read(n)
        if len(data) != n:
            raise ConnectionError("eof after %d of %d body bytes" % (len(data), n))
        return data

    def at_eof(self, timeout=2.0):
        """True if the peer closed the connection (within timeout) with no more data."""
        self.sock.settimeout(timeout)
        try:
            return self.rfile.read(1) == b""
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True

    def close(self):
        try:
            self.rfile.close()
            self.sock.close()
        except OSError:
            pass


def http_request(method, path, host="localhost", headers=(), body=None):
    """Bytes of one HTTP/1.1 request."""
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: %s" % host]
    for k, v in headers:
        lines.append("%s: %s" % (k, v))
    if body is not None and not any(k.lower() in ("content-length", "transfer-encoding")
                                    for k, _ in headers):
        lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


# ---------------------------------------------------------------------------------------------
# Test base class
# ---------------------------------------------------------------------------------------------

def _kill_and_reap(proc):
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=5)


# ---------------------------------------------------------------------------------------------
# A fake DNS server
# ---------------------------------------------------------------------------------------------

class FakeDnsServer(object):
    """A DNS server on 127.0.0.1 (UDP and TCP on the same port) answering A and AAAA queries from
    a mutable table, for DNS clusters (point one at it with dns_resolver_config()).

        dns = FakeDnsServer()
        dns.set("svc.test", [("127.0.0.1", 30)])     # name -> [(address, ttl)]
        dns.mode = "servfail"                        # or "nxdomain", "drop" (never answers)
        dns.queries("svc.test")                      # how many queries arrived for the name

    A name not in the table gets NXDOMAIN; a name with no address of the asked type gets an
    empty NOERROR answer. Threads of this process; stop() ends them."""

    A, AAAA = 1, 28
    MODES = ("answer", "nxdomain", "servfail", "drop")

    def __init__(self):
        self._lock = threading.Lock()
        self._table = {}
        self._counts = {}
        self.mode = "answer"
        # A port free for both UDP and TCP: the kernel picks a UDP one, which another test may
        # hold for TCP (the TCP case then found no server: a failure seen only in the full
        # suite). Bounded tries; UDP only if none is found.
        self.tcp = None
        for _ in range(50):
            self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.udp.bind(("127.0.0.1", 0))
            self.port = self.udp.getsockname()[1]
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                tcp.bind(("127.0.0.1", self.port))
                tcp.listen(16)
                self.tcp = tcp
                break
            except OSError:
                tcp.close()
                self.udp.close()
        if self.tcp is None:
            self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.udp.bind(("127.0.0.1", 0))
            self.port = self.udp.getsockname()[1]
        self._stopped = False
        self._threads = [threading.Thread(target=self._serve_udp, daemon=True)]
        if self.tcp:
            self._threads.append(threading.Thread(target=self._serve_tcp, daemon=True))
        for t in self._threads:
            t.start()

    # -- the table
    def set(self, name, records):
        """`records`: [(address, ttl)], IPv4 and IPv6 addresses mixed as they come."""
        with self._lock:
            self._table[name.lower().rstrip(".")] = list(records)

    def remove(self, name):
        with self._lock:
            self._table.pop(name.lower().rstrip("."), None)

    def queries(self, name, qtype=None):
        """Queries received for `name` (of `qtype` only, when given: FakeDnsServer.A / AAAA)."""
        with self._lock:
            c = self._counts.get(name.lower().rstrip("."), {})
            return c.get(qtype, 0) if qtype else sum(c.values())

    # -- serving
    def answer(self, query):
        """The response to a query message (bytes), or None to stay silent."""
        if len(query) < 12:
            return None
        qid, flags, qdcount = struct.unpack("!HHH", query[:6])
        if qdcount != 1:
            return None
        p, labels = 12, []
        while p < len(query) and query[p] != 0:
            n = query[p]
            labels.append(query[p + 1:p + 1 + n].decode("ascii", "replace"))
            p += 1 + n
        p += 1
        if p + 4 > len(query):
            return None
        qtype, _ = struct.unpack("!HH", query[p:p + 4])
        question = query[12:p + 4]
        name = ".".join(labels).lower()
        with self._lock:
            c = self._counts.setdefault(name, {})
            c[qtype] = c.get(qtype, 0) + 1
            mode = self.mode
            records = self._table.get(name)
        if mode == "drop":
            return None
        rcode = {"nxdomain": 3, "servfail": 2}.get(mode, 0)
        if rcode == 0 and records is None:
            rcode = 3
        answers = b""
        count = 0
        for addr, ttl in (records or []) if rcode == 0 else []:
            family = socket.AF_INET6 if ":" in addr else socket.AF_INET
            if (qtype == self.A) != (family == socket.AF_INET) or qtype not in (self.A, self.AAAA):
                continue
            rdata = socket.inet_pton(family, addr)
            answers += struct.pack("!HHHIH", 0xC00C, qtype, 1, ttl, len(rdata)) + rdata
            count += 1
        rflags = 0x8000 | (flags & 0x0100) | 0x0080 | rcode  # QR, RD as asked, RA
        return struct.pack("!HHHHHH", qid, rflags, 1, count, 0, 0) + question + answers

    def _serve_udp(self):
        while not self._stopped:
            try:
                r, _, _ = select.select([self.udp], [], [], 0.2)
                if not r:
                    continue
                data, peer = self.udp.recvfrom(4096)
            except OSError:
                return
            reply = self.answer(data)
            if reply is not None:
                try:
                    self.udp.sendto(reply, peer)
                except OSError:
                    pass

    def _serve_tcp(self):
        while not self._stopped:
            try:
                r, _, _ = select.select([self.tcp], [], [], 0.2)
                if not r:
                    continue
                conn, _ = self.tcp.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_tcp_conn, args=(conn,), daemon=True).start()

    def _serve_tcp_conn(self, conn):
        conn.settimeout(5.0)
        try:
            while not self._stopped:
                head = self._read_exact(conn, 2)
                if head is None:
                    return
                query = self._read_exact(conn, struct.unpack("!H", head)[0])
                if query is None:
                    return
                reply = self.answer(query)
                if reply is not None:
                    conn.sendall(struct.pack("!H", len(reply)) + reply)
        except OSError:
            pass
        finally:
            conn.close()

    @staticmethod
    def _read_exact(conn, n):
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def stop(self):
        self._stopped = True
        for t in self._threads:
            t.join(2.0)
        self.udp.close()
        if self.tcp:
            self.tcp.close()


def dns_resolver_config(port, use_tcp=False, no_search=True):
    """A cluster's typed_dns_resolver_config pointing at a FakeDnsServer's port."""
    options = {"no_default_search_domain": no_search}
    if use_tcp:
        options["use_tcp_for_dns_lookups"] = True
    return {
        "name": "envoy.network.dns_resolver.cares",
        "typed_config": {
            "@type": "type.googleapis.com/"
                     "envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig",
            "resolvers": [{"socket_address": {"address": "127.0.0.1", "port_value": port}}],
            "dns_resolver_options": options,
        },
    }


# ---------------------------------------------------------------------------------------------
# HTTP/2: a scripted client (python3-h2's state machine over a plain socket)
# ---------------------------------------------------------------------------------------------

H2_WAIT = 10.0


class H2Client(object):
    """A scripted HTTP/2 client over a plain socket (python3-h2's state machine). `window`: the
    initial stream window it announces; `validate=False` lets it send what HTTP/2 forbids (for
    the hardening cases). Responses are collected per stream id in `responses`; a GOAWAY from
    rpx lands in `goaway`, the socket's EOF sets `closed`."""

    def __init__(self, port, window=None, validate=True):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=H2_WAIT)
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                        validate_outbound_headers=validate,
                                        normalize_outbound_headers=validate,
                                        validate_inbound_headers=False)
        self.conn = h2.connection.H2Connection(config=cfg)
        self.conn.initiate_connection()
        if window is not None:
            self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.flush()
        self.events = []
        self.responses = {}  # stream id -> {"headers":[], "data":bytearray, "ended":bool, ...}
        self.goaway = None
        self.closed = False
        self.auto_ack = True

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path, method="GET", headers=(), body=None, end=True, authority="example"):
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":path", path), (":scheme", "http"),
                (":authority", authority)] + list(headers)
        self.conn.send_headers(sid, hdrs, end_stream=end and body is None)
        if body is not None:
            self.send_body(sid, body, end=end)
        self.flush()
        self.responses[sid] = {"headers": None, "data": bytearray(), "ended": False,
                               "reset": None, "trailers": None}
        return sid

    def send_body(self, sid, body, end=True):
        # Within the server's windows: wait for WINDOW_UPDATEs as needed.
        view = memoryview(body)
        while view:
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if room <= 0:
                self.read_some()
                continue
            self.conn.send_data(sid, bytes(view[:room]))
            view = view[room:]
            self.flush()
        if end:
            self.conn.end_stream(sid)
            self.flush()

    def read_some(self):
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise AssertionError("no data from rpx within %ss" % H2_WAIT)
        if not data:
            self.closed = True
            return False
        for ev in self.conn.receive_data(data):
            self.events.append(ev)
            sid = getattr(ev, "stream_id", None)
            r = self._entry(sid) if sid else None
            if isinstance(ev, h2.events.ResponseReceived):
                r["headers"] = dict(ev.headers)
                r["header_list"] = list(ev.headers)
            elif isinstance(ev, h2.events.TrailersReceived):
                r["trailers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                r["data"] += ev.data
                if self.auto_ack:
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                r["ended"] = True
            elif isinstance(ev, h2.events.StreamReset):
                if r is not None:
                    r["reset"] = ev.error_code
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.goaway = ev
        self.flush()
        return True

    def wait(self, predicate):
        deadline = time.time() + H2_WAIT
        while not predicate():
            if time.time() > deadline:
                raise AssertionError("condition not met within %ss" % H2_WAIT)
            if not self.read_some():
                if predicate():
                    return
                raise AssertionError("rpx closed the connection")

    def _entry(self, sid):
        return self.responses.setdefault(sid, {"headers": None, "data": bytearray(),
                                               "ended": False, "reset": None, "trailers": None})

    def response(self, sid):
        r = self._entry(sid)
        self.wait(lambda: r["ended"] or r["reset"] is not None)
        return r

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass



def grpc_available():
    """Debian's python3-grpcio can be imported (the gRPC tests skip without it)."""
    try:
        import grpc  # noqa: F401
        return True
    except ImportError:
        return False


class H2Origin(object):
    """A scripted HTTP/2 origin (h2c with prior knowledge, or TLS with ALPN h2 when `ssl_context`
    is given), python3-h2 on a thread per connection. By path:
      /echo               200, a JSON body: the request's fields (pseudo-headers included, in
                          order), body length and sha256, its trailers (or null), connection
                          and stream numbers
      /hold/N             answered (as /echo) once N /hold streams wait on the same connection
      /holdall/N          answered (as /echo) once N /holdall streams wait, over all connections
      /bytes/N            N deterministic bytes (det_bytes), within the client's windows
      /trailers           200, body "abc", then trailers grpc-status: 0, x-trailer: yes
      /goaway             answered as /echo, then GOAWAY naming this stream as the last one
      /refuse-once        the first such stream of the origin's life: RST_STREAM REFUSED_STREAM
      /refuse             always RST_STREAM REFUSED_STREAM
      /rst                headers, then RST_STREAM INTERNAL_ERROR
    `max_streams` is announced as SETTINGS_MAX_CONCURRENT_STREAMS (streams beyond it are refused).
    Counts: `connections`, `refused`,
    `max_open` (most streams open at once on one connection), `requests` (paths seen)."""

    def __init__(self, max_streams=100, ssl_context=None):
        self.max_streams = max_streams
        self.ssl_context = ssl_context
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.connections = 0
        self.max_open = 0
        self.holdall_waiting = 0  # /holdall streams waiting, over all connections
        self.holdall_release = threading.Event()
        self.requests = []
        self.refused_once = False
        self.refused = 0  # streams refused for exceeding max_streams
        self.errors = []  # why connections ended early (protocol errors, socket errors)
        self.stopping = False
        self.conns = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def stop(self):
        self.stopping = True
        try:
            self.sock.close()
        except OSError:
            pass
        for c in list(self.conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
                c.close()
            except OSError:
                pass

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.ssl_context is not None:
                try:
                    c = self.ssl_context.wrap_socket(c, server_side=True)
                except (OSError, Exception):
                    c.close()
                    continue
            with self.lock:
                self.connections += 1
                n = self.connections
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c, n), daemon=True).start()

    def _serve(self, sock, conn_no):
        cfg = h2.config.H2Configuration(client_side=False, header_encoding="utf-8",
                                        validate_inbound_headers=False)
        conn = h2.connection.H2Connection(config=cfg)
        conn.local_settings = h2.settings.Settings(
            client=False, initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams})
        conn.initiate_connection()
        # Announced above; enforced below as nghttp2 and nginx do, by refusing the excess streams
        # (REFUSED_STREAM) rather than as python3-h2 would (ending the connection).
        conn.local_settings = h2.settings.Settings(
            client=False, initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1 << 30})
        streams = {}   # id -> {"headers": [...], "body": bytearray}
        sends = {}     # id -> [bytes left, trailers or None]
        holds = []
        holdalls = []  # this connection's /holdall streams
        goaway_after = [None]
        open_now = set()

        def finish_send(sid):
            data, trailers = sends[sid]
            while data:
                room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
                if room <= 0:
                    return
                conn.send_data(sid, data[:room])
                data = data[room:]
                sends[sid][0] = data
            if trailers:
                conn.send_headers(sid, trailers, end_stream=True)
            else:
                conn.end_stream(sid)
            del sends[sid]
            open_now.discard(sid)

        def respond(sid, status=200, body=b"", headers=(), trailers=None):
            hdrs = [(":status", str(status)), ("content-type", "application/json")]
            if trailers is None:
                hdrs.append(("content-length", str(len(body))))
            conn.send_headers(sid, hdrs + list(headers))
            sends[sid] = [body, trailers]
            finish_send(sid)

        def echo_body(sid):
            st = streams[sid]
            return json.dumps({"headers": st["headers"], "body_len": len(st["body"]),
                               "body_sha256": hashlib.sha256(bytes(st["body"])).hexdigest(),
                               "trailers": st.get("trailers"),
                               "conn": conn_no, "stream": sid}).encode()

        def handle(sid):
            st = streams[sid]
            path = dict(st["headers"]).get(":path", "")
            with self.lock:
                self.requests.append(path)
            if path.startswith("/hold/"):
                holds.append(sid)
                if len(holds) >= int(path.split("/")[2]):
                    for h in holds:
                        respond(h, body=echo_body(h))
                    del holds[:]
            elif path.startswith("/holdall/"):
                holdalls.append(sid)
                with self.lock:
                    self.holdall_waiting += 1
                    if self.holdall_waiting >= int(path.split("/")[2]):
                        self.holdall_release.set()
            elif path.startswith("/bytes/"):
                respond(sid, body=det_bytes(int(path.split("/")[2])))
            elif path == "/trailers":
                respond(sid, body=b"abc", trailers=[("grpc-status", "0"), ("x-trailer", "yes")])
            elif path == "/goaway":
                respond(sid, body=echo_body(sid))
                goaway_after[0] = sid
            elif path == "/refuse" or (path == "/refuse-once" and not self.refused_once):
                self.refused_once = True
                conn.reset_stream(sid, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
                open_now.discard(sid)
            elif path == "/rst":
                conn.send_headers(sid, [(":status", "200")])
                conn.reset_stream(sid, error_code=h2.errors.ErrorCodes.INTERNAL_ERROR)
                open_now.discard(sid)
            else:
                respond(sid, body=echo_body(sid))

        def release_holdalls():
            # Streams held until enough wait over every connection: another connection's thread
            # may release them, so each thread looks between reads.
            if holdalls and self.holdall_release.is_set():
                for h in holdalls:
                    if h in open_now:
                        respond(h, body=echo_body(h))
                del holdalls[:]

        try:
            sock.sendall(conn.data_to_send())
            while not self.stopping:
                # Wake up now and then (without a socket timeout, which would also bound sends).
                pending = sock.pending() if hasattr(sock, "pending") else 0
                if not pending and not select.select([sock], [], [], 0.02)[0]:
                    release_holdalls()
                    out = conn.data_to_send()
                    if out:
                        sock.sendall(out)
                    continue
                data = sock.recv(65536)
                if not data:
                    break
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.RequestReceived):
                        if len(open_now) >= self.max_streams:
                            conn.reset_stream(ev.stream_id,
                                              error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
                            with self.lock:
                                self.refused += 1
                            continue
                        streams[ev.stream_id] = {"headers": [list(h) for h in ev.headers],
                                                 "body": bytearray()}
                        open_now.add(ev.stream_id)
                        with self.lock:
                            self.max_open = max(self.max_open, len(open_now))
                    elif isinstance(ev, h2.events.DataReceived):
                        if ev.stream_id in streams:
                            streams[ev.stream_id]["body"] += ev.data
                        conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    elif isinstance(ev, h2.events.TrailersReceived):
                        if ev.stream_id in streams:
                            streams[ev.stream_id]["trailers"] = [list(h) for h in ev.headers]
                    elif isinstance(ev, h2.events.StreamEnded):
                        if ev.stream_id in streams:
                            handle(ev.stream_id)
                    elif isinstance(ev, h2.events.StreamReset):
                        open_now.discard(ev.stream_id)
                        sends.pop(ev.stream_id, None)
                        if ev.stream_id in holds:
                            holds.remove(ev.stream_id)
                    elif isinstance(ev, h2.events.WindowUpdated):
                        for sid in list(sends):
                            finish_send(sid)
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        self.stopping_conn = True
                release_holdalls()
                if goaway_after[0] is not None:
                    conn.close_connection(last_stream_id=goaway_after[0])
                    goaway_after[0] = None
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
        except (OSError, h2.exceptions.ProtocolError) as e:
            self.errors.append(repr(e))
        finally:
            try:
                sock.close()
            except OSError:
                pass


class IntegrationTestCase(unittest.TestCase):
    """Starts servers with cleanups registered, so tearDown always stops them (by PID for rpx).
    A crash of rpx during a test makes the test fail."""

    def start_echo(self, name="echo", **kwargs):
        u = EchoUpstream(name, **kwargs)
        self.addCleanup(u.stop)
        return u

    def start_reset(self, rst=False):
        u = ResetUpstream(rst=rst)
        self.addCleanup(u.stop)
        return u

    def start_garbage(self, reply=b"not http\r\n\r\n", close_after_reply=False):
        u = GarbageUpstream(reply, close_after_reply)
        self.addCleanup(u.stop)
        return u

    def start_blackhole(self):
        u = BlackholeUpstream()
        self.addCleanup(u.stop)
        return u

    def validate(self, config):
        """Runs `rpx --mode validate` on `config` (a bootstrap dict); returns the finished
        process (returncode, stdout, stderr)."""
        tmp = make_tmpdir("rpx-it-validate-")
        try:
            path = os.path.join(tmp, "bootstrap.yaml")
            with open(path, "w") as f:
                f.write(to_yaml(config))
            return run_rpx(["--mode", "validate", "-c", path])
        finally:
            remove_tmpdir(tmp)

    def assert_cluster_refused(self, extra, *wanted, route_action=None):
        """`assert_refused` on one listener routing everything to one static cluster "c" with
        `extra` merged into the cluster (and `route_action` into the route's action)."""
        c = cluster("c", free_port())
        c.update(extra or {})
        r = route("/", "c")
        r["route"].update(route_action or {})
        self.assert_refused(bootstrap([http_listener("l", free_port(), [
            virtual_host("all", ["*"], [r])])], [c]), *wanted)

    def assert_refused(self, config, *wanted):
        """`rpx --mode validate` refuses `config` (a bootstrap dict), and its output holds each
        of `wanted`."""
        cp = self.validate(config)
        self.assertNotEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        for w in wanted:
            self.assertIn(w, cp.stdout + cp.stderr)

    def start_rpx(self, config, **kwargs):
        proxy = Rpx(config, **kwargs)
        self.addCleanup(proxy.cleanup)
        proxy.start()
        self.addCleanup(proxy.check_clean_exit)  # runs before cleanup (LIFO)
        return proxy

    def start_dns_server(self):
        """A FakeDnsServer on 127.0.0.1, stopped at cleanup."""
        dns = FakeDnsServer()
        self.addCleanup(dns.stop)
        return dns

    def start_xds_server(self, files=None, port=0, poll_ms=200, checked=False, control=False,
                         extra_args=()):
        """Starts tools/xds_server on a fresh resource directory holding `files` (file name ->
        dict of write_resources() arguments) from the start; stopped (by PID) at cleanup."""
        xds = XdsServer(port=port, poll_ms=poll_ms, checked=checked, control=control,
                        extra_args=extra_args)
        self.addCleanup(xds.cleanup)
        for name, lists in (files or {}).items():
            xds.write_resources(name, **lists)
        xds.start()
        return xds

    def start_etcd(self):
        """A real etcd on loopback (see Etcd), stopped and removed at cleanup."""
        etcd = Etcd()
        self.addCleanup(etcd.cleanup)
        return etcd.start()

    def start_listening_process(self, argv, ports, what):
        """Starts a helper binary (bench/tcp_relay, bench/origin) and waits until it listens on
        every port in `ports`; killed by PID at cleanup. Returns the Popen."""
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(_kill_and_reap, proc)
        for port in ports:
            wait_until(lambda: port_is_listening(port) or proc.poll() is not None,
                       what="%s listening on %d" % (what, port))
            if proc.poll() is not None:
                raise AssertionError("%s exited with %d: %r" % (what, proc.returncode,
                                                                proc.communicate()[1]))
        return proc

    def start_nginx(self, servers, ports):
        """Starts a real nginx (one process, no daemon) whose http block holds `servers` (nginx
        server blocks, as text) and waits until it listens on every port in `ports`; stopped by
        PID at cleanup. Skips the test when nginx is not installed."""
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.access(nginx, os.X_OK):
            raise unittest.SkipTest("nginx is not installed")
        conf_dir = make_tmpdir("rpx-it-nginx-")
        self.addCleanup(remove_tmpdir, conf_dir)
        with open(os.path.join(conf_dir, "nginx.conf"), "w") as f:
            # As root nginx would chown its temp dirs to "nobody", which a sandbox refuses.
            f.write("user root root;\n" if os.geteuid() == 0 else "")
            f.write("""daemon off; master_process off; error_log stderr; pid %(d)s/nginx.pid;
events {}
http {
  access_log off;
  client_body_temp_path %(d)s/b; proxy_temp_path %(d)s/p; fastcgi_temp_path %(d)s/f;
  uwsgi_temp_path %(d)s/u; scgi_temp_path %(d)s/s;
  types { text/plain txt; text/html html; application/octet-stream bin; }
%(servers)s
}
""" % {"d": conf_dir, "servers": servers})
        return self.start_listening_process(
            [nginx, "-p", conf_dir, "-c", os.path.join(conf_dir, "nginx.conf"), "-e", "stderr"],
            ports, "nginx")

    def start_tls_nginx(self, cert_key, body, extra=""):
        """A real nginx serving TLS on a free port with `cert_key` ((cert, key) paths), answering
        every request with 200 and `body` (nginx variables allowed) and a newline; `extra` goes
        into the server block. Returns the port."""
        port = free_port()
        cert, key = cert_key
        self.start_nginx("""  server {
    listen 127.0.0.1:%d ssl; ssl_certificate %s; ssl_certificate_key %s; %s
    location / { return 200 "%s\\n"; }
  }""" % (port, cert, key, extra, body), [port])
        return port

    def raw_client(self, port, timeout=10.0):
        c = RawClient(port, timeout)
        self.addCleanup(c.close)
        return c
