"""PRIORITY frames cost nothing to send and something to process: more than
max_inbound_priority_frames_per_stream (100) per opened stream ends the connection."""


def run(t):
    c = t.h2()
    t.send_raw(c, b"".join(t.frame(2, 0, 1 + 2 * (i % 50), b"\x00\x00\x00\x00\x10")
                           for i in range(400)))
    t.expect_connection_end(c, error_code=11)
