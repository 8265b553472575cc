"""SETTINGS flood: a client that sends SETTINGS frames without reading the ACKs. The ACKs rpx
owes pile up only to max_outbound_control_frames; then the connection ends."""


def run(t):
    c = t.h2()
    t.flood(c, t.frame(4, 0, 0, b"\x00\x03\x00\x00\x00\x64"), 20000)
    t.assert_serving()
