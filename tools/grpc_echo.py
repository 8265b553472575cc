#!/usr/bin/env python3
"""A gRPC echo server and client on Debian's python3-grpcio, for trying gRPC through rpx
(docs/http2.md, configs/grpc.yaml). Messages are raw bytes: no generated code is needed.

    grpc_echo.py serve PORT                 service echo.Echo on 127.0.0.1:PORT: Say (unary),
                                            Count (server streaming: N messages), Sum (client
                                            streaming: total length), Chat (bidi: upper case),
                                            Fail (status NOT_FOUND), Sleep (waits N seconds)
    grpc_echo.py call TARGET METHOD [ARG] [--timeout S]
                                            one call through TARGET (host:port); prints each
                                            reply, or the status code and message
"""

import sys
import time
from concurrent import futures

import grpc

ident = lambda b: b  # noqa: E731


def serve(port):
    def say(req, ctx):
        return b"echo: " + req

    def count(req, ctx):
        for i in range(int(req or b"3")):
            yield b"message %d" % i

    def total(it, ctx):
        return str(sum(len(m) for m in it)).encode()

    def chat(it, ctx):
        for m in it:
            yield m.upper()

    def fail(req, ctx):
        ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing: " + req.decode(errors="replace"))

    def sleep(req, ctx):
        end = time.time() + float(req or b"5")
        while time.time() < end and ctx.is_active():
            time.sleep(0.05)
        return b"slept"

    handler = grpc.method_handlers_generic_handler("echo.Echo", {
        "Say": grpc.unary_unary_rpc_method_handler(say, ident, ident),
        "Count": grpc.unary_stream_rpc_method_handler(count, ident, ident),
        "Sum": grpc.stream_unary_rpc_method_handler(total, ident, ident),
        "Chat": grpc.stream_stream_rpc_method_handler(chat, ident, ident),
        "Fail": grpc.unary_unary_rpc_method_handler(fail, ident, ident),
        "Sleep": grpc.unary_unary_rpc_method_handler(sleep, ident, ident),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port("127.0.0.1:%d" % port)
    server.start()
    print("serving echo.Echo on 127.0.0.1:%d" % port, flush=True)
    server.wait_for_termination()


def call(target, method, arg, timeout):
    channel = grpc.insecure_channel(target)
    path = "/echo.Echo/" + method
    data = arg.encode()
    try:
        if method == "Count":
            for m in channel.unary_stream(path)(data, timeout=timeout):
                print(m.decode())
        elif method == "Sum":
            print(channel.stream_unary(path)(iter(data.split(b",")), timeout=timeout).decode())
        elif method == "Chat":
            for m in channel.stream_stream(path)(iter(data.split(b",")), timeout=timeout):
                print(m.decode())
        else:
            print(channel.unary_unary(path)(data, timeout=timeout).decode())
    except grpc.RpcError as e:
        print("%s: %s" % (e.code().name, e.details()))
        return 1
    return 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "serve":
        serve(int(argv[1]))
        return 0
    if len(argv) >= 3 and argv[0] == "call":
        timeout = 10.0
        args = list(argv[1:])
        if "--timeout" in args:
            i = args.index("--timeout")
            timeout = float(args[i + 1])
            del args[i:i + 2]
        return call(args[0], args[1], args[2] if len(args) > 2 else "", timeout)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
