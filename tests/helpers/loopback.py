"""A JSON service on loopback for the tests of rewards that ask one (tests/test_plugins_http_reward.py,
test_plugins_judge_reward.py): it records every request, counts how many it serves at once, and
answers as the test says, well or badly."""

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's names
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        service = self.server
        with service.lock:
            service.requests.append((self.path, dict(self.headers), body))
            number = len(service.requests)
            service.active += 1
            service.peak = max(service.peak, service.active)
        try:
            service.answer(self, body, number)
        finally:
            with service.lock:
                service.active -= 1

    def reply(self, status=200, body=None, raw=None, headers=None, length=True):
        """Answer ``body`` as JSON (or the bytes ``raw``), with a Content-Length unless ``length`` is false."""
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
