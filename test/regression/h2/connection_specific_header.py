"""Connection-specific fields (connection, keep-alive, transfer-encoding, upgrade,
proxy-connection; te other than "trailers") are malformed in HTTP/2 (RFC 9113 8.2.2): not
forwarded; with override_stream_error_on_invalid_http_message only the stream is reset (the
lenient listener of this runner) and the connection serves the next request."""


def run(t):
    for name, value in (("connection", "close"), ("transfer-encoding", "chunked"),
                        ("upgrade", "websocket"), ("te", "gzip"), ("keep-alive", "1")):
        c = t.h2(t.lenient_port, validate=False)
        sid = c.request("/cs-" + name, headers=[(name, value)])
        r = c.response(sid)
        assert r["reset"] is not None, (name, r)
        t.assert_not_forwarded("/cs-" + name)
        sid = c.request("/e/after-" + name)
        assert c.response(sid)["headers"][":status"] == "200"
