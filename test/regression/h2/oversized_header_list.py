"""A header list larger than max_request_headers_kb (60 KiB by default) gets a 431 on its
stream; the connection and its other streams carry on."""


def run(t):
    c = t.h2()
    sid = c.request("/big", headers=[("x-big-%d" % i, "v" * 4000) for i in range(20)])
    assert c.response(sid)["headers"][":status"] == "431"
    t.assert_not_forwarded("/big")
    sid = c.request("/e/after")
    assert c.response(sid)["headers"][":status"] == "200"
