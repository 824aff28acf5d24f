"""Math answer checker: reward 1.0 when the completion's final answer equals the gold answer.

Registered as reward ``math``. Dataset column ``answer``: a final answer (``"42"``,
``"\\frac{1}{2}"``) or a full solution (GSM8K ``... #### 42``, MATH ``... \\boxed{42}``).

Pipeline, per sample, in a worker process of :class:`rlvr.workers.DeadlinePool`
(math-verify times out with ``signal.alarm``, which only works in a main thread,
and sympy can hang inside C code where no signal handler runs, so a worker that
overruns ``timeout`` is killed from outside and replaced; a softer SIGALRM limit
at 85% of it usually stops the work first and keeps the worker):

1. extract the gold answer (``gold`` option) and the predicted answer (``extract``);
2. normalise both strings (math delimiters, ``\\dfrac``, ``\\mathrm{e}``, units,
   thousands separators, ``\\$``, degrees, scientific notation, repeating decimals);
3. equal if identical after math-verify's normalisation; plain numbers (``-12``,
   ``1,000``, ``0.25``, ``\\frac{3}{4}``) are compared exactly without sympy;
4. otherwise parse both with math-verify, each wrapped in ``\\boxed{}`` so that only
   its LaTeX parser runs on the whole string (its plain-text extractor takes the
   last number out of ``3x-y+13=0``); a parse is rejected unless it consumed the
   whole normalised string (math-verify's unit stripping turned
   ``1-\\frac{1}{\\mathrm{e}}`` into ``1-\\frac{1}{``, read as 1);
5. our own checks decide where they apply -- exact comparison of numbers
   (math-verify chops differences below 1e-15: ``1/2004!`` equalled ``1/2006!``),
   a relative tolerance of 2e-6 once a decimal appears, equations vs values (only
   ``x = 5`` may stand for ``5``, never ``x^2+1=0`` for ``0``), equations vs
   equations (equal up to a nonzero factor, so lines in any form), inequalities,
   tuples, sets, intervals and matrices element-wise, and symbolic expressions
   at random rational points with adaptive-precision evaluation;
6. ``math_verify.verify`` for everything else (text answers, sets vs relations, ...).

Values: 1.0 equal, 0.0 different / no answer found / too slow (reason in
``info["why"]``), ``None`` when the gold answer cannot be parsed or the checker
itself failed.
"""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

from rlvr import RlvrError, Score, hookimpl
from rlvr.rewards import completion_text

__all__ = ["math_reward", "check_answer", "extract_answer", "extract_gold", "last_boxed", "rlvr_register_rewards"]

EXTRACT_MODES = ("boxed", "hash", "tag", "last_number", "auto")
GOLD_MODES = ("auto", "hash", "boxed", "raw")

# --------------------------------------------------------------------------- extraction
# Pure string work, no math imports: usable and testable in the host process.

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE_RE = re.compile(r"\\.|[{}]", re.DOTALL)


def _balanced_group(text: str, open_index: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_index`` (``\\{``/``\\}`` skipped), or None."""
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


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces kept), or of ``\\boxed 5``.

    ``None`` when there is none or the last one is not closed (a cut-off answer).
    """
    match = None
    for match in _BOX_RE.finditer(text):
        pass
    if match is None:
        return None
    i = match.end()
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        end = _balanced_group(text, i)
        return None if end is None else text[i + 1 : end].strip()
    token = re.match(r"[^\s$]+", text[i:])  # "\boxed 5" is valid TeX
    if token is None:
        return None
    return token.group(0).rstrip(".")


_HASH_RE = re.compile(r"####[ \t]*([^\n]*)")
_NUMBER_RE = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")
_PHRASE_RE = re.compile(r"(?i)\banswer\s*(?:is\s*:?|:)\s*(?:\*\*)?\s*([^\n]+)")


def _hash_answer(text: str) -> str | None:
    found = _HASH_RE.findall(text)
    if not found:
        return None
    answer = found[-1].strip().rstrip(".").strip()
    return answer or None


def _tag_answer(text: str) -> str | None:
    # rfind rather than a regex: linear even for a text full of unclosed <answer> tags.
    lower = text.lower()
    end = lower.rfind("</answer>")
    start = lower.rfind("<answer>", 0, max(end, 0))
    if end < 0 or start < 0:
        return None
    inner = text[start + len("<answer>") : end].strip()
    boxed = last_boxed(inner)
    return boxed if boxed is not None else (inner or None)


def _phrase_answer(text: str) -> str | None:
    found = _PHRASE_RE.findall(text)
    if not found:
        return None
    answer = found[-1].strip().strip("*").strip()
    answer = re.sub(r"\.\s*$", "", answer)
    return answer or None


def _last_number(text: str) -> str | None:
    # Look at the tail first: a long text has a million numbers but we want the last one.
    for window in (4096, len(text)):
        tail = text[-window:]
        last = None
        for last in _NUMBER_RE.finditer(tail):
            pass
        if last is not None and (last.start() > 0 or window >= len(text)):
            return last.group(0)
        if window >= len(text):
            break
    return None


def _final_part(text: str) -> str:
    """The part after the last ``</think>``: reasoning may contain drafts of answers."""
    cut = text.rfind("</think>")
    return text if cut < 0 else text[cut + len("</think>") :]


def extract_answer(text: str, mode: str = "boxed") -> str | None:
    """The final answer in a completion, by ``mode`` (see ``EXTRACT_MODES``), or None."""
    text = _final_part(text)
    if mode == "boxed":
        return last_boxed(text)
    if mode == "hash":
        return _hash_answer(text)
    if mode == "tag":
        return _tag_answer(text)
    if mode == "last_number":
        return _last_number(text)
    if mode == "auto":
        for finder in (_tag_answer, last_boxed, _hash_answer, _phrase_answer, _last_number):
            answer = finder(text)
            if answer is not None:
                return answer
        return None
    raise ValueError(f"unknown extract mode {mode!r}")


def extract_gold(text: str, mode: str = "auto") -> str | None:
    """The gold final answer: after ``####`` (commas dropped), else the last ``\\boxed{}``, else all."""
    text = text.strip()
    if mode in ("auto", "hash") and "####" in text:
        answer = _hash_answer(text)
        return None if answer is None else re.sub(r"(?<=\d),(?=\d{3}\b)", "", answer)
    if mode == "hash":
        return None
    if mode in ("auto", "boxed") and _BOX_RE.search(text):
        return last_boxed(text)
    if mode == "boxed":
        return None
    return text or None


# --------------------------------------------------------------------------- normalisation

_DELIMS = ((r"$$", r"$$"), ("$", "$"), (r"\(", r"\)"), (r"\[", r"\]"))
_FONT_LETTER_RE = re.compile(r"\\(?:mathrm|mathit|mathbf|mathsf|mathtt|mathnormal|textrm|textit|textbf|text|operatorname)\s*\{\s*([A-Za-z])\s*\}")
# A trailing degree sign is a unit (30^\circ = 30); inside trigonometry it is a conversion,
# which math-verify drops (it reads \cos 60^\circ as cos(60 radians)).
_TRIG_RE = re.compile(r"\\(?:sin|cos|tan|cot|sec|csc)(?![A-Za-z])")
_DEGREE_ARG_RE = re.compile(r"(\d+(?:\.\d+)?)\s*\^\s*\{?\s*\\circ\s*\}?")
_DEGREE_RE = re.compile(r"(?:\^\s*\{?\s*\\circ\s*\}?|\\degree|°)\s*(?:\\text\s*\{\s*[CF]?\s*\}|[CF])?\s*$")
_THIN_SEP_RE = re.compile(r"(?<=\d)(?:\\,|\\;|\\:|\\ |~|\{,\})(?=\d{3}(?!\d))")
_SPACING_RE = re.compile(r"(?<!\\)\\(?:,|;|:|\s|quad|qquad)|~")  # not the "\\" row break
_TEXT_NUMBER_RE = re.compile(r"\\(?:text|textrm|textnormal|mbox|mathrm)\s*\{\s*([-+]?\.?\d[^{}]*)\}")
_SPACED_THOUSANDS_RE = re.compile(r"[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?")
_SCI_RE = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*[eE]\s*([-+]?\d+)")
_REPEATING_RE = re.compile(r"(-?)(\d*)\.(\d*)\\overline\s*\{(\d+)\}")
_UNIT_TEXT_RE = re.compile(
    r"\\(?:text|textrm|textnormal|textit|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*$"
)
_UNIT_WORDS_RE = re.compile(r"(?<=[\d}])\s+([A-Za-z]{2,}(?:\s+[A-Za-z]{2,})*)\.?\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*$")
# Words that are mathematics, not units, when they trail an expression.
_MATH_WORDS = {"pi", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "inf", "infinity",
               "percent", "percentage", "pct", "and", "or", "mod", "degrees", "degree", "radians", "rad"}


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


def _depth_at(s: str, index: int) -> int:
    depth, i = 0, 0
    while i < index:
        if s[i] == "\\":
            i += 2
            continue
        depth += s[i] == "{"
        depth -= s[i] == "}"
        i += 1
    return depth


def _strip_units(s: str) -> str:
    """Drop trailing units: ``5\\text{ cm}^2``, ``12 square feet``; never text inside braces."""
    for _ in range(2):
        m = _UNIT_TEXT_RE.search(s)
        if m and s[: m.start()].strip() and _depth_at(s, m.start()) == 0:
            s = s[: m.start()].rstrip()
            continue
        m = _UNIT_WORDS_RE.search(s)
        if m and not (set(m.group(1).lower().split()) & _MATH_WORDS) and _depth_at(s, m.start()) == 0:
            s = s[: m.start()].rstrip()
            continue
        break
    return s


def _repeating_to_fraction(m: re.Match) -> str:
    sign, whole, fixed, period = m.group(1), m.group(2) or "0", m.group(3), m.group(4)
    # x = whole.fixed(period)(period)...  =>  x = (whole fixed period - whole fixed) / (10^k (10^p - 1))
    denominator = (10 ** len(period) - 1) * 10 ** len(fixed)
    numerator = int(whole + fixed + period) - int(whole + fixed)
    return f"{sign}\\frac{{{numerator}}}{{{denominator}}}"


_UNICODE = str.maketrans({"\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u00b7": "\\cdot ",
                          "\u22c5": "\\cdot ", "\u03c0": "\\pi ", "\u221e": "\\infty ", "\u221a": "\\sqrt ", "\u00a0": " ",
                          "\u2009": " ", "\u202f": " ", "\u2264": "\\le ", "\u2265": "\\ge ", "\u2260": "\\ne "})


def normalize_answer(s: str) -> str:
    """String-level clean-up before parsing; conservative: it never drops digits or signs inside braces."""
    s = _strip_delimiters(s.strip().translate(_UNICODE))
    s = s.replace("\\displaystyle", "").replace("\\$", "").replace("\\!", "")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
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
    m = _SCI_RE.fullmatch(s)
    if m:
        s = f"{m.group(1)}\\times 10^{{{m.group(2)}}}"
    s = _REPEATING_RE.sub(_repeating_to_fraction, s)
    return re.sub(r"\s+", " ", s).strip()


def _key(s: str) -> str:
    return re.sub(r"\s+", "", s)


# --------------------------------------------------------------------------- worker-side checking
# Everything below imports math-verify/sympy lazily and runs in worker processes.

_MV: dict[str, Any] = {}


class _SoftTimeout(BaseException):
    """Raised by SIGALRM inside a worker; a BaseException so that no ``except Exception`` swallows it."""


def _on_alarm(signum, frame):  # pragma: no cover - timing dependent
    raise _SoftTimeout()


def _init_worker() -> None:
    """Worker initializer: import the math stack once and quiet its per-sample warnings."""
    import logging
    import signal

    import math_verify
    import sympy
    from latex2sympy2_extended.latex2sympy2 import NormalizationConfig, normalize_latex

    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    norm = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all", equations=False)
    _MV.update(
        parse=math_verify.parse,
        verify=math_verify.verify,
        normalize=normalize_latex,
        norm_last=NormalizationConfig(**{**norm.__dict__, "boxed": "last"}),
        # Units are handled by normalize_answer: math-verify's unit stripping truncates (see there).
        latex_cfg=[math_verify.LatexExtractionConfig(boxed_match_priority=0, normalization_config=norm)],
        expr_cfg=[math_verify.ExprExtractionConfig()],
        sympy=sympy,
    )
    signal.signal(signal.SIGALRM, _on_alarm)
    _Parsed("\\frac{1}{2}+x").expr  # noqa: B018 - warms the regex and parser caches


def _show(x: Any, limit: int = 200) -> str:
    try:
        text = str(x)
    except Exception:  # noqa: BLE001 - e.g. integers beyond the str() digit limit
        text = f"<{type(x).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


_PLAIN_DECIMAL_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")
_PLAIN_FRACTION_RE = re.compile(r"([-+]?)(?:\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|\\frac(\d)(\d)|(\d+)\s*/\s*(\d+))")


def _plain_number(clean: str):
    """(Fraction, has_decimal_point) for answers like ``-12``, ``1,000``, ``0.25``, ``\\frac{3}{4}``, ``3/4``.

    Most GSM8K answers and many MATH ones are such numbers: they are compared exactly
    without sympy, which is where most of the checking time goes (the LaTeX parser).
    """
    from fractions import Fraction

    if len(clean) > 200:
        return None
    if _PLAIN_DECIMAL_RE.fullmatch(clean):
        text = clean.replace(",", "")
        return Fraction(text), "." in text
    m = _PLAIN_FRACTION_RE.fullmatch(clean)
    if m:
        numerator, denominator = [int(x) for x in m.groups()[1:] if x is not None]
        if denominator == 0:
            return None
        value = Fraction(numerator, denominator)
        return (-value if m.group(1) == "-" else value), False
    return None


class _Parsed:
    """One side of a comparison: the normalised text, its key for exact matching, a plain
    number when it is one, and the sympy parse -- done on first use of ``expr`` only."""

    __slots__ = ("text", "key", "number", "_expr", "_note")

    def __init__(self, text: str):
        self.text = text
        self.key = _key(_MV["normalize"]("\\boxed{" + text + "}", _MV["norm_last"]).strip())
        self.number = _plain_number(text)
        self._note: str | None = None
        self._expr: Any = None

    @property
    def expr(self) -> Any:
        if self._note is None:
            self._expr, self._note = _parse_expr(self.text, self.key)
        return self._expr

    @property
    def note(self) -> str:
        self.expr  # noqa: B018 - parses if not done yet
        return self._note or ""


def _parse_expr(clean: str, key: str) -> tuple[Any, str]:
    """math-verify's parse of the whole answer, or (None, why not)."""
    parse = _MV["parse"]
    found = parse("\\boxed{" + clean + "}", extraction_config=_MV["latex_cfg"], fallback_mode="first_match", parsing_timeout=None)
    expr = found[0] if found and not isinstance(found[0], str) else None
    if expr is not None:
        got = found[-1] if isinstance(found[-1], str) else ""
        # The parse must stand for the whole answer: math-verify may parse a piece of it.
        if _key(got) != key or key.count("{") != key.count("}"):
            return None, f"partial parse rejected ({_show(got, 60)!r})"
        if re.search(r"\d\s+\d", got):
            # latex2sympy reads "2 3" as 2+3 and "1 000" as 1*0.
            return None, "digits separated by spaces are ambiguous"
        return expr, "parsed"
    if not re.search(r"\\[A-Za-z]", clean):
        # Plain-text maths such as "sqrt(2)/2"; accepted only if the whole string was used.
        found = parse(clean, extraction_config=_MV["expr_cfg"], fallback_mode="first_match", parsing_timeout=None)
        if found and not isinstance(found[0], str) and _key(str(found[-1])) == _key(clean):
            return found[0], "parsed"
    return None, "could not parse"


# ---- exact and numeric comparison of sympy objects -------------------------------------------

_REL_TOL_FLOAT = 2e-6  # a decimal with 6 significant digits matches (1/3 vs 0.333333)
_ZERO_PREC_BITS = 10  # evalf returns "0.e-160" (precision ~1 bit) for a zero it cannot prove


def _combine(verdicts) -> bool | None:
    verdicts = list(verdicts)
    if any(v is False for v in verdicts):
        return False
    if verdicts and all(v is True for v in verdicts):
        return True
    return None


def _has_float(e) -> bool:
    sp = _MV["sympy"]
    try:
        return bool(e.atoms(sp.Float))
    except Exception:  # noqa: BLE001
        return False


def _is_zero_value(v) -> bool | None:
    """Is the evalf result ``v`` zero? sympy's evalf is adaptive: a nonzero difference
    comes back with full precision, one it cannot tell from zero as ``0.e-160``."""
    sp = _MV["sympy"]
    if v == 0:
        return True
    parts = [sp.re(v), sp.im(v)] if not v.is_real else [v]
    result = True
    for part in parts:
        if part == 0:
            continue
        if not isinstance(part, sp.Float):
            return None
        if part._prec > _ZERO_PREC_BITS:
            result = False
    return result


def _numbers_equal(g, p) -> bool | None:
    """Exact comparison of constant expressions; relative tolerance when decimals appear."""
    sp = _MV["sympy"]
    try:
        g, p = g.doit(), p.doit()
        if g == p:
            return True
        if isinstance(g, sp.Rational) and isinstance(p, sp.Rational):
            return False
        gv, pv = g.evalf(30), p.evalf(30)
        if not (gv.is_number and pv.is_number):
            return None
        if gv.is_finite is False or pv.is_finite is False:
            return bool(gv == pv)
        if _has_float(g) or _has_float(p):
            scale = max(abs(gv), abs(pv))
            return bool(abs(gv - pv) <= _REL_TOL_FLOAT * scale)
        return _is_zero_value((g - p).evalf(30))
    except _SoftTimeout:
        raise
    except Exception:  # noqa: BLE001 - sympy raises many things on odd input
        return None


def _sample_points(symbols, count: int):
    import random

    rng = random.Random(20240917)  # fixed: the same pair always gets the same verdict
    sp = _MV["sympy"]
    for _ in range(count):
        yield {s: sp.Rational(rng.choice([-1, 1]) * rng.randint(3, 97), rng.randint(2, 29)) for s in symbols}


def _values_at(exprs, point):
    """30-digit values at a point, or None where one is undefined (or sympy cannot evaluate it). ``evalf(subs=)`` is
    adaptive: a difference that cancels to 1e-40 comes back as 1e-40, not 0, and huge
    powers are not expanded as exact rationals."""
    sp = _MV["sympy"]
    values = []
    try:
        for e in exprs:
            v = e.evalf(30, subs=point)
            if not v.is_number or v.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
                return None
            values.append(v)
    except _SoftTimeout:
        raise
    except Exception:  # noqa: BLE001 - sympy fails in many ways at a bad point: treat as undefined
        return None
    return values


def _texty(e) -> bool:
    """``Monday`` parses as M*o*n*d*a*y: math-verify compares such things as text."""
    sp = _MV["sympy"]
    return isinstance(e, sp.Symbol) or (isinstance(e, sp.Mul) and all(isinstance(a, sp.Symbol) or a == sp.E for a in e.args))


def _functions_equal(g, p) -> bool | None:
    """Numeric identity test at a few random rational points: False is a proof of difference."""
    symbols = sorted(g.free_symbols | p.free_symbols, key=str)
    tol_float = _has_float(g) or _has_float(p)
    agreed = 0
    for point in _sample_points(symbols, 4):
        values = _values_at((g, p, g - p), point)
        if values is None:
            continue
        gv, pv, dv = values
        if tol_float:
            same = abs(gv - pv) <= _REL_TOL_FLOAT * max(abs(gv), abs(pv))
        else:
            same = _is_zero_value(dv) is True
        if not same:
            return False
        agreed += 1
    return True if agreed >= 2 else None


def _proportional(e1, e2, positive: bool = False) -> bool | None:
    """Do ``e1 = 0`` and ``e2 = 0`` describe the same equation (e1 = c * e2, c a nonzero
    constant, positive if asked)?

    Tested at random points p_k against a reference point p_0 through the cross product
    e1(p_k) e2(p_0) - e2(p_k) e1(p_0), evaluated as one expression so that evalf resolves
    a tiny difference (``x = 10^{-40}`` vs ``x = 0``) instead of rounding it away.
    """
    sp = _MV["sympy"]
    symbols = sorted(e1.free_symbols | e2.free_symbols, key=str)
    if not symbols:
        return None
    tol_float = _has_float(e1) or _has_float(e2)
    here = {s: sp.Dummy() for s in symbols}
    there = {s: sp.Dummy() for s in symbols}
    cross = e1.xreplace(here) * e2.xreplace(there) - e2.xreplace(here) * e1.xreplace(there)
    points = []
    for point in _sample_points(symbols, 6):
        values = _values_at((e1, e2), point)
        if values is None:
            continue
        z1, z2 = _is_zero_value(values[0]) is True, _is_zero_value(values[1]) is True
        if z1 and z2:
            continue
        if z1 != z2:
            return False  # one equation holds at this point, the other does not
        points.append((point, values[0] / values[1]))
    if len(points) < 2:
        return None
    reference, ratio = points[0]
    if positive and not (ratio.is_real and ratio > 0):
        return False
    for point, other_ratio in points[1:]:
        if tol_float:
            if abs(other_ratio - ratio) > _REL_TOL_FLOAT * abs(ratio):
                return False
            continue
        subs = {here[s]: v for s, v in point.items()} | {there[s]: v for s, v in reference.items()}
        if _is_zero_value(cross.evalf(30, subs=subs)) is not True:
            return False
    return True


def _inequalities_equal(g, p) -> bool | None:
    """``a < b`` vs ``c < d`` (or ``d > c``): the same when ``a-b`` is a positive multiple of
    ``c-d``; different when the two differ by a nonzero constant (``x > 10^{-20}`` vs ``x > 0``,
    which math-verify's chopped numeric comparison calls equal). Otherwise no opinion."""
    sp = _MV["sympy"]
    flip = {sp.StrictLessThan: sp.StrictGreaterThan, sp.StrictGreaterThan: sp.StrictLessThan,
            sp.LessThan: sp.GreaterThan, sp.GreaterThan: sp.LessThan}
    e1 = g.lhs - g.rhs
    if type(g) is type(p):
        e2 = p.lhs - p.rhs
    elif flip.get(type(g)) is type(p):
        e2 = p.rhs - p.lhs
    else:
        return None
    if _proportional(e1, e2, positive=True):
        return True
    offset = e1 - e2
    if not offset.free_symbols and _numbers_equal(offset, sp.Integer(0)) is False:
        return False
    return None


def _is_assignment_lhs(lhs) -> bool:
    """``x``, ``f(x)``, ``x+y``: a left side naming what the value is, not an equation to solve."""
    sp = _MV["sympy"]
    try:
        return bool(lhs.free_symbols) and not lhs.atoms(sp.Number)
    except Exception:  # noqa: BLE001
        return False


def _percent_forms(e) -> list:
    """latex2sympy writes ``5\\%`` as ``5*UnevaluatedExpr(1/100)``; math-verify lets it equal 5 or 0.05."""
    sp = _MV["sympy"]
    if isinstance(e, sp.Mul) and len(e.args) == 2 and e.args[1] == sp.UnevaluatedExpr(sp.Rational(1, 100)):
        return [e.args[0], e.args[0] / 100]
    return [e]


def _strict_check(g, p, depth: int = 0) -> bool | None:
    """Our own verdict on a pair math-verify called equal: True, False (veto) or None (no opinion)."""
    sp = _MV["sympy"]
    if depth > 6 or isinstance(g, str) or isinstance(p, str):
        return None
    gf, pf = _percent_forms(g), _percent_forms(p)
    if len(gf) > 1 or len(pf) > 1:
        verdicts = [_strict_check(a, b, depth + 1) for a in gf for b in pf]
        if any(v is True for v in verdicts):
            return True
        return False if all(v is False for v in verdicts) else None

    g_eq, p_eq = isinstance(g, sp.Eq), isinstance(p, sp.Eq)
    if g_eq and p_eq:
        if g.lhs == p.lhs and _is_assignment_lhs(g.lhs):
            rhs = _strict_check(g.rhs, p.rhs, depth + 1)
            if rhs is not None:
                return rhs
        return _proportional(g.lhs - g.rhs, p.lhs - p.rhs)
    if g_eq or p_eq:
        eq, other = (g, p) if g_eq else (p, g)
        if isinstance(other, (sp.Basic, sp.MatrixBase)) and not isinstance(other, (sp.Set, sp.Tuple, sp.Rel, sp.And)):
            if _is_assignment_lhs(eq.lhs):
                return _strict_check(eq.rhs, other, depth + 1) if g_eq else _strict_check(other, eq.rhs, depth + 1)
            return False  # "x^2+1=0" is not the value 0
        return None
    if isinstance(g, sp.Rel) and isinstance(p, sp.Rel):
        return _inequalities_equal(g, p)
    if isinstance(g, (sp.Rel, sp.And)) or isinstance(p, (sp.Rel, sp.And)):
        return None  # systems, chains, inequality vs set: math-verify's own logic

    if isinstance(g, sp.MatrixBase) and isinstance(p, sp.MatrixBase):
        if g.shape != p.shape:
            return False
        return _combine(_strict_check(a, b, depth + 1) for a, b in zip(g, p))
    if isinstance(g, sp.Interval) and isinstance(p, sp.Interval):
        if (g.left_open, g.right_open) != (p.left_open, p.right_open):
            return False
        return _combine([_strict_check(g.start, p.start, depth + 1), _strict_check(g.end, p.end, depth + 1)])
    if isinstance(g, sp.Tuple) and isinstance(p, sp.Tuple):
        if len(g) != len(p):
            return False
        return _combine(_strict_check(a, b, depth + 1) for a, b in zip(g.args, p.args))
    if isinstance(g, sp.FiniteSet) and isinstance(p, sp.FiniteSet):
        return _sets_equal(list(g.args), list(p.args), depth)
    if isinstance(g, (sp.Set, sp.Tuple)) or isinstance(p, (sp.Set, sp.Tuple)):
        return None

    if isinstance(g, sp.Expr) and isinstance(p, sp.Expr):
        g_free, p_free = g.free_symbols, p.free_symbols
        if not g_free and not p_free:
            return _numbers_equal(g, p)
        if not (_texty(g) or _texty(p)):
            return _functions_equal(g, p)
    return None


def _sets_equal(gs: list, ps: list, depth: int) -> bool | None:
    """Element-wise set comparison as a bipartite matching on our verdicts."""
    if len(gs) != len(ps):
        return False
    if len(gs) > 10:
        return None
    table = [[_strict_check(a, b, depth + 1) for b in ps] for a in gs]

    def matching(allowed) -> bool:
        owner: dict[int, int] = {}

        def augment(i: int, seen: set[int]) -> bool:
            for j in range(len(ps)):
                if allowed(table[i][j]) and j not in seen:
                    seen.add(j)
                    if j not in owner or augment(owner[j], seen):
                        owner[j] = i
                        return True
            return False

        return all(augment(i, set()) for i in range(len(gs)))

    if matching(lambda v: v is True):
        return True
    if not matching(lambda v: v is not False):
        return False
    return None


_MAX_DIGITS = 100_000  # exact values beyond this are not evaluated


def _log10_size(e) -> float:
    """Rough upper bound on the decimal digits of the integers an exact evaluation of ``e``
    builds: towers like ``9^{9^{9^9}}`` and huge factorials would take minutes and gigabytes.
    Powers with a symbol in them are not expanded exactly (evalf handles them), so they are
    only as large as their parts."""
    import math

    sp = _MV["sympy"]
    if isinstance(e, sp.Rational):
        return max(math.log10(abs(e.p) or 1), math.log10(e.q))
    if isinstance(e, (sp.Float, sp.NumberSymbol)):
        try:
            return abs(math.log10(abs(float(e)) or 1.0))
        except (OverflowError, ValueError):
            return math.inf
    args = getattr(e, "args", ())
    if not args:
        return 0.0
    sizes = [_log10_size(a) for a in args]
    if isinstance(e, sp.exp) and not e.free_symbols:  # e^x, as a power of E
        return math.inf if sizes[0] > 300 else max(sizes[0], 0.4343 * 10 ** sizes[0])
    if isinstance(e, sp.Pow) and not e.free_symbols:
        base, exponent = sizes
        return math.inf if exponent > 300 else max(base, exponent, base * 10**exponent)
    if isinstance(e, (sp.factorial, sp.factorial2, sp.gamma, sp.subfactorial)) and not e.free_symbols:
        if sizes[0] > 300:
            return math.inf
        n = 10 ** sizes[0]
        return max(sizes[0], n * math.log10(max(n, 2.0)))
    if isinstance(e, sp.binomial) and not e.free_symbols:
        return math.inf if sizes[0] > 300 else max(sizes) + 10 ** sizes[0] * 0.30103
    return max(sizes)


def _numbers_close(a, b, decimal: bool) -> bool:
    """Exact for integers and fractions; the float tolerance as soon as a decimal point appears."""
    if not decimal:
        return a == b
    return abs(a - b) <= _REL_TOL_FLOAT * max(abs(a), abs(b))


def _compare(gold: _Parsed, pred: _Parsed) -> tuple[bool, str]:
    if gold.key == pred.key:
        return True, "identical after normalisation"
    if gold.number is not None and pred.number is not None:
        equal = _numbers_close(gold.number[0], pred.number[0], gold.number[1] or pred.number[1])
        return equal, ("equal" if equal else "not equal") + " (numbers)"
    if pred.expr is None:
        return False, f"prediction: {pred.note}"
    if _log10_size(pred.expr) > _MAX_DIGITS:
        return False, f"prediction too large to evaluate (over {_MAX_DIGITS} digits)"
    # Our exact checks first: where they have a verdict (numbers, equations, tuples, sets,
    # intervals, matrices, functions at random points) it is sound, and cheaper than
    # math-verify's simplify(). A False here is exactly where math-verify can be fooled.
    own = _strict_check(gold.expr, pred.expr)
    if own is not None:
        return own, ("equal" if own else "not equal") + " (exact check)"
    if _MV["verify"](gold.expr, pred.expr, timeout_seconds=None):
        return True, "equal (math-verify)"
    return False, "not equal (math-verify)"


# ---- one sample, in a worker ------------------------------------------------------------------

_GOLD_CACHE: dict[tuple[str, str], tuple[str | None, _Parsed | None]] = {}
_GOLD_CACHE_SIZE = 4096


def _gold_parsed(gold_text: str, mode: str) -> tuple[str | None, _Parsed | None]:
    key = (mode, gold_text)
    hit = _GOLD_CACHE.get(key)
    if hit is None:
        answer = extract_gold(gold_text, mode)
        hit = (answer, None if answer is None else _Parsed(normalize_answer(answer)))
        if len(_GOLD_CACHE) >= _GOLD_CACHE_SIZE:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[key] = hit
    return hit


def check_answer(gold: str, pred: str) -> tuple[bool | None, dict[str, Any]]:
    """Compare a gold final answer with a predicted one (both LaTeX/plain strings).

    Returns (verdict, info); verdict None when the gold cannot be parsed. Runs in the
    calling process without a time limit and installs a SIGALRM handler there (main
    thread only): for scripts and debugging. The reward runs it in worker processes.
    """
    if not _MV:
        _init_worker()
    _, g = _gold_parsed(gold, "raw")
    p = _Parsed(normalize_answer(pred))
    return _verdict(g, p)


def _verdict(g: _Parsed | None, p: _Parsed) -> tuple[bool | None, dict[str, Any]]:
    info: dict[str, Any] = {"gold_norm": _show(g.text if g else None), "pred_norm": _show(p.text)}
    if g is None:
        return None, {**info, "why": "no gold answer"}
    if g.key != p.key and g.number is None and g.expr is None:
        return None, {**info, "why": f"gold answer: {g.note}"}
    equal, why = _compare(g, p)
    for side, parsed in (("gold_parsed", g), ("pred_parsed", p)):
        if parsed._expr is not None:  # only where a parse was needed
            info[side] = _show(parsed._expr)
    return equal, {**info, "why": why}


def _score_item(item: tuple) -> dict[str, Any]:
    """Worker entry point: (completion, gold, extract, gold_mode, max_chars, soft_seconds) -> dict."""
    import signal

    completion, gold_text, extract, gold_mode, max_chars, soft_seconds = item
    if not _MV:
        _init_worker()
    signal.setitimer(signal.ITIMER_REAL, soft_seconds)
    info: dict[str, Any] = {}
    try:
        pred = extract_answer(completion, extract)
        info["pred"] = None if pred is None else _show(pred, 300)
        gold, g = _gold_parsed(gold_text, gold_mode)
        info["gold"] = None if gold is None else _show(gold, 300)
        if gold is None:
            return {"value": None, "info": {**info, "why": f"no gold answer found (gold={gold_mode!r})"}}
        if pred is None:
            return {"value": 0.0, "info": {**info, "why": f"no answer found (extract={extract!r})"}}
        if len(pred) > max_chars:
            return {"value": 0.0, "info": {**info, "why": f"answer longer than {max_chars} characters"}}
        p = _Parsed(normalize_answer(pred))
        verdict, more = _verdict(g, p)
        return {"value": None if verdict is None else float(verdict), "info": {**info, **more}}
    except _SoftTimeout:
        return {"value": 0.0, "info": {**info, "why": f"checking took longer than {soft_seconds:.2f} s"}}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


# --------------------------------------------------------------------------- host side

def _pool(workers: int = 0):
    """The shared worker pool of that size (see :func:`rlvr.workers.shared_pool`).

    ``workers=0``: $RLVR_MATH_WORKERS, else the CPU count clamped to 2..8.
    """
    if workers <= 0:
        size = os.environ.get("RLVR_MATH_WORKERS")
        try:
            workers = max(1, int(size)) if size else 0
        except ValueError:
            raise RlvrError(f"RLVR_MATH_WORKERS must be an integer, got {size!r}") from None
    from rlvr.workers import shared_pool

    # 2 GiB of growth per worker: far more than any sane answer needs, and a cap
    # on what a pathological one can take from the trainer beside it.
    return shared_pool(workers, _init_worker, memory_limit_mb=2048)


def math_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    completion_ids: Sequence[Any] | None,
    *,
    answer: Sequence[Any],
    extract: str = "boxed",
    gold: str = "auto",
    timeout: float = 5.0,
    max_answer_chars: int = 1000,
    workers: int = 0,
) -> list[Score]:
    """1.0 if the completion's final answer equals the gold ``answer``, else 0.0.

    Options: ``extract`` = "boxed" (last ``\\boxed{}``), "hash" (``#### N``), "tag"
    (``<answer>..</answer>``), "last_number", or "auto" (tag, boxed, hash, "answer is",
    last number); ``gold`` = "auto" (``####``, else last ``\\boxed{}``, else the whole
    string), "hash", "boxed" or "raw"; ``timeout`` = hard limit in seconds per sample;
    ``max_answer_chars`` = longer extracted answers score 0; ``workers`` = checker
    processes (0: automatic, see :func:`_pool`).
    """
    if extract not in EXTRACT_MODES:
        raise RlvrError(f"math reward: extract must be one of {', '.join(EXTRACT_MODES)}, got {extract!r}")
    if gold not in GOLD_MODES:
        raise RlvrError(f"math reward: gold must be one of {', '.join(GOLD_MODES)}, got {gold!r}")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise RlvrError(f"math reward: timeout must be a positive number of seconds, got {timeout!r}")
    if len(answer) != len(completions):
        raise RlvrError(f"math reward: {len(completions)} completions but {len(answer)} answers")
    # The worker stops itself a little before the hard limit, keeping the process (and its
    # warm caches) alive; the hard limit catches what a signal cannot interrupt.
    soft = max(0.05, 0.85 * float(timeout) - 0.05)
    items = []
    for completion, gold_value in zip(completions, answer):
        gold_text = "" if gold_value is None else str(gold_value)
        items.append((completion_text(completion), gold_text, extract, gold, int(max_answer_chars), soft))
    from rlvr.workers import PoolBroken

    try:
        results = _pool(int(workers)).map(_score_item, items, timeout=float(timeout))
    except PoolBroken as exc:
        raise RlvrError(f"math reward: checker processes unavailable: {exc}") from exc
    scores = []
    for result in results:
        if result.ok:
            scores.append(Score(result.value["value"], result.value["info"]))
        elif result.status == "timeout":
            scores.append(Score(0.0, {"why": f"checking exceeded the hard limit of {timeout:g} s"}))
        else:
            scores.append(Score(None, {"why": f"checker error: {result.error}"}))
    return scores


@hookimpl
def rlvr_register_rewards(register):
    register(
        "math",
        math_reward,
        description="1.0 if the final answer (\\boxed{}, ####, <answer>) equals the gold answer; "
        "math-verify with exactness fixes, hard time limit per sample",
    )
