"""A stream id lower than one already used (or reused) is a connection error (RFC 9113 5.1.1):
GOAWAY with PROTOCOL_ERROR; the stream is not served."""


def run(t):
    c = t.h2(validate=False)
    enc = c.conn.encoder
    t.send_raw(c, t.frame(1, 0x5, 5, enc.encode(t.request("/e/five"))))
    t.send_raw(c, t.frame(1, 0x5, 3, enc.encode(t.request("/e/three"))))
    t.expect_connection_end(c, error_code=1)
    t.assert_not_forwarded("/e/three")
