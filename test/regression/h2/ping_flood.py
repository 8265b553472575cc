"""PING flood: a client that sends PINGs without reading the ACKs; the connection ends at
max_outbound_control_frames, and rpx serves others."""


def run(t):
    c = t.h2()
    t.flood(c, t.frame(6, 0, 0, b"12345678"), 20000)
    t.assert_serving()
