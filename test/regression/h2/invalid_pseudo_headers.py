"""Requests with pseudo-header fields that HTTP/2 forbids: an unknown one, :path missing, a
pseudo-header after a regular field, :status in a request. Each is malformed (RFC 9113 8.3):
nothing is forwarded, and by default (override_stream_error_on_invalid_http_message false) the
connection ends with PROTOCOL_ERROR."""


def run(t):
    bad = [
        t.request("/a") + [(":unknown", "x")],
        [(":method", "GET"), (":scheme", "http"), (":authority", "x")],
        [(":method", "GET"), ("x-regular", "1"), (":path", "/c"), (":scheme", "http")],
        t.request("/d") + [(":status", "200")],
    ]
    for headers in bad:
        c = t.h2(validate=False)
        c.conn.send_headers(1, headers, end_stream=True)
        t.send(c)
        t.expect_connection_end(c, error_code=1)
    for path in ("/a", "/c", "/d"):
        t.assert_not_forwarded(path)
