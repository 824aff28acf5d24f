"""A JSON service on loopback for the tests of rewards that ask one (tests/integration/test_plugins_http_reward.py,
test_plugins_judge_reward.py): it records every request, counts how many it serves at once, and
answers as the test says, well or badly. And an HTTP proxy on loopback that takes every request,
whatever host it names, to one loopback service: so a test can name a host that no resolver
knows (``scorer.invalid``) and still reach nothing but loopback."""

import json
import socket
import socketserver
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's names
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        service = self.server
        with service.lock:
            service.requests.append((self.path, dict(self.headers), body))
            number = len(service.requests)
            service.active += 1
            service.peak = max(service.peak, service.active)
        self.counted = True
        try:
            service.answer(self, body, number)
        finally:
            self.served()

    def served(self):
        """This request no longer counts among those served at once. ``reply`` says so before its
        first byte goes out: a client that sends its next request as soon as it has an answer was
        otherwise counted twice when this thread had not yet come back from writing."""
        if self.counted:
            self.counted = False
            with self.server.lock:
                self.server.active -= 1

    def reply(self, status=200, body=None, raw=None, headers=None, length=True):
        """Answer ``body`` as JSON (or the bytes ``raw``), with a Content-Length unless ``length`` is false."""
        self.served()
        payload = raw if raw is not None else json.dumps(body).encode()
        self.send_response(status)
        if length:
            self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


class Service(ThreadingHTTPServer):
    """``answer(handler, body, number)`` answers each POST (numbered from 1, ``handler.reply``);
    ``requests`` holds each one's (path, headers, body), ``peak`` the most served at once."""

    daemon_threads = True

    def __init__(self, answer):
        super().__init__(("127.0.0.1", 0), Handler)
        self.answer, self.requests, self.lock, self.active, self.peak = answer, [], threading.Lock(), 0, 0

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextmanager
def serving(service: Service):
    """``service`` answering from a thread until the block ends."""
    thread = threading.Thread(target=service.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield service
    finally:
        service.shutdown()
        service.server_close()


class Proxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy on loopback: ``CONNECT`` tunnels and plain-http requests (absolute form), each
    taken to ``backend`` (a loopback (host, port)) whatever host it names. ``seen`` holds each
    request's (method, target, headers with lower-case names); with ``credentials`` (a
    ``Proxy-Authorization`` value) a request without them is answered 407."""

    daemon_threads = True

    def __init__(self, backend: tuple[str, int], credentials: str | None = None):
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.backend, self.credentials, self.seen, self.lock = backend, credentials, [], threading.Lock()

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(socketserver.StreamRequestHandler):
    def handle(self):
        method, target, _ = self.rfile.readline(65536).decode("latin-1").split(" ", 2)
        headers = {}
        while line := self.rfile.readline(65536).decode("latin-1").rstrip("\r\n"):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        proxy = self.server
        with proxy.lock:
            proxy.seen.append((method, target, headers))
        if proxy.credentials and headers.get("proxy-authorization") != proxy.credentials:
            self.wfile.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
            return
        with socket.create_connection(proxy.backend) as upstream:
            if method == "CONNECT":  # the client waits for this line before it says more: nothing is buffered
                self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self.wfile.flush()
                there = threading.Thread(target=_pipe, args=(self.connection, upstream), daemon=True)
                there.start()
                _pipe(upstream, self.connection)
                there.join(10)
                return
            parts = urlsplit(target)
            body = self.rfile.read(int(headers.get("content-length", 0)))
            sent = [f"{method} {parts.path or '/'}{'?' + parts.query if parts.query else ''} HTTP/1.0"]
            sent += [f"{k}: {v}" for k, v in headers.items() if k not in ("proxy-authorization", "connection")]
            upstream.sendall(("\r\n".join(sent) + "\r\nConnection: close\r\n\r\n").encode("latin-1") + body)
            _pipe(upstream, self.connection)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Bytes from ``source`` to ``sink`` until ``source`` ends; then ``sink``'s sending side ends."""
    try:
        while data := source.recv(1 << 16):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


@contextmanager
def user_secret(url: str, secret_file: str = "", secret_env: str = ""):
    """The user's secret for ``url``'s host and port, as ``--secret HOST:PORT=FILE`` (or
    ``=env:VARIABLE``) gives it: in ``RLVR_SECRETS`` while the block runs."""
    import os

    if not (secret_file or secret_env):
        yield
        return
    parts = urlsplit(url)
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    before = os.environ.get("RLVR_SECRETS")
    os.environ["RLVR_SECRETS"] = f"{host}:{port}=" + (secret_file or f"env:{secret_env}")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("RLVR_SECRETS", None)
        else:
            os.environ["RLVR_SECRETS"] = before
