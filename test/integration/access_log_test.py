"""Access logs: Envoy's file/stdout loggers, its command operators checked on real requests (200,
404, 503 overflow, 503 connect failure, 504, upstream reset, client abort), filters, rotation
under load (SIGUSR1 and POST /reopen_logs) without a lost or broken line, and a 1 GiB log that
does not grow rpx's memory."""

import glob
import http.client
import json
import os
import re
import signal
import socket
import threading
import time
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, free_port, http_listener,
                     http_request, make_tmpdir, remove_tmpdir, route, virtual_host, wait_until)

FILE_LOG = "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog"
STDOUT_LOG = "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"

# Every operator the issue names, one JSON key each.
JSON_FORMAT = {
    "start": "%START_TIME%",
    "start_s": "%START_TIME(%s)%",
    "method": "%REQ(:METHOD)%",
    "path": "%REQ(:PATH)%",
    "authority": "%REQ(:AUTHORITY)%",
    "ua": "%REQ(USER-AGENT)%",
    "tag": "%REQ(X-TAG?X-ALT-TAG):4%",
    "resp_type": "%RESP(CONTENT-TYPE)%",
    "trailer": "%TRAILER(X-TRAILER)%",
    "code": "%RESPONSE_CODE%",
    "flags": "%RESPONSE_FLAGS%",
    "details": "%RESPONSE_CODE_DETAILS%",
    "rx": "%BYTES_RECEIVED%",
    "tx": "%BYTES_SENT%",
    "duration": "%DURATION%",
    "request_duration": "%REQUEST_DURATION%",
    "response_duration": "%RESPONSE_DURATION%",
    "upstream_host": "%UPSTREAM_HOST%",
    "upstream_cluster": "%UPSTREAM_CLUSTER%",
    "upstream_local": "%UPSTREAM_LOCAL_ADDRESS%",
    "failure": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
    "remote": "%DOWNSTREAM_REMOTE_ADDRESS%",
    "local": "%DOWNSTREAM_LOCAL_ADDRESS%",
    "route": "%ROUTE_NAME%",
    "protocol": "%PROTOCOL%",
    "sni": "%REQUESTED_SERVER_NAME%",
    "hostname": "%HOSTNAME%",
}


def file_log(path, log_format=None, flt=None):
    cfg = {"@type": FILE_LOG, "path": path}
    if log_format is not None:
        cfg["log_format"] = log_format
    entry = {"name": "envoy.access_loggers.file", "typed_config": cfg}
    if flt is not None:
        entry["filter"] = flt
    return entry


def read_lines(path):
    with open(path, "rb") as f:
        return f.read().decode().splitlines()


class AccessLogTest(IntegrationTestCase):

    def setUp(self):
        super().setUp()
        self.dir = make_tmpdir("rpx-it-logs-")
        self.addCleanup(remove_tmpdir, self.dir)

    def named_route(self, name, prefix, cluster_name, timeout=None):
        r = route(prefix, cluster_name, timeout=timeout)
        r["name"] = name
        return r

    def start_proxy(self, access_log, routes=None, clusters=None, hcm_extra=None,
                    concurrency=2):
        if not getattr(self, "up", None):
            self.up = self.start_echo("up")
        self.port = free_port()
        routes = routes or [self.named_route("r-ok", "/", "up")]
        hcm = {"access_log": access_log}
        if hcm_extra:
            hcm.update(hcm_extra)
        cfg = bootstrap(
            [http_listener("l", self.port, [virtual_host(
                "vh", ["localhost", "127.0.0.1:%d" % self.port], routes)], hcm_extra=hcm)],
            clusters or [cluster("up", self.up.port)])
        self.proxy = self.start_rpx(cfg, concurrency=concurrency)
        return self.proxy

    def flush(self):
        # Lines reach the file within a second (each worker's flush); stopping flushes the rest.
        self.proxy.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proxy.wait_exit(20), 0)

    def test_every_operator_on_real_requests(self):
        log = os.path.join(self.dir, "access.json")
        errors_log = os.path.join(self.dir, "errors.log")
        dead_port = free_port()  # nothing listens there
        reset = self.start_reset()
        routes = [
            self.named_route("r-timeout", "/slow/", "up", timeout="0.3s"),
            self.named_route("r-dead", "/dead", "dead"),
            self.named_route("r-reset", "/reset", "reset"),
            self.named_route("r-tiny", "/tiny/", "tiny"),
            self.named_route("r-ok", "/", "up"),
        ]
        self.up = self.start_echo("up")
        only_5xx = {"status_code_filter": {"comparison": {
            "op": "GE", "value": {"default_value": 500, "runtime_key": "x"}}}}
        self.start_proxy(
            [file_log(log, {"json_format": JSON_FORMAT}),
             file_log(errors_log, {"text_format_source": {
                 "inline_string": "%RESPONSE_CODE% %RESPONSE_FLAGS% %REQ(:PATH)%\n"}},
                 flt=only_5xx)],
            routes=routes,
            clusters=[cluster("up", self.up.port), cluster("dead", dead_port),
                      cluster("reset", reset.port), cluster("tiny", self.up.port, max_requests=1)])
        base = "http://127.0.0.1:%d" % self.port

        ok = curl(base + "/ok", "-H", "User-Agent: it/1", "-H", "X-Alt-Tag: abcdefgh")
        self.assertEqual(ok.status, 200)
        post = curl(base + "/post", "-d", "x" * 1000)
        self.assertEqual(post.status, 200)
        self.assertEqual(curl("http://127.0.0.1:%d/nothing" % self.port, "-H",
                              "Host: elsewhere").status, 404)
        self.assertEqual(curl(base + "/dead").status, 503)
        self.assertEqual(curl(base + "/slow/2").status, 504)
        self.assertEqual(curl(base + "/reset").status, 502)
        # Overflow: one request holds tiny's only slot (once the timed-out one is gone upstream).
        wait_until(lambda: self.up.in_flight == 0, timeout=10, what="the upstream idle")
        holder = threading.Thread(target=lambda: curl(base + "/tiny/slow/1"))
        holder.start()
        wait_until(lambda: self.up.in_flight >= 1, timeout=10, what="tiny's slot taken")
        self.assertEqual(curl(base + "/tiny/x").status, 503)
        holder.join(10)
        wait_until(lambda: self.up.in_flight == 0, timeout=10, what="the upstream idle")
        # A client that hangs up mid-request.
        c = socket.create_connection(("127.0.0.1", self.port))
        c.sendall(http_request("GET", "/abort/slow/2"))
        wait_until(lambda: self.up.in_flight >= 1, timeout=10, what="the aborted request upstream")
        client_port = c.getsockname()[1]
        c.close()
        time.sleep(0.2)
        self.flush()

        entries = [json.loads(l) for l in read_lines(log)]
        by_path = {}
        for e in entries:
            by_path.setdefault(e["path"], e)
        self.assertEqual(len(entries), 9, entries)

        e = by_path["/ok"]
        self.assertRegex(e["start"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertLess(abs(int(e["start_s"]) - time.time()), 120)
        self.assertEqual((e["method"], e["authority"], e["ua"], e["tag"]),
                         ("GET", "127.0.0.1:%d" % self.port, "it/1", "abcd"))
        self.assertEqual(e["resp_type"], "application/json")
        self.assertIsNone(e["trailer"])
        self.assertEqual((e["code"], e["flags"], e["details"]), (200, "-", "via_upstream"))
        self.assertEqual(e["rx"], 0)
        self.assertEqual(e["tx"], len(ok.body))
        for k in ("duration", "request_duration", "response_duration"):
            self.assertIsInstance(e[k], int, k)
            self.assertGreaterEqual(e[k], 0)
        self.assertEqual(e["upstream_host"], "127.0.0.1:%d" % self.up.port)
        self.assertEqual(e["upstream_cluster"], "up")
        self.assertRegex(e["upstream_local"], r"^127\.0\.0\.1:\d+$")
        self.assertIsNone(e["failure"])
        self.assertRegex(e["remote"], r"^127\.0\.0\.1:\d+$")
        self.assertEqual(e["local"], "127.0.0.1:%d" % self.port)
        self.assertEqual((e["route"], e["protocol"], e["sni"]), ("r-ok", "HTTP/1.1", None))
        self.assertEqual(e["hostname"], socket.gethostname())

        self.assertEqual(by_path["/post"]["rx"], 1000)
        self.assertEqual(by_path["/post"]["method"], "POST")

        e = by_path["/nothing"]
        self.assertEqual((e["code"], e["flags"], e["details"]), (404, "NR", "route_not_found"))
        self.assertIsNone(e["upstream_host"])
        self.assertIsNone(e["route"])

        e = by_path["/dead"]
        self.assertEqual((e["code"], e["flags"]), (503, "UF"))
        self.assertEqual(e["details"], "upstream_reset_before_response_started{connection_failure}")
        self.assertEqual(e["upstream_host"], "127.0.0.1:%d" % dead_port)
        self.assertIn("refused", e["failure"].lower())

        e = by_path["/slow/2"]
        self.assertEqual((e["code"], e["flags"], e["details"]),
                         (504, "UT", "upstream_response_timeout"))
        self.assertGreaterEqual(e["duration"], 250)

        e = by_path["/reset"]
        self.assertEqual((e["code"], e["flags"]), (502, "UC"))
        self.assertEqual(e["details"],
                         "upstream_reset_before_response_started{connection_termination}")

        e = by_path["/tiny/x"]
        self.assertEqual((e["code"], e["flags"], e["details"]), (503, "UO", "overflow"))
        self.assertEqual(by_path["/tiny/slow/1"]["code"], 200)

        e = by_path["/abort/slow/2"]
        self.assertEqual((e["code"], e["flags"], e["details"]),
                         (0, "DC", "downstream_remote_disconnect"))
        self.assertEqual(e["remote"], "127.0.0.1:%d" % client_port)

        # The filtered log has the 5xx answers only.
        errors = sorted(read_lines(errors_log))
        self.assertEqual(errors, sorted(["503 UF /dead", "504 UT /slow/2", "502 UC /reset",
                                         "503 UO /tiny/x"]))

    def test_default_format_and_stdout(self):
        log = os.path.join(self.dir, "access.log")
        self.start_proxy([file_log(log), {"name": "envoy.access_loggers.stdout",
                                          "typed_config": {"@type": STDOUT_LOG}}])
        r = curl("http://127.0.0.1:%d/hello?x=1" % self.port, "-H", "User-Agent: ua/2",
                 "-H", "X-Request-Id: rid-1")
        self.assertEqual(r.status, 200)
        self.flush()
        lines = read_lines(log)
        self.assertEqual(len(lines), 1, lines)
        # Envoy's default format.
        self.assertRegex(
            lines[0],
            r'^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\] "GET /hello\?x=1 HTTP/1.1" 200 - 0 %d '
            r'\d+ - "-" "ua/2" "rid-1" "127.0.0.1:%d" "127.0.0.1:%d"$' %
            (len(r.body), self.port, self.up.port))
        with open(os.path.join(self.proxy.dir, "stdout.log")) as f:
            self.assertEqual(f.read().splitlines(), lines)

    def test_request_headers_to_add_use_the_formatter(self):
        log = os.path.join(self.dir, "access.log")
        r = route("/", "up")
        r["request_headers_to_add"] = [
            {"header": {"key": "x-client", "value": "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"}},
            {"header": {"key": "x-proto", "value": "%PROTOCOL% 100%%"}},
            {"header": {"key": "x-none", "value": "%REQ(X-ABSENT)%"}},
        ]
        self.start_proxy([file_log(log)], routes=[r])
        body = json.loads(curl("http://127.0.0.1:%d/h" % self.port).body)
        headers = {k.lower(): v for k, v in body["headers"]}
        self.assertEqual(headers.get("x-client"), "127.0.0.1")
        self.assertEqual(headers.get("x-proto"), "HTTP/1.1 100%")
        self.assertNotIn("x-none", headers)  # empty: not added, as Envoy does

    def test_rotation_under_load_loses_no_line(self):
        log = os.path.join(self.dir, "access.log")
        self.start_proxy([file_log(log, {"text_format_source": {
            "inline_string": "%REQ(:PATH)% %RESPONSE_CODE%\n"}})])
        threads_n, per_thread = 4, 600
        failures = []

        def load(t):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            try:
                for i in range(per_thread):
                    conn.request("GET", "/t%d/%d" % (t, i))
                    resp = conn.getresponse()
                    resp.read()
                    if resp.status != 200:
                        failures.append(resp.status)
            except Exception as e:  # noqa: BLE001 - any failure fails the test below
                failures.append(repr(e))
            finally:
                conn.close()
        threads = [threading.Thread(target=load, args=(t,)) for t in range(threads_n)]
        for t in threads:
            t.start()
        rotations = 0
        while any(t.is_alive() for t in threads) and rotations < 6:
            time.sleep(0.15)
            rotations += 1
            os.rename(log, "%s.%d" % (log, rotations))
            if rotations % 2:
                self.proxy.proc.send_signal(signal.SIGUSR1)  # logrotate's postrotate
            else:
                self.assertEqual(self.proxy.admin("POST", "/reopen_logs")[0], 200)
            wait_until(lambda: os.path.exists(log), timeout=5, what="the log reopened")
        for t in threads:
            t.join(60)
        self.assertEqual(failures, [])
        self.assertGreaterEqual(rotations, 2)
        self.assertEqual(self.proxy.stat("filesystem.write_dropped"), 0)
        self.flush()
        lines = []
        for p in glob.glob(log + "*"):
            lines += read_lines(p)
        self.assertEqual(len(lines), threads_n * per_thread)
        expected = {"/t%d/%d 200" % (t, i) for t in range(threads_n) for i in range(per_thread)}
        self.assertEqual(set(lines), expected)  # every line whole, none twice

    def test_admin_access_log(self):
        # admin.access_log (as Envoy's examples write it) and the deprecated access_log_path.
        self.up = self.start_echo("up")
        self.port = free_port()
        log = os.path.join(self.dir, "admin.log")
        old_style = os.path.join(self.dir, "admin-path.log")
        cfg = bootstrap([http_listener("l", self.port, [virtual_host("vh", ["*"], [
            route("/", "up")])])], [cluster("up", self.up.port)])
        cfg["admin"]["access_log"] = [file_log(log, {"text_format_source": {
            "inline_string": "%REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE%\n"}})]
        cfg["admin"]["access_log_path"] = old_style
        self.proxy = self.start_rpx(cfg)
        self.assertEqual(self.proxy.admin("GET", "/server_info")[0], 200)
        self.assertEqual(self.proxy.admin("GET", "/nope")[0], 404)
        self.assertEqual(curl("http://127.0.0.1:%d/" % self.port).status, 200)  # not admin
        self.flush()
        lines = read_lines(log)
        self.assertIn("GET /server_info 200", lines)
        self.assertIn("GET /nope 404", lines)
        self.assertFalse(any(line.startswith("GET / ") for line in lines), lines)
        # Envoy's default format in the deprecated form.
        self.assertTrue(any('"GET /server_info HTTP/1.1" 200' in line
                            for line in read_lines(old_style)), read_lines(old_style))

    def test_a_1gib_log_does_not_grow_memory(self):
        log = os.path.join(self.dir, "big.log")
        r = route("/", direct_response=(200, "ok"))
        self.start_proxy([file_log(log, {"text_format_source": {
            "inline_string": "%REQ(X-BIG)%\n"}})], routes=[r],
            hcm_extra={"max_request_headers_kb": 96}, concurrency=1)
        big = "b" * (64 * 1024)
        request = http_request("GET", "/", headers=[("X-Big", big)])

        def send(n):
            s = socket.create_connection(("127.0.0.1", self.port))
            try:
                f = s.makefile("rb")
                for i in range(n):
                    s.sendall(request)
                    status = f.readline()
                    self.assertIn(b" 200 ", status)
                    while f.readline() not in (b"\r\n", b""):
                        pass
                    f.read(2)
            finally:
                s.close()

        def rss_kib():
            with open("/proc/%d/status" % self.proxy.proc.pid) as f:
                return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        send(500)  # warm up: buffers and caches at their working size
        before = rss_kib()
        total = (1 << 30) // (len(big) + 1)
        send(total - 500)
        after = rss_kib()
        self.assertLess(after - before, 48 * 1024,
                        "RSS grew from %d to %d KiB while logging 1 GiB" % (before, after))
        # Once the writer has caught up, what is left (one worker buffer) cannot be dropped.
        wait_until(lambda: self.proxy.stat("filesystem.write_total_buffered") == 0, timeout=60,
                   what="the writer caught up")
        dropped = self.proxy.stat("filesystem.write_dropped_bytes")
        self.flush()
        size = os.path.getsize(log)
        print("1 GiB log: %d requests, %d bytes logged, %d dropped, RSS %d -> %d KiB" %
              (total, size, dropped, before, after))
        # How much reaches the disk depends on the disk and on the writer thread getting a core;
        # what must hold everywhere: every line is either written whole or counted as dropped.
        self.assertEqual(size + dropped, total * (len(big) + 1))
        self.assertEqual(size % (len(big) + 1), 0, "a partial line was written")
        self.assertGreater(size, 0)
        os.unlink(log)


if __name__ == "__main__":
    unittest.main()
