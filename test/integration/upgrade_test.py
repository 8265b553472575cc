"""Upgrades and streaming: WebSocket through rpx with real clients on both sides (the
`websockets` server as the upstream, `websocket-client` as the browser), upgrade_configs on the
listener and per route, the tunnel's idle timeout, an upstream that refuses or wrongly grants an
upgrade, WebSocket over HTTP/2 (RFC 8441 extended CONNECT from a python3-h2 client, to the same
HTTP/1.1 WebSocket server), and streamed responses (server-sent events) forwarded as they arrive.

No timing assertions: the streaming checks make the upstream wait until the client has seen each
event before it sends the next, so a proxy that buffered would stall (and fail on a timeout)."""

import asyncio
import socket
import threading
import unittest

import websocket  # websocket-client (Debian python3-websocket)
import websockets  # Debian python3-websockets
import websockets.server

import h2.events
import h2.settings

from harness import (H2Client, IntegrationTestCase, RawUpstream, bootstrap, cluster, free_port,
                     http_listener, http_request, route, virtual_host)

WAIT = 10.0  # generous bound for anything that should happen at once


class WebSocketUpstream(object):
    """A real WebSocket server (the `websockets` library) on 127.0.0.1, in its own thread.
    Paths: /echo echoes every message; /push sends "hello" first, then echoes; /close sends
    "bye" and closes the connection."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.connections = 0
        self.closed = threading.Event()
        self.received = []
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        if not ready.wait(WAIT):
            raise RuntimeError("websocket upstream did not start")

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)

        async def start():
            self.server = await websockets.server.serve(self._handler, "127.0.0.1", 0,
                                                        max_size=8 << 20)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    async def _handler(self, ws, path):
        self.connections += 1
        try:
            if path == "/close":
                await ws.send("bye")
                await ws.close()
                return
            if path == "/push":
                await ws.send("hello")
            async for msg in ws:
                self.received.append(msg)
                await ws.send(msg)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed.set()

    def stop(self):
        async def shutdown():
            self.server.close()
            await self.server.wait_closed()

        fut = asyncio.run_coroutine_threadsafe(shutdown(), self.loop)
        try:
            fut.result(WAIT)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(WAIT)
            if not self.thread.is_alive():
                self.loop.close()


def ws_route(prefix, cluster_name, upgrade_enabled=None, idle_timeout=None):
    r = route(prefix, cluster_name, timeout="5s")
    if upgrade_enabled is not None:
        r["route"]["upgrade_configs"] = [{"upgrade_type": "websocket",
                                          "enabled": upgrade_enabled}]
    if idle_timeout is not None:
        r["route"]["idle_timeout"] = idle_timeout
    return r


class WebSocketTest(IntegrationTestCase):

    def setUp(self):
        self.ws = WebSocketUpstream()
        self.addCleanup(self.ws.stop)
        self.port = free_port()
        self.plain_port = free_port()
        routes = [
            ws_route("/off/", "ws", upgrade_enabled=False),
            ws_route("/idle/", "ws", idle_timeout="0.3s"),
            ws_route("/", "ws"),
        ]
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port, [virtual_host("all", ["*"], routes)],
                           hcm_extra={"upgrade_configs": [{"upgrade_type": "websocket"}]}),
             # No upgrade_configs: upgrades are refused.
             # ...unless a route enables them (Envoy's rule).
             http_listener("plain", self.plain_port,
                           [virtual_host("all", ["*"], [
                               ws_route("/on/", "ws", upgrade_enabled=True),
                               ws_route("/", "ws")])])],
            [cluster("ws", self.ws.port)]), concurrency=1)

    def connect(self, path, port=None):
        ws = websocket.create_connection("ws://127.0.0.1:%d%s" % (port or self.port, path),
                                         timeout=WAIT)
        self.addCleanup(ws.close)
        return ws

    def test_echo_both_ways_with_real_clients(self):
        ws = self.connect("/push")
        self.assertEqual(ws.recv(), "hello")  # the upstream speaks first
        ws.send("ping")
        self.assertEqual(ws.recv(), "ping")
        big = bytes(range(256)) * 4096  # 1 MiB, many reads and writes through the tunnel
        ws.send_binary(big)
        self.assertEqual(ws.recv(), big)
        for i in range(50):
            ws.send("m%d" % i)
        self.assertEqual([ws.recv() for _ in range(50)], ["m%d" % i for i in range(50)])
        self.assertEqual(self.proxy.stat("http.ingress.downstream_cx_upgrades_total"), 1)
        self.assertEqual(self.proxy.stat("http.ingress.downstream_cx_upgrades_active"), 1)
        ws.close()
        # The client's close reaches the upstream, and rpx forgets the tunnel.
        self.assertTrue(self.ws.closed.wait(WAIT))
        self.proxy.wait_stat("http.ingress.downstream_cx_upgrades_active", lambda v: v == 0)
        self.proxy.wait_stat("http.ingress.downstream_cx_active", lambda v: v == 0)
        self.assertEqual(self.proxy.stat("http.ingress.downstream_rq_1xx"), 1)

    def test_upstream_closing_ends_the_tunnel(self):
        ws = self.connect("/close")
        self.assertEqual(ws.recv(), "bye")
        # The close frame and then EOF come through.
        with self.assertRaises(websocket.WebSocketConnectionClosedException):
            ws.recv()
            ws.recv()
        self.proxy.wait_stat("http.ingress.downstream_cx_upgrades_active", lambda v: v == 0)

    def test_route_can_disable_the_upgrade(self):
        with self.assertRaises(websocket.WebSocketBadStatusException) as cm:
            websocket.create_connection("ws://127.0.0.1:%d/off/x" % self.port, timeout=WAIT)
        self.assertEqual(cm.exception.status_code, 403)
        self.assertEqual(self.proxy.stat("http.ingress.downstream_rq_ws_on_non_ws_route"), 1)
        self.assertEqual(self.ws.connections, 0)

    def test_listener_without_upgrade_configs_refuses(self):
        with self.assertRaises(websocket.WebSocketBadStatusException) as cm:
            websocket.create_connection("ws://127.0.0.1:%d/echo" % self.plain_port,
                                        timeout=WAIT)
        self.assertEqual(cm.exception.status_code, 403)
        self.assertEqual(self.proxy.stat("http.plain.downstream_rq_ws_on_non_ws_route"), 1)
        self.assertEqual(self.ws.connections, 0)

    def test_a_route_alone_can_enable_the_upgrade(self):
        # Envoy's example websocket configs enable the upgrade on the route only.
        ws = self.connect("/on/echo", port=self.plain_port)
        ws.send("ping")
        self.assertEqual(ws.recv(), "ping")
        self.assertEqual(self.proxy.stat("http.plain.downstream_cx_upgrades_total"), 1)

    def test_idle_tunnel_is_closed_by_the_route_idle_timeout(self):
        ws = self.connect("/idle/echo")
        ws.send("once")
        self.assertEqual(ws.recv(), "once")
        # Silence in both directions: rpx closes the tunnel after the route's idle_timeout.
        with self.assertRaises((websocket.WebSocketConnectionClosedException, ConnectionError)):
            ws.recv()
        self.assertEqual(self.proxy.stat("http.ingress.downstream_rq_idle_timeout"), 1)
        self.assertTrue(self.ws.closed.wait(WAIT), "the upstream side was not closed")

    def test_first_frames_in_the_same_packet_as_the_handshake(self):
        # A client may pipeline its first frame right behind the upgrade request: those bytes
        # must reach the upstream after the 101, not be parsed as HTTP.
        c = self.raw_client(self.port)
        frame = b"\x81\x84" + b"\x01\x02\x03\x04" + bytes(
            b ^ m for b, m in zip(b"ping", b"\x01\x02\x03\x04"))
        c.send(http_request("GET", "/echo", headers=[
            ("Upgrade", "websocket"), ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "13")]) + frame)
        line = c.rfile.readline()
        self.assertIn(b" 101 ", line)
        head = b""
        while True:
            h = c.rfile.readline()
            if h in (b"\r\n", b""):
                break
            head += h.lower()
        self.assertIn(b"upgrade: websocket", head)
        self.assertIn(b"connection: upgrade", head)
        self.assertNotIn(b"content-length", head)
        self.assertNotIn(b"transfer-encoding", head)
        self.assertEqual(c.rfile.read(6), b"\x81\x04ping")  # unmasked echo from the server


def ws_frame(opcode, payload):
    """One final WebSocket frame, masked as a client must send it (websocket-client's ABNF)."""
    return websocket.ABNF.create_frame(payload, opcode).format()


def ws_parse(buf):
    """Complete unmasked frames at the start of `buf` -> ([(opcode, payload)], bytes used)."""
    frames, pos = [], 0
    while len(buf) - pos >= 2:
        opcode, n, at = buf[pos] & 0x0F, buf[pos + 1] & 0x7F, pos + 2
        if n == 126:
            if len(buf) - at < 2:
                break
            n, at = int.from_bytes(buf[at:at + 2], "big"), at + 2
        elif n == 127:
            if len(buf) - at < 8:
                break
            n, at = int.from_bytes(buf[at:at + 8], "big"), at + 8
        if len(buf) - at < n:
            break
        frames.append((opcode, bytes(buf[at:at + n])))
        pos = at + n
    return frames, pos


class WebSocketOverHttp2Test(IntegrationTestCase):
    """RFC 8441: an h2 client opens a WebSocket with an extended CONNECT (allow_connect on the
    connection manager's http2_protocol_options); rpx sends the upstream the HTTP/1.1 upgrade it
    stands for, answers 200 once the upstream switched, and carries the frames as DATA."""

    def setUp(self):
        self.ws = WebSocketUpstream()
        self.addCleanup(self.ws.stop)
        self.port = free_port()
        self.off_port = free_port()
        routes = [ws_route("/off/", "ws", upgrade_enabled=False), ws_route("/", "ws")]
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("h2ws", self.port, [virtual_host("all", ["*"], routes)],
                           hcm_extra={"upgrade_configs": [{"upgrade_type": "websocket"}],
                                      "http2_protocol_options": {"allow_connect": True}}),
             # allow_connect not set: the setting is not announced.
             http_listener("h2plain", self.off_port, [virtual_host("all", ["*"], routes)],
                           hcm_extra={"upgrade_configs": [{"upgrade_type": "websocket"}]})],
            [cluster("ws", self.ws.port)]), concurrency=1)

    def client(self, port):
        c = H2Client(port)
        self.addCleanup(c.close)
        c.wait(lambda: any(isinstance(e, h2.events.RemoteSettingsChanged) for e in c.events))
        return c

    def open(self, c, path):
        return c.request(path, method="CONNECT", end=False, authority="127.0.0.1:%d" % self.port,
                         headers=[(":protocol", "websocket"), ("sec-websocket-version", "13")])

    def frames(self, c, sid, count):
        r = c.responses[sid]
        got = []

        def enough():
            frames, used = ws_parse(r["data"])
            if frames:
                del r["data"][:used]
                got.extend(frames)
            return len(got) >= count or r["ended"] or r["reset"] is not None
        c.wait(enough)
        return got

    def test_websocket_over_h2_to_an_http1_server(self):
        c = self.client(self.port)
        self.assertEqual(c.conn.remote_settings.get(
            h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL), 1)
        sid = self.open(c, "/push")
        c.wait(lambda: c.responses[sid]["headers"] is not None)
        headers = c.responses[sid]["headers"]
        self.assertEqual(headers[":status"], "200", headers)
        for name in ("connection", "upgrade", "sec-websocket-accept"):
            self.assertNotIn(name, headers)
        self.assertEqual(self.frames(c, sid, 1), [(1, b"hello")])  # the upstream speaks first
        c.send_body(sid, ws_frame(1, b"ping"), end=False)
        self.assertEqual(self.frames(c, sid, 1), [(1, b"ping")])
        big = bytes(range(256)) * 4096  # 1 MiB through both windows
        c.send_body(sid, ws_frame(2, big), end=False)
        self.assertEqual(self.frames(c, sid, 1), [(2, big)])
        self.assertEqual(self.ws.received, ["ping", big])
        self.assertEqual(self.proxy.stat("http.h2ws.downstream_cx_upgrades_total"), 1)
        self.assertEqual(self.proxy.stat("http.h2ws.downstream_cx_upgrades_active"), 1)
        # A second WebSocket on the same connection, beside the first.
        sid2 = self.open(c, "/echo")
        c.wait(lambda: c.responses[sid2]["headers"] is not None)
        c.send_body(sid2, ws_frame(1, b"second"), end=False)
        self.assertEqual(self.frames(c, sid2, 1), [(1, b"second")])
        # The closing handshake: the client's close frame, the server's answer, then the server
        # closes its connection and that ends the stream.
        c.send_body(sid, ws_frame(8, b"\x03\xe8"), end=False)
        self.assertEqual(self.frames(c, sid, 1)[0][0], 8)
        c.wait(lambda: c.responses[sid]["ended"] or c.responses[sid]["reset"] is not None)
        self.assertTrue(c.responses[sid]["ended"])
        self.proxy.wait_stat("http.h2ws.downstream_cx_upgrades_active", lambda v: v == 1)
        # The client's END_STREAM alone ends a tunnel (as an HTTP/1.1 client's close does): the
        # upstream connection is closed and the stream ends.
        self.ws.closed.clear()
        c.send_body(sid2, b"", end=True)
        c.wait(lambda: c.responses[sid2]["ended"] or c.responses[sid2]["reset"] is not None)
        self.assertTrue(self.ws.closed.wait(WAIT))
        self.proxy.wait_stat("http.h2ws.downstream_cx_upgrades_active", lambda v: v == 0)
        self.assertEqual(self.ws.connections, 2)

    def test_upstream_close_ends_the_stream(self):
        c = self.client(self.port)
        sid = self.open(c, "/close")
        frames = self.frames(c, sid, 2)
        self.assertEqual(frames[0], (1, b"bye"))
        self.assertEqual(frames[1][0], 8)  # the server's close frame: the client answers it
        c.send_body(sid, ws_frame(8, frames[1][1]), end=False)
        c.wait(lambda: c.responses[sid]["ended"] or c.responses[sid]["reset"] is not None)
        self.assertTrue(c.responses[sid]["ended"])
        self.proxy.wait_stat("http.h2ws.downstream_cx_upgrades_active", lambda v: v == 0)

    def test_route_that_disables_the_upgrade_refuses_it(self):
        c = self.client(self.port)
        sid = self.open(c, "/off/x")
        r = c.response(sid)
        self.assertEqual(r["headers"][":status"], "403", r)
        self.assertEqual(self.ws.connections, 0)

    def test_without_allow_connect_the_setting_is_not_sent(self):
        c = H2Client(self.off_port, validate=False)  # python3-h2 wants :path even on CONNECT
        self.addCleanup(c.close)
        c.wait(lambda: any(isinstance(e, h2.events.RemoteSettingsChanged) for e in c.events))
        self.assertNotEqual(c.conn.remote_settings.get(
            h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL), 1)
        # A plain CONNECT (a TCP tunnel) is refused on either listener.
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, [(":method", "CONNECT"), (":authority", "127.0.0.1:1")])
        c.flush()
        self.assertEqual(c.response(sid)["headers"][":status"], "403")


class UpgradeRefusedOrWronglyGrantedTest(IntegrationTestCase):

    def setUp(self):
        self.port = free_port()

        def serve(conn, req, rest):
            if "/refuse" in req.split("\r\n")[0]:
                conn.sendall(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 5\r\n\r\nnope!")
            else:
                # A 101 to a request that never asked for one.
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             b"Connection: upgrade\r\n\r\nraw bytes")
            conn.recv(1)  # hold the connection until the proxy closes it

        self.up = RawUpstream("script", serve=serve)
        self.addCleanup(self.up.stop)
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port,
                           [virtual_host("all", ["*"], [ws_route("/", "raw")])],
                           hcm_extra={"upgrade_configs": [{"upgrade_type": "websocket"}]})],
            [cluster("raw", self.up.port)]), concurrency=1)

    def test_refused_upgrade_is_a_normal_response_then_close(self):
        c = self.raw_client(self.port)
        c.send(http_request("GET", "/refuse", headers=[
            ("Upgrade", "websocket"), ("Connection", "Upgrade")]))
        r = c.read_response()
        self.assertEqual(r.status, 426)
        self.assertEqual(r.body, b"nope!")
        self.assertTrue(c.at_eof(WAIT))
        # The upstream was asked for the upgrade, with the hop-by-hop headers rebuilt.
        self.assertIn("upgrade: websocket", self.up.heads[0].lower())
        self.assertEqual(self.proxy.stat("http.ingress.downstream_cx_upgrades_total"), 0)

    def test_unrequested_101_is_a_502(self):
        c = self.raw_client(self.port)
        c.send(http_request("GET", "/plain"))
        r = c.read_response()
        self.assertEqual(r.status, 502)
        self.assertIn(b"101", r.body)
        self.assertNotIn("upgrade", self.up.heads[0].lower())

    def test_h2c_upgrade_is_served_as_http1(self):
        # curl --http2 on cleartext asks for h2c; rpx stays on HTTP/1.1 and forwards no Upgrade.
        c = self.raw_client(self.port)
        c.send(http_request("GET", "/refuse", headers=[
            ("Upgrade", "h2c"), ("Connection", "Upgrade, HTTP2-Settings"),
            ("HTTP2-Settings", "AAMAAABkAAQCAAAAAAIAAAAA")]))
        r = c.read_response()
        self.assertEqual(r.status, 426)
        req = self.up.heads[0].lower()
        self.assertNotIn("upgrade", req)
        self.assertNotIn("http2-settings", req)


class StreamedResponseTest(IntegrationTestCase):
    """Each event must reach the client before the upstream sends the next one."""

    EVENTS = 5

    def setUp(self):
        self.port = free_port()
        self.seen = [threading.Event() for _ in range(self.EVENTS)]
        self.failures = []

        def serve(conn, req, rest):
            close_delimited = "/eof" in req.split("\r\n")[0]
            if close_delimited:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Connection: close\r\n\r\n")
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
            for i in range(self.EVENTS):
                event = ("id: %d\ndata: event %d\n\n" % (i, i)).encode()
                if close_delimited:
                    conn.sendall(event)
                else:
                    conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
                if not self.seen[i].wait(WAIT):
                    self.failures.append("event %d never reached the client" % i)
                    return
            if not close_delimited:
                conn.sendall(b"0\r\n\r\n")

        self.up = RawUpstream("script", serve=serve)
        self.addCleanup(self.up.stop)
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port,
                           [virtual_host("all", ["*"], [route("/", "sse", timeout="0s")])])],
            [cluster("sse", self.up.port)]), concurrency=1)

    def read_events(self, path):
        c = self.raw_client(self.port)
        c.send(http_request("GET", path, headers=[("Accept", "text/event-stream")]))
        status = c.rfile.readline()
        self.assertIn(b" 200 ", status)
        while c.rfile.readline() not in (b"\r\n", b""):
            pass
        got = b""
        for i in range(self.EVENTS):
            want = ("data: event %d\n\n" % i).encode()
            while want not in got:
                chunk = c.rfile.read1(4096)  # what has arrived, without waiting for more
                self.assertTrue(chunk, "stream ended before event %d" % i)
                got += chunk
            self.seen[i].set()
        self.assertEqual(self.failures, [])
        return c

    def read_to_last_chunk(self, c):
        tail = b""
        while not tail.endswith(b"0\r\n\r\n"):
            chunk = c.rfile.read1(4096)
            self.assertTrue(chunk, "no last chunk")
            tail += chunk

    def test_chunked_event_stream_is_forwarded_as_it_arrives(self):
        self.read_to_last_chunk(self.read_events("/events"))

    def test_close_delimited_stream_is_forwarded_as_it_arrives(self):
        # The upstream ends the body by closing; the HTTP/1.1 client gets it chunked.
        self.read_to_last_chunk(self.read_events("/eof"))


if __name__ == "__main__":
    unittest.main()
