"""Routing: virtual hosts by Host header, path prefixes, rewrites, forwarding headers, hop-by-hop."""

import re
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, curl_multi, free_port,
                     http_listener, http_request, route, virtual_host)

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def header(record, name):
    """The values the upstream received for header `name`."""
    return [v for k, v in record["headers"] if k == name]


class RoutingTest(IntegrationTestCase):

    def setUp(self):
        self.a = self.start_echo("A")
        self.b = self.start_echo("B")
        self.port = free_port()
        vhosts = [
            virtual_host("a", ["a.example.com"], [
                route("/rewrite/", "A", prefix_rewrite="/rewritten/"),
                route("/api/", "B"),
                route(path="/exact", cluster="B"),
                route("/", "A"),
            ]),
            virtual_host("b", ["*.b.example.com"], [
                route("/hostrw/", "B", host_rewrite_literal="rewritten.internal"),
                route("/", "B"),
            ]),
            virtual_host("c", ["c.example.com"], [
                route("/only/", "A"),
            ]),
        ]
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port, vhosts)],
            [cluster("A", self.a.port), cluster("B", self.b.port)]))

    def get(self, path, host, *args):
        return curl("http://127.0.0.1:%d%s" % (self.port, path), "-H", "Host: " + host, *args)

    def assertServedBy(self, resp, name, path):
        self.assertEqual(resp.status, 200, resp)
        rec = resp.json()
        self.assertEqual(rec["server"], name)
        self.assertEqual(rec["path"], path)
        return rec

    def test_exact_host_routes_to_cluster_a(self):
        r = self.get("/hello", "a.example.com")
        rec = self.assertServedBy(r, "A", "/hello")
        self.assertEqual(header(rec, "host"), ["a.example.com"])
        self.assertEqual(self.a.request_count(), 1)
        self.assertEqual(self.b.request_count(), 0)

    def test_wildcard_host_routes_to_cluster_b(self):
        self.assertServedBy(self.get("/x", "foo.b.example.com"), "B", "/x")
        self.assertServedBy(self.get("/y", "deep.er.b.example.com"), "B", "/y")
        self.assertEqual(self.a.request_count(), 0)
        self.assertEqual(self.b.request_count(), 2)

    def test_host_match_ignores_case_and_port(self):
        self.assertServedBy(self.get("/p", "A.Example.COM"), "A", "/p")
        self.assertServedBy(self.get("/q", "foo.b.example.com:8080"), "B", "/q")

    def test_wildcard_needs_a_nonempty_label(self):
        r = self.get("/x", "b.example.com")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.body, b"")

    def test_unknown_host_is_404(self):
        r = self.get("/x", "nope.example.org")
        self.assertEqual(r.status, 404)
        # Envoy's: no body, no content-type.
        self.assertEqual(r.body, b"")
        self.assertEqual(r.headers.get("content-length"), "0")
        self.assertIsNone(r.headers.get("content-type"))
        self.assertEqual(self.a.request_count() + self.b.request_count(), 0)
        stats = self.proxy.stats()
        self.assertEqual(stats["http.ingress.no_route"], 1)
        self.assertEqual(stats["http.ingress.downstream_rq_4xx"], 1)

    def test_path_prefix_routes(self):
        self.assertServedBy(self.get("/api/v1/items", "a.example.com"), "B", "/api/v1/items")
        # "/api/" does not match "/apix": falls through to "/".
        self.assertServedBy(self.get("/apix", "a.example.com"), "A", "/apix")
        # path (exact) match: "/exact" only.
        self.assertServedBy(self.get("/exact", "a.example.com"), "B", "/exact")
        self.assertServedBy(self.get("/exact/more", "a.example.com"), "A", "/exact/more")
        self.assertServedBy(self.get("/exact?q=1", "a.example.com"), "B", "/exact?q=1")

    def test_no_path_match_is_404(self):
        self.assertServedBy(self.get("/only/x", "c.example.com"), "A", "/only/x")
        r = self.get("/other", "c.example.com")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.body, b"")

    def test_prefix_rewrite(self):
        r = self.get("/rewrite/foo/bar?x=1&y=2", "a.example.com")
        self.assertServedBy(r, "A", "/rewritten/foo/bar?x=1&y=2")

    def test_host_rewrite_literal(self):
        rec = self.assertServedBy(self.get("/hostrw/z", "x.b.example.com"), "B", "/hostrw/z")
        self.assertEqual(header(rec, "host"), ["rewritten.internal"])

    def test_method_query_and_body_preserved(self):
        r = self.get("/m?a=1&b=%20", "a.example.com", "-X", "PUT", "--data-binary", "payload")
        rec = self.assertServedBy(r, "A", "/m?a=1&b=%20")
        self.assertEqual(rec["method"], "PUT")
        self.assertEqual(rec["body_length"], 7)
        self.assertEqual(rec["version"], "HTTP/1.1")
        self.assertEqual(header(rec, "content-length"), ["7"])
        r = self.get("/d", "a.example.com", "-X", "DELETE")
        self.assertEqual(self.assertServedBy(r, "A", "/d")["method"], "DELETE")

    def test_forwarding_headers_added(self):
        rec = self.assertServedBy(self.get("/f", "a.example.com"), "A", "/f")
        # Without use_remote_address (Envoy's default) XFF is not rpx's to write.
        self.assertEqual(header(rec, "x-forwarded-for"), [])
        self.assertEqual(header(rec, "x-forwarded-proto"), ["http"])
        ids = header(rec, "x-request-id")
        self.assertEqual(len(ids), 1, rec)
        self.assertRegex(ids[0], UUID_RE)
        # Another request gets another id.
        rec2 = self.assertServedBy(self.get("/f", "a.example.com"), "A", "/f")
        self.assertNotEqual(header(rec2, "x-request-id"), ids)

    def test_forwarding_headers_from_client(self):
        r = self.get("/f", "a.example.com", "-H", "X-Forwarded-For: 10.1.2.3",
                     "-H", "X-Request-Id: my-request-id")
        rec = self.assertServedBy(r, "A", "/f")
        self.assertEqual(header(rec, "x-forwarded-for"), ["10.1.2.3"])
        self.assertEqual(header(rec, "x-request-id"), ["my-request-id"])

    def test_hop_by_hop_request_headers_removed(self):
        r = self.get("/h", "a.example.com",
                     "-H", "Connection: X-Foo, x-bar",
                     "-H", "X-Foo: 1",
                     "-H", "X-Bar: 2",
                     "-H", "Keep-Alive: timeout=5",
                     "-H", "Proxy-Connection: keep-alive",
                     "-H", "TE: gzip",
                     "-H", "X-End-To-End: yes")
        rec = self.assertServedBy(r, "A", "/h")
        names = [k for k, _ in rec["headers"]]
        for gone in ("connection", "x-foo", "x-bar", "keep-alive", "proxy-connection", "te"):
            self.assertNotIn(gone, names, rec["headers"])
        self.assertEqual(header(rec, "x-end-to-end"), ["yes"])

    def test_repeated_headers_and_long_url_preserved(self):
        r = self.get("/dup", "a.example.com", "-H", "X-Dup: 1", "-H", "X-Dup: 2")
        self.assertEqual(header(self.assertServedBy(r, "A", "/dup"), "x-dup"), ["1", "2"])
        long_path = "/long/" + "a" * 32000
        self.assertServedBy(self.get(long_path, "a.example.com"), "A", long_path)

    def test_too_many_request_headers_431(self):
        args = []
        for i in range(101):  # the default limit is 100
            args += ["-H", "X-H%d: v" % i]
        r = self.get("/many", "a.example.com", *args)
        self.assertEqual(r.status, 431)
        self.assertEqual(self.a.request_count(), 0)

    def test_te_trailers_is_kept(self):
        rec = self.assertServedBy(self.get("/t", "a.example.com", "-H", "TE: trailers"), "A", "/t")
        self.assertEqual(header(rec, "te"), ["trailers"])

    def test_hop_by_hop_response_headers_removed(self):
        r = self.get("/hop", "a.example.com")
        self.assertServedBy(r, "A", "/hop")
        names = [k for k, _ in r.header_list]
        for gone in ("x-hop-resp", "keep-alive", "proxy-connection"):
            self.assertNotIn(gone, names, r.header_list)
        for v in r.header_values("connection"):
            self.assertNotIn("x-hop-resp", v.lower())
        self.assertEqual(r.headers.get("x-end-to-end"), "kept")


class RouteFeaturesTest(IntegrationTestCase):
    """Redirects, direct responses, header/regex matching, header mutation, load balancing."""

    def setUp(self):
        self.a = self.start_echo("A")
        self.b = self.start_echo("B")
        self.port = free_port()
        vh = virtual_host("v", ["*"], [
            {"match": {"prefix": "/secure/"}, "redirect": {"https_redirect": True}},
            {"match": {"prefix": "/old/"},
             "redirect": {"prefix_rewrite": "/new/", "response_code": "FOUND"}},
            route("/direct", direct_response=(418, "short and stout\n")),
            route("/nobody", direct_response=(204, "a body a 204 cannot carry\n")),
            {"match": {"prefix": "/pick",
                       "headers": [{"name": "x-pick", "string_match": {"exact": "b"}}]},
             "route": {"cluster": "B"}},
            {"match": {"safe_regex": {"regex": "/re/[0-9]+"}}, "route": {"cluster": "B"}},
            {"match": {"prefix": "/ops"}, "route": {"cluster": "A"},
             "request_headers_to_add": [{"header": {"key": "x-route", "value": "r"}}],
             "request_headers_to_remove": ["x-secret"],
             "response_headers_to_add": [{"header": {"key": "x-resp-route", "value": "rr"}}]},
            route("/lb/", "AB"),
            route("/", "A"),
        ])
        vh["request_headers_to_add"] = [{"header": {"key": "x-vhost", "value": "v"}}]
        vh["response_headers_to_add"] = [{"header": {"key": "x-resp-vhost", "value": "vv"}}]
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port, [vh])],
            [cluster("A", self.a.port), cluster("B", self.b.port),
             cluster("AB", [self.a.port, self.b.port], lb_policy="ROUND_ROBIN")]),
            concurrency=1)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def test_https_redirect(self):
        r = curl(self.url("/secure/x?q=1"), "-H", "Host: a.example.com")
        self.assertEqual(r.status, 301)
        self.assertEqual(r.headers.get("location"), "https://a.example.com/secure/x?q=1")
        self.assertEqual(self.proxy.stat("http.ingress.rq_redirect"), 1)

    def test_prefix_redirect(self):
        r = curl(self.url("/old/x?q=1"), "-H", "Host: a.example.com")
        self.assertEqual(r.status, 302)
        self.assertEqual(r.headers.get("location"), "http://a.example.com/new/x?q=1")

    def test_direct_response(self):
        r = curl(self.url("/direct"))
        self.assertEqual((r.status, r.body), (418, b"short and stout\n"))
        self.assertEqual(self.a.request_count() + self.b.request_count(), 0)

    def test_direct_response_204_drops_its_body(self):
        # Found by fuzzing: the configured body used to follow a 204 head and desync the
        # connection. The next request on the same connection must get its own response.
        c = self.raw_client(self.port)
        c.send(http_request("GET", "/nobody") + http_request("GET", "/direct"))
        r = c.read_response()
        self.assertEqual((r.status, r.body), (204, b""))
        r = c.read_response()
        self.assertEqual((r.status, r.body), (418, b"short and stout\n"))

    def test_header_match(self):
        self.assertEqual(curl(self.url("/pick"), "-H", "x-pick: b").json()["server"], "B")
        self.assertEqual(curl(self.url("/pick"), "-H", "x-pick: c").json()["server"], "A")
        self.assertEqual(curl(self.url("/pick")).json()["server"], "A")

    def test_regex_match(self):
        self.assertEqual(curl(self.url("/re/123")).json()["server"], "B")
        self.assertEqual(curl(self.url("/re/12a")).json()["server"], "A")

    def test_header_mutation(self):
        r = curl(self.url("/ops"), "-H", "x-secret: s")
        rec = r.json()
        self.assertEqual(header(rec, "x-route"), ["r"])
        self.assertEqual(header(rec, "x-vhost"), ["v"])
        self.assertEqual(header(rec, "x-secret"), [])
        self.assertEqual(r.headers.get("x-resp-route"), "rr")
        self.assertEqual(r.headers.get("x-resp-vhost"), "vv")

    def test_round_robin_over_two_endpoints(self):
        responses, _ = curl_multi([self.url("/lb/%d" % i) for i in range(10)])
        servers = [r.json()["server"] for r in responses]
        self.assertEqual(sorted(servers), ["A"] * 5 + ["B"] * 5, servers)
        for x, y in zip(servers, servers[1:]):
            self.assertNotEqual(x, y, servers)

    def test_absolute_form_request_uri(self):
        c = self.raw_client(self.port)
        c.send(b"GET http://abs.example.com/abs?x=1 HTTP/1.1\r\nHost: other\r\n\r\n")
        r = c.read_response()
        rec = r.json()
        self.assertEqual(rec["path"], "/abs?x=1")
        self.assertEqual(header(rec, "host"), ["abs.example.com"])

    def test_bad_request_heads(self):
        for raw, status in [
                (b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
                (b"GET / HTTP/1.1\r\n\r\n", 400),
                (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
                (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431)]:
            c = self.raw_client(self.port)
            c.send(raw)
            r = c.read_response()
            self.assertEqual(r.status, status, (raw[:60], r))
            self.assertTrue(c.at_eof())
        self.assertEqual(self.a.request_count(), 0)


class ServerHeaderTest(IntegrationTestCase):
    """server_header_transformation, as Envoy: OVERWRITE (the default) replaces the upstream's
    Server header with server_name, APPEND_IF_ABSENT keeps the upstream's, PASS_THROUGH leaves it
    alone. The upstream (the echo server) always sends its own."""

    def test_each_transformation(self):
        up = self.start_echo("A")
        modes = {"OVERWRITE": free_port(), "APPEND_IF_ABSENT": free_port(),
                 "PASS_THROUGH": free_port(), "default": free_port()}
        listeners = []
        for mode, port in modes.items():
            extra = {"server_name": "edge"}
            if mode != "default":
                extra["server_header_transformation"] = mode
            listeners.append(http_listener(mode.lower(), port, [virtual_host("v", ["*"], [
                route("/", "A")])], hcm_extra=extra))
        self.start_rpx(bootstrap(listeners, [cluster("A", up.port)]))

        def servers(mode):
            r = curl("http://127.0.0.1:%d/x" % modes[mode])
            self.assertEqual(r.status, 200, r)
            return [v for k, v in r.header_list if k == "server"]

        self.assertEqual(servers("OVERWRITE"), ["edge"])
        self.assertEqual(servers("default"), ["edge"])
        upstream_says = servers("PASS_THROUGH")
        self.assertEqual(len(upstream_says), 1, upstream_says)
        self.assertTrue(upstream_says[0].startswith("echo-upstream"), upstream_says)
        self.assertEqual(servers("APPEND_IF_ABSENT"), upstream_says)


class ForwardedForTest(IntegrationTestCase):
    """x-forwarded-for and x-forwarded-proto, as Envoy: the client's address is appended only with
    use_remote_address (the default, false, leaves XFF as the client sent it), and
    skip_xff_append turns the appending off again; with use_remote_address x-forwarded-proto is
    rpx's own, without it a client's value is kept."""

    def test_use_remote_address_and_skip_xff_append(self):
        up = self.start_echo("A")
        modes = {"default": ({}, free_port()),
                 "remote": ({"use_remote_address": True}, free_port()),
                 "skip": ({"use_remote_address": True, "skip_xff_append": True}, free_port())}
        listeners = [http_listener(name, port, [virtual_host("v", ["*"], [route("/", "A")])],
                                   hcm_extra=extra) for name, (extra, port) in modes.items()]
        self.start_rpx(bootstrap(listeners, [cluster("A", up.port)]))

        def sent(mode, *args):
            r = curl("http://127.0.0.1:%d/x" % modes[mode][1], *args)
            self.assertEqual(r.status, 200, r)
            rec = r.json()
            return header(rec, "x-forwarded-for"), header(rec, "x-forwarded-proto")

        client = ("-H", "X-Forwarded-For: 10.1.2.3", "-H", "X-Forwarded-Proto: https")
        self.assertEqual(sent("default"), ([], ["http"]))
        self.assertEqual(sent("default", *client), (["10.1.2.3"], ["https"]))
        self.assertEqual(sent("remote"), (["127.0.0.1"], ["http"]))
        self.assertEqual(sent("remote", *client), (["10.1.2.3, 127.0.0.1"], ["http"]))
        self.assertEqual(sent("skip"), ([], ["http"]))
        self.assertEqual(sent("skip", *client), (["10.1.2.3"], ["http"]))


if __name__ == "__main__":
    unittest.main()
