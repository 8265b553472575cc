"""Network namespaces for the sidecar tests (issue 34): an "app" namespace whose TCP is redirected
to a sidecar's ports the way Istio's istio-iptables does it, a "svc" namespace on the other end of
a veth pair, and the helpers to run things in them. Python 3 standard library only; run as root.

    ok, why = netns.available()          # namespaces work and some iptables works inside one
    with netns.topology() as t:          # namespaces rpxapp-<pid>-<n> and rpxsvc-<pid>-<n>
        netns.install_redirect(t.app, proxy_uid=1337, exclude_inbound_ports=[15000],
                               inbound_interface=t.app_if)
        srv = t.start_listener(t.app, "outbound", "0.0.0.0", 15001)   # answers its SO_ORIGINAL_DST
        print(t.connect(t.app, t.svc_ip, 8080))   # "outbound 10.213.0.2:8080 127.0.0.1:15001 ..."
        print(t.connect(t.app, t.svc_ip, 8080, uid=1337))   # the proxy's user: not redirected
    # everything is gone here: processes (stopped by PID), rules, veths, namespaces

The topology:

    app namespace  (rpxapp-<pid>-<n>)              svc namespace (rpxsvc-<pid>-<n>)
      lo up, eth0 = 10.213.0.1/24  <---- veth ---->  eth0 = 10.213.0.2/24, lo up
      default route via 10.213.0.2                  default route via 10.213.0.1

The veth pair is created directly inside the two namespaces (`ip link add ... netns`), so its ends
never appear in the root namespace and can carry the same names (eth0, as in a pod) in every run;
the addresses are private to the run's namespaces for the same reason, so parallel runs cannot
clash. Namespace names carry the pid and a counter; `cleanup_stale()` removes those left behind by
a run that was killed (its pid gone).

The redirect rules (nat table of the app namespace; the same rules, chains and order as
deploy/vm/rpx-redirect.sh install):

    -A PREROUTING [-i eth0] -p tcp -j RPX_INBOUND
    -A OUTPUT -p tcp -j RPX_OUTPUT
    -A RPX_INBOUND -p tcp --dport 15000 -j RETURN            one per excluded inbound port
    -A RPX_INBOUND -p tcp -j RPX_IN_REDIRECT
    -A RPX_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
    -A RPX_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN             the inbound passthrough's source
    -A RPX_OUTPUT -m mark --mark 0x539 -j RETURN              with mark=
    -A RPX_OUTPUT -m owner --uid-owner 1337 -j RETURN         with proxy_uid=
    -A RPX_OUTPUT -m owner --gid-owner 1337 -j RETURN         with proxy_gid=
    -A RPX_OUTPUT -d 127.0.0.1/32 -j RETURN
    -A RPX_OUTPUT -p tcp --dport PORT -j RETURN               one per excluded outbound port
    -A RPX_OUTPUT -d CIDR -j RETURN                           one per excluded outbound CIDR
    -A RPX_OUTPUT -j RPX_REDIRECT
    -A RPX_REDIRECT -p tcp -j REDIRECT --to-ports 15001

A process runs as the proxy's user with `as_user()` (setpriv(1) --reuid/--regid --clear-groups;
the uid needs no passwd entry). `ip netns exec` and setpriv both exec(2) the command, so the PID of
a Popen from `start_in()` is the command's own PID and tests stop it by that PID.

Environment:
  RPX_IPTABLES   the iptables binary to use (default: the first of iptables, iptables-nft,
                 iptables-legacy that can install the rules inside a fresh namespace)
"""

import contextlib
import itertools
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

# Istio's defaults.
PROXY_UID = 1337
PROXY_GID = 1337
OUTBOUND_PORT = 15001
INBOUND_PORT = 15006
ADMIN_PORT = 15000
LOOP_MARK = 0x539  # 1337, the mark istio-iptables exempts (-m mark --mark 0x539 -j RETURN)

SOL_IP = 0
SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
SO_MARK = 36          # asm-generic/socket.h

NS_PREFIX = "rpx"  # namespaces: rpx<role>-<pid>-<n>
CHAINS = ("RPX_OUTPUT", "RPX_INBOUND", "RPX_REDIRECT", "RPX_IN_REDIRECT")

# Python for the small servers and clients run in the namespaces, possibly as the proxy's
# (non-root) user: Debian's, whose files everyone can read (a pyenv one under /root is not).
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

CMD_TIMEOUT = 30.0
READY_TIMEOUT = 10.0
APT_TIMEOUT = 600.0

_counter = itertools.count(1)


class NetnsError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------

def _ip():
    return shutil.which("ip") or "/usr/sbin/ip"


def run(argv, check=True, timeout=CMD_TIMEOUT, input=None, env=None):
    """Runs `argv` and returns the CompletedProcess (text stdout/stderr). With `check`, a non-zero
    exit raises NetnsError with the command and its stderr."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input,
                           env=env)
    except FileNotFoundError as e:
        if check:
            raise NetnsError("%s: not found" % argv[0]) from e
        return subprocess.CompletedProcess(argv, 127, "", str(e))
    if check and p.returncode != 0:
        raise NetnsError("%s exited %d: %s" % (" ".join(argv), p.returncode,
                                               (p.stderr or p.stdout).strip()))
    return p


def as_user(argv, uid, gid=None):
    """`argv` wrapped to run as `uid`:`gid` (gid defaults to uid) with no supplementary groups:
    setpriv(1) where it exists, else a Python trampoline doing setgroups/setgid/setuid."""
    gid = uid if gid is None else gid
    setpriv = shutil.which("setpriv")
    if setpriv:
        return ([setpriv, "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups", "--"]
                + list(argv))
    return [PYTHON, "-I", "-c", _DROP_AND_EXEC, str(uid), str(gid)] + list(argv)


_DROP_AND_EXEC = """
import os, sys
uid, gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([]); os.setgid(gid); os.setuid(uid)
os.execvp(sys.argv[3], sys.argv[3:])
"""


def preexec_as(uid, gid=None):
    """A preexec_fn for subprocess that drops to `uid`:`gid` (for commands that need no namespace
    change after it; for `ip netns exec` use as_user(), since setns needs root)."""
    gid = uid if gid is None else gid

    def drop():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return drop


def ns_argv(ns, argv, uid=None, gid=None):
    """The command line that runs `argv` in namespace `ns` (as `uid`:`gid` when given)."""
    if uid is not None or gid is not None:
        argv = as_user(argv, PROXY_UID if uid is None else uid, gid)
    return [_ip(), "netns", "exec", ns] + list(argv)


def exec_in(ns, argv, uid=None, gid=None, check=True, timeout=CMD_TIMEOUT, input=None, env=None):
    """Runs `argv` in namespace `ns` to completion; returns the CompletedProcess."""
    return run(ns_argv(ns, argv, uid, gid), check=check, timeout=timeout, input=input, env=env)


def start_in(ns, argv, uid=None, gid=None, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
             env=None, cwd=None):
    """Starts `argv` in the background in namespace `ns`; returns its Popen. Its PID is the
    command's own (ip netns exec and setpriv exec it), in a session of its own: stop it with
    stop()."""
    return subprocess.Popen(ns_argv(ns, argv, uid, gid), stdout=stdout, stderr=stderr, env=env,
                            cwd=cwd, stdin=subprocess.DEVNULL, start_new_session=True)


def stop(proc, timeout=5.0):
    """Stops a process started by start_in(): SIGTERM to it (by PID), SIGKILL after `timeout`."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)
    finally:
        for f in (proc.stdout, proc.stderr):
            if f:
                f.close()


def wait_line(proc, timeout=READY_TIMEOUT):
    """The next line `proc` writes on its stdout (a PIPE), or NetnsError with its stderr if it
    exits or says nothing within `timeout`."""
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise NetnsError("%s said nothing in %.0fs" % (" ".join(proc.args), timeout))
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            proc.wait(5)
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise NetnsError("%s exited %s: %s" % (" ".join(proc.args), proc.returncode,
                                                   err.strip()))
        buf += chunk
    return buf.decode(errors="replace").split("\n", 1)[0]


def listening(ns, port):
    """True if some TCP socket listens on `port` in namespace `ns` (ss(8))."""
    out = exec_in(ns, ["ss", "-Hltn", "sport = :%d" % port], check=False).stdout
    return bool(out.strip())


def wait_listening(ns, port, timeout=READY_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not listening(ns, port):
        if time.monotonic() > deadline:
            raise NetnsError("nothing listens on port %d in %s after %.0fs" % (port, ns, timeout))
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# SO_ORIGINAL_DST
# ---------------------------------------------------------------------------------------------

def parse_sockaddr_in(raw):
    """(ip, port) from a struct sockaddr_in (family, port in network order, address)."""
    family, port = struct.unpack_from("!HH", raw, 0)
    # sin_family is in host order: check both so the parse does not depend on endianness.
    if family not in (socket.AF_INET, socket.htons(socket.AF_INET)):
        raise ValueError("not an AF_INET address: family %d" % family)
    return socket.inet_ntoa(raw[4:8]), port


def original_dst(sock):
    """The address a redirected IPv4 connection was going to: (ip, port). OSError (ENOENT) when
    the connection was not NATed."""
    return parse_sockaddr_in(sock.getsockopt(SOL_IP, SO_ORIGINAL_DST, 16))


# A TCP server for the namespaces: `SERVER_CODE TAG HOST PORT` prints "listening HOST:PORT" once
# bound, then answers every connection with one line and closes it:
#     TAG ORIGINAL_DST LOCAL PEER       (ORIGINAL_DST is "-" when the connection was not NATed)
SERVER_CODE = r"""
import socket, struct, sys
tag, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port))
s.listen(128)
print("listening %s:%d" % s.getsockname(), flush=True)
while True:
    c, peer = s.accept()
    try:
        raw = c.getsockopt(0, 80, 16)  # SOL_IP, SO_ORIGINAL_DST
        od = "%s:%d" % (socket.inet_ntoa(raw[4:8]), struct.unpack("!H", raw[2:4])[0])
    except OSError:
        od = "-"
    try:
        c.sendall(("%s %s %s:%d %s:%d\n" % ((tag, od) + c.getsockname() + peer)).encode())
    except OSError:
        pass
    c.close()
"""

# A client: `CLIENT_CODE HOST PORT [MARK|- [TIMEOUT [SOURCE]]]` connects (with SO_MARK when MARK
# is given, from address SOURCE when given), prints what it reads until EOF; exits 1 with the
# error on stderr when the connection fails.
CLIENT_CODE = r"""
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(float(sys.argv[4]) if len(sys.argv) > 4 else 5.0)
if len(sys.argv) > 3 and sys.argv[3] != "-":
    s.setsockopt(socket.SOL_SOCKET, 36, int(sys.argv[3], 0))  # SO_MARK
if len(sys.argv) > 5:
    s.bind((sys.argv[5], 0))
try:
    s.connect((host, port))
    data = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        data += b
except OSError as e:
    sys.stderr.write("%s:%d: %s\n" % (host, port, e))
    sys.exit(1)
sys.stdout.write(data.decode(errors="replace"))
"""


# ---------------------------------------------------------------------------------------------
# Namespaces
# ---------------------------------------------------------------------------------------------

def list_namespaces():
    out = run([_ip(), "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def add_namespace(role):
    """Creates namespace rpx<role>-<pid>-<n> with lo up; returns its name."""
    name = "%s%s-%d-%d" % (NS_PREFIX, role, os.getpid(), next(_counter))
    run([_ip(), "netns", "add", name])
    try:
        exec_in(name, [_ip(), "link", "set", "lo", "up"])
    except Exception:
        delete_namespace(name)
        raise
    return name


def kill_namespace_processes(ns):
    """SIGKILL, by PID, every process still in namespace `ns` (ip netns pids): only processes this
    run started can be in a namespace it made."""
    out = run([_ip(), "netns", "pids", ns], check=False).stdout
    for pid in (int(x) for x in out.split() if x.isdigit()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def delete_namespace(ns):
    """Removes namespace `ns` (its veth ends and iptables rules go with it)."""
    if ns not in list_namespaces():
        return
    kill_namespace_processes(ns)
    run([_ip(), "netns", "del", ns], check=False)
    if ns in list_namespaces():
        raise NetnsError("namespace %s is still there after ip netns del" % ns)


@contextlib.contextmanager
def namespace(role="probe"):
    """One fresh namespace (lo up), removed on exit."""
    ns = add_namespace(role)
    try:
        yield ns
    finally:
        delete_namespace(ns)


def cleanup_stale():
    """Removes this module's namespaces whose creating process is gone (a run that was killed
    before its teardown). Returns their names."""
    gone = []
    for ns in list_namespaces():
        m = re.match(r"^%s[a-z]+-(\d+)-\d+$" % NS_PREFIX, ns)
        if not m:
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or os.path.exists("/proc/%d" % pid):
            continue
        delete_namespace(ns)
        gone.append(ns)
    return gone


# ---------------------------------------------------------------------------------------------
# Availability
# ---------------------------------------------------------------------------------------------

_ns_result = None
_ipt_result = None
_apt_tried = False
IPTABLES_CANDIDATES = ("iptables", "iptables-nft", "iptables-legacy")


def namespaces_work():
    """(True, "") if `ip netns add` works here (as root), else (False, why). Cached."""
    global _ns_result
    if _ns_result is None:
        if os.geteuid() != 0:
            _ns_result = (False, "network namespaces need root (euid %d)" % os.geteuid())
        elif not os.access(_ip(), os.X_OK):
            _ns_result = (False, "ip(8) from iproute2 is not installed")
        else:
            try:
                with namespace("probe"):
                    pass
                _ns_result = (True, "")
            except NetnsError as e:
                _ns_result = (False, "network namespaces cannot be made here: %s" % e)
    return _ns_result


def iptables_version(binary):
    """`iptables -V`'s line, e.g. "iptables v1.8.9 (nf_tables)"."""
    return run([binary, "-V"], check=False).stdout.strip()


def _iptables_works_in(ns, binary):
    """None if `binary` installs an owner/mark/REDIRECT rule set in namespace `ns`, else why."""
    path = shutil.which(binary)
    if not path:
        return "%s: not installed" % binary
    rules = [["-N", "RPX_PROBE"],
             ["-A", "RPX_PROBE", "-m", "owner", "--uid-owner", str(PROXY_UID), "-j", "RETURN"],
             ["-A", "RPX_PROBE", "-m", "mark", "--mark", hex(LOOP_MARK), "-j", "RETURN"],
             ["-A", "RPX_PROBE", "-p", "tcp", "-j", "REDIRECT", "--to-ports", str(OUTBOUND_PORT)],
             ["-A", "OUTPUT", "-p", "tcp", "-j", "RPX_PROBE"]]
    for r in rules:
        p = exec_in(ns, [path, "-w", "-t", "nat"] + r, check=False)
        if p.returncode != 0:
            return "%s %s: %s" % (binary, " ".join(r), (p.stderr or p.stdout).strip())
    if "RPX_PROBE" not in exec_in(ns, [path, "-w", "-t", "nat", "-S"], check=False).stdout:
        return "%s: the rules did not show in -S" % binary
    return None


def _install_iptables():
    """apt-get install iptables (Debian), once per process; None if it worked, else why."""
    global _apt_tried
    if _apt_tried:
        return "apt-get install iptables was already tried and failed"
    _apt_tried = True
    if not shutil.which("apt-get"):
        return "iptables is not installed and there is no apt-get to install it"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "iptables"]
    p = run(cmd, check=False, timeout=APT_TIMEOUT, env=env)
    if p.returncode != 0:
        # An old or missing package list: refresh it and try the install once more.
        run(["apt-get", "update"], check=False, timeout=APT_TIMEOUT, env=env)
        p = run(cmd, check=False, timeout=APT_TIMEOUT, env=env)
    if p.returncode != 0:
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-3:])
        return "apt-get install -y iptables failed (exit %d): %s" % (p.returncode, tail)
    return None


def iptables_report():
    """{binary: None if it works inside a fresh namespace, else why} for every candidate."""
    out = {}
    for b in IPTABLES_CANDIDATES:
        with namespace("probe") as ns:  # one per binary: legacy and nft rules would coexist
            out[b] = _iptables_works_in(ns, b)
    return out


def available():
    """(True, description) when the sidecar topology can be built here: `ip netns add` works and an
    iptables (RPX_IPTABLES, else iptables, iptables-nft or iptables-legacy; installed from Debian
    with apt-get once if none is there) installs owner, mark and REDIRECT rules inside a
    namespace. Else (False, why). Cached."""
    global _ipt_result, IPTABLES
    if _ipt_result is not None:
        return _ipt_result
    ok, why = namespaces_work()
    if not ok:
        _ipt_result = (False, why)
        return _ipt_result
    wanted = os.environ.get("RPX_IPTABLES")
    candidates = (wanted,) if wanted else IPTABLES_CANDIDATES
    if not any(shutil.which(b) for b in candidates):
        err = _install_iptables() if not wanted else "RPX_IPTABLES=%s is not installed" % wanted
        if err:
            _ipt_result = (False, err)
            return _ipt_result
    reasons = []
    for b in candidates:
        with namespace("probe") as ns:
            err = _iptables_works_in(ns, b)
        if err is None:
            IPTABLES = shutil.which(b)
            _ipt_result = (True, "%s (%s) works inside a namespace" % (b, iptables_version(b)))
            return _ipt_result
        reasons.append(err)
    _ipt_result = (False, "no iptables works inside a namespace: " + "; ".join(reasons))
    return _ipt_result


IPTABLES = None  # set by available()


def require():
    """For tests: skips (unittest.SkipTest) where namespaces cannot be made, removes what killed
    runs left behind, and fails (AssertionError, with the reason) where no iptables works."""
    import unittest
    ok, why = namespaces_work()
    if not ok:
        raise unittest.SkipTest(why)
    cleanup_stale()
    ok, why = available()
    if not ok:
        raise AssertionError(why)


def iptables_bin():
    """The iptables binary available() chose (it runs available() when not done yet)."""
    if IPTABLES is None:
        ok, why = available()
        if not ok:
            raise NetnsError(why)
    return IPTABLES


# ---------------------------------------------------------------------------------------------
# Redirect rules (nat table), as istio-iptables installs them
# ---------------------------------------------------------------------------------------------

def redirect_rules(outbound_port=OUTBOUND_PORT, inbound_port=INBOUND_PORT, proxy_uid=PROXY_UID,
                   proxy_gid=None, mark=None, exclude_inbound_ports=(ADMIN_PORT,),
                   exclude_outbound_ports=(), exclude_outbound_cidrs=(), inbound_interface=None):
    """The iptables argument lists (after `-t nat`) that install_redirect() runs, in order: the
    same rules, in the same order, as deploy/vm/rpx-redirect.sh install with the same options.
    At least one of proxy_uid, proxy_gid and mark must be given: without an exemption the proxy's
    own upstream connections would be captured again (a loop). inbound_port=None leaves inbound
    traffic alone; outbound_port=None leaves outbound traffic alone."""
    if outbound_port is not None and proxy_uid is None and proxy_gid is None and mark is None:
        raise ValueError("no loop-safety rule: give proxy_uid, proxy_gid or mark")
    r = [["-N", c] for c in CHAINS]
    if inbound_port is not None:
        r.append(["-A", "RPX_IN_REDIRECT", "-p", "tcp", "-j", "REDIRECT", "--to-ports",
                  str(inbound_port)])
        for port in exclude_inbound_ports or ():
            r.append(["-A", "RPX_INBOUND", "-p", "tcp", "--dport", str(port), "-j", "RETURN"])
        r.append(["-A", "RPX_INBOUND", "-p", "tcp", "-j", "RPX_IN_REDIRECT"])
        iface = ["-i", inbound_interface] if inbound_interface else []
        r.append(["-A", "PREROUTING"] + iface + ["-p", "tcp", "-j", "RPX_INBOUND"])
    if outbound_port is not None:
        r.append(["-A", "RPX_REDIRECT", "-p", "tcp", "-j", "REDIRECT", "--to-ports",
                  str(outbound_port)])
        # The proxy's inbound passthrough connects to the application from 127.0.0.6 (Istio's
        # InboundPassthroughCluster upstream_bind_config).
        r.append(["-A", "RPX_OUTPUT", "-s", "127.0.0.6/32", "-o", "lo", "-j", "RETURN"])
        if mark is not None:
            r.append(["-A", "RPX_OUTPUT", "-m", "mark", "--mark", hex(mark), "-j", "RETURN"])
        if proxy_uid is not None:
            r.append(["-A", "RPX_OUTPUT", "-m", "owner", "--uid-owner", str(proxy_uid), "-j",
                      "RETURN"])
        if proxy_gid is not None:
            r.append(["-A", "RPX_OUTPUT", "-m", "owner", "--gid-owner", str(proxy_gid), "-j",
                      "RETURN"])
        r.append(["-A", "RPX_OUTPUT", "-d", "127.0.0.1/32", "-j", "RETURN"])
        for port in exclude_outbound_ports or ():
            r.append(["-A", "RPX_OUTPUT", "-p", "tcp", "--dport", str(port), "-j", "RETURN"])
        for cidr in exclude_outbound_cidrs or ():
            r.append(["-A", "RPX_OUTPUT", "-d", cidr, "-j", "RETURN"])
        r.append(["-A", "RPX_OUTPUT", "-j", "RPX_REDIRECT"])
        r.append(["-A", "OUTPUT", "-p", "tcp", "-j", "RPX_OUTPUT"])
    return r


def _ipt(ns, args, check=True):
    return exec_in(ns, [iptables_bin(), "-w", "-t", "nat"] + list(args), check=check)


def install_redirect(ns, **kwargs):
    """Installs the redirect rules (redirect_rules(**kwargs)) in namespace `ns`, replacing any
    this module or rpx-redirect.sh installed before (so calling it twice is harmless). Returns
    the argument lists it ran."""
    remove_redirect(ns)
    rules = redirect_rules(**kwargs)
    for r in rules:
        _ipt(ns, r)
    return rules


def remove_redirect(ns):
    """Removes the RPX_* chains and the jumps to them from the nat table of `ns` (no error when
    they are not there)."""
    for line in nat_rules(ns):
        parts = line.split()
        if (len(parts) > 2 and parts[0] == "-A" and parts[1] in ("PREROUTING", "OUTPUT")
                and "-j" in parts and parts[parts.index("-j") + 1] in CHAINS):
            _ipt(ns, ["-D"] + parts[1:], check=False)
    present = set(nat_chains(ns))
    for c in CHAINS:
        if c in present:
            _ipt(ns, ["-F", c])
    for c in CHAINS:
        if c in present:
            _ipt(ns, ["-X", c])


def nat_rules(ns):
    """`iptables -t nat -S` in `ns`, as lines."""
    return [l for l in _ipt(ns, ["-S"]).stdout.splitlines() if l.strip()]


def nat_chains(ns):
    """The user-defined chains of the nat table of `ns`."""
    return [l.split()[1] for l in nat_rules(ns) if l.startswith("-N ")]


# ---------------------------------------------------------------------------------------------
# The topology
# ---------------------------------------------------------------------------------------------

class Topology:
    """Namespaces `app` and `svc` joined by a veth pair (`app_if` in app, `svc_if` in svc), with
    addresses app_ip/svc_ip in a /24 and default routes through each other. Processes started
    with start()/start_listener() are stopped by close(), which also removes the namespaces (and
    with them the veths and rules). close() is idempotent; use it through topology()."""

    def __init__(self, app_ip="10.213.0.1", svc_ip="10.213.0.2", prefix_len=24,
                 app_if="eth0", svc_if="eth0"):
        self.app_ip, self.svc_ip, self.prefix_len = app_ip, svc_ip, prefix_len
        self.app_if, self.svc_if = app_if, svc_if
        self.app = self.svc = None
        self.procs = []
        self.closed = False
        try:
            self.app = add_namespace("app")
            self.svc = add_namespace("svc")
            run([_ip(), "link", "add", "name", app_if, "netns", self.app, "type", "veth",
                 "peer", "name", svc_if, "netns", self.svc])
            for ns, ifname, ip, gw in ((self.app, app_if, app_ip, svc_ip),
                                       (self.svc, svc_if, svc_ip, app_ip)):
                exec_in(ns, [_ip(), "addr", "add", "%s/%d" % (ip, prefix_len), "dev", ifname])
                exec_in(ns, [_ip(), "link", "set", ifname, "up"])
                exec_in(ns, [_ip(), "route", "add", "default", "via", gw, "dev", ifname])
        except Exception:
            self.close()
            raise

    @property
    def namespaces(self):
        return [n for n in (self.app, self.svc) if n]

    def start(self, ns, argv, uid=None, gid=None, **kwargs):
        """start_in(), and the process is stopped by close()."""
        p = start_in(ns, argv, uid=uid, gid=gid, **kwargs)
        self.procs.append(p)
        return p

    def start_listener(self, ns, tag, host, port, uid=None, gid=None):
        """A SERVER_CODE server on host:port in `ns`, answering "TAG ORIGDST LOCAL PEER"; returns
        its Popen once it listens."""
        p = self.start(ns, [PYTHON, "-I", "-c", SERVER_CODE, tag, host, str(port)], uid=uid,
                       gid=gid)
        wait_line(p)
        return p

    def connect(self, ns, host, port, uid=None, gid=None, mark=None, source=None, timeout=5.0):
        """Connects from `ns` (as uid:gid, with SO_MARK `mark`, from address `source`) to
        host:port and returns what the server wrote (stripped); NetnsError if the connection
        fails."""
        argv = [PYTHON, "-I", "-c", CLIENT_CODE, host, str(port),
                "-" if mark is None else hex(mark), str(timeout)] + ([source] if source else [])
        return exec_in(ns, argv, uid=uid, gid=gid, timeout=timeout + 10).stdout.strip()

    def close(self):
        if self.closed:
            return
        self.closed = True
        errors = []
        for p in self.procs:
            try:
                stop(p)
            except Exception as e:  # keep going: the namespaces must go
                errors.append(str(e))
        for ns in self.namespaces:
            try:
                delete_namespace(ns)
            except Exception as e:
                errors.append(str(e))
        if errors:
            raise NetnsError("teardown: " + "; ".join(errors))


@contextlib.contextmanager
def topology(**kwargs):
    """A Topology(**kwargs), torn down (processes, rules, veths, namespaces) on exit, even when
    the body raises."""
    t = Topology(**kwargs)
    try:
        yield t
    finally:
        t.close()


def main(argv):
    """netns.py check | cleanup   (by hand: what works here; remove namespaces of dead runs)."""
    if argv[:1] == ["check"]:
        ok, why = available()
        print("available:", ok, why)
        if namespaces_work()[0]:
            for b, err in iptables_report().items():
                print("%-16s %s" % (b, "works inside a namespace (%s)" % iptables_version(b)
                                    if err is None else err))
        return 0 if ok else 1
    if argv[:1] == ["cleanup"]:
        for ns in cleanup_stale():
            print("removed", ns)
        return 0
    print(main.__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
