"""The bundled configs/quickstart.yaml, served for real (with its fixed ports made ephemeral)."""

import signal
import time
import unittest

from harness import (IntegrationTestCase, RawClient, Rpx, curl, curl_multi, free_port,
                     http_request, quickstart_config)


def quickstart_with_ports(listen_port, admin_port):
    with open(quickstart_config()) as f:
        text = f.read()
    # 9901: the admin listener and the "admin" cluster's endpoint; 10000: the listener.
    if text.count("port_value: 9901") != 2 or text.count("port_value: 10000") != 1:
        raise AssertionError("configs/quickstart.yaml changed shape: expected port_value 9901 "
                             "twice and 10000 once")
    return (text.replace("port_value: 9901", "port_value: %d" % admin_port)
            .replace("port_value: 10000", "port_value: %d" % listen_port))


class QuickstartTest(IntegrationTestCase):

    def setUp(self):
        self.port = free_port()
        self.admin_port = free_port()
        self.proxy = self.start_rpx(quickstart_with_ports(self.port, self.admin_port),
                                    admin_port=self.admin_port)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def test_root_is_a_direct_response(self):
        r = curl(self.url("/"))
        self.assertEqual(r.status, 200)
        self.assertTrue(r.body.startswith(b"Hello from rpx"), r.body)
        self.assertEqual(r.headers.get("content-type"), "text/plain")
        self.assertEqual(r.headers.get("content-length"), str(len(r.body)))
        stats = self.proxy.stats()
        self.assertEqual(stats["http.quickstart.rq_direct_response"], 1)
        self.assertEqual(stats["cluster.admin.upstream_rq_total"], 0)

    def test_head_on_direct_response(self):
        get = curl(self.url("/"))
        head = curl(self.url("/"), "-I")
        self.assertEqual(head.status, 200)
        self.assertEqual(head.headers.get("content-length"), str(len(get.body)))
        self.assertEqual(head.info.get("size_download"), 0)

    def test_admin_ready_through_the_proxy(self):
        r = curl(self.url("/admin/ready"))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"LIVE\n")
        stats = self.proxy.stats()
        self.assertEqual(stats["cluster.admin.upstream_rq_total"], 1)
        self.assertEqual(stats["cluster.admin.upstream_rq_2xx"], 1)
        self.assertEqual(stats["http.quickstart.downstream_rq_2xx"], 1)

    def test_admin_stats_through_the_proxy(self):
        responses, _ = curl_multi([self.url("/admin/stats"), self.url("/admin/stats")])
        self.assertEqual([r.status for r in responses], [200, 200])
        text = responses[1].body.decode()
        # The snapshot counts the first request and the one in flight (itself).
        self.assertIn("cluster.admin.upstream_rq_total: 2\n", text)
        self.assertIn("cluster.admin.upstream_rq_active: 1\n", text)
        self.assertIn("http.quickstart.downstream_rq_total: ", text)
        self.assertIn("server.live: 1\n", text)
        self.assertEqual([r.num_connects for r in responses], [1, 0])

    def test_admin_paths_through_the_proxy(self):
        r = curl(self.url("/admin/nope"))
        self.assertEqual(r.status, 404)
        self.assertIn(b"unknown admin path: /nope", r.body)
        r = curl(self.url("/admin/quitquitquit"))  # GET: refused, rpx keeps running
        self.assertEqual(r.status, 405)
        self.assertTrue(self.proxy.alive())
        r = curl(self.url("/admin/server_info"))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json()["state"], "LIVE")
        self.assertEqual(r.json()["concurrency"], 2)


class ShutdownTest(IntegrationTestCase):

    def start_quickstart(self, extra_args=()):
        port, admin_port = free_port(), free_port()
        proxy = Rpx(quickstart_with_ports(port, admin_port), admin_port=admin_port,
                    extra_args=extra_args)
        self.addCleanup(proxy.cleanup)
        proxy.start()
        return proxy, port

    def test_quitquitquit_exits_cleanly(self):
        proxy, port = self.start_quickstart()
        status, body = proxy.admin("POST", "/quitquitquit")
        self.assertEqual((status, body), (200, b"OK\n"))
        self.assertEqual(proxy.proc.wait(5), 0)

    def test_sigterm_with_open_connections_exits_cleanly(self):
        # SIGTERM drains: the idle connection closes at once; the one with half a request head
        # keeps rpx up to the drain time (2 s here), then everything closes and rpx exits 0.
        proxy, port = self.start_quickstart(["--drain-time-s", "2"])
        idle = RawClient(port)
        self.addCleanup(idle.close)
        idle.send(http_request("GET", "/"))
        self.assertEqual(idle.read_response().status, 200)  # now idle, kept alive
        busy = RawClient(port)
        self.addCleanup(busy.close)
        busy.send(http_request("GET", "/admin/ready"))
        self.assertEqual(busy.read_response().status, 200)
        half = RawClient(port)  # a request head in progress
        self.addCleanup(half.close)
        half.send(b"GET / HTTP/1.1\r\nHo")
        time.sleep(0.1)
        proxy.proc.send_signal(signal.SIGTERM)  # by PID
        self.assertTrue(idle.at_eof(2))
        self.assertEqual(proxy.proc.wait(15), 0)

    def test_sigterm_exits_cleanly(self):
        proxy, port = self.start_quickstart()
        self.assertEqual(curl("http://127.0.0.1:%d/" % port).status, 200)
        proxy.proc.send_signal(signal.SIGTERM)  # by PID
        self.assertEqual(proxy.proc.wait(5), 0)


if __name__ == "__main__":
    unittest.main()
