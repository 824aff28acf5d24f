"""Who may talk to a sampler: a shared secret on every route, and only the routes rlvr uses.

vLLM's server in dev mode (needed for its weight-transfer routes) also opens ``/collective_rpc``
(``shutdown`` kills it), ``/sleep``, ``/server_info``, ``/reset_prefix_cache`` and more, none
behind vLLM's ``--api-key`` (which guards only ``/v1``-style paths). rlvr's sampler runs
``SamplerGuard`` as vLLM's outermost ASGI middleware (``--middleware``): a request without
``Authorization: Bearer <secret>`` gets 401 on any path, so a stranger learns nothing, not even
which routes exist; with the secret, a route rlvr does not use gets 404.

The secret reaches the sampler through the environment (``RLVR_SAMPLER_SECRET``), never through
its command line or logs: a trainer makes a new one for every run; for a sampler started by hand
(``rlvr sampler``) the user gives the same secret to it and to every trainer rank, in
``RLVR_SAMPLER_SECRET`` or in a file that ``RLVR_SAMPLER_SECRET_FILE`` names (what a cluster's
launcher can forward without putting the secret itself on a command line). A sampler process
without one refuses every request (fails closed).

This module is imported inside vLLM's API server process: it depends on nothing but the standard
library and Starlette's ASGI conventions.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import sys

SECRET_ENV = "RLVR_SAMPLER_SECRET"
SECRET_FILE_ENV = "RLVR_SAMPLER_SECRET_FILE"
MIN_SECRET_CHARS = 16

# (method, path) of every request rlvr makes to a sampler: rlvr.sampling.server and its weight sync,
# and the judge reward (plugins/judge_reward.py: api chat, its default, or completions).
ROUTES = frozenset({
    ("GET", "/health"),
    ("GET", "/get_world_size"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/pause"),
    ("POST", "/resume"),
    ("POST", "/init_weight_transfer_engine"),
    ("POST", "/start_weight_update"),
    ("POST", "/update_weights"),
    ("POST", "/finish_weight_update"),
})


def new_secret() -> str:
    """A fresh secret for one run (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def secret_problem(secret: str | None) -> str | None:
    """Why ``secret`` cannot guard a sampler, or None when it can."""
    if not secret:
        return "no secret"
    if len(secret) < MIN_SECRET_CHARS:
        return f"the secret is {len(secret)} characters long; use at least {MIN_SECRET_CHARS}"
    if any(c.isspace() or not c.isprintable() for c in secret):
        return "the secret holds spaces or control characters"
    return None


def given_secret(secret_file: str | os.PathLike | None = None) -> tuple[str, str]:
    """(the secret a user gave, where it came from): the first line of ``secret_file``, else
    ``RLVR_SAMPLER_SECRET``, else the first line of the file ``RLVR_SAMPLER_SECRET_FILE`` names.
    An unreadable file is a ``ValueError`` with one line; a missing secret is ``""`` (check it
    with ``secret_problem``)."""
    if secret_file is None and os.environ.get(SECRET_ENV):
        return os.environ[SECRET_ENV], SECRET_ENV
    where = f"--secret-file {secret_file}" if secret_file is not None else SECRET_FILE_ENV
    secret_file = secret_file if secret_file is not None else os.environ.get(SECRET_FILE_ENV)
    if not secret_file:
        return "", SECRET_ENV
    try:
        with open(secret_file, encoding="utf-8") as f:
            secret = f.readline().strip()
            if secret:
                warn_if_shared(f.fileno(), where)
            return secret, where
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: cannot read {secret_file}: {getattr(exc, 'strerror', None) or exc}") from None


def warn_if_shared(fd: int, where: str) -> bool:
    """Say on stderr (one line) when the secret file open at ``fd`` is a regular file that its group
    or other users may read or write: whoever reads the secret can drive the sampler, whoever writes
    it can swap it. True when it warned."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode) or not mode & 0o077:
        return False
    who = " and ".join(w for w, bits in (("its group", 0o070), ("other users", 0o007)) if mode & bits)
    print(f"rlvr: warning: {where} may be read or written by {who} (mode {stat.S_IMODE(mode):o}): "
          "anyone who reads the secret can drive the sampler; chmod 600 it", file=sys.stderr)
    return True


def required_secret(needs: str, how: str = "", secret_file: str | os.PathLike | None = None) -> str:
    """The secret a user gave (``given_secret``), or an ``RlvrError`` of one line: ``needs``, then
    what is wrong with it and where it was looked for, then ``how`` to give one."""
    from rlvr import RlvrError

    try:
        secret, where = given_secret(secret_file)
    except ValueError as exc:
        raise RlvrError(str(exc)) from None
    problem = secret_problem(secret)
    if problem:
        raise RlvrError(f"{needs} ({problem} in {where}){how}")
    return secret


def auth_headers(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def _digest(text: str | bytes) -> bytes:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).digest()


def secret_digest(secret: str | None) -> bytes | None:
    """What ``bearer_matches`` compares with: None (nothing matches) when ``secret`` cannot
    guard a sampler, after saying why on stderr (the sampler's log)."""
    problem = secret_problem(secret)
    if problem:  # fail closed, and say why in the sampler's log
        print(f"rlvr: sampler: {problem} in {SECRET_ENV}: every request will be refused", file=sys.stderr)
        return None
    return _digest(secret)


def bearer_matches(authorization: bytes, digest: bytes | None) -> bool:
    """Whether an ``Authorization`` header's value is ``Bearer <the secret>``. Comparisons are of
    SHA-256 digests in constant time, so the answer's timing does not tell a caller how much of a
    guess was right."""
    scheme, _, token = authorization.partition(b" ")
    if digest is None or scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(_digest(token.strip()), digest)


UNAUTHORIZED = {"error": "unauthorized: this sampler needs its run's secret"}


class SamplerGuard:
    """Pure ASGI middleware: 401 without the secret (any path), 404 for a route rlvr does not use."""

    def __init__(self, app, secret: str | None = None):
        self.app = app
        self._digest = secret_digest(os.environ.get(SECRET_ENV) if secret is None else secret)

    def _authorized(self, scope) -> bool:
        value = b""
        for name, header in scope.get("headers", ()):
            if name.lower() == b"authorization":
                value = header
                break
        return bearer_matches(value, self._digest)

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):  # lifespan: start-up and shut-down
            await self.app(scope, receive, send)
            return
        path = scope["path"].removeprefix(scope.get("root_path", "")) or "/"
        if not self._authorized(scope):
            status, body = 401, UNAUTHORIZED
        elif scope["type"] != "http" or (scope.get("method"), path) not in ROUTES:
            status, body = 404, {"error": f"not a route of rlvr's sampler: {path}"}
        else:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        payload = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                                *([(b"www-authenticate", b"Bearer")] if status == 401 else [])]})
        await send({"type": "http.response.body", "body": payload})
