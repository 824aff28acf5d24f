"""Text helpers every reward needs: a completion's plain text, an error on one line, and text
from outside (program output, reward reasons) escaped so that it shows what it holds."""

from __future__ import annotations

import re
import unicodedata
from typing import Any


def completion_text(completion: Any) -> str:
    """Plain text of a completion: a string, or chat messages (the last assistant turn counts;
    without roles, the last message). Content may itself be a list of text parts."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        if "content" in completion:
            return completion_text(completion["content"])
        return str(completion.get("text", ""))
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict) and "content" in m]
        if messages:
            assistant = [m for m in messages if m.get("role", "assistant") == "assistant"]
            return completion_text((assistant or messages)[-1])
        return "".join(completion_text(part) for part in completion)
    return str(completion)


# rlvr's optional parts (pyproject.toml's extras), each named for the package it installs.
EXTRAS = ("trl", "trackio", "wandb")


def install_line(extra: str) -> str:
    """What installs rlvr's optional part ``extra`` (one of :data:`EXTRAS`), at the version rlvr
    is tested with, for the error that says it is missing."""
    return f"pip install 'rlvr[{extra}]' (in a checkout of rlvr: pip install -e '.[{extra}]')"


def one_line(message: str | BaseException, limit: int = 300) -> str:
    """``message`` on one line: whitespace runs become one space, cut to ``limit`` characters.

    An exception reads ``"TypeName: message"`` (``"TypeName"`` alone when it has no message).
    """
    if isinstance(message, BaseException):
        text = str(message)
        message = f"{type(message).__name__}: {text}" if text.strip() else type(message).__name__
    text = " ".join(message.split()) or "(no message)"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Candidates: all but tab, newline, printable ASCII, and the Latin ranges that hold no format
# character (U+00A0-U+02FF but the soft hyphen); each is then judged by its Unicode category.
_CANDIDATES = re.compile("[^\t\n\x20-\x7e\xa0-\xac\xae-\u02ff]")
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def escape_controls(text: str) -> str:
    """``text`` with what a terminal, a log viewer or a reader may act on rather than show
    written out as Python's ``repr`` writes it: C0 and C1 control characters but tab and
    newline, DEL (``\\x1b``, ``\\r``, ``\\x85``), and Unicode's invisible format characters
    (category Cf: bidi overrides and isolates, zero-width spaces and joiners, the byte-order
    mark, tag characters U+E0000-U+E007F) and line and paragraph separators (Zl, Zp) as
    ``\\u200b``, ``\\u202e``, ``\\U000e0041``. ``\\r\\n`` becomes ``\\n``; letters of any script
    and emoji stay (a ZWJ emoji sequence shows its joiners). A lone surrogate (bytes decoded
    with ``surrogateescape``) is escaped too. Escaping twice changes nothing more."""
    return _CANDIDATES.sub(_escape_one, text.replace("\r\n", "\n"))


def _escape_one(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    tag = 0xE0000 <= code <= 0xE007F  # unassigned ones too: the block exists to hide text
    if not tag and unicodedata.category(char) not in _HIDDEN:
        return char
    if char == "\r":
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
