"""One side of a comparison, parsed: the math stack (math-verify, sympy) and ``Parsed``.

Everything from here on runs in worker processes (or in ``check_answer``'s caller) and imports
math-verify and sympy lazily: ``init_worker`` imports them once into ``MV``. A side is parsed
with math-verify wrapped in ``\\boxed{}``, so that only its LaTeX parser runs on the whole string
(its plain-text extractor takes the last number out of ``3x-y+13=0``), and the parse is rejected
unless it consumed the whole normalised string (math-verify's unit stripping turned
``1-\\frac{1}{\\mathrm{e}}`` into ``1-\\frac{1}{``, read as 1).
"""

from __future__ import annotations

import re
from typing import Any

from .normalise import match_key
from .rounding import plain_number

MV: dict[str, Any] = {}  # the math stack, once init_worker has imported it


def init_worker() -> None:
    """Worker initializer: import the math stack once and quiet its per-sample warnings."""
    import logging

    import math_verify
    import sympy
    from latex2sympy2_extended.latex2sympy2 import NormalizationConfig, normalize_latex

    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    norm = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all", equations=False)
    MV.update(
        parse=math_verify.parse,
        verify=math_verify.verify,
        normalize=normalize_latex,
        norm_last=NormalizationConfig(**{**norm.__dict__, "boxed": "last"}),
        # Units are handled by normalize_answer: math-verify's unit stripping truncates (see there).
        latex_cfg=[math_verify.LatexExtractionConfig(boxed_match_priority=0, normalization_config=norm)],
        expr_cfg=[math_verify.ExprExtractionConfig()],
        sympy=sympy,
    )
    Parsed("\\frac{1}{2}+x").expr  # noqa: B018 - warms the regex and parser caches


def show(x: Any, limit: int = 200) -> str:
    try:
        text = str(x)
    except Exception:  # noqa: BLE001 - e.g. integers beyond the str() digit limit
        text = f"<{type(x).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


class Parsed:
    """One side of a comparison: the normalised text, its key for exact matching, a plain
    number when it is one, and the sympy parse -- done on first use of ``expr`` only."""

    __slots__ = ("text", "key", "number", "_expr", "_note")

    def __init__(self, text: str):
        self.text = text
        self.key = match_key(MV["normalize"]("\\boxed{" + text + "}", MV["norm_last"]).strip())
        self.number = plain_number(text)
        self._note: str | None = None
        self._expr: Any = None

    @property
    def expr(self) -> Any:
        if self._note is None:
            self._expr, self._note = _parse_expr(self.text, self.key)
        return self._expr

    @property
    def parsed_expr(self) -> Any:
        """``expr`` where it was already parsed, else None (without parsing: for showing it)."""
        return self._expr

    @property
    def note(self) -> str:
        self.expr  # noqa: B018 - parses if not done yet
        return self._note or ""


def _parse_expr(clean: str, key: str) -> tuple[Any, str]:
    """math-verify's parse of the whole answer, or (None, why not)."""
    parse = MV["parse"]
    found = parse("\\boxed{" + clean + "}", extraction_config=MV["latex_cfg"], fallback_mode="first_match", parsing_timeout=None)
    expr = found[0] if found and not isinstance(found[0], str) else None
    if expr is not None:
        got = found[-1] if isinstance(found[-1], str) else ""
        # The parse must stand for the whole answer: math-verify may parse a piece of it.
        if match_key(got) != key or key.count("{") != key.count("}"):
            return None, f"partial parse rejected ({show(got, 60)!r})"
        if re.search(r"\d\s+\d", got):
            # latex2sympy reads "2 3" as 2+3 and "1 000" as 1*0.
            return None, "digits separated by spaces are ambiguous"
        return _imaginary_unit(expr), "parsed"
    if not re.search(r"\\[A-Za-z]", clean):
        # Plain-text maths such as "sqrt(2)/2"; accepted only if the whole string was used.
        found = parse(clean, extraction_config=MV["expr_cfg"], fallback_mode="first_match", parsing_timeout=None)
        if found and not isinstance(found[0], str) and match_key(str(found[-1])) == match_key(clean):
            return found[0], "parsed"
    return None, "could not parse"


def _imaginary_unit(expr):
    """latex2sympy reads ``i`` as a symbol (``e^{i\\pi}`` stays exp(i*pi), not -1): make it sympy's I."""
    try:
        unit = {s: MV["sympy"].I for s in expr.free_symbols if s.name == "i"}
        return expr.xreplace(unit) if unit else expr
    except Exception:  # noqa: BLE001 - not a sympy object with free symbols
        return expr
