"""The sampler's front door: the only TCP listener of an rlvr sampler, in front of vLLM's server.

``python -m rlvr.sampling.front --host H --port P -- VLLM_ARGS...`` listens on H:P and runs vLLM's
OpenAI server as its child on a Unix socket in a private folder (mode 0700, removed at exit). It
reads each connection's request headers itself, checks the run's secret (``rlvr.sampling.auth``)
and only then connects the caller to vLLM, passing bytes both ways unchanged. vLLM's own server
buffers a header of any size and keeps a connection that never finishes one forever, and its
guard (``SamplerGuard``, still there behind this) sees only whole requests: the limits must come
before it.

What it protects against, from anyone who can reach the port without the secret:

- connections that send nothing, or headers slowly (slowloris): closed when the headers are not
  whole ``header_timeout_s`` after the connection was accepted;
- huge headers: no more than ``MAX_HEADER_BYTES`` are read (431, closed);
- running the sampler out of file descriptors: connections not yet admitted are capped
  (``connection_caps``, below the process's RLIMIT_NOFILE); at the cap the oldest is closed to
  make room once it has had ``MIN_CHANCE_S`` to send its headers, and newer ones wait in the
  kernel's queue in the order they came, so a stranger holding every slot he can still cannot keep
  the owner out: the owner's headers arrive at once, his connection's turn comes after the ones
  queued before it, at ``max_waiting / MIN_CHANCE_S`` a second;
- the owner's connections (secret checked) have a share of their own, which strangers cannot use.

What it does not: bandwidth or SYN floods (the kernel's and the network's business), anyone
holding the secret. After the first request of a kept-alive connection, bytes pass unparsed: only
the owner has such a connection; vLLM's guard checks each request on it, and vLLM closes it once
idle (``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``, 5 s).

The front exits when vLLM exits, with its status (a signal that killed vLLM kills the front too),
and forwards SIGTERM and SIGINT to it. Standard library only (plus ``rlvr.sampling.auth``): no torch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections import OrderedDict

from rlvr.sampling.auth import SECRET_ENV, UNAUTHORIZED, bearer_matches, secret_digest

HEADER_TIMEOUT_S = 10.0  # from accept to the end of the request headers
MAX_HEADER_BYTES = 16 << 10  # rlvr's requests send ~300 bytes of headers
RESERVED_FDS = 64  # the front's own: listener, event loop, pipes, stdio, imports
MIN_CHANCE_S = 0.5  # at the cap, how long a connection may send its headers before a newer one takes its place
LINGER_S = 1.0  # after a refusal, how long unread request bytes are drained (else the kernel resets the connection)
CHUNK = 1 << 16


def connection_caps(fd_limit: int) -> tuple[int, int]:
    """(connections not yet admitted, admitted connections) under a limit of ``fd_limit`` open
    files: one not yet admitted holds one descriptor, an admitted one two (the caller's and vLLM's)."""
    budget = max(fd_limit - RESERVED_FDS, 24)
    waiting = max(8, min(1024, budget // 4))
    return waiting, max(8, (budget - waiting) // 2)


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere a no-op)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return


def _vllm_setup() -> None:  # in vLLM's process, between fork and exec
    """vLLM dies with the front, and may open as many files as the hard limit allows (the front's
    own, lower limit is for the front: its caps are set from it)."""
    die_with_parent()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (65536 if hard == resource.RLIM_INFINITY else hard, hard))
    except (ValueError, OSError):
        pass


def answer(status: int, reason: str, body: dict, extra: str = "") -> bytes:
    payload = json.dumps(body).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(payload)}\r\n"
            f"connection: close\r\n{extra}\r\n").encode() + payload


def authorization(head: bytes) -> bytes:
    """The first ``Authorization`` header's value in a request head (request line and headers)."""
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon and name.strip().lower() == b"authorization":
            return value.strip()
    return b""


class Front:
    """Admits connections to vLLM at ``upstream`` (a Unix socket) by the secret's ``digest``."""

    def __init__(self, upstream: str, digest: bytes | None, *, header_timeout_s: float = HEADER_TIMEOUT_S,
                 fd_limit: int | None = None):
        self.upstream, self.digest, self.header_timeout_s = upstream, digest, header_timeout_s
        fd_limit = fd_limit or resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.max_waiting, self.max_admitted = connection_caps(fd_limit)
        self.waiting: OrderedDict[socket.socket, float] = OrderedDict()  # not yet admitted: when accepted, oldest first
        self.admitted = 0
        self.freed = asyncio.Event()  # a waiting connection left
        self.tasks: set[asyncio.Task] = set()

    async def serve(self, sock: socket.socket) -> None:
        """Accept on ``sock`` for ever, as fast as there is room: connections beyond wait in the
        kernel's queue, in the order they came."""
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        while True:
            await self._make_room()
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError:  # out of files after all (another thread's), or the caller left: not the end
                await asyncio.sleep(0.1)
                continue
            self.waiting[conn] = loop.time()
            task = asyncio.ensure_future(self._connection(conn))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _make_room(self) -> None:
        """At the cap, close the oldest waiting connection once it has had ``MIN_CHANCE_S`` to send
        its headers (the owner sends them at once): however many a stranger opens, each connection
        accepted gets that chance, and the queue moves on at ``max_waiting / MIN_CHANCE_S`` a second."""
        loop = asyncio.get_running_loop()
        while len(self.waiting) >= self.max_waiting:
            oldest, since = next(iter(self.waiting.items()))
            left = since + MIN_CHANCE_S - loop.time()
            if left > 0:
                self.freed.clear()
                try:
                    await asyncio.wait_for(self.freed.wait(), left)
                except TimeoutError:
                    pass
                continue
            del self.waiting[oldest]
            try:
                oldest.shutdown(socket.SHUT_RDWR)  # its reader sees the end, and its task closes it
            except OSError:
                pass

    async def _connection(self, conn: socket.socket) -> None:
        try:
            try:
                reader, writer = await asyncio.open_connection(sock=conn, limit=MAX_HEADER_BYTES)
            except OSError:
                conn.close()
                return
            head = await self._head(reader, writer, deadline=self.waiting.get(conn, 0.0) + self.header_timeout_s)
        finally:
            if self.waiting.pop(conn, None) is not None:
                self.freed.set()
        if head is None:
            writer.transport.abort()
            return
        if self.admitted >= self.max_admitted:
            await self._refuse(reader, writer, answer(503, "Service Unavailable", {"error": "too many connections"}))
            return
        self.admitted += 1
        try:
            await self._forward(head, reader, writer)
        finally:
            self.admitted -= 1

    async def _head(self, reader, writer, deadline: float) -> bytes | None:
        """The request's head if it carries the secret; None when the connection is done with
        (``deadline`` passed, too long, refused, gone)."""
        refusal = None
        try:
            async with asyncio.timeout_at(deadline):
                head = await reader.readuntil(b"\r\n\r\n")
                if bearer_matches(authorization(head), self.digest):
                    return head
                refusal = answer(401, "Unauthorized", UNAUTHORIZED, "www-authenticate: Bearer\r\n")
        except asyncio.LimitOverrunError:
            refusal = answer(431, "Request Header Fields Too Large", {"error": "request headers too large"})
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            return None
        await self._refuse(reader, writer, refusal)
        return None

    async def _refuse(self, reader, writer, response: bytes) -> None:
        """Answer and close; the request's unread bytes are drained for a moment first, so that
        the caller reads the answer instead of a reset."""
        try:
            async with asyncio.timeout(LINGER_S):
                writer.write(response)
                await writer.drain()
                writer.write_eof()
                drained = 0
                while drained < 4 * CHUNK and (chunk := await reader.read(CHUNK)):
                    drained += len(chunk)
        except (TimeoutError, ConnectionError, OSError):
            pass
        writer.transport.abort()

    async def _forward(self, head: bytes, reader, writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self.upstream)
        except OSError:  # vLLM still starting (or gone)
            await self._refuse(reader, writer, answer(503, "Service Unavailable", {"error": "the sampler is starting"}))
            return
        up_writer.write(head)
        to_vllm = asyncio.ensure_future(_copy(reader, up_writer))
        try:
            await _copy(up_reader, writer)  # vLLM ends the connection (answered and idle, or the caller left)
        finally:
            to_vllm.cancel()
            up_writer.transport.abort()
            writer.transport.abort()


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Bytes from ``source`` to ``sink`` until the end; an end is passed on (a half close), a
    failure closes ``sink``."""
    try:
        while chunk := await source.read(CHUNK):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        sink.transport.abort()


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    return socket.create_server((host, port), family=family, backlog=1024, dualstack_ipv6=False)


async def serve(sock: socket.socket, front: Front, child: subprocess.Popen) -> int:
    """Serve until vLLM exits; its exit status."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, child.send_signal, sig)
    accepting = asyncio.ensure_future(front.serve(sock))
    try:
        return await loop.run_in_executor(None, child.wait)
    finally:
        accepting.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rlvr.sampling.front", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--header-timeout", type=float, default=HEADER_TIMEOUT_S, help="seconds")
    parser.add_argument("vllm", nargs=argparse.REMAINDER, help="-- and vLLM's OpenAI server's arguments")
    args = parser.parse_args(argv)
    vllm_args = args.vllm[1:] if args.vllm[:1] == ["--"] else args.vllm
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as exc:
        print(f"rlvr: error: the sampler cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        sys.exit(2)
    folder = tempfile.mkdtemp(prefix="rlvr-sampler-")  # 0700: only this user reaches vLLM's socket
    upstream = os.path.join(folder, "vllm.sock")
    front = Front(upstream, secret_digest(os.environ.get(SECRET_ENV)), header_timeout_s=args.header_timeout)
    print(f"rlvr: sampler listening on {args.host}:{args.port}, vLLM behind it on {upstream}; at most "
          f"{front.max_waiting} connections wait for their headers ({front.header_timeout_s:g} s each), "
          f"{front.max_admitted} admitted", file=sys.stderr, flush=True)
    try:
        child = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", *vllm_args,
                                  "--uds", upstream], preexec_fn=_vllm_setup)
        status = asyncio.run(serve(sock, front, child))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if status < 0:  # killed by a signal: so is the front, for whoever watches it
        try:
            signal.signal(-status, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL: always the default
            pass
        os.kill(os.getpid(), -status)
    sys.exit(status)


if __name__ == "__main__":
    main()
