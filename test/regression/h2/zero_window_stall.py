"""A client that opens a stream with a zero window and never opens it: rpx cannot send the body,
and the stream idle timeout (1 s in this runner's config) ends the stream instead of holding it
(and its upstream connection) forever."""


def run(t):
    c = t.h2(window=0)
    c.auto_ack = False
    sid = c.request("/bytes/100000")
    r = c.response(sid)  # reset by rpx, or ended if the headers alone were allowed through
    assert r["reset"] is not None or c.goaway is not None, r
    assert len(r["data"]) == 0
