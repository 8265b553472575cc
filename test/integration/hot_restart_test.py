"""Hot restart: a new rpx started with --restart-epoch N+1 takes the listening sockets of the
running epoch N over a Unix socket (SCM_RIGHTS); the old one drains and exits 0. Under wrk
load across the handover: no refused connection, no failed request."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import unittest

from harness import (IntegrationTestCase, Rpx, bootstrap, cluster, curl, free_port, http_listener,
                     make_tmpdir, origin_bin, remove_tmpdir, route, virtual_host, wait_until)

_next_base_id = [os.getpid() % 100000 * 10]


def base_id():
    # Distinct per test: abstract Unix sockets are shared by every process in the network
    # namespace, and tests run side by side.
    _next_base_id[0] += 1
    return str(_next_base_id[0])


class HotRestartTest(IntegrationTestCase):

    def config(self, upstream_port):
        self.port = getattr(self, "port", None) or free_port()
        self.admin_port = getattr(self, "admin_port", None) or free_port()
        return bootstrap([http_listener("l", self.port, [virtual_host("all", ["*"], [
            route("/", "up", timeout="20s")])])], [cluster("up", upstream_port)],
            admin_port=self.admin_port)

    def start_epoch(self, cfg, epoch, base, *extra, wait_ready=True, concurrency=2):
        args = ["--restart-epoch", str(epoch), "--base-id", base, "--drain-time-s", "10"]
        proxy = Rpx(cfg, extra_args=args + list(extra), log_level="info", wait_ready=wait_ready,
                    concurrency=concurrency)
        self.addCleanup(proxy.cleanup)
        proxy.start()
        return proxy

    def server_info(self):
        status, body = Rpx.admin(self.parent, "GET", "/server_info")
        self.assertEqual(status, 200)
        return json.loads(body)

    def start_origin(self):
        root = make_tmpdir("rpx-it-origin-")
        self.addCleanup(remove_tmpdir, root)
        with open(os.path.join(root, "small.txt"), "wb") as f:
            f.write(b"x" * 30)
        port = free_port()
        self.start_listening_process([origin_bin(), root, str(port)], [port], "origin")
        return port

    def test_wrk_sees_no_error_across_the_handover(self):
        wrk = shutil.which("wrk")
        if not wrk:
            raise unittest.SkipTest("wrk is not installed")
        origin = self.start_origin()
        cfg = self.config(origin)
        base = base_id()
        self.parent = self.start_epoch(cfg, 0, base)
        out = {}

        def load():
            p = subprocess.run(["timeout", "60", wrk, "-t1", "-c16", "-d6s",
                                "http://127.0.0.1:%d/small.txt" % self.port],
                               capture_output=True, text=True)
            out["rc"], out["text"] = p.returncode, p.stdout + p.stderr
        t = threading.Thread(target=load)
        t.start()
        wait_until(lambda: self.parent.stat("http.l.downstream_rq_total") > 200,
                   timeout=10, what="load on epoch 0")
        child = self.start_epoch(cfg, 1, base, wait_ready=False)
        # The parent drains (its connections are told Connection: close) and exits 0.
        self.assertEqual(self.parent.wait_exit(30), 0, self.parent.stderr_text())
        t.join(70)
        self.assertEqual(out.get("rc"), 0, out)
        text = out["text"]
        print(text)
        self.assertNotIn("Socket errors", text, text)
        self.assertNotIn("Non-2xx", text, text)
        requests = int(re.search(r"(\d+) requests in", text).group(1))
        self.assertGreater(requests, 0)
        # The successor served after the handover, on the same port and admin port.
        self.assertTrue(child.alive(), child.stderr_text())
        self.assertGreater(child.stat("http.l.downstream_rq_total"), 0)
        info = json.loads(child.admin("GET", "/server_info")[1])
        self.assertEqual(info["command_line_options"]["restart_epoch"], 1)
        self.assertEqual(info["hot_restart_version"], "rpx.1")
        self.assertEqual(child.stat("server.hot_restart_epoch"), 1)
        self.assertEqual(curl("http://127.0.0.1:%d/small.txt" % self.port).status, 200)
        self.assertIn("took", child.stderr_text())
        child.check_clean_exit()

    def test_requests_in_flight_finish_on_the_old_epoch(self):
        up = self.start_echo("up")
        cfg = self.config(up.port)
        base = base_id()
        self.parent = self.start_epoch(cfg, 0, base)
        results = []

        def get():
            results.append(curl("http://127.0.0.1:%d/slow/2" % self.port, timeout=30))
        threads = [threading.Thread(target=get) for _ in range(4)]
        for t in threads:
            t.start()
        wait_until(lambda: up.in_flight == 4, timeout=10, what="4 requests in flight")
        child = self.start_epoch(cfg, 1, base, wait_ready=False)
        # New connections go to the successor while the old requests are still running.
        wait_until(lambda: "draining" in self.parent.stderr_text(), timeout=10,
                   what="epoch 0 to drain")
        r = curl("http://127.0.0.1:%d/fast" % self.port)
        self.assertEqual(r.status, 200)
        for t in threads:
            t.join(30)
        self.assertEqual([r.status for r in results], [200] * 4, results)
        self.assertEqual(self.parent.wait_exit(30), 0)
        self.assertEqual(child.stat("http.l.downstream_rq_total"), 1)
        child.check_clean_exit()

    def test_parent_shutdown_time_bounds_the_old_epochs_drain(self):
        # The parent may drain 10 s; the successor's --parent-shutdown-time-s 1 cuts that short,
        # so a 5-second request on the old epoch does not get its answer.
        up = self.start_echo("up")
        cfg = self.config(up.port)
        base = base_id()
        self.parent = self.start_epoch(cfg, 0, base)
        results = []
        t = threading.Thread(target=lambda: results.append(
            curl("http://127.0.0.1:%d/slow/5" % self.port, timeout=30)))
        t.start()
        wait_until(lambda: up.in_flight == 1, timeout=10, what="the slow request in flight")
        child = self.start_epoch(cfg, 1, base, "--parent-shutdown-time-s", "1", wait_ready=False)
        self.assertEqual(self.parent.wait_exit(30), 0)
        t.join(30)
        self.assertNotEqual(results[0].status, 200, results)
        self.assertIn("up to 1000 ms", self.parent.stderr_text())
        self.assertEqual(curl("http://127.0.0.1:%d/x" % self.port).status, 200)
        child.check_clean_exit()

    def test_a_third_epoch_takes_over_from_the_second(self):
        up = self.start_echo("up")
        cfg = self.config(up.port)
        base = base_id()
        self.parent = self.start_epoch(cfg, 0, base)
        second = self.start_epoch(cfg, 1, base, wait_ready=False, concurrency=1)
        self.assertEqual(self.parent.wait_exit(30), 0)
        # More workers than inherited sockets: the extra ones join the SO_REUSEPORT group.
        third = self.start_epoch(cfg, 2, base, wait_ready=False, concurrency=3)
        self.assertEqual(second.wait_exit(30), 0, second.stderr_text())
        for _ in range(20):
            self.assertEqual(curl("http://127.0.0.1:%d/x" % self.port).status, 200)
        self.assertEqual(third.stat("http.l.downstream_rq_total"), 20)
        info = json.loads(third.admin("GET", "/server_info")[1])
        self.assertEqual(info["command_line_options"]["restart_epoch"], 2)
        third.check_clean_exit()

    def test_a_successor_that_fails_leaves_the_parent_serving(self):
        up = self.start_echo("up")
        cfg = self.config(up.port)
        base = base_id()
        self.parent = self.start_epoch(cfg, 0, base)
        # The successor's second listener wants a port a stranger holds: it fails after taking
        # the sockets, before asking the parent to drain.
        stranger = socket.socket()
        stranger.bind(("127.0.0.1", 0))
        stranger.listen(1)
        self.addCleanup(stranger.close)
        bad = self.config(up.port)
        bad["static_resources"]["listeners"].append(http_listener(
            "taken", stranger.getsockname()[1], [virtual_host("all", ["*"], [route("/", "up")])]))
        child = Rpx(bad, extra_args=["--restart-epoch", "1", "--base-id", base], wait_ready=False)
        self.addCleanup(child.cleanup)
        child.start()
        self.assertEqual(child.wait_exit(20), 1)
        self.assertIn("cannot bind", child.stderr_text())
        for _ in range(10):
            self.assertEqual(curl("http://127.0.0.1:%d/x" % self.port).status, 200)
        self.assertTrue(self.parent.alive())
        self.parent.check_clean_exit()

    def test_an_epoch_without_a_parent_is_an_error(self):
        up = self.start_echo("up")
        base = base_id()
        child = Rpx(self.config(up.port), extra_args=["--restart-epoch", "1", "--base-id", base],
                    wait_ready=False)
        self.addCleanup(child.cleanup)
        child.start()
        self.assertEqual(child.wait_exit(20), 1)
        self.assertIn("no rpx of epoch 0 (base id %s)" % base, child.stderr_text())

    def test_two_instances_with_one_base_id_are_refused(self):
        up = self.start_echo("up")
        base = base_id()
        self.parent = self.start_epoch(self.config(up.port), 0, base)
        self.port = self.admin_port = None  # the second instance has ports of its own
        other = Rpx(self.config(up.port), extra_args=["--restart-epoch", "0", "--base-id", base],
                    wait_ready=False)
        self.addCleanup(other.cleanup)
        other.start()
        self.assertEqual(other.wait_exit(20), 1)
        self.assertIn("another rpx runs with --base-id %s" % base, other.stderr_text())
        self.assertTrue(self.parent.alive())
        self.parent.check_clean_exit()


if __name__ == "__main__":
    unittest.main()
