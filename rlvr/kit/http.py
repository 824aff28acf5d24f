"""POSTing JSON to a service that scores or judges, within the limits a training run needs.

A reward that asks a service (``http``, ``judge``) must neither hang a run nor let a service it
does not control make it read without end, go elsewhere, or say its secret. ``post_json`` gives:

- one deadline per attempt for the whole exchange (connect, send, the answer's headers and
  body): a server that answers a byte a second is cut at ``timeout_s`` as one that never answers
  is (a watchdog shuts the socket, which wakes the blocked read);
- a cap on the answer's size (``max_response_bytes``): a longer answer is refused, unread;
- no redirects: a 3xx is a failure naming where it pointed (following one would carry the
  request, and its secret, to whatever host the server names);
- retries of what may pass (no connection, a timeout, a dropped connection, HTTP 408, 425, 429
  and 5xx) with exponential backoff and jitter (``backoff_s``, doubling each time, times a random
  factor in [0.5, 1.5) drawn from the system's generator, so ranks seeded alike do not retry in
  step; a ``Retry-After`` of seconds is waited for; no wait is over ``MAX_BACKOFF_S``); another
  4xx, or an answer that is not JSON, is not retried. An attempt never outlasts ``timeout_s``, so
  a call ends within ``(retries + 1) * timeout_s`` plus its waits;
- reasons (``HttpFailure``) of one line, the server's own words escaped and cut short, with the
  secret written ``<secret>`` should a server echo it back (``redact`` does the same to an answer).

Secrets are the user's, by host, never a recipe's: ``user_secret(url)`` is the bearer secret the
user gave for the URL's host (``--secret HOST=FILE`` on the command line, which sets
``RLVR_SECRETS``; ``HOST[:PORT]=FILE`` or ``HOST[:PORT]=env:VARIABLE`` entries, comma-separated),
or none: a secret goes only to a host its user named, whatever the scheme, and a recipe cannot
name where one is read from. ``read_secret`` reads one (a file's first line, at most
``MAX_SECRET_BYTES``, or a variable); ``check_url`` refuses what is not
``http(s)://host[:port]/path`` (credentials in the address included: they belong in the
secret). https checks the host's certificate against the system's authorities (or those
``SSL_CERT_FILE`` names); a certificate that fails is not retried.

Proxies are those the environment names, as curl and Python's urllib read them
(``HTTPS_PROXY``/``https_proxy`` for https, ``HTTP_PROXY``/``http_proxy`` for http, else
``ALL_PROXY``; ``NO_PROXY`` hosts and domains go direct): https goes through a ``CONNECT`` tunnel,
so TLS, and the secret, run end to end with the host; plain http is sent to the proxy. A proxy
is an ``http://[user:password@]host[:port]`` address (its credentials go in
``Proxy-Authorization``, never in a message); another scheme is a one-line failure. Loopback
addresses (``localhost``, 127.0.0.0/8 in any spelling, ``127.1`` and ``localhost.`` included, ::1)
always go direct: a proxy cannot reach this host's loopback, and a local service's secret has no
business at a proxy. Standard library only.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import os
import random
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import unquote, urlsplit
from urllib.request import getproxies_environment, proxy_bypass_environment

from rlvr.kit.data import parse_json
from rlvr.kit.text import escape_controls, one_line

__all__ = ["HttpAnswer", "HttpFailure", "MAX_BACKOFF_S", "MAX_SECRET_BYTES", "SECRETS_ENV", "check_url", "cleartext",
           "host_key", "post_json", "proxy_for", "read_secret", "redact", "secret_sources", "user_secret"]

MAX_BACKOFF_S = 30.0
MAX_SECRET_BYTES = 4096  # a secret file's first line is read up to this (never /dev/zero without end)
SECRETS_ENV = "RLVR_SECRETS"
MAX_JSON_DEPTH = 64  # an answer nested deeper is refused: no scorer or judge answers like that
RETRYABLE_STATUS = frozenset({408, 425, 429})  # and every 5xx
_CHUNK = 1 << 16
_ERROR_BYTES = 1 << 16  # what is read of an error's body, for its first words
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JITTER = random.SystemRandom()  # not the run's seeded generator: ranks must not retry in step


class HttpFailure(Exception):
    """Why a POST gave no usable answer, in one line (``str()``), the secret written out of it."""

    def __init__(self, why: str, *, retryable: bool = False, status: int | None = None,
                 retry_after: float | None = None, attempts: int = 1):
        super().__init__(why)
        self.why, self.retryable, self.status, self.retry_after = why, retryable, status, retry_after
        self.attempts = attempts


@dataclass(frozen=True)
class HttpAnswer:
    """A JSON answer: its parsed body, HTTP status, how many attempts it took and the seconds they
    took with the waits between them."""

    body: Any
    status: int
    attempts: int
    seconds: float


@dataclass(frozen=True)
class _Proxy:
    host: str
    port: int
    authorization: str | None  # the Proxy-Authorization header's value, from the proxy's address

    @property
    def name(self) -> str:
        return f"proxy {self.host}:{self.port}"


@dataclass(frozen=True)
class _Target:
    https: bool
    host: str
    port: int
    path: str

    def connection(self, timeout_s: float, proxy: _Proxy | None) -> http.client.HTTPConnection:
        """A connection to the host, or to ``proxy``: a tunnel for https, a plain one for http."""
        if proxy is None:
            if self.https:
                return http.client.HTTPSConnection(self.host, self.port, timeout=timeout_s, context=_tls())
            return http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        if self.https:  # CONNECT host:port, then TLS with the host through it (its name checked)
            connection = http.client.HTTPSConnection(proxy.host, proxy.port, timeout=timeout_s, context=_tls())
            auth = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
            connection.set_tunnel(self.host, self.port, headers=auth)
            return connection
        return http.client.HTTPConnection(proxy.host, proxy.port, timeout=timeout_s)

    def request_target(self, proxy: _Proxy | None) -> str:
        """The request line's target: the path, or the whole URL for a plain-http proxy."""
        if proxy is None or self.https:
            return self.path
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}"


def host_key(host: str) -> str:
    """``host`` as one spelling: lower case, no trailing dot, an IPv4 address in dotted quads
    (``127.1`` and ``0x7f.1`` are ``127.0.0.1``, as the resolver reads them), IPv6 compressed."""
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host):
        try:  # the shorthand forms inet_aton reads (the resolver connects to them)
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            pass
    return host


def _loopback(host: str) -> bool:
    host = host_key(host)
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def proxy_for(url: str) -> str | None:
    """The proxy a POST to ``url`` goes through (``host:port``), None when it goes direct; a
    proxy variable rlvr cannot use is a one-line ``ValueError`` (see the module docstring)."""
    proxy = _proxy(_target(url))
    return None if proxy is None else f"{proxy.host}:{proxy.port}"


def _proxy(target: _Target) -> _Proxy | None:
    proxies = getproxies_environment()
    scheme = "https" if target.https else "http"
    address, which = proxies.get(scheme), f"{scheme.upper()}_PROXY"
    if not address:
        address, which = proxies.get("all"), "ALL_PROXY"
    if not address or _loopback(target.host) or proxy_bypass_environment(target.host, proxies):
        return None
    if "://" not in address:
        address = "http://" + address  # curl's reading of a bare host:port
    try:
        parts = urlsplit(address)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme != "http" or not parts.hostname:
        shown = parts._replace(netloc=parts.hostname or "").geturl() if parts is not None else "it"
        raise ValueError(f"{which} names a proxy rlvr cannot use ({escape_controls(one_line(shown, 80))}): "
                         "only an http://host:port proxy")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode("ascii")
    return _Proxy(parts.hostname, port or 80, authorization)


_TLS: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
_TLS_LOCK = threading.Lock()


def _tls() -> ssl.SSLContext:
    """Certificates checked, hostnames too, against the system's authorities or those that
    ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` name (a private CA's); made once for each (loading
    them takes a while)."""
    where = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _TLS_LOCK:
        if where not in _TLS:
            _TLS[where] = ssl.create_default_context()
        return _TLS[where]


def _target(url: str) -> _Target:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not a URL: {one_line(exc)}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("a URL starts with http:// or https://")
    if not parts.hostname:
        raise ValueError("the URL names no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials in the URL would be logged with it: give them with secret_file or secret_env")
    if parts.fragment:
        raise ValueError("a URL to POST to has no #fragment")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError("the URL holds spaces or control characters")
    if not url.isascii():
        raise ValueError("the URL holds non-ASCII characters: percent-encode them (a host in its xn-- form)")
    https = parts.scheme == "https"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target(https, parts.hostname, port or (443 if https else 80), path)


def check_url(url: str) -> str:
    """``url`` when it is ``http(s)://host[:port][/path][?query]`` without credentials, else a
    one-line ``ValueError`` saying what is wrong (an option validator's contract)."""
    _target(url)
    return url


def cleartext(url: str) -> bool:
    """Whether a secret sent to ``url`` would cross a network unencrypted: plain http to a host
    other than this one's loopback."""
    target = _target(url)
    return not target.https and not _loopback(target.host)


def read_secret(secret_file: str = "", secret_env: str = "") -> str:
    """The bearer secret: the first line of ``secret_file`` (read up to ``MAX_SECRET_BYTES``),
    else the value of the environment variable named ``secret_env``; ``""`` when neither is given.
    A file that cannot be read, a first line over the limit, an unset or empty variable, or a
    secret with spaces or control characters (it could not travel in a header) is a one-line
    ``ValueError`` that never holds the secret."""
    if secret_file:
        where = secret_file
        try:
            with open(os.path.expanduser(secret_file), "rb") as f:
                head = f.read(MAX_SECRET_BYTES + 1)
            line = head.split(b"\n", 1)[0]
            if len(line) > MAX_SECRET_BYTES:
                raise ValueError(f"the secret file {secret_file} has no line break in its first {MAX_SECRET_BYTES} "
                                 "bytes (the secret is its first line)")
            secret = line.decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the secret file {secret_file}: "
                             f"{getattr(exc, 'strerror', None) or one_line(exc)}") from None
        if not secret:
            raise ValueError(f"the secret file {secret_file} is empty (the secret is its first line)")
    elif secret_env:
        if not _ENV_NAME.fullmatch(secret_env):
            raise ValueError(f"{secret_env!r} is not the name of an environment variable (name it, not the secret)")
        where = f"${secret_env}"
        secret = os.environ.get(secret_env, "").strip()
        if not secret:
            raise ValueError(f"the environment variable {secret_env} is not set or empty")
    else:
        return ""
    if not _fits_a_header(secret):
        raise ValueError(f"the secret in {where} holds spaces, control or non-ASCII characters")
    return secret


def secret_sources(text: str | None = None) -> dict[str, str]:
    """The user's secrets by host, from ``text`` (default: ``RLVR_SECRETS``): ``HOST=FILE``,
    ``HOST:PORT=FILE`` or ``HOST[:PORT]=env:VARIABLE`` entries, comma-separated -> {host key
    (``host_key``, with ``:PORT`` when given): source}. A malformed entry is a one-line
    ``ValueError``; nothing is read here."""
    text = os.environ.get(SECRETS_ENV, "") if text is None else text
    found: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        where, eq, source = entry.partition("=")
        where, source = where.strip(), source.strip()
        if not eq or not where or not source:
            raise ValueError(f"secret {escape_controls(one_line(where or entry, 80))}: give it as HOST=FILE, "
                             "HOST:PORT=FILE or HOST=env:VARIABLE")
        if "/" in where or "@" in where:
            raise ValueError(f"secret for {escape_controls(one_line(where, 80))}: name a host (and port), not a URL")
        host, port = where, ""
        if where.count(":") == 1 or where.startswith("["):  # host:port, [v6]:port
            host, _, port = where.rpartition(":") if not where.endswith("]") else (where, "", "")
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"secret for {escape_controls(one_line(where, 80))}: the port is not a number "
                                 "from 1 to 65535")
        if not host:
            raise ValueError(f"secret for {escape_controls(one_line(where, 80))}: name a host")
        key = host_key(host) + (f":{int(port)}" if port else "")
        if key in found:
            raise ValueError(f"two secrets are given for {key}")
        found[key] = source
    return found


def user_secret(url: str) -> tuple[str, str]:
    """(the secret the user gave for ``url``'s host, where it was read: ``"--secret 127.0.0.1:8001"``)
    or ("", "") when the user gave none for that host (a ``HOST:PORT`` entry first, then ``HOST``);
    read now, so a secret rotated in its file is picked up. One-line ``ValueError`` when the
    entry is malformed or its file or variable cannot be read."""
    target = _target(url)
    sources = secret_sources()
    host = host_key(target.host)
    for key in (f"{host}:{target.port}", host):
        if key in sources:
            source = sources[key]
            variable = source[4:] if source.startswith("env:") else ""
            try:
                return read_secret("" if variable else source, variable), f"the secret for {key}"
            except ValueError as exc:
                raise ValueError(f"the secret for {key}: {exc}") from None
    return "", ""


def _fits_a_header(secret: str) -> bool:
    """Whether ``secret`` can travel in an ``Authorization`` header as it is (printable ASCII, no
    spaces): anything else would make the HTTP library raise an error quoting it."""
    return secret.isascii() and all(c.isprintable() and not c.isspace() for c in secret)


def _redacted(text: str, secret: str) -> str:
    return text.replace(secret, "<secret>") if secret else text


def redact(value: Any, secret: str) -> Any:
    """``value`` (parsed JSON) with ``secret`` written ``<secret>`` in every string, keys too: what
    a server answers is kept in logs and samples, and a server may echo what it was sent."""
    if not secret:
        return value
    if isinstance(value, str):
        return _redacted(value, secret)
    if isinstance(value, dict):
        return {redact(k, secret): redact(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, secret) for v in value]
    return value


def _snippet(body: bytes, secret: str) -> str:
    text = _redacted(body.decode("utf-8", "replace"), secret)[:400]  # redacted whole: a cut could leave part of it
    return escape_controls(one_line(text, 200)) if text.strip() else "(no body)"


class _Watchdog:
    """Shuts the socket it watches ``timeout_s`` after it was made: whatever read or write blocks
    on it then returns, and ``fired`` says why. (Not the connection's ``sock``: http.client lets go
    of it once the answer's headers say the connection will close, while the answer is still read.)"""

    def __init__(self, timeout_s: float):
        self.fired, self.sock, self.lock = False, None, threading.Lock()
        self.timer = threading.Timer(timeout_s, self._fire)
        self.timer.daemon = True
        self.timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self.lock:
            self.sock = sock
            if self.fired:
                self._shut()

    def _fire(self) -> None:
        with self.lock:
            self.fired = True
            self._shut()

    def _shut(self) -> None:
        if self.sock is not None:
            try:  # socket.socket's own: an SSLSocket's shutdown would drop its TLS state under the reader
                socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self.timer.cancel()


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:  # an HTTP date: not worth a parser; the backoff applies
        return None


def _read(response: http.client.HTTPResponse, max_bytes: int, whole: bool = True) -> bytes:
    """The answer's body, at most ``max_bytes``: a longer one is a failure when ``whole``, else cut
    there (an error's body is read for its first words only)."""
    length = response.getheader("content-length")
    if whole and length and length.strip().isdigit() and int(length) > max_bytes:
        raise HttpFailure(f"HTTP {response.status}: an answer of {int(length)} bytes, over max_response_bytes "
                          f"({max_bytes})", status=response.status)
    chunks, size = [], 0
    while chunk := response.read(min(_CHUNK, max_bytes + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            if not whole:
                break
            raise HttpFailure(f"HTTP {response.status}: an answer over max_response_bytes ({max_bytes} bytes)",
                              status=response.status)
    return b"".join(chunks)[:max_bytes]


def _attempt(target: _Target, payload: bytes, headers: Mapping[str, str], timeout_s: float, max_bytes: int,
             secret: str, proxy: _Proxy | None = None) -> tuple[int, bytes]:
    connection = target.connection(timeout_s, proxy)
    watchdog = _Watchdog(timeout_s)
    via = f" via {proxy.name}" if proxy else ""
    try:
        connection.connect()  # within timeout_s (the socket's timeout), the tunnel and TLS handshake included
        watchdog.watch(connection.sock)
        sent = dict(headers)
        if proxy is not None and proxy.authorization and not target.https:
            sent["Proxy-Authorization"] = proxy.authorization
        connection.request("POST", target.request_target(proxy), body=payload, headers=sent)
        response = connection.getresponse()
        status = response.status
        if 300 <= status < 400:
            where = urlsplit(response.getheader("location") or "")
            to = f"{where.scheme}://{where.netloc}{where.path}" if where.netloc else where.path
            to = f" to {escape_controls(one_line(_redacted(to, secret), 200))}" if to else ""
            raise HttpFailure(f"HTTP {status}: redirected{to}; "
                              "redirects are not followed: give the final address", status=status)
        body = _read(response, max_bytes) if status < 400 else _read(response, min(max_bytes, _ERROR_BYTES), False)
        if watchdog.fired:  # the socket was shut under the read: what came is cut short
            raise TimeoutError
        if status < 400 and response.length:  # bytes announced that never came
            raise HttpFailure(f"HTTP {status}: the answer ended {response.length} bytes short of its Content-Length",
                              retryable=True, status=status)
    except HttpFailure:
        raise
    except ssl.SSLCertVerificationError as exc:  # the same next time (a ValueError too, hence first)
        raise HttpFailure(f"{target.host}: {one_line(exc.verify_message or str(exc), 200)}") from None
    except ValueError as exc:  # what http.client refuses to send (never the secret: it is checked first)
        raise HttpFailure(f"cannot send the request: {escape_controls(one_line(_redacted(str(exc), secret), 200))}"
                          ) from None
    except (OSError, http.client.HTTPException) as exc:
        if watchdog.fired or isinstance(exc, TimeoutError):
            raise HttpFailure(f"no answer within {timeout_s:g} s{via}", retryable=True) from None
        if isinstance(exc, ConnectionRefusedError):
            refused = proxy.name if proxy else f"{target.host}:{target.port}"
            raise HttpFailure(f"connection refused by {refused}", retryable=True) from None
        said = one_line(f"{type(exc).__name__}: {_redacted(str(exc), secret)}", 200)
        if proxy is not None and str(exc).startswith("Tunnel connection failed"):  # the proxy's CONNECT answer
            status = int(m.group(1)) if (m := re.search(r"failed: (\d{3})", str(exc))) else None
            raise HttpFailure(f"{escape_controls(said)} ({proxy.name}, to {target.host}:{target.port})",
                              retryable=status is None or status >= 500 or status in RETRYABLE_STATUS,
                              status=status) from None
        raise HttpFailure(f"{escape_controls(said)} ({target.host}:{target.port}{via})",
                          retryable=True) from None
    finally:
        watchdog.cancel()
        connection.close()
    if status >= 400:
        raise HttpFailure(f"HTTP {status} {escape_controls(one_line(_redacted(response.reason or '', secret), 60))}: "
                          f"{_snippet(body, secret)}", retryable=status >= 500 or status in RETRYABLE_STATUS,
                          status=status, retry_after=_retry_after(response.getheader("retry-after")))
    return status, body


def _depth(value: Any) -> int:
    """How deep lists and objects nest in ``value`` (parsed JSON), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            if level <= MAX_JSON_DEPTH:
                todo.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _wait(attempt: int, backoff_s: float, retry_after: float | None) -> float:
    delay = backoff_s * 2 ** (attempt - 1) * _JITTER.uniform(0.5, 1.5)
    return min(MAX_BACKOFF_S, max(delay, retry_after or 0.0))


def post_json(url: str, payload: bytes | Any, *, secret: str = "", timeout_s: float = 30.0, retries: int = 2,
              backoff_s: float = 0.5, max_response_bytes: int = 1 << 20,
              headers: Mapping[str, str] | None = None) -> HttpAnswer:
    """POST ``payload`` (JSON bytes, or a value to encode) to ``url`` and read the JSON answer,
    with ``Authorization: Bearer <secret>`` when a secret is given; raises ``HttpFailure`` when
    no usable answer came after ``retries`` retries (see the module docstring)."""
    try:
        target = _target(url)
    except ValueError as exc:
        raise HttpFailure(f"url {url!r}: {exc}") from None
    try:
        proxy = _proxy(target)
    except ValueError as exc:
        raise HttpFailure(str(exc)) from None
    if secret and not _fits_a_header(secret):
        raise HttpFailure("the secret holds spaces, control or non-ASCII characters")
    if not isinstance(payload, bytes):
        payload = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode()
    sent = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "rlvr", **(headers or {})}
    if secret:
        sent["Authorization"] = f"Bearer {secret}"
    start = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            status, body = _attempt(target, payload, sent, timeout_s, max_response_bytes, secret, proxy)
        except HttpFailure as failure:
            if failure.retryable and attempt <= retries:
                time.sleep(_wait(attempt, backoff_s, failure.retry_after))
                continue
            after = f" (after {attempt} attempts)" if attempt > 1 else ""
            if failure.status in (401, 403) and not secret:
                after += (f"; no secret was sent: the user gives one for this host with --secret "
                          f"{host_key(target.host)}:{target.port}=FILE (or {SECRETS_ENV})")
            raise HttpFailure(failure.why + after, retryable=failure.retryable, status=failure.status,
                              attempts=attempt) from None
        try:
            answer = parse_json(body)
        except (ValueError, RecursionError) as exc:  # not JSON; a 5,000-digit number; nesting deeper than Python's stack
            raise HttpFailure(f"HTTP {status}, but the answer is not JSON ({one_line(str(exc), 80)}): "
                              f"{_snippet(body, secret)}", status=status, attempts=attempt) from None
        if _depth(answer) > MAX_JSON_DEPTH:  # what reads it (redact, the reward) recurses
            raise HttpFailure(f"HTTP {status}, but the answer is nested deeper than {MAX_JSON_DEPTH} levels",
                              status=status, attempts=attempt)
        return HttpAnswer(answer, status, attempt, time.monotonic() - start)
