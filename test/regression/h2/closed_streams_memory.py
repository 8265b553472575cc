"""One long-lived connection serving many streams must not grow with each one served: nghttp2
keeps closed streams for RFC 7540's priority tree unless told not to, and with Envoy's default
max_concurrent_streams (2^31-1) that kept every closed stream of the connection (about 50 MB after
200,000 requests on 50 connections). 60,000 requests on one connection: rpx's memory stays put."""

import os
import subprocess


def run(t):
    if os.environ.get("ASAN_OPTIONS"):
        # ASan holds freed blocks in its quarantine (16 MB in CI): RSS says nothing here.
        t.skipTest("RSS growth is meaningless under AddressSanitizer")
    url = "http://127.0.0.1:%d/direct" % t.port
    subprocess.run(["h2load", "-n", "2000", "-c", "1", "-m", "20", url], capture_output=True,
                   timeout=60)  # warm: pools and buffers at their working size
    before = t.rss_kib()
    cp = subprocess.run(["h2load", "-n", "60000", "-c", "1", "-m", "20", url],
                        capture_output=True, timeout=120)
    out = cp.stdout.decode()
    assert "60000 succeeded, 0 failed" in out, out
    grown = t.rss_kib() - before
    assert grown < 6 * 1024, "rpx grew by %d KiB over 60,000 streams" % grown
