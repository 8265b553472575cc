"""CONTINUATION flood (CVE-2024-27316 style): a HEADERS frame without END_HEADERS followed by an
endless run of CONTINUATION frames carrying header fields. rpx must not hold them all: past
max_request_headers_kb the fields are dropped (and the request, if it ever ends, gets a 431) or
the connection ends; its memory stays bounded, and nothing reaches the upstream."""


def run(t):
    c = t.h2()
    enc = c.conn.encoder
    block = enc.encode(t.request("/flood"))
    rss_before = t.rss_kib()
    payload = b"".join(enc.encode([("x-f%d" % i, "v" * 1000)]) for i in range(16))
    frames = [t.frame(1, 0x0, 1, block)]
    for _ in range(2000):  # about 32 MB of header fields
        frames.append(t.frame(9, 0x0, 1, payload))
    t.send_raw(c, b"".join(frames))
    t.send_raw(c, t.frame(9, 0x4, 1, b""))
    status = t.status_or_end(c, 1)
    assert status in (None, "431", "reset"), status
    assert t.rss_kib() - rss_before < 24 * 1024, "rpx grew by %d KiB" % (t.rss_kib() - rss_before)
    t.assert_not_forwarded("/flood")
    t.assert_serving()
