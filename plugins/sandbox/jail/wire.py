"""The wire format of every channel in the sandbox, the host's included: length-prefixed
JSON frames (``send``, ``recv``), the tagged encoding of values crossing between the
tester and a candidate (``encode``, ``decode``), and failure text cut to one short line
(``short``, ``exception_text``)."""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

from ..limits import MAX_MESSAGE, MESSAGE_LIMIT_TEXT


FRAME = struct.Struct(">I")  # a frame's header: its length in bytes, big-endian


class Timeout(Exception):
    """A deadline passed before the frame was read."""


class Closed(Exception):
    """The other end closed the channel, or sent a frame over the size limit."""


def wait_readable(fd: int, deadline: float | None) -> None:
    """Wait until ``fd`` is readable (or hung up); Timeout at ``deadline`` (monotonic)."""
    if deadline is None:
        return
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Timeout
        try:
            if poller.poll(left * 1000):
                return
        except InterruptedError:
            continue


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        wait_readable(fd, deadline)
        try:
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
        except InterruptedError:
            continue
        except OSError as e:
            raise Closed(str(e)) from None
        if not chunk:
            raise Closed("end of stream")
        buf += chunk
    return bytes(buf)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to a blocking ``fd``."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


def send(fd: int, obj: Any) -> None:
    """Write ``obj`` as one JSON frame."""
    data = json.dumps(obj, separators=(",", ":")).encode()
    write_all(fd, FRAME.pack(len(data)) + data)


def recv(fd: int, deadline: float | None = None, limit: int = MAX_MESSAGE) -> Any:
    """Read one JSON frame; Timeout at ``deadline``, Closed at end of stream or past ``limit`` bytes."""
    (n,) = FRAME.unpack(_read_exact(fd, FRAME.size, deadline))
    if n > limit:
        raise Closed(f"message of {n} bytes is over the {limit}-byte limit")
    return json.loads(_read_exact(fd, n, deadline))


def short(text: str, limit: int = MESSAGE_LIMIT_TEXT) -> str:
    """``text`` on one line (whitespace runs collapsed), at most ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def exception_text(e: BaseException) -> str:
    """One short line for an exception: a syntax error with its line number."""
    if isinstance(e, SyntaxError):
        return short(f"SyntaxError: {e.msg} (line {e.lineno})")
    return short(f"{type(e).__name__}: {e}")


# Values crossing between tester and candidate: JSON with one-key objects as tags.
# Encoding happens on both sides; only ever *decoding* matters for trust, and the
# decoder builds nothing but builtin values.


def encode(value: Any, ref_of: Any = None, depth: int = 0) -> Any:
    """Plain data to JSON-able form. Subclasses of builtins become their base type
    (a namedtuple a tuple, a Counter a dict): their own ``__eq__`` is dropped."""
    if depth > 200:
        raise ValueError("value nested too deeply")
    d = depth + 1
    if value is None or value is True or value is False:
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return [encode(v, ref_of, d) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"t": [encode(v, ref_of, d) for v in tuple.__iter__(value)]}
    if isinstance(value, dict):
        return {"d": [[encode(k, ref_of, d), encode(v, ref_of, d)] for k, v in dict.items(value)]}
    if isinstance(value, frozenset):
        return {"f": [encode(v, ref_of, d) for v in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"s": [encode(v, ref_of, d) for v in set.__iter__(value)]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).hex()}
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    if ref_of is not None:
        name = ref_of(value)
        if name is not None:
            return {"r": name}
    raise TypeError(f"a {type(value).__name__} cannot cross the sandbox boundary (only plain data can)")


def decode(value: Any, resolve_ref: Any = None) -> Any:
    """Strict inverse of ``encode``: anything unexpected raises ValueError."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [decode(v, resolve_ref) for v in value]
    if kind is dict and len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "b" and type(inner) is str:
            return bytes.fromhex(inner)
        if tag == "r" and type(inner) is str and resolve_ref is not None:
            return resolve_ref(inner)
        if tag == "c" and type(inner) is list and len(inner) == 2:
            re_, im = inner
            if type(re_) in (int, float) and type(im) in (int, float):
                return complex(re_, im)
        if type(inner) is list:
            if tag == "t":
                return tuple(decode(v, resolve_ref) for v in inner)
            if tag == "s":
                return {decode(v, resolve_ref) for v in inner}
            if tag == "f":
                return frozenset(decode(v, resolve_ref) for v in inner)
            if tag == "d":
                out = {}
                for pair in inner:
                    if type(pair) is not list or len(pair) != 2:
                        raise ValueError("malformed dict entry")
                    out[decode(pair[0], resolve_ref)] = decode(pair[1], resolve_ref)
                return out
    raise ValueError("malformed value")
