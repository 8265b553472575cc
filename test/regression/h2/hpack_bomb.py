"""HPACK bomb: one large field inserted into the dynamic table, then referenced by index over and
over, so a few bytes on the wire decode to megabytes. rpx counts decoded bytes against
max_request_headers_kb: a 431 (or the connection ends), bounded memory, nothing forwarded."""


def run(t):
    c = t.h2()
    enc = c.conn.encoder
    big = ("x-bomb", "b" * 4000)
    first = enc.encode(t.request("/bomb") + [big])
    # Indexed representation of the dynamic table's first entry (index 62): one byte each.
    block = first + bytes([0x80 | 62]) * 4000
    rss_before = t.rss_kib()
    t.send_raw(c, t.frame(1, 0x5, 1, block[:16000]) if len(block) <= 16000 else
               t.frame(1, 0x1, 1, block[:16000]) + t.frame(9, 0x4, 1, block[16000:]))
    status = t.status_or_end(c, 1)
    assert status in (None, "431", "reset"), status
    assert t.rss_kib() - rss_before < 24 * 1024
    t.assert_not_forwarded("/bomb")
    t.assert_serving()
