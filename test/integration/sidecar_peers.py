"""The peers of the sidecar test (netns_sidecar_test.py), run inside its namespaces:

    sidecar_peers.py svc IP CERT KEY   an HTTP origin on IP:8080 (answers with JSON: which server,
                                       the path, the request headers, the peer's address), a TCP
                                       echo on IP:9000 and an HTTPS origin on IP:8443
    sidecar_peers.py app IP            the application: an HTTP server on IP:9080 (same JSON)

Prints "ready" once every socket listens; runs until killed."""

import http.server
import json
import socket
import socketserver
import ssl
import sys
import threading


def http_handler(name):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            body = json.dumps({"server": name, "path": self.path,
                               "headers": {k.lower(): v for k, v in self.headers.items()},
                               "peer": "%s:%d" % self.client_address[:2]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    return Handler


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self):
        # HTTPServer's own asks socket.getfqdn(), a DNS lookup that hangs in a namespace
        # without a resolver.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class Echo(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


class EchoHandler(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            b = self.request.recv(65536)
            if not b:
                return
            self.request.sendall(b)


def serve(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main(argv):
    role, ip = argv[1], argv[2]
    if role == "svc":
        serve(Server((ip, 8080), http_handler("svc-http")))
        serve(Echo((ip, 9000), EchoHandler))
        tls = Server((ip, 8443), http_handler("svc-tls"))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(argv[3], argv[4])
        tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
        serve(tls)
    elif role == "app":
        serve(Server((ip, 9080), http_handler("app")))
    else:
        raise SystemExit("unknown role %r" % role)
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv)
