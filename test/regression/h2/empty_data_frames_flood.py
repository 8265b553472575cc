"""Empty DATA frames (no payload, no END_STREAM) one after another cost rpx work and carry
nothing: past max_consecutive_inbound_frames_with_empty_payload (1) the connection ends with
ENHANCE_YOUR_CALM."""


def run(t):
    c = t.h2()
    c.conn.send_headers(1, t.request("/e/empty", "POST"))
    t.send(c)
    t.send_raw(c, b"".join(t.frame(0, 0, 1, b"") for _ in range(10)))
    t.expect_connection_end(c, error_code=11)
