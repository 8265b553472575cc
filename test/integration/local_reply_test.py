"""local_reply_config: rpx's own answers (no route, no upstream, direct responses) rewritten by
Envoy's mappers (status, body, headers) and formatted by body_format (text or JSON, with
%LOCAL_REPLY_BODY%); and scheme_header_transformation as header formatters see it."""

import json
import unittest

from harness import (IntegrationTestCase, bootstrap, cluster, curl, free_port, http_listener,
                     route, virtual_host)


def status_is(code):
    return {"status_code_filter": {"comparison": {
        "op": "EQ", "value": {"default_value": code, "runtime_key": "k"}}}}


class LocalReplyTest(IntegrationTestCase):

    def setUp(self):
        super().setUp()
        self.up = self.start_echo("up")
        self.port = free_port()
        dead = free_port()
        echo_route = route("/echo", "up")
        echo_route["request_headers_to_add"] = [
            {"header": {"key": "x-scheme", "value": "%REQ(:SCHEME)%"}}]
        hcm = {
            "scheme_header_transformation": {"scheme_to_overwrite": "https"},
            "local_reply_config": {
                "mappers": [
                    {"filter": status_is(404), "status_code": 410,
                     "body": {"inline_string": "nothing here"},
                     "headers_to_add": [{"header": {"key": "x-local", "value": "%RESPONSE_CODE%"},
                                         "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]},
                    {"filter": status_is(503),
                     "body_format_override": {"text_format_source": {
                         "inline_string": "sorry: %LOCAL_REPLY_BODY%"}}},
                ],
                "body_format": {"json_format": {
                    "code": "%RESPONSE_CODE%", "message": "%LOCAL_REPLY_BODY%",
                    "path": "%REQ(:PATH)%"}},
            },
        }
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("l", self.port, [
                virtual_host("v", ["localhost", "127.0.0.1:%d" % self.port], [
                    echo_route,
                    route("/dead", "dead"),
                    route("/direct", direct_response=(200, "hello")),
                ])], hcm_extra=hcm)],
            [cluster("up", self.up.port), cluster("dead", dead)]))

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def test_a_mapper_rewrites_status_body_and_headers(self):
        r = curl(self.url("/nothing"), "-H", "Host: elsewhere")
        self.assertEqual(r.status, 410)
        self.assertEqual(r.headers.get("x-local"), "410")
        self.assertEqual(r.headers.get("content-type"), "application/json")
        self.assertEqual(json.loads(r.body),
                         {"code": 410, "message": "nothing here", "path": "/nothing"})

    def test_a_mapper_overrides_the_format(self):
        r = curl(self.url("/dead"))
        self.assertEqual(r.status, 503)
        self.assertEqual(r.headers.get("content-type"), "text/plain")
        self.assertTrue(r.body.startswith(b"sorry: upstream connect error: "), r.body)

    def test_unmatched_replies_take_the_body_format(self):
        r = curl(self.url("/direct"))
        self.assertEqual(r.status, 200)
        self.assertEqual(json.loads(r.body), {"code": 200, "message": "hello", "path": "/direct"})

    def test_a_welcome_page_for_get_requests_nothing_routes(self):
        # The shape of Envoy's own configs/envoy-demo.yaml: a route table with no virtual host
        # and a mapper keyed on the :method pseudo-header that serves an HTML page.
        port = free_port()
        page = "<html><body><h1>Welcome</h1></body></html>\n"
        hcm = {"local_reply_config": {"mappers": [{
            "filter": {"header_filter": {"header": {"name": ":method",
                                                    "string_match": {"exact": "GET"}}}},
            "body_format_override": {"text_format_source": {"inline_string": page},
                                     "content_type": "text/html; charset=UTF-8"}}]}}
        listener = http_listener("welcome", port, [], hcm_extra=hcm)
        listener["filter_chains"][0]["filters"][0]["typed_config"]["route_config"] = {
            "name": "local_route"}
        proxy = self.start_rpx(bootstrap([listener], []))
        r = curl("http://127.0.0.1:%d/" % port)
        self.assertEqual(r.status, 404)
        self.assertEqual(r.headers.get("content-type"), "text/html; charset=UTF-8")
        self.assertEqual(r.body.decode(), page)
        r = curl("http://127.0.0.1:%d/" % port, "-X", "POST", "-d", "x")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.body, b"")
        self.assertTrue(proxy.alive())

    def test_proxied_responses_are_untouched_and_scheme_is_overwritten(self):
        r = curl(self.url("/echo"))
        self.assertEqual(r.status, 200)
        headers = {k: v for k, v in r.json()["headers"]}
        self.assertEqual(headers.get("x-scheme"), "https")


if __name__ == "__main__":
    unittest.main()
