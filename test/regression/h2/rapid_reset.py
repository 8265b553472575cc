"""Rapid reset (CVE-2023-44487): HEADERS then RST_STREAM in a loop. Each stream costs rpx a
dispatch to the router; a client may not make it do that without bound on one connection. rpx
(nghttp2's reset rate limit) ends the connection with GOAWAY, and serves new connections."""


def run(t):
    c = t.h2()
    for i in range(4000):
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, t.request("/direct"))
        c.conn.reset_stream(sid)
        if i % 200 == 199 and not t.send(c):
            break
    t.send(c)
    t.expect_connection_end(c)
    t.assert_serving()
