"""String and LaTeX normalisation of an answer before it is parsed (``normalize_answer``).

Math delimiters, ``\\dfrac``, ``\\mathrm{e}``, units, thousands separators, ``\\$``, degrees,
scientific notation, repeating decimals, lists joined by words and the units of each item (one
letter in ``\\text{ m}``, never a bare ``2m``), a worked computation ``1+18 = 19`` as its
result, mixed numbers ``4 4/9``, a trailing ``\\\\`` or spacing command. Also the bracket-aware
splitting (``top_level``) and the label test (``is_label``: ``x``, ``f(x)``, ``V_1:V_2``) that
the comparison reuses. Pure string work, like extraction.
"""

from __future__ import annotations

import itertools
import re

from .extract import depth_at

__all__ = ["normalize_answer"]

_DELIMS = ((r"$$", r"$$"), ("$", "$"), (r"\(", r"\)"), (r"\[", r"\]"))
_FONT_LETTER_RE = re.compile(r"\\(?:mathrm|mathit|mathbf|mathsf|mathtt|mathnormal|textrm|textit|textbf|text|operatorname)\s*\{\s*([A-Za-z])\s*\}")
# A trailing degree sign is a unit (30^\circ = 30); inside trigonometry it is a conversion,
# which math-verify drops (it reads \cos 60^\circ as cos(60 radians)).
_TRIG_RE = re.compile(r"\\(?:sin|cos|tan|cot|sec|csc)(?![A-Za-z])")
_DEGREE_ARG_RE = re.compile(r"(\d+(?:\.\d+)?)\s*\^\s*\{?\s*\\circ\s*\}?")
_DEGREE_RE = re.compile(r"(?:\^\s*\{?\s*\\circ\s*\}?|\\degree|°)\s*(?:\\text\s*\{\s*[CF]?\s*\}|[CF])?\s*$")
_THIN_SEP_RE = re.compile(r"(?<=\d)(?:\\,|\\;|\\:|\\ |~|\{,\})(?=\d{3}(?!\d))")
_SPACING_RE = re.compile(r"(?<!\\)\\(?:,|;|:|\s|quad|qquad)|~")  # not the "\\" row break
_TEXT_NUMBER_RE = re.compile(r"\\(?:text|textrm|textnormal|textbf|mbox|mathrm)\s*\{\s*([-+]?\.?\d[^{}]*)\}")
_SPACED_THOUSANDS_RE = re.compile(r"[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?")
_SCI_RE = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*[eE]\s*([-+]?\d+)")
_REPEATING_RE = re.compile(r"(-?)(\d*)\.(\d*)\\overline\s*\{(\d+)\}")
_UNIT_TEXT_RE = re.compile(
    r"\\(?:text|textrm|textnormal|textit|textbf|textsf|textup|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*$"
)
_UNIT_WORDS_RE = re.compile(r"(?:(?<=[\d}])|(?<=\\pi))\s+([A-Za-z]{2,}(?:\s+[A-Za-z]{2,})*)\.?\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*$")
# Words that are mathematics, not units, when they trail an expression.
_MATH_WORDS = {"pi", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "inf", "infinity",
               "percent", "percentage", "pct", "and", "or", "mod", "degrees", "degree", "radians", "rad",
               "am", "pm"}  # 12:00 PM: a time of day keeps its half


# What may trail an answer and carries nothing: a row break \\ ending a display line, a lone
# backslash (left of "\$" or "\,"), spacing commands and "~": 5\\ , 12\, , \boxed{5\quad}.
_TRAILING_NOISE_RE = re.compile(
    r"(?:~|\\\\|\\(?:quad|qquad|enspace|enskip|thinspace|medspace|thickspace|hfill)(?![A-Za-z])"
    r"|\\(?:hspace|hskip|vspace)\*?\s*\{[^{}]*\}|\\[,;:!]|\\)$")


def _strip_trailing_noise(s: str) -> str:
    """One token at a time from the end (a single regex over a run of spaces would be quadratic)."""
    s = s.rstrip()
    for _ in range(20):
        m = _TRAILING_NOISE_RE.search(s)
        if m is None:
            break
        s = s[: m.start()].rstrip()
    return s


# A mixed number: a whole number, a space, a proper fraction ("4 4/9", "2 \frac{1}{3}", "-1 \frac12").
# Only a proper fraction makes one: "2 4/3" and "2 3" stay ambiguous (and unparsed), and the
# space is never read as a product ("4 4/9" is 40/9, not 16/9).
_MIXED_RE = re.compile(
    r"([-+]?)(\d+)\s+(?:(\d+)\s*/\s*(\d+)|\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|\\frac\s*(\d)(\d))")


def _mixed_number(s: str) -> str:
    """``4 4/9`` -> ``\\frac{40}{9}``, ``-2 \\frac{1}{3}`` -> ``-\\frac{7}{3}``; anything else unchanged."""
    m = _MIXED_RE.fullmatch(s.strip())
    if m is None:
        return s
    numerator, denominator = [int(x) for x in m.groups()[2:] if x is not None]
    if not 0 < numerator < denominator:
        return s
    total = int(m.group(2)) * denominator + numerator
    return f"{'-' if m.group(1) == '-' else ''}\\frac{{{total}}}{{{denominator}}}"


def _strip_delimiters(s: str) -> str:
    changed = True
    while changed:
        changed = False
        s = s.strip()
        for left, right in _DELIMS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s = s[len(left) : len(s) - len(right)]
                changed = True
                break
    return s


def _strip_units(s: str) -> str:
    """Drop trailing units: ``5\\text{ cm}^2``, ``12 square feet``; never text inside braces."""
    for _ in range(2):
        m = _UNIT_TEXT_RE.search(s)
        if m and s[: m.start()].strip() and depth_at(s, m.start()) == 0:
            s = s[: m.start()].rstrip()
            continue
        m = _UNIT_WORDS_RE.search(s)
        if m and not (set(m.group(1).lower().split()) & _MATH_WORDS) and depth_at(s, m.start()) == 0:
            s = s[: m.start()].rstrip()
            continue
        break
    return s


# A one-letter unit in text mode after a number, ending the answer or one of its items:
# "3\text{ m}, 5\text{ m}", "12\textrm{ s}", "5 \text{g}^2". Text mode marks a word, not a
# variable (a bare "2m" stays 2*m); \mathrm{..} is left alone (\mathrm{e}, \mathrm{i}, \mathrm{d}x),
# and so are e and i in any font.
_LETTER_UNIT_RE = re.compile(
    r"(?<=[\d}.])\s*\\(?:text|textrm|textnormal|textup|mbox)\s*\{\s*[A-DF-HJ-Za-df-hj-z]\s*\}"
    r"(?:\s*\^\s*\{?\s*[23]\s*\}?)?"
    r"(?=\s*(?:$|[,;]|(?:and|or)\b|\\(?:text|textrm|textnormal|mbox)\s*\{\s*(?:and|or)\s*\}))")


def _strip_letter_units(s: str) -> str:
    """``3\\text{ m}, 5\\text{ m}`` -> ``3, 5`` (top level only: ``\\{2\\text{ m}\\}`` is kept)."""
    if "\\" not in s:
        return s
    out, last = [], 0
    for m in itertools.islice(_LETTER_UNIT_RE.finditer(s), 50):  # depth_at is linear: a bounded count
        if depth_at(s, m.start()) == 0:
            out.append(s[last : m.start()])
            last = m.end()
    return "".join(out) + s[last:] if out else s


# Separators of list items; not a thousands comma ("x = 1,000" is one item).
ITEM_SEP_RE = re.compile(r";|,(?!\d{3}(?![\d.]))")


def _strip_item_units(s: str) -> str:
    """``3\\text{ cm}, 5\\text{ cm}`` -> ``3, 5``: the units of each item of a list (the whole-answer
    pass only sees the last one). Unchanged unless an item lost a unit."""
    items = top_level(s, ITEM_SEP_RE)
    if len(items) < 2 or len(items) > 50:
        return s
    stripped = [_strip_units(item.strip()) for item in items]
    if all(a == b.strip() for a, b in zip(stripped, items)) or not all(stripped):
        return s
    return ", ".join(stripped)


def _repeating_to_fraction(m: re.Match) -> str:
    sign, whole, fixed, period = m.group(1), m.group(2) or "0", m.group(3), m.group(4)
    # x = whole.fixed(period)(period)...  =>  x = (whole fixed period - whole fixed) / (10^k (10^p - 1))
    denominator = (10 ** len(period) - 1) * 10 ** len(fixed)
    numerator = int(whole + fixed + period) - int(whole + fixed)
    return f"{sign}\\frac{{{numerator}}}{{{denominator}}}"


_UNICODE = str.maketrans({"\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u00b7": "\\cdot ",
                          "\u22c5": "\\cdot ", "\u03c0": "\\pi ", "\u221e": "\\infty ", "\u221a": "\\sqrt ", "\u00a0": " ",
                          "\u2009": " ", "\u202f": " ", "\u2264": "\\le ", "\u2265": "\\ge ", "\u2260": "\\ne "})


# "11,\! 111": a thousands separator with a negative thin space, then a space; "14{, }916".
_BANG_SEP_RE = re.compile(r"(?<=\d)\s*(?:,\s*\\!|\{\s*,\s*\})\s*(?=\d{3}(?!\d))")
# "$125$ miles": a math part followed by words (the gold answers of some data sets).
_MATH_THEN_WORDS_RE = re.compile(r"\$([^$]+)\$\s*([A-Za-z][A-Za-z .]*)")
# "12\text{ and }13", "19, 46, and 82": items of a list joined by words.
_TEXT_JOIN_RE = re.compile(r"\s*,?\s*\\(?:text|textrm|textnormal|mbox|mathrm)\s*\{\s*(?:and|or)\s*\}\s*,?\s*")
_WORD_JOIN_RE = re.compile(r"\s*,?\s+(?:and|or)\s+|(?<=[\d)}])\s*(?:and|or)\s*(?=[-+(\\A-Z\d])")
_INEQUALITY_RE = re.compile(r"[<>]|\\(?:le|ge|leq|geq|lt|gt|leqslant|geqslant)(?![A-Za-z])")


def _join_words(s: str) -> str:
    """``a \\text{ and } b`` / ``a, and b`` / ``a or b`` -> ``a, b`` at the top level; not between
    inequalities ("x < 1 or x > 2" is a union, which math-verify reads as such)."""
    if _INEQUALITY_RE.search(s):
        return s
    s = _TEXT_JOIN_RE.sub(", ", s)
    out, last = [], 0
    for m in _WORD_JOIN_RE.finditer(s):
        if depth_at(s, m.start()) == 0 and "\\text" not in s[max(0, m.start() - 6) : m.start()]:
            out.append(s[last : m.start()])
            out.append(", ")
            last = m.end()
    return "".join(out) + s[last:] if out else s


def normalize_answer(s: str) -> str:
    """String-level clean-up before parsing; conservative: it never drops digits or signs inside braces."""
    s = s.strip().translate(_UNICODE)
    m = _MATH_THEN_WORDS_RE.fullmatch(s)
    if m:
        s = f"{m.group(1)} {m.group(2)}"
    s = _strip_trailing_noise(_strip_delimiters(s))
    s = _BANG_SEP_RE.sub(",", s)
    s = s.replace("\\displaystyle", "").replace("\\$", "").replace("\\!", "")
    s = re.sub(r"\\[dtc]frac", r"\\frac", s)
    s = _strip_letter_units(s)
    # math-verify turns \mathrm{..} into \text{..} and then drops a \text{..} at the end of the
    # string as a unit -- even inside a fraction: "1-\frac{1}{\mathrm{e}}" parsed as "1-\frac{1}{".
    s = _FONT_LETTER_RE.sub(r"\1", s)
    if _TRIG_RE.search(s):
        s = _DEGREE_ARG_RE.sub(r"(\1\\cdot\\frac{\\pi}{180})", s)
    else:
        s = _DEGREE_RE.sub("", s)
    s = _THIN_SEP_RE.sub("", s)
    s = _SPACING_RE.sub(" ", s)
    m = _TEXT_NUMBER_RE.fullmatch(s.strip())
    if m:  # "\text{5 cm}": the whole answer written as text
        s = m.group(1)
    s = _strip_units(s)
    s = s.strip().rstrip(".").strip() if not s.endswith("..") else s.strip()
    if _SPACED_THOUSANDS_RE.fullmatch(s):
        s = s.replace(" ", "")
    s = _mixed_number(s)
    m = _SCI_RE.fullmatch(s)
    if m:
        s = f"{m.group(1)}\\times 10^{{{m.group(2)}}}"
    s = _REPEATING_RE.sub(_repeating_to_fraction, s)
    s = _join_words(s)
    s = _strip_item_units(s)
    s = _reduce_chain(s)
    return re.sub(r"\s+", " ", s).strip()


OPEN, CLOSE = set("([{"), set(")]}")


def top_level(s: str, sep: re.Pattern) -> list[str]:
    """``s`` split at the matches of ``sep`` outside brackets of any kind (half-open
    intervals such as ``[1, 2)`` still balance: any opener and any closer count)."""
    parts, depth, last, i = [], 0, 0, 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            m = sep.match(s, i) if depth == 0 else None
            if m and m.end() > i:
                parts.append(s[last:i])
                last = i = m.end()
                continue
            i += 2
            continue
        if c in OPEN:
            depth += 1
        elif c in CLOSE:
            depth -= 1
        elif depth == 0:
            m = sep.match(s, i)
            if m and m.end() > i:
                parts.append(s[last:i])
                last = i = m.end()
                continue
        i += 1
    parts.append(s[last:])
    return parts


EQ_SEP_RE = re.compile(r"(?<![<>!=:\\])=(?!=)")
_APPROX_SEP_RE = re.compile(r"\\approx(?![A-Za-z])|≈")
_LATEX_CMD_RE = re.compile(r"\\[A-Za-z]+")


def has_letters(s: str) -> bool:
    """Letters outside LaTeX commands: ``x``, ``f(n)``, ``\\frac{NO}{BO}``; not ``\\frac{1}{2}``."""
    return bool(re.search(r"[A-Za-z]", _LATEX_CMD_RE.sub("", s)))


def _reduce_chain(s: str) -> str:
    """A worked computation as its result: ``x = 5+5+1 = 11`` -> ``x = 11``, ``1 + 18 = 19`` ->
    ``19``; ``x = 1/3 \\approx 0.33`` -> ``x = 1/3``, ``x \\approx 11`` -> ``x = 11``. Lists are
    left alone (``a=1, b=2``)."""
    if "=" not in s and "\\approx" not in s and "≈" not in s:
        return s
    if len(top_level(s, ITEM_SEP_RE)) > 1:  # "a=1, b=2"; not "500 + 500 = 1,000"
        return s
    approx = top_level(s, _APPROX_SEP_RE)
    if len(approx) > 1:  # "x = 1/3 \approx 0.33" and "\pi \approx 3.14" keep the exact value
        head = approx[0].strip()
        if not head:
            s = approx[-1]
        elif len(top_level(head, EQ_SEP_RE)) > 1 or not is_label(head):
            s = head
        else:  # "x \approx 11": the value of x
            s = f"{head} = {approx[-1].strip()}"
    parts = [p.strip() for p in top_level(s, EQ_SEP_RE)]
    if len(parts) < 2 or not all(parts):
        return s
    if len(parts) == 2:  # "1 + 2 \times 9 = 19"; not the equation "7 = 11a+c"
        return parts[-1] if not (has_letters(parts[0]) or has_letters(parts[1])) else s
    return f"{parts[0]} = {parts[-1]}" if has_letters(parts[0]) else parts[-1]  # "1 = \zzz = x = 0"


def match_key(s: str) -> str:
    return re.sub(r"\s+", "", s)


_LABEL_COMMANDS_RE = re.compile(
    r"\\(?:[dt]?frac|left|right|overline|overrightarrow|vec|bar|hat|widehat|angle|triangle|mathrm|mathit|text|"
    r"operatorname|lvert|rvert|vert|mid)(?![A-Za-z])")
_SUBSCRIPT_RE = re.compile(r"_\s*(?:\{[^{}]*\}|\w)")
_LABEL_CHARS_RE = re.compile(r"[\s(){}|:,]")
_CALL_ARGS_RE = re.compile(r"(?<=[A-Za-z])\([^()]*\)")


def is_label(s: str) -> bool:
    """``x``, ``x_1``, ``(p,q)``, ``f(x)``, ``|AB|``, ``V_1:V_2``, ``\\frac{NO}{BO}``: names, not
    expressions (no digits outside subscripts, no operators)."""
    s = _CALL_ARGS_RE.sub("", _SUBSCRIPT_RE.sub("", s))  # f(2), P(A): a function's value names
    rest = _LABEL_CHARS_RE.sub("", _LABEL_COMMANDS_RE.sub("", s))
    return bool(rest) and rest.isalpha()
