"""Request trailers with a pseudo-header field (:path) are malformed (RFC 9113 8.1): they are
never passed on, the upstream never gets a complete request, and by default
(override_stream_error_on_invalid_http_message false) the connection ends with PROTOCOL_ERROR."""


def run(t):
    c = t.h2(validate=False)
    sid = c.request("/e/trailers-pseudo", method="POST", body=b"body", end=False)
    c.conn.send_headers(sid, [(":path", "/elsewhere"), ("x-t", "1")], end_stream=True)
    t.send(c)
    t.expect_connection_end(c, error_code=1)
    t.assert_not_forwarded("/e/trailers-pseudo")
    t.assert_not_forwarded("/elsewhere")
    t.assert_serving()
