"""Request trailers that take the header list past max_request_headers_kb (60 KiB by default,
counted with the request's head): rpx cannot pass them on, so it resets the stream
(http2.header_overflow) and the upstream never gets a complete request; the connection and its
other streams carry on."""


def run(t):
    c = t.h2()
    sid = c.request("/e/trailers-big", method="POST", body=b"body", end=False)
    c.conn.send_headers(sid, [("x-big-%d" % i, "v" * 4000) for i in range(20)], end_stream=True)
    c.flush()
    assert c.response(sid)["reset"] is not None
    t.assert_not_forwarded("/e/trailers-big")
    assert t.proxy.stat("http.main.http2.header_overflow") == 1
    sid = c.request("/e/after")
    assert c.response(sid)["headers"][":status"] == "200"
