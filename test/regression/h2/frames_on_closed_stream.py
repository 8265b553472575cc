"""DATA on a stream that is already closed (both sides ended) is a connection error of type
STREAM_CLOSED (RFC 9113 5.1); nothing more is forwarded."""


def run(t):
    c = t.h2()
    sid = c.request("/e/closed")
    assert c.response(sid)["headers"][":status"] == "200"
    t.send_raw(c, t.frame(0, 0x1, sid, b"late data"))
    t.expect_connection_end(c, error_code=5)
