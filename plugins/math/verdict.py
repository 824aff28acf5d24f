"""The verdict on one (gold, prediction) pair of normalised answers: ``judge``.

The literal reading first, then other readings of either side, equal if any reading is: a gold
``label = value`` (``V_1:V_2=11:21``, ``AB=4, CD=5``) against a bare value, and a decimal comma
(``1,22``) where the comma cannot separate thousands. Named values against an unnamed list
(``x=2 and y=3`` vs ``(2, 3)``) are compared in order (never as a set); times of day (never
ratios: ``12:00`` is not ``1:00``) and ratios part by part; the rest goes to ``compare``.
"""

from __future__ import annotations

import re
from typing import Any

from .compare import compare_parsed
from .normalise import CLOSE, EQ_SEP_RE, ITEM_SEP_RE, OPEN, has_letters, is_label, match_key, top_level
from .parse import Parsed, show

_VALID_THOUSANDS_RE = re.compile(r"[-+]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?")
# "1,22", "1000,99", "0,111": not thousands; two digits after the comma at least ("1,2" is
# more often the list 1, 2 than the European 1.2).
_DECIMAL_COMMA_RE = re.compile(r"[-+]?\d+,\d{2,}")


def _strip_labels(text: str) -> str | None:
    """``AB=4, CD=5`` -> ``4, 5``; ``a=4, -8, -10`` -> ``4, -8, -10``; ``V_1:V_2=11:21`` ->
    ``11:21``; ``p=5,q=2; p=7,q=2`` -> ``(5, 2), (7, 2)``. None when there is no label to strip."""
    groups = top_level(text, re.compile(";"))
    out, stripped = [], False
    for group in groups:
        items = []
        for item in top_level(group, ITEM_SEP_RE):  # "x = 1,000" is one item
            sides = top_level(item, EQ_SEP_RE)
            if len(sides) == 2 and is_label(sides[0]) and sides[1].strip():
                items.append(sides[1].strip())
                stripped = True
            elif len(sides) == 1:
                items.append(item.strip())
            else:
                return None
        joined = ", ".join(items)
        out.append(f"({joined})" if len(groups) > 1 and len(items) > 1 else joined)
    return ", ".join(out) if stripped else None


_TIME_RE = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(?:\\text\{\s*)?([ap]\.?\s*m\.?)?\s*\}?", re.IGNORECASE)
_RATIO_SEP_RE = re.compile(r":|\\colon(?![A-Za-z])")


def _time_of_day(text: str) -> tuple | None:
    m = _TIME_RE.fullmatch(text.strip())
    if m is None:
        return None
    meridiem = (m.group(4) or "").lower().replace(".", "").replace(" ", "")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), meridiem


def _ratio_parts(text: str) -> list[str] | None:
    """``3:4`` / ``1:2:3``: parts of a ratio of numbers (no letters: ``\\{x : x>0\\}`` is not one)."""
    if ":" not in text and "\\colon" not in text:
        return None
    parts = [p.strip() for p in top_level(text, _RATIO_SEP_RE)]
    if len(parts) < 2 or not all(parts) or any(has_letters(p) or not re.search(r"\d", p) for p in parts):
        return None
    return parts


def judge(g: Parsed | None, p: Parsed) -> tuple[bool | None, dict[str, Any]]:
    """The literal reading first; then other readings of either side (labels stripped from
    ``x = 5`` against ``5``, ``1,5`` as a decimal comma): equal if any reading is."""
    info: dict[str, Any] = {"gold_norm": show(g.text if g else None), "pred_norm": show(p.text)}
    if g is None:
        return None, {**info, "why": "no gold answer"}
    result = _compare_assignments(g.text, p.text)
    alternatives = _alternatives(g, p) if result is None else ()
    result = result or _compare_readings(g, p)
    for alt_g, alt_p in alternatives:
        if result[0] is True:
            break
        other = _compare_readings(alt_g, alt_p)
        if other[0] is True or result[0] is None:
            result = other
    equal, why = result
    # Both parses, where this comparison parsed the answer (a fresh ``p``). Not the gold's alone:
    # the gold's ``Parsed`` is cached across items, so whether it holds a parse depends on which
    # items came before, and the reasons a sample shows must not.
    if p.parsed_expr is not None:
        info["pred_parsed"] = show(p.parsed_expr)
        if g.parsed_expr is not None:
            info["gold_parsed"] = show(g.parsed_expr)
    return equal, {**info, "why": why}


def _assignments(text: str) -> list[tuple[str, str]] | None:
    """``x=2, y=3`` (``x=2 and y=3`` once normalised) -> [(x, 2), (y, 3)]: values given to two or
    more distinct names; None for anything else (``x=2, x=3`` lists roots: a set)."""
    if ";" in text or "=" not in text:
        return None
    items = top_level(text, ITEM_SEP_RE)
    if len(items) < 2:
        return None
    named = []
    for item in items:
        sides = top_level(item, EQ_SEP_RE)
        if len(sides) != 2 or not is_label(sides[0]) or not sides[1].strip():
            return None
        named.append((match_key(sides[0]), sides[1].strip()))
    return named if len({name for name, _ in named}) == len(named) else None


_PAREN_LEFT_RE = re.compile(r"\\left\s*\(")
_PAREN_RIGHT_RE = re.compile(r"\\right\s*\)")


def _closing_bracket(s: str, start: int) -> int | None:
    """Index of the bracket (any kind, as in :func:`top_level`) closing the one at ``start``."""
    depth, i = 0, start
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        depth += c in OPEN
        depth -= c in CLOSE
        if depth == 0:
            return i
        i += 1
    return None


def _bare_values(text: str) -> tuple[list[str], bool] | None:
    """(items, is a tuple) of an unnamed list ``2, 3`` or tuple ``(2, 3)``; one item for anything
    else (a set ``\\{2, 3\\}``, an interval ``[2, 3]``); None when an item is an equation."""
    t = _PAREN_RIGHT_RE.sub(")", _PAREN_LEFT_RE.sub("(", text.strip()))
    is_tuple = t.startswith("(") and t.endswith(")") and _closing_bracket(t, 0) == len(t) - 1
    if is_tuple:
        t = t[1:-1]  # one pair of parentheses around everything (not "(1, 2), (3, 4)")
    items = [item.strip() for item in top_level(t, ITEM_SEP_RE)]
    return None if any("=" in item for item in items) else (items, is_tuple)


def _compare_assignments(g_text: str, p_text: str) -> tuple[bool, str] | None:
    """Named values against unnamed ones (``x=2, y=3`` vs ``(2, 3)`` or ``2, 3``, either side gold):
    the values in the order the names are written -- for a tuple also in the order they sort
    (an ordered pair is (x, y) by convention), and both must agree: ``(3, 2)`` is not
    ``x=2, y=3``, nor is the set ``\\{2, 3\\}``, and ``y=3, x=2`` matches no tuple (which order would
    it mean?). A list without parentheses follows the written order (``x=-5, p=14/3`` vs
    ``-5, 14/3``: math-verify's numina case). None where this does not apply."""
    for named_text, other in ((g_text, p_text), (p_text, g_text)):
        named = _assignments(named_text)
        found = _bare_values(other) if named else None
        if found is None:
            continue
        values, is_tuple = found
        if len(values) != len(named):
            return False, "not equal (named values vs a list of another length)"
        orders = [named] + ([sorted(named)] if is_tuple and sorted(named) != named else [])
        for order in orders:
            for (_, value), item in zip(order, values):
                pair = (Parsed(value), Parsed(item)) if named_text is g_text else (Parsed(item), Parsed(value))
                if _compare_readings(*pair)[0] is not True:
                    return False, "not equal (named values in the order of their names)"
        return True, "equal (named values in the order of their names)"
    return None


def _alternatives(g: Parsed, p: Parsed):
    """Other readings to try, cheapest first; generated lazily."""
    for side in (g, p):
        if _DECIMAL_COMMA_RE.fullmatch(side.text) and not _VALID_THOUSANDS_RE.fullmatch(side.text):
            decimal = Parsed(side.text.replace(",", "."))
            yield (decimal, p) if side is g else (g, decimal)
    g_eq, p_eq = "=" in g.text, "=" in p.text
    if g_eq != p_eq:
        bare = _strip_labels(g.text if g_eq else p.text)
        if bare is not None:
            yield (Parsed(bare), p) if g_eq else (g, Parsed(bare))


def _compare_readings(g: Parsed, p: Parsed) -> tuple[bool | None, str]:
    """One reading of each side: times of day and ratios by their parts, the rest by
    :func:`compare_parsed`; None when the gold answer cannot be read."""
    if g.key == p.key:
        return True, "identical after normalisation"
    g_time, p_time = _time_of_day(g.text), _time_of_day(p.text)
    if g_time or p_time:  # never read as a ratio: 12:00 is not 12/0
        same = bool(g_time and p_time and g_time[:3] == p_time[:3] and (not g_time[3] or not p_time[3]
                                                                          or g_time[3] == p_time[3]))
        return same, ("equal" if same else "not equal") + " (times of day)"
    g_ratio, p_ratio = _ratio_parts(g.text), _ratio_parts(p.text)
    if g_ratio or p_ratio:
        return _compare_ratios(g_ratio or [g.text], p_ratio or [p.text])
    if g.number is None and g.expr is None:
        return None, f"gold answer: {g.note}"
    return compare_parsed(g, p)


def _compare_ratios(gs: list[str], ps: list[str]) -> tuple[bool | None, str]:
    """``a:b`` equals ``c:d`` part by part, or as the quotient ``a/b`` when there are two parts
    and none is zero (``3:4`` = ``6:8`` = ``\\frac34``)."""
    if len(gs) == len(ps):
        verdicts = [_compare_readings(Parsed(a), Parsed(b))[0] for a, b in zip(gs, ps)]
        if all(v is True for v in verdicts):
            return True, "equal (ratios, part by part)"
    quotients = []
    for parts in (gs, ps):
        if len(parts) == 1:
            quotients.append(parts[0])
        elif len(parts) == 2 and not any(_PLAIN_ZERO_RE.fullmatch(x) for x in parts):
            quotients.append(f"\\frac{{{parts[0]}}}{{{parts[1]}}}")
        else:
            return False, "not equal (ratios)"
    equal, why = _compare_readings(Parsed(quotients[0]), Parsed(quotients[1]))
    return bool(equal), why + " (ratios as quotients)"


_PLAIN_ZERO_RE = re.compile(r"[-+]?0+(?:\.0*)?")
