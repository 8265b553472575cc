"""An extended CONNECT (:protocol, RFC 8441) on a connection where rpx did not send
SETTINGS_ENABLE_CONNECT_PROTOCOL (allow_connect is false by default) is malformed (RFC 8441 4):
nothing is forwarded (no upgrade reaches the upstream), and by default
(override_stream_error_on_invalid_http_message false) the connection ends with PROTOCOL_ERROR."""


def run(t):
    c = t.h2(validate=False)
    c.conn.send_headers(1, [(":method", "CONNECT"), (":protocol", "websocket"),
                            (":scheme", "http"), (":path", "/e/ws"), (":authority", "example"),
                            ("sec-websocket-version", "13")], end_stream=False)
    t.send(c)
    t.expect_connection_end(c, error_code=1)
    t.assert_not_forwarded("/e/ws")
    t.assert_serving()
