"""A reference server for rlvr's ``http`` reward: any registered rlvr reward, behind a secret.

    RLVR_REWARD_SERVER_SECRET=... python examples/reward-server/server.py --reward math --option timeout=5

It answers ``POST /score`` in the ``http`` reward's wire format (docs/rewards.md): the records of
``{"records": [...]}`` are scored as one batch by the named reward, through rlvr's own reward
runner (``rlvr.api.RewardScorer``), so a record the reward cannot score, or on which it fails,
is ``{"score": null, "why": ...}`` and spoils no other. ``GET /health`` says which reward it serves.

Closed to strangers: it listens on 127.0.0.1 unless ``--host`` says otherwise, and answers
nothing (401, on every path) to a request without ``Authorization: Bearer <secret>``; the secret
(16 characters or more) comes from ``--secret-file`` or ``$RLVR_REWARD_SERVER_SECRET``, never from
the command line, and is compared in constant time. A request body is read only when its
``Content-Length`` is at most ``--max-request-bytes`` (413 otherwise), and at most
``--max-records`` records are scored a request. Batches are scored one at a time (the reward's
own worker processes work in parallel inside one). What it does not do: TLS (put it behind a
proxy that terminates TLS before it leaves this host) or guard against floods of connections.
The log says one line a request (status, records, seconds), never a header.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ipaddress
import json
import math
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

from rlvr import RlvrError
from rlvr.api import RewardScorer
from rlvr.kit import close_shared, escape_controls, one_line
from rlvr.kit.data import parse_json
from rlvr.kit.http import read_secret

SECRET_ENV = "RLVR_REWARD_SERVER_SECRET"
MIN_SECRET_CHARS = 16
DEFAULT_PORT = 8400  # the http reward's default url: http://127.0.0.1:8400/score
MAX_REQUEST_BYTES = 16 << 20
MAX_RECORDS = 10_000
SOCKET_TIMEOUT_S = 30.0  # for each read or write of a connection
LINGER_S, LINGER_BYTES = 1.0, 4 << 20  # what is drained of a refused request, at most


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


def plain(value):
    """``value`` as strict JSON can hold it: a reward's info may carry NaN, numpy scalars, objects."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    item = getattr(value, "tolist", None)
    return plain(item()) if callable(item) else str(value)


def wire_score(value, info: dict):
    """One record's item of the answer: a bare number, or ``{"score", "why", "info"}``."""
    if value is None:
        why = info.get("error") or info.get("why") or "the reward returned None"
        return {"score": None, "why": str(why), "info": plain(info)}
    return {"score": value, "info": plain(info)} if info else value


class Handler(BaseHTTPRequestHandler):
    server_version = "rlvr-reward-server"
    sys_version = ""
    timeout = SOCKET_TIMEOUT_S
    server: RewardServer

    def do_GET(self):  # noqa: N802 - http.server's names
        self._serve("GET")

    def do_POST(self):  # noqa: N802
        self._serve("POST")

    def _serve(self, method: str) -> None:
        self.records, self.body_read = 0, False
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(_digest(token.strip().encode()), self.server.digest):
            self.answer(401, {"error": "unauthorized: this reward server needs its secret"},
                        {"WWW-Authenticate": "Bearer"})
            return
        path = self.path.split("?", 1)[0]
        if path == "/health" and method == "GET":
            self.answer(200, {"reward": self.server.scorer.name})
            return
        if path != "/score":
            self.answer(404, {"error": f"no route {escape_controls(one_line(path, 80))}: POST /score, GET /health"})
            return
        if method != "POST":
            self.answer(405, {"error": "POST records to /score"}, {"Allow": "POST"})
            return
        length = self.headers.get("Content-Length", "")
        if not length.strip().isdigit():
            self.answer(411, {"error": "a request needs a Content-Length"})
            return
        if int(length) > self.server.max_request_bytes:
            self.answer(413, {"error": f"a request of {int(length)} bytes, over {self.server.max_request_bytes}"})
            return
        self.body_read = True
        try:
            body = parse_json(self.rfile.read(int(length)))
        except (ValueError, UnicodeDecodeError) as exc:
            self.answer(400, {"error": f"the request is not JSON: {one_line(str(exc), 120)}"})
            return
        records = body.get("records") if isinstance(body, dict) else None
        if not isinstance(records, list):
            self.answer(400, {"error": 'the request is not {"records": [...]}'})
            return
        if len(records) > self.server.max_records:
            self.answer(413, {"error": f"{len(records)} records, over {self.server.max_records} a request"})
            return
        self.records = len(records)
        try:
            with self.server.scoring:
                scored = self.server.scorer.score(records)
        except RlvrError as exc:  # a malformed record, or one without a column the reward needs
            self.answer(400, {"error": str(exc)})
            return
        self.answer(200, {"scores": [wire_score(value, info) for value, info in scored]})

    def answer(self, status: int, body: dict, headers: dict | None = None) -> None:
        payload = json.dumps(body, ensure_ascii=False, allow_nan=False).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(payload)),
                            **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)
        if status >= 400 and not self.body_read:
            self._linger()

    def _linger(self) -> None:
        """After a refusal, drain what the caller is still sending for a moment before closing:
        closing a socket with unread bytes resets the connection, and the caller would see the
        reset instead of the answer."""
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(LINGER_S)
            drained = 0
            while drained < LINGER_BYTES and (chunk := self.connection.recv(1 << 16)):
                drained += len(chunk)
        except OSError:
            pass

    def log_request(self, code="-", size="-") -> None:  # one line a request: no header is ever logged
        took = time.monotonic() - getattr(self, "started", time.monotonic())
        self.log_message("%s %s %s: %d records, %.3f s", code, self.command, escape_controls(one_line(self.path, 80)),
                         getattr(self, "records", 0), took)

    def parse_request(self) -> bool:
        self.started = time.monotonic()
        return super().parse_request()

    def log_message(self, format, *args) -> None:  # noqa: A002 - http.server's signature
        sys.stderr.write(f"reward-server: {self.client_address[0]} {format % args}\n")


class RewardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, scorer: RewardScorer, secret: str, max_request_bytes: int, max_records: int):
        super().__init__(address, Handler)
        self.scorer, self.digest = scorer, _digest(secret.encode())
        self.max_request_bytes, self.max_records = max_request_bytes, max_records
        self.scoring = threading.Lock()


def options(pairs: list[str]) -> dict:
    """``KEY=VALUE`` pairs, each value read as YAML (``timeout=5`` is a number), as ``rlvr score --option``."""
    out = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise RlvrError(f"--option expects KEY=VALUE (e.g. timeout=5), got {pair!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reward", required=True, help="a registered reward's name (rlvr rewards lists them)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a reward option")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    parser.add_argument("--secret-file", default="", help=f"file whose first line is the secret (else ${SECRET_ENV})")
    parser.add_argument("--max-request-bytes", type=int, default=MAX_REQUEST_BYTES)
    parser.add_argument("--max-records", type=int, default=MAX_RECORDS)
    args = parser.parse_args(argv)
    try:
        try:
            secret = read_secret(secret_file=args.secret_file, secret_env="" if args.secret_file else SECRET_ENV)
        except ValueError as exc:
            raise RlvrError(f"no secret: {exc}; make one with python3 -c 'import secrets; "
                            "print(secrets.token_urlsafe(32))'") from None
        if len(secret) < MIN_SECRET_CHARS:
            raise RlvrError(f"the secret is {len(secret)} characters long; use at least {MIN_SECRET_CHARS}")
        scorer = RewardScorer(args.reward, options(args.option))
        try:
            server = RewardServer((args.host, args.port), scorer, secret, args.max_request_bytes, args.max_records)
        except OSError as exc:
            raise RlvrError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    except RlvrError as exc:
        print(f"reward-server: error: {exc}", file=sys.stderr)
        sys.exit(2)
    host, port = server.server_address[:2]
    if not loopback(args.host):
        print(f"reward-server: warning: listening on {args.host}, beyond this host: requests and the secret travel "
              "unencrypted unless a TLS proxy is in front", file=sys.stderr)
    print(f"reward-server: {scorer.name!r} on http://{host}:{port}/score", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        close_shared()


if __name__ == "__main__":
    main()
