"""A Content-Length that disagrees with the DATA that follows (more, or fewer before
END_STREAM) is malformed: the stream is reset and the upstream never sees a complete request
with the wrong body."""


def run(t):
    for path, length, body in (("/post/more", "4", b"too much data"),
                               ("/post/less", "100", b"short")):
        c = t.h2(t.lenient_port, validate=False)
        c.conn.send_headers(1, t.request(path, "POST") + [("content-length", length)])
        c.conn.send_data(1, body, end_stream=True)
        t.send(c)
        r = c.response(1)
        assert r["reset"] is not None or r["headers"] is None or \
            r["headers"][":status"] != "200", r
        for rec in t.forwarded(path):
            assert rec["body_length"] != len(body), rec
