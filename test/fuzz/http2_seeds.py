"""Writes the seed corpus of http2_server_fuzz (test/fuzz/corpus/http2_server_fuzz/): what a
client sends after the connection preface, one scenario per file, made with python3-h2 (frames it
would not send are written by hand). Run from the repository root:
    /usr/bin/python3 test/fuzz/http2_seeds.py"""

import os
import struct

import h2.config
import h2.connection
import h2.settings

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "http2_server_fuzz")
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def client(validate=True):
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(
        client_side=True, header_encoding="utf-8", validate_outbound_headers=validate,
        normalize_outbound_headers=validate))
    c.initiate_connection()
    return c


def req(path="/", method="GET", extra=()):
    return [(":method", method), (":path", path), (":scheme", "http"),
            (":authority", "example.com")] + list(extra)


def after_preface(data):
    assert data.startswith(PREFACE)
    return data[len(PREFACE):]


def seeds():
    out = {}
    c = client()
    c.send_headers(1, req(), end_stream=True)
    out["get"] = c.data_to_send()

    c = client()
    c.send_headers(1, req("/post", "POST", [("content-length", "11")]))
    c.send_data(1, b"hello world", end_stream=True)
    out["post_with_length"] = c.data_to_send()

    c = client()
    c.send_headers(1, req("/post", "POST", [("content-type", "application/grpc"),
                                            ("te", "trailers")]))
    c.send_data(1, b"\x00\x00\x00\x00\x02hi")
    c.send_headers(1, [("grpc-timeout", "1S")], end_stream=True)
    out["grpc_with_trailers"] = c.data_to_send()

    c = client()
    for sid in (1, 3, 5, 7):
        c.send_headers(sid, req("/m%d" % sid, extra=[("cookie", "a=%d" % sid), ("cookie", "b")]),
                       end_stream=True)
    out["multiplexed_cookies"] = c.data_to_send()

    c = client()
    c.send_headers(1, req("/big", "POST", [("expect", "100-continue")]))
    c.send_data(1, b"x" * 16000)
    c.send_data(1, b"y" * 16000, end_stream=True)
    out["expect_continue_body"] = c.data_to_send()

    c = client()
    c.send_headers(1, req())
    c.reset_stream(1)
    c.send_headers(3, req())
    c.reset_stream(3)
    c.send_headers(5, req(), end_stream=True)
    out["rapid_reset"] = c.data_to_send()

    c = client()
    c.send_headers(1, req(), end_stream=True)
    c.ping(b"12345678")
    c.increment_flow_control_window(1 << 20)
    c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 10,
                       h2.settings.SettingCodes.MAX_FRAME_SIZE: 16384})
    out["ping_window_settings"] = c.data_to_send()

    c = client(validate=False)
    c.send_headers(1, req(extra=[("X-Upper", "1"), ("connection", "close")]), end_stream=True)
    out["malformed_headers"] = c.data_to_send()

    c = client()
    c.send_headers(1, req(extra=[("x-h%d" % i, "v" * 200) for i in range(40)]), end_stream=True)
    out["large_header_list"] = c.data_to_send()

    c = client()
    c.send_headers(1, req("/cl", "POST", [("content-length", "3")]))
    c.send_data(1, b"toolong", end_stream=True)
    out["content_length_mismatch"] = c.data_to_send()

    base = after_preface(client().data_to_send())
    # HEADERS without END_HEADERS, then CONTINUATION frames.
    c = client()
    block = c.encoder.encode(req("/cont"))
    out["continuation"] = base + frame(1, 0x1, 1, block[:5]) + frame(9, 0, 1, block[5:-2]) + \
        frame(9, 0x4, 1, block[-2:])
    out["continuation_flood"] = base + frame(1, 0x1, 1, block[:5]) + b"".join(
        frame(9, 0, 1, b"") for _ in range(50))
    out["empty_data_frames"] = base + frame(1, 0x4, 1, c.encoder.encode(req("/e", "POST"))) + \
        b"".join(frame(0, 0, 1, b"") for _ in range(20))
    out["priority_flood"] = base + b"".join(frame(2, 0, 3 + 2 * i, b"\x00\x00\x00\x00\x10")
                                            for i in range(40))
    out["window_update_flood"] = base + b"".join(frame(8, 0, 0, b"\x00\x00\x00\x01")
                                                 for _ in range(60))
    out["stream_id_reuse"] = base + frame(1, 0x5, 3, c.encoder.encode(req("/a"))) + \
        frame(1, 0x5, 1, c.encoder.encode(req("/b"))) + frame(1, 0x5, 3, c.encoder.encode(req("/c")))
    out["data_on_idle_stream"] = base + frame(0, 0x1, 9, b"abc")
    out["goaway_then_request"] = base + frame(7, 0, 0, b"\x00\x00\x00\x00\x00\x00\x00\x00") + \
        frame(1, 0x5, 1, c.encoder.encode(req("/late")))
    out["bad_hpack"] = base + frame(1, 0x5, 1, b"\xff\xff\xff\xff\xff\x0f")
    out["settings_garbage"] = base + frame(4, 0, 0, b"\x00\x04\xff\xff\xff\xff") + \
        frame(4, 0, 0, b"\x00\x05\x00\x00\x00\x01") + frame(4, 0x1, 0, b"x")
    return {k: (after_preface(v) if v.startswith(PREFACE) else v) for k, v in out.items()}


if __name__ == "__main__":
    import h2.settings  # noqa: F401
    os.makedirs(OUT, exist_ok=True)
    for name, data in seeds().items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds()), OUT))
