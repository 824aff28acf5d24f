"""Finding ``\\boxed{...}`` answers in a completion: pure string work, linear in the text.

A box is ``\\boxed`` or ``\\fbox`` (not ``\\boxedx``), then blanks, then a ``{...}`` group
(nested braces kept, ``\\{`` and ``\\}`` skipped) or, as TeX allows, one bare token
(``\\boxed 5``). A box whose group never closes (a cut-off answer) has no end.
"""

from __future__ import annotations

import re

__all__ = ["BOX_RE", "box_at", "boxes", "last_boxed"]

BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")  # the command that opens a box
_BRACE_RE = re.compile(r"\\.|[{}]", re.DOTALL)
_TOKEN_RE = re.compile(r"[^\s$]+")  # the argument of "\boxed 5"


def _after_blanks(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t":
        i += 1
    return i


def _closing_brace(text: str, open_index: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_index``, or None."""
    depth = 0
    for m in _BRACE_RE.finditer(text, open_index):
        token = m.group(0)
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return None


def box_at(text: str, start: int) -> tuple[str, int] | None:
    """(content, end) of the box whose command starts at ``start``: the content stripped (a bare
    token without a trailing full stop), ``end`` just past it; None when it is not closed."""
    m = BOX_RE.match(text, start)
    if m is None:
        return None
    i = _after_blanks(text, m.end())
    if i < len(text) and text[i] == "{":
        end = _closing_brace(text, i)
        return None if end is None else (text[i + 1 : end].strip(), end + 1)
    token = _TOKEN_RE.match(text, i)
    return None if token is None else (token.group(0).rstrip("."), token.end())


def boxes(text: str) -> list[tuple[int, int | None]]:
    """(start, end) of every box in ``text``, in order: where its command starts and just past
    its closing brace (or bare token); end None when it is not closed. One pass over the text
    however many boxes nest or stay open."""
    commands = list(BOX_RE.finditer(text))
    if not commands:
        return []
    closing: dict[int, int] = {}  # the index of each "{" -> that of its "}"
    opened: list[int] = []
    for m in _BRACE_RE.finditer(text):
        token = m.group(0)
        if token == "{":
            opened.append(m.start())
        elif token == "}" and opened:
            closing[opened.pop()] = m.start()
    spans: list[tuple[int, int | None]] = []
    for m in commands:
        i = _after_blanks(text, m.end())
        if i < len(text) and text[i] == "{":
            close = closing.get(i)
            spans.append((m.start(), None if close is None else close + 1))
        else:
            token = _TOKEN_RE.match(text, i)
            spans.append((m.start(), None if token is None else token.end()))
    return spans


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces kept), or of ``\\boxed 5``.

    ``None`` when there is none or the last one is not closed (a cut-off answer).
    """
    match = None
    for match in BOX_RE.finditer(text):
        pass
    if match is None:
        return None
    box = box_at(text, match.start())
    return None if box is None else box[0]
