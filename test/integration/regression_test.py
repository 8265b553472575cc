"""Runs every protocol regression case in test/regression/cases against the real rpx binary.

Each case becomes its own test method (so each is counted), named after its file. A case with a
`--- response` section is about the upstream side: a raw upstream answers the forwarded request
with exactly those bytes."""

import os
import re
import socket
import time
import unittest

from harness import (CannedUpstream, IntegrationTestCase, bootstrap, cluster, free_port,
                     http_listener, route, virtual_host)

HERE = os.path.dirname(os.path.abspath(__file__))


def cases_dir():
    for d in (os.path.join(HERE, "..", "regression", "cases"),
              os.path.join(os.environ.get("TEST_SRCDIR", ""), "rpx", "test", "regression", "cases")):
        if os.path.isdir(d):
            return d
    raise RuntimeError("test/regression/cases not found")


def decode(line):
    out = bytearray()
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line):
            n = line[i + 1]
            if n == "r":
                out += b"\r"
            elif n == "n":
                out += b"\n"
            elif n == "t":
                out += b"\t"
            elif n == "\\":
                out += b"\\"
            elif n == "x":
                out.append(int(line[i + 2:i + 4], 16))
                i += 2
            else:
                raise ValueError("unknown escape \\%s" % n)
            i += 2
            continue
        out += c.encode()
        i += 1
    return bytes(out)


def parse_case(path):
    """Returns (fields, request bytes, response bytes or None)."""
    fields, section = {}, None
    parts = {"request": bytearray(), "response": None}
    with open(path) as f:
        for raw in f.read().split("\n"):
            if raw.strip() in ("--- request", "--- response"):
                section = raw.strip()[4:]
                if parts[section] is None:
                    parts[section] = bytearray()
            elif section:
                parts[section] += decode(raw)
            elif raw.startswith("#") or not raw.strip():
                continue
            else:
                k, _, v = raw.partition(":")
                fields[k.strip()] = v.strip()
    response = parts["response"]
    return fields, bytes(parts["request"]), None if response is None else bytes(response)


class RegressionCases(IntegrationTestCase):

    def start(self, upstream):
        self.echo = upstream
        self.port = free_port()
        self.proxy = self.start_rpx(bootstrap(
            [http_listener("ingress", self.port, [
                virtual_host("app", ["*"], [route("/", "E", timeout="5s")]),
            ])],
            [cluster("E", self.echo.port)]))

    def run_case(self, path):
        fields, request, response = parse_case(path)
        if "known-gap" in fields:
            self.skipTest("known gap: " + fields["known-gap"])
        if response is None:
            self.start(self.start_echo("E"))
        else:
            upstream = CannedUpstream(response)  # then waits for rpx to close
            self.addCleanup(upstream.stop)
            self.start(upstream)
        before = self.echo.request_count()
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        try:
            s.sendall(request)
            data = bytearray()
            closed = False
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    break
                except ConnectionResetError:
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
                data += chunk
                if fields.get("closes") != "yes" and b"\r\n\r\n" in data:
                    break
        finally:
            s.close()
        m = re.match(rb"HTTP/1\.1 (\d{3}) ", bytes(data))
        self.assertIsNotNone(m, "no HTTP response; got %r" % bytes(data[:200]))
        self.assertEqual(int(m.group(1)), int(fields["status"]), bytes(data[:300]))
        if fields.get("forwarded") == "no":
            self.assertEqual(self.echo.request_count(), before, "the request reached the upstream")
        elif fields.get("forwarded") == "yes":
            self.assertEqual(self.echo.request_count(), before + 1, "the request was not forwarded")
        if fields.get("ends-cleanly") == "no":
            self.assertFalse(bytes(data).endswith(b"0\r\n\r\n"),
                             "a broken upstream body reached the client as a complete response")
        if fields.get("closes") == "yes":
            self.assertTrue(closed, "rpx kept the connection open after rejecting the request")


def _add_cases():
    for name in sorted(os.listdir(cases_dir())):
        if not name.endswith(".case"):
            continue
        path = os.path.join(cases_dir(), name)

        def test(self, path=path):
            self.run_case(path)
        setattr(RegressionCases, "test_" + name[:-len(".case")], test)


_add_cases()

if __name__ == "__main__":
    unittest.main()
