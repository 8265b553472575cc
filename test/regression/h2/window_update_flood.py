"""WINDOW_UPDATE flood: far more WINDOW_UPDATE frames than the DATA rpx sent could justify
(max_inbound_window_update_frames_per_data_frame_sent): GOAWAY with ENHANCE_YOUR_CALM."""


def run(t):
    c = t.h2()
    t.send_raw(c, b"".join(t.frame(8, 0, 0, b"\x00\x00\x00\x01") for _ in range(200)))
    t.expect_connection_end(c, error_code=11)
    t.assert_serving()
