"""The sampler's front door (rlvr.sampling.front) against a stand-in for vLLM on a Unix socket: what
strangers get, what reaches vLLM, how many connections it holds. No vLLM here: tests/e2e/test_sampling_server.py
runs the front before a real one, with the owner training through it while strangers attack."""

import asyncio
import json
import socket
import threading

import pytest

from rlvr.sampling.auth import _digest, auth_headers
from rlvr.sampling.front import MAX_HEADER_BYTES, Front, connection_caps, listening_socket

SECRET = "the-secret-of-this-run-0123456789"


class Harness:
    """A Front on a loopback port in a thread of its own, with a stand-in vLLM that answers every
    request with what it received (and records it)."""

    def __init__(self, tmp_path, **front_args):
        self.received: list[bytes] = []
        self.loop = asyncio.new_event_loop()
        self.upstream = str(tmp_path / "vllm.sock")
        self.front = Front(self.upstream, _digest(SECRET), **front_args)
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(30)

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)

        async def vllm(reader, writer):
            head = await reader.readuntil(b"\r\n\r\n")
            self.received.append(head)
            body = json.dumps({"seen": head.decode()}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body)
            await writer.drain()
            writer.close()

        async def start():
            await asyncio.start_unix_server(vllm, self.upstream)
            sock = listening_socket("127.0.0.1", 0)
            self.port = sock.getsockname()[1]
            asyncio.ensure_future(self.front.serve(sock))

        self.loop.run_until_complete(start())
        ready.set()
        self.loop.run_forever()

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)

    def request(self, headers: dict[str, str], path: str = "/health") -> tuple[int, bytes]:
        with self.connect() as s:
            lines = [f"GET {path} HTTP/1.1", "Host: x", *(f"{k}: {v}" for k, v in headers.items())]
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            return status_and_body(read_all(s))

    def close(self):
        async def cancel_all():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


def read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def status_and_body(response: bytes) -> tuple[int, bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def closed_by_server(s: socket.socket) -> bool:
    """Whether the other end closed ``s`` (reads the end, or a reset); blocks until it does."""
    try:
        while s.recv(65536):
            pass
    except ConnectionError:
        pass
    return True


@pytest.fixture
def harness(tmp_path):
    h = Harness(tmp_path)
    yield h
    h.close()


def test_the_owner_is_forwarded_and_strangers_never_reach_vllm(harness):
    for headers in ({}, auth_headers("a-wrong-guess-at-the-secret"), {"Authorization": SECRET},
                    {"Authorization": f"Basic {SECRET}"}):
        status, body = harness.request(headers)
        assert status == 401 and json.loads(body) == {"error": "unauthorized: this sampler needs its run's secret"}
    assert harness.received == []
    status, body = harness.request({**auth_headers(SECRET), "X-Other": "kept"}, path="/v1/completions")
    assert status == 200
    seen = json.loads(body)["seen"]
    assert seen.startswith("GET /v1/completions HTTP/1.1\r\n") and "X-Other: kept" in seen  # unchanged
    assert len(harness.received) == 1


def test_a_refused_request_with_a_body_reads_its_answer(harness):
    """Unread request bytes are drained before the close, so the caller gets the 401, not a reset."""
    with harness.connect() as s:
        s.sendall(b"POST /pause HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n" + b"x" * 200000)
        status, _ = status_and_body(read_all(s))
    assert status == 401


def test_headers_over_the_limit_are_refused_unread(harness):
    with harness.connect() as s:
        s.sendall(f"GET /health HTTP/1.1\r\nAuthorization: Bearer {SECRET}\r\nX-Big: ".encode())
        sent = 0
        try:
            while sent < 64 * MAX_HEADER_BYTES:  # a header that never ends
                s.sendall(b"a" * 4096)
                sent += 4096
        except ConnectionError:
            pass
        response = b""
        try:
            response = read_all(s)
        except ConnectionError:
            pass
    assert response == b"" or status_and_body(response)[0] == 431
    assert harness.received == []


def test_a_connection_that_never_finishes_its_headers_is_closed(tmp_path):
    h = Harness(tmp_path, header_timeout_s=0.5)
    try:
        with h.connect() as quiet, h.connect() as slow:
            slow.sendall(b"GET /health HTTP/1.1\r\n")
            assert closed_by_server(quiet) and closed_by_server(slow)
        assert h.request(auth_headers(SECRET))[0] == 200
    finally:
        h.close()


def test_at_the_cap_the_oldest_waiting_connection_makes_room(tmp_path):
    """A stranger holding every slot for connections that have not sent their headers: each new
    connection closes the oldest, so the owner still gets in, and the front holds no more."""
    h = Harness(tmp_path, fd_limit=100)
    waiting, _ = connection_caps(100)
    try:
        held = [h.connect() for _ in range(waiting)]
        for s in held:
            s.sendall(b"GET / HTTP/1.1\r\n")  # and no more
        assert h.request(auth_headers(SECRET))[0] == 200  # made room, then admitted
        assert closed_by_server(held[0])
        more = [h.connect() for _ in range(3 * waiting)]
        assert h.request(auth_headers(SECRET))[0] == 200
        for s in more[:-waiting]:
            assert closed_by_server(s)
        assert len(h.front.waiting) <= waiting
        for s in held + more:
            s.close()
    finally:
        h.close()
