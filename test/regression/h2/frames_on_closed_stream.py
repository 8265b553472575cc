"""DATA on a stream that is already closed (both sides ended) is dropped: nothing more reaches
the upstream, no stream is revived, and the connection serves the next stream.

RFC 9113 5.1 lets a receiver treat this as a connection error (STREAM_CLOSED). rpx does not:
nghttp2 is told to keep no closed streams (closed_streams_memory.py says why), so it cannot tell
a closed stream from one it never saw below the highest id, and it drops their frames unread,
which costs nothing. HEADERS on such an id is still a connection error (stream_id_reuse.py)."""


def run(t):
    c = t.h2()
    sid = c.request("/e/closed")
    assert c.response(sid)["headers"][":status"] == "200"
    before = len(t.forwarded("/e/closed"))
    t.send_raw(c, t.frame(0, 0x1, sid, b"late data"))
    nxt = c.request("/e/next")
    assert c.response(nxt)["headers"][":status"] == "200"
    assert len(t.forwarded("/e/closed")) == before
