"""Connection reuse: downstream keep-alive, upstream pooling, circuit-breaker connection limits."""

import threading
import time
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl_multi, free_port,
                     http_listener, route, virtual_host)


class KeepAliveTest(IntegrationTestCase):

    def start(self, concurrency=2, route_timeout="10s", **cluster_args):
        self.echo = self.start_echo("E", **cluster_args.pop("echo_args", {}))
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port,
                           [virtual_host("all", ["*"], [route("/", "E", timeout=route_timeout)])])],
            [cluster("E", self.echo.port, **cluster_args)]), concurrency=concurrency)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def test_sequential_requests_share_one_connection_each_side(self):
        self.start()
        urls = [self.url("/seq/%d" % i) for i in range(50)]
        responses, cp = curl_multi(urls)
        self.assertEqual(cp.returncode, 0, cp.stderr_text)
        for i, r in enumerate(responses):
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["path"], "/seq/%d" % i)
        # Downstream: curl connected once; rpx saw one connection.
        self.assertEqual(sum(r.num_connects for r in responses), 1)
        stats = self.proxy.stats()
        self.assertEqual(stats["http.ingress.downstream_cx_total"], 1)
        self.assertEqual(stats["http.ingress.downstream_rq_total"], 50)
        self.assertEqual(stats["http.ingress.downstream_rq_2xx"], 50)
        # Upstream: one pooled connection carried all 50 requests.
        self.assertEqual(self.echo.accepted, 1)
        self.assertEqual({r.json()["conn_id"] for r in responses}, {1})
        self.assertEqual(stats["cluster.E.upstream_cx_total"], 1)
        self.assertEqual(stats["cluster.E.upstream_rq_total"], 50)
        self.assertEqual(stats["cluster.E.upstream_rq_2xx"], 50)
        self.assertEqual(stats["cluster.E.upstream_cx_active"], 1)

    def test_max_requests_per_connection(self):
        self.start(max_requests_per_connection=10)
        responses, _ = curl_multi([self.url("/m/%d" % i) for i in range(50)])
        self.assertEqual([r.status for r in responses], [200] * 50)
        conn_ids = [r.json()["conn_id"] for r in responses]
        # Ten requests per upstream connection, in order.
        self.assertEqual(conn_ids, [1 + i // 10 for i in range(50)])
        self.assertEqual(self.echo.accepted, 5)
        stats = self.proxy.stats()
        self.assertEqual(stats["cluster.E.upstream_cx_total"], 5)
        self.assertEqual(stats["cluster.E.upstream_cx_max_requests"], 5)
        self.assertEqual(stats["http.ingress.downstream_cx_total"], 1)

    def test_parallel_clients_respect_max_connections(self):
        max_conns = 4
        self.start(max_connections=max_conns)
        clients, per_client = 20, 20
        results = [None] * clients
        errors = []

        def run(i):
            try:
                urls = [self.url("/slow/0.01?c=%d&r=%d" % (i, j)) for j in range(per_client)]
                results[i] = curl_multi(urls, timeout=60)
            except Exception as e:  # reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        self.assertFalse(errors, errors)
        self.assertFalse(any(t.is_alive() for t in threads), "clients did not finish in 90s")
        statuses = [r.status for responses, _ in results for r in responses]
        self.assertEqual(statuses, [200] * (clients * per_client))
        # Each client kept one downstream connection.
        for responses, _ in results:
            self.assertEqual(sum(r.num_connects for r in responses), 1)
        stats = self.proxy.stats()
        self.assertEqual(stats["http.ingress.downstream_cx_total"], clients)
        self.assertEqual(stats["cluster.E.upstream_rq_total"], clients * per_client)
        # The cluster never had more than max_connections upstream connections open at once...
        self.assertLessEqual(self.echo.peak_open, max_conns)
        self.assertLessEqual(stats["cluster.E.upstream_cx_active"], max_conns)
        # ...and pooled connections were reused, not replaced: over the whole run the upstream
        # saw max_connections connections, plus at most one per worker (a worker left without
        # any connection may get a slot handed over from another worker, which closes one).
        self.assertEqual(stats["cluster.E.upstream_cx_total"], self.echo.accepted)
        self.assertLessEqual(self.echo.accepted, max_conns + self.proxy.concurrency,
                             "upstream accepted %d connections (peak open %d), stats: %s" %
                             (self.echo.accepted, self.echo.peak_open,
                              {k: v for k, v in stats.items() if k.startswith("cluster.E.")}))

    def test_parallel_clients_without_limit_reuse_connections(self):
        self.start()
        clients, per_client = 8, 10
        results = [None] * clients

        def run(i):
            results[i] = curl_multi([self.url("/slow/0.01?%d" % j) for j in range(per_client)])

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        statuses = [r.status for responses, _ in results for r in responses]
        self.assertEqual(statuses, [200] * (clients * per_client))
        # At most one upstream connection per concurrent downstream request.
        self.assertLessEqual(self.echo.accepted, clients)
        self.assertEqual(self.proxy.stat("cluster.E.upstream_cx_total"), self.echo.accepted)

    def test_idle_connection_on_another_worker_does_not_starve_requests(self):
        # max_connections: 1 and two workers. The first request leaves the only connection idle
        # in one worker's pool. Later clients land on either worker (SO_REUSEPORT); those on the
        # other worker must still be served (by taking over or closing the idle connection),
        # not wait for a slot that nobody gives back until the route timeout fires.
        self.start(max_connections=1, route_timeout="1s")
        self.assertEqual(curl_multi([self.url("/first")])[0][0].status, 200)
        outcomes = []
        for i in range(10):  # separate curl runs: new connections, spread over both workers
            r = curl_multi([self.url("/later/%d" % i)], timeout=5)[0][0]
            outcomes.append((r.status, round(r.info.get("time_total", 0), 2)))
        slow = [o for o in outcomes if o[0] != 200]
        if slow:
            self.fail("%d of 10 requests were not served (status, seconds): %s; stats: %s" % (
                len(slow), outcomes,
                {k: v for k, v in self.proxy.stats().items() if k.startswith("cluster.E.") and v}))

    def test_upstream_idle_timeout(self):
        self.start(concurrency=1, idle_timeout="0.3s")
        r1, _ = curl_multi([self.url("/one")])
        time.sleep(0.8)
        r2, _ = curl_multi([self.url("/two")])
        self.assertEqual([r1[0].status, r2[0].status], [200, 200])
        self.assertEqual(self.echo.accepted, 2)
        stats = self.proxy.stats()
        self.assertEqual(stats["cluster.E.upstream_cx_idle_timeout"], 1)
        self.assertEqual(stats["cluster.E.upstream_cx_total"], 2)

    def test_upstream_connection_close_is_not_reused(self):
        self.start(concurrency=1)
        responses, _ = curl_multi([self.url("/close") for _ in range(5)] + [self.url("/x")])
        self.assertEqual([r.status for r in responses], [200] * 6)
        self.assertEqual(self.echo.accepted, 6)
        self.assertEqual([r.json()["conn_id"] for r in responses], [1, 2, 3, 4, 5, 6])
        # The client's connection was kept throughout.
        self.assertEqual(sum(r.num_connects for r in responses), 1)

    def test_upstream_closing_idle_connection_is_detected(self):
        # The upstream drops idle keep-alive connections after 0.2s; rpx must notice and not send
        # the next request on the dead connection.
        self.start(concurrency=1, echo_args={"keepalive_timeout": 0.2})
        for i in range(3):
            r, _ = curl_multi([self.url("/idle/%d" % i)])
            self.assertEqual(r[0].status, 200, r[0])
            time.sleep(0.6)
        self.assertEqual(self.echo.accepted, 3)
        self.assertEqual(self.proxy.stat("cluster.E.upstream_cx_destroy_remote"), 3)
        self.assertEqual(self.proxy.stat("cluster.E.upstream_cx_active"), 0)

    def test_client_connection_close(self):
        self.start()
        responses, _ = curl_multi([self.url("/a"), self.url("/b")], "-H", "Connection: close")
        self.assertEqual([r.status for r in responses], [200, 200])
        self.assertEqual(responses[0].headers.get("connection"), "close")
        self.assertEqual([r.num_connects for r in responses], [1, 1])
        self.assertEqual(self.proxy.stat("http.ingress.downstream_cx_total"), 2)

    def test_http10_keep_alive(self):
        self.start()
        responses, _ = curl_multi([self.url("/a"), self.url("/b")], "-0",
                                  "-H", "Connection: keep-alive")
        self.assertEqual([r.status for r in responses], [200, 200])
        self.assertEqual(responses[0].headers.get("connection", "").lower(), "keep-alive")
        self.assertEqual([r.num_connects for r in responses], [1, 0])

    def test_http10_without_keep_alive_closes(self):
        self.start()
        responses, _ = curl_multi([self.url("/a"), self.url("/b")], "-0")
        self.assertEqual([r.status for r in responses], [200, 200])
        self.assertEqual([r.num_connects for r in responses], [1, 1])


if __name__ == "__main__":
    unittest.main()
