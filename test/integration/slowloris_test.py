"""Slow HTTP attacks with slowhttptest (Debian package `slowhttptest`, installed by
tools/setup.sh): slow headers (Slowloris, -H) against request_headers_timeout and slow bodies
(R-U-Dead-Yet, -B) against request_timeout. rpx must close every slow connection when its
timeout fires, count it, and keep serving normal requests during the attack."""

import csv
import os
import re
import shutil
import subprocess
import threading
import time
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, free_port, http_listener,
                     make_tmpdir, remove_tmpdir, route, virtual_host)

SLOWHTTPTEST = shutil.which("slowhttptest")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

CONNECTIONS = 500      # slow connections in all (slowhttptest uses select(): keep it below 1024)
RATE = 100             # new slow connections per second: ~RATE * timeout held open at once
HEADERS_TIMEOUT = 3    # seconds (request_headers_timeout)
REQUEST_TIMEOUT = 3    # seconds (request_timeout, for slow bodies)
TEST_LENGTH = 25       # slowhttptest's own limit (-l); the attack ends earlier when rpx closes all
NORMAL_MAX_SECONDS = 3.0  # a normal request during the attack must complete within this


@unittest.skipIf(SLOWHTTPTEST is None,
                 "slowhttptest is not installed (apt-get install slowhttptest; tools/setup.sh "
                 "installs it)")
class SlowlorisTest(IntegrationTestCase):

    def setUp(self):
        self.echo = self.start_echo("E")
        self.port = free_port()
        hcm = {
            "request_headers_timeout": "%ds" % HEADERS_TIMEOUT,
            "request_timeout": "%ds" % REQUEST_TIMEOUT,
            "stream_idle_timeout": "30s",
        }
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port,
                           [virtual_host("all", ["*"], [route("/", "E", timeout="30s")])],
                           hcm_extra=hcm)],
            [cluster("E", self.echo.port)]), concurrency=2)
        self.tmp = make_tmpdir("rpx-it-slowloris-")
        self.addCleanup(remove_tmpdir, self.tmp)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def attack(self, mode_args):
        """Runs slowhttptest while a normal client makes requests; returns (report, normal)
        where report = {"exit": status text, "rows": CSV rows (dicts of ints), "stdout": text}
        and normal = [(status, seconds)] of the normal requests made during the attack."""
        prefix = os.path.join(self.tmp, "report")
        cmd = [SLOWHTTPTEST] + list(mode_args) + [
            "-c", str(CONNECTIONS), "-r", str(RATE), "-i", "1", "-l", str(TEST_LENGTH),
            "-p", "3", "-g", "-o", prefix, "-u", self.url("/slow-attack")]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=self.tmp)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait(5)))
        box = {}

        def read_output():
            box["out"] = proc.stdout.read()
        reader = threading.Thread(target=read_output, daemon=True)
        reader.start()
        # Normal requests while the attack runs (the first once slow connections are held).
        normal = []
        time.sleep(1.0)
        deadline = time.monotonic() + TEST_LENGTH + 15
        while proc.poll() is None and time.monotonic() < deadline:
            t0 = time.monotonic()
            r = curl(self.url("/normal/%d" % len(normal)), timeout=10)
            normal.append((r.status, time.monotonic() - t0, self.active()))
            time.sleep(0.3)
        try:
            proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
            self.fail("slowhttptest did not end within %ds" % (TEST_LENGTH + 15))
        reader.join(5)
        out = ANSI.sub("", (box.get("out") or b"").decode("utf-8", "replace"))
        m = re.search(r"Exit status:\s*(.*)", out)
        rows = []
        with open(prefix + ".csv") as f:
            for row in csv.DictReader(f):
                rows.append({k.strip(): int(v) for k, v in row.items() if k and v.strip()})
        return {"exit": m.group(1).strip() if m else None, "rows": rows, "stdout": out,
                "returncode": proc.returncode}, normal

    def active(self):
        return self.proxy.stat("http.ingress.downstream_cx_active")

    def check_common(self, report, normal, what):
        info = "slowhttptest exit %r (rc %s); csv %s; stdout tail:\n%s" % (
            report["exit"], report["returncode"], report["rows"][-3:], report["stdout"][-1500:])
        self.assertEqual(report["returncode"], 0, info)
        # slowhttptest's verdict: it ended because the server closed every connection, not
        # because the test length ran out, and its probe always found the service available.
        self.assertEqual(report["exit"], "No open connections left", info)
        rows = report["rows"]
        self.assertTrue(rows, info)
        self.assertTrue(all(r["Service Available"] > 0 for r in rows),
                        "slowhttptest's probe found rpx unavailable: " + info)
        peak = max(r["Connected"] for r in rows)
        self.assertGreaterEqual(peak, 150, "the attack never held many connections: " + info)
        self.assertGreaterEqual(max(r["Closed"] for r in rows), CONNECTIONS * 0.8, info)
        self.assertLess(rows[-1]["Seconds"], TEST_LENGTH, info)
        # Every normal request during the attack was served, promptly.
        self.assertGreaterEqual(len(normal), 5, "too few normal requests during the attack")
        bad = [n for n in normal if n[0] != 200 or n[1] > NORMAL_MAX_SECONDS]
        self.assertFalse(bad, "normal requests failed or were slow during the %s attack "
                         "(status, seconds, rpx active connections): %s" % (what, bad))
        # The normal requests ran while many slow connections were held.
        self.assertGreaterEqual(max(n[2] for n in normal), 100, normal)
        # Nothing is left open.
        self.proxy.wait_stat("http.ingress.downstream_cx_active", lambda v: v == 0, timeout=10)
        print("\nslowloris %s: slowhttptest exit %r after %ds, peak %d slow connections held, "
              "closed %d; %d normal requests during the attack, slowest %.2fs, with up to %d rpx "
              "connections active" % (what, report["exit"], rows[-1]["Seconds"], peak,
                                      max(r["Closed"] for r in rows), len(normal),
                                      max(n[1] for n in normal), max(n[2] for n in normal)))
        return peak

    def upstream_requests(self, normal):
        """Checks what reached the upstream complete: the normal requests and slowhttptest's
        probes (GET of the attack URL), nothing else. Returns the number of probes."""
        with self.echo.lock:
            seen = [(r["method"], r["path"]) for r in self.echo.requests]
        normal_seen = [p for m, p in seen if p.startswith("/normal/")]
        probes = [(m, p) for m, p in seen if not p.startswith("/normal/")]
        self.assertEqual(len(normal_seen), len(normal))
        self.assertEqual(set(probes) | {("GET", "/slow-attack")}, {("GET", "/slow-attack")},
                         "a slow request reached the upstream complete")
        return len(probes)

    def test_slow_headers(self):
        report, normal = self.attack(["-H"])
        self.check_common(report, normal, "slow headers")
        stats = self.proxy.stats()
        # Every slow connection was closed by request_headers_timeout (408), none reached the
        # upstream; the normal requests did.
        self.assertEqual(stats["http.ingress.downstream_cx_headers_timeout"], CONNECTIONS,
                         {k: v for k, v in stats.items() if k.startswith("http.ingress.")})
        self.assertEqual(stats["http.ingress.downstream_rq_4xx"], CONNECTIONS)
        probes = self.upstream_requests(normal)
        self.assertEqual(stats["http.ingress.downstream_rq_2xx"], len(normal) + probes)
        self.assertEqual(stats["http.ingress.downstream_cx_total"],
                         CONNECTIONS + len(normal) + probes)

    def test_slow_body(self):
        report, normal = self.attack(["-B", "-s", "8192"])
        self.check_common(report, normal, "slow body")
        stats = self.proxy.stats()
        # Every slow body was cut by request_timeout (408 before any response).
        self.assertEqual(stats["http.ingress.downstream_rq_timeout"], CONNECTIONS,
                         {k: v for k, v in stats.items() if k.startswith("http.ingress.")})
        self.assertEqual(stats["http.ingress.downstream_rq_4xx"], CONNECTIONS)
        probes = self.upstream_requests(normal)
        self.assertEqual(stats["http.ingress.downstream_rq_2xx"], len(normal) + probes)
        self.assertEqual(stats["http.ingress.downstream_cx_headers_timeout"], 0)
        # The upstream connections the slow requests held were released.
        self.proxy.wait_stat("cluster.E.upstream_rq_active", lambda v: v == 0, timeout=10)


if __name__ == "__main__":
    unittest.main()
