"""An uppercase header name is malformed in HTTP/2 (RFC 9113 8.2.1): not forwarded; the
connection ends with PROTOCOL_ERROR."""


def run(t):
    c = t.h2(validate=False)
    c.conn.send_headers(1, t.request("/upper") + [("X-Upper", "1")], end_stream=True)
    t.send(c)
    t.expect_connection_end(c, error_code=1)
    t.assert_not_forwarded("/upper")
