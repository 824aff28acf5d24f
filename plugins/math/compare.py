"""Equivalence of two parsed answers: our own exact checks with sympy, then math-verify's ``verify``.

Our checks decide where they apply (``_strict_check``): exact comparison of numbers (math-verify
chops differences below 1e-15: ``1/2004!`` equalled ``1/2006!``), a relative tolerance of 2e-6
once a decimal appears, a decimal as written against what it rounds (``rounding``; against an
irrational gold only with ``approximate_irrational``, see ``_approximates_irrational``), equations
vs values (only ``x = 5`` may stand for ``5``, never ``x^2+1=0`` for ``0``), equations vs
equations (equal up to a nonzero factor), inequalities, tuples, sets, intervals and matrices
element-wise, expression trees equal up to the order of terms and factors, symbolic
expressions at random rational points with adaptive-precision evaluation. Values too large to
evaluate and unevaluated arithmetic against a number score 0 (``compare_parsed``). Runs in workers.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from fractions import Fraction

from rlvr.kit.deadline import SoftTimeout

from .normalise import EQ_SEP_RE
from .parse import MV, Parsed
from .rounding import MACHINE_FLOAT_DIGITS, REL_TOL_FLOAT, numbers_close

@dataclass
class Approximations:
    """The math reward's ``approximate_irrational`` option for the sample being checked (may a
    rounded decimal stand for an irrational gold value, 3.1416 for \\pi?), and whether the check
    refused such a decimal (the sample's ``why`` says so)."""

    allowed: bool = False
    refused: bool = False


_APPROXIMATIONS: ContextVar[Approximations] = ContextVar("approximations", default=Approximations())


@contextmanager
def irrational_approximations(allowed: bool):
    """Within: a rounded decimal stands for an irrational gold value it rounds iff ``allowed``;
    yields the ``Approximations`` that records a refusal."""
    state = Approximations(bool(allowed))
    token = _APPROXIMATIONS.set(state)
    try:
        yield state
    finally:
        _APPROXIMATIONS.reset(token)


_ZERO_PREC_BITS = 10  # evalf returns "0.e-160" (precision ~1 bit) for a zero it cannot prove


def _combine(verdicts) -> bool | None:
    verdicts = list(verdicts)
    if any(v is False for v in verdicts):
        return False
    if verdicts and all(v is True for v in verdicts):
        return True
    return None


def _has_float(e) -> bool:
    sp = MV["sympy"]
    try:
        return bool(e.atoms(sp.Float))
    except Exception:  # noqa: BLE001
        return False


def _is_zero_value(v) -> bool | None:
    """Is the evalf result ``v`` zero? sympy's evalf is adaptive: a nonzero difference
    comes back with full precision, one it cannot tell from zero as ``0.e-160``."""
    sp = MV["sympy"]
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
    """Exact comparison of constant expressions; a written decimal against an exact value or another
    decimal as a rounding (:func:`numbers_close`); relative tolerance for other decimal arithmetic."""
    sp = MV["sympy"]
    try:
        written = g, p
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
        plain = [_as_plain(w, e) for w, e in zip(written, (g, p))]
        if None not in plain and (plain[0][1] or plain[1][1]):  # a decimal as written: what it rounds
            if _approximates_irrational(g, plain[0], plain[1]):
                return False
            return numbers_close(*plain)
        if _rounded_irrational(g, p) or _rounded_irrational(p, g):
            return False
        if _has_float(g) or _has_float(p):
            scale = max(abs(gv), abs(pv))
            return bool(abs(gv - pv) <= REL_TOL_FLOAT * scale)
        return _is_zero_value((g - p).evalf(30))
    except SoftTimeout:
        raise
    except Exception:  # noqa: BLE001 - sympy raises many things on odd input
        return None


def _literal_decimal(e) -> tuple | None:
    """A decimal as the parser read it (``2.6667``, ``-3.141593``: a Float or its negation, not
    arithmetic on one) -> (value as written, (places, significant digits)); None otherwise, and
    for a literal longer than a double holds (the parser keeps its digits: see
    :func:`_rounded_irrational`). The written digits come back as the shortest decimal that
    reads as the same double (a written trailing zero is lost: ``2.6670`` reads as ``2.667``)."""
    from decimal import Decimal

    sp = MV["sympy"]
    sign = 1
    if isinstance(e, sp.Mul) and len(e.args) == 2 and e.args[0] == -1:
        e, sign = e.args[1], -1
    if not isinstance(e, sp.Float) or e._prec > 53:
        return None
    written = Decimal(repr(float(e)))
    if not written.is_finite():
        return None
    _, digits, exponent = written.as_tuple()
    return sign * Fraction(written), (max(-exponent, 0), len("".join(map(str, digits)).lstrip("0")))


def _approximates_irrational(gold, gold_plain: tuple, pred_plain: tuple) -> bool:
    """Is the prediction a rounded decimal (fewer than 15 significant digits) and the gold an exact
    value that is not rational (``\\pi``, ``\\sqrt{2}``, ``e``, ``\\ln 2``, ``2\\pi``), while
    ``approximate_irrational`` is off? Then they differ, as in math-verify and MATH's graders: a
    model that writes 3.1416 for \\pi has approximated, not solved (Qwen2.5-Math's grader accepts
    it: the option). A full-precision float (a program's ``print(math.pi)``) is the value itself,
    as math-verify reads it; a decimal gold against an exact prediction keeps the rounding rule."""
    sp = MV["sympy"]
    state = _APPROXIMATIONS.get()
    if state.allowed or gold_plain[1] is not None or pred_plain[1] is None:
        return False
    refused = (not isinstance(gold, sp.Rational) and pred_plain[1][1] < MACHINE_FLOAT_DIGITS
               and numbers_close(gold_plain, pred_plain))  # else it differs anyway: nothing to note
    state.refused |= refused
    return refused


_EXACT_DIGITS = 40  # an exact irrational value is compared through this many digits


def _as_plain(written, value) -> tuple | None:
    """A side of :func:`_numbers_equal` as :func:`numbers_close` takes it: a literal decimal
    with its written digits, or an exact real value (no float in it) as a Fraction -- an
    irrational one (``\\pi``, ``\\sqrt{2}``, ``e``) through 40 correct digits; None for anything
    else (arithmetic on decimals, complex values, a value evalf cannot pin down)."""
    sp = MV["sympy"]
    literal = _literal_decimal(written)
    if literal is not None:
        return literal
    if _has_float(value) or _has_float(written):
        return None
    if isinstance(value, sp.Rational):
        return Fraction(int(value.p), int(value.q)), None
    approx = value.evalf(_EXACT_DIGITS)
    if not (isinstance(approx, sp.Float) and approx._prec >= 3.3 * _EXACT_DIGITS):
        return None  # not real, or evalf could not reach the precision (a zero it cannot prove)
    exact = sp.Rational(approx)  # the binary value of the approximation, exactly
    return Fraction(int(exact.p), int(exact.q)), None


_FULL_PRECISION_DIGITS = 10


def _rounded_irrational(decimal, exact) -> bool:
    """Is ``decimal`` arithmetic on decimals of fewer than 10 significant digits that evaluates
    to one (``2 \\times 1.414214``) and ``exact`` an exact irrational value? Then they differ: no
    written digit says how it was rounded. (A decimal as written is compared through
    :func:`_as_plain` before this.) A full-precision decimal (a float printed by a program) is
    the value itself; rationals keep the float tolerance."""
    sp = MV["sympy"]
    if not _has_float(decimal) or _has_float(exact):
        return False
    value = decimal.doit()
    if not (value.is_Float or (value.is_Mul and len(value.args) == 2 and -1 in value.args and value.is_number
                                and any(a.is_Float for a in value.args))):
        return False
    if decimal.atoms(sp.NumberSymbol, sp.Function) or any(not a.exp.is_Integer for a in decimal.atoms(sp.Pow)):
        return False
    if exact.is_rational is not False:
        return False
    digits = min(len(re.sub(r"[^0-9]", "", str(f)).strip("0")) for f in decimal.atoms(sp.Float))
    return digits < _FULL_PRECISION_DIGITS


def _sample_points(symbols, count: int):
    import random

    rng = random.Random(20240917)  # fixed: the same pair always gets the same verdict
    sp = MV["sympy"]
    for _ in range(count):
        yield {s: sp.Rational(rng.choice([-1, 1]) * rng.randint(3, 97), rng.randint(2, 29)) for s in symbols}


def _values_at(exprs, point):
    """30-digit values at a point, or None where one is undefined (or sympy cannot evaluate it). ``evalf(subs=)`` is
    adaptive: a difference that cancels to 1e-40 comes back as 1e-40, not 0, and huge
    powers are not expanded as exact rationals."""
    sp = MV["sympy"]
    values = []
    try:
        for e in exprs:
            v = e.evalf(30, subs=point)
            if not v.is_number or v.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
                return None
            values.append(v)
    except SoftTimeout:
        raise
    except Exception:  # noqa: BLE001 - sympy fails in many ways at a bad point: treat as undefined
        return None
    return values


def _texty(e) -> bool:
    """``Monday`` parses as M*o*n*d*a*y: math-verify compares such things as text."""
    sp = MV["sympy"]
    return isinstance(e, sp.Symbol) or (isinstance(e, sp.Mul) and all(isinstance(a, sp.Symbol) or a == sp.E for a in e.args))


def _summed(e):
    """``e`` with its sums and products in closed form where sympy finds one; None where one
    stays symbolic: random rational values of a summation bound mean nothing."""
    sp = MV["sympy"]
    if not e.has(sp.Sum, sp.Product):
        return e
    done = e.doit()
    return None if done.has(sp.Sum, sp.Product) else done


def _functions_equal(g, p) -> bool | None:
    """Numeric identity test at a few random rational points: False is a proof of difference."""
    g, p = _summed(g), _summed(p)
    if g is None or p is None:
        return None
    symbols = sorted(g.free_symbols | p.free_symbols, key=str)
    tol_float = _has_float(g) or _has_float(p)
    agreed = 0
    for point in _sample_points(symbols, 4):
        values = _values_at((g, p, g - p), point)
        if values is None:
            continue
        gv, pv, dv = values
        if tol_float:
            same = abs(gv - pv) <= REL_TOL_FLOAT * max(abs(gv), abs(pv))
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
    sp = MV["sympy"]
    e1, e2 = _summed(e1), _summed(e2)
    if e1 is None or e2 is None:
        return None
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
            if abs(other_ratio - ratio) > REL_TOL_FLOAT * abs(ratio):
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
    sp = MV["sympy"]
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
    sp = MV["sympy"]
    try:
        return bool(lhs.free_symbols) and not lhs.atoms(sp.Number)
    except Exception:  # noqa: BLE001
        return False


def _percent_forms(e) -> list:
    """latex2sympy writes ``5\\%`` as ``5*UnevaluatedExpr(1/100)``; math-verify lets it equal 5 or 0.05."""
    sp = MV["sympy"]
    if isinstance(e, sp.Mul) and len(e.args) == 2 and e.args[1] == sp.UnevaluatedExpr(sp.Rational(1, 100)):
        return [e.args[0], e.args[0] / 100]
    return [e]


def _strict_check(g, p, depth: int = 0) -> bool | None:
    """Our own verdict on a pair math-verify called equal: True, False (veto) or None (no opinion)."""
    sp = MV["sympy"]
    if depth > 6 or isinstance(g, str) or isinstance(p, str):
        return None
    try:
        if g == p or _tree_key(g) == _tree_key(p):  # the same tree, up to the order of terms and
            return True  # factors: no evaluation needed (a reordered sum of products would cost
    except Exception:  # noqa: BLE001 - random-point evaluations of symbolic sums)
        pass
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


def _tree_key(e):
    """A key of the expression tree in which the terms of a sum and the factors of a product
    are unordered: the parser leaves them as written (``F_k F_{n-k-1}`` vs ``F_{n-k-1} F_k``).
    Nothing is evaluated (rebuilding ``Eq(n, {1,2})`` would evaluate it to False)."""
    sp = MV["sympy"]
    args = getattr(e, "args", ())
    if not args:
        return e
    keys = [_tree_key(a) for a in args]
    if isinstance(e, (sp.Add, sp.Mul, sp.Eq, sp.Ne)):  # Eq(a, b) is Eq(b, a); not so a < b
        keys.sort(key=repr)
    return type(e).__name__, tuple(keys)


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

    sp = MV["sympy"]
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


def _same_symbols(gold, pred):
    """``pred`` with each symbol renamed to the gold's symbol of that name: the parser makes
    every symbol complex in an answer that contains an ``i`` (``\\sum_{i=1}^n i``), so the gold's
    ``n`` and the prediction's ``n`` may differ in their assumptions only."""
    try:
        by_name = {s.name: s for s in gold.free_symbols}
        renames = {s: by_name[s.name] for s in pred.free_symbols if s.name in by_name and by_name[s.name] != s}
        return pred.xreplace(renames) if renames else pred
    except Exception:  # noqa: BLE001 - not a sympy object with free symbols
        return pred


_ARITH_COMMAND_RE = re.compile(r"\\(?:times|cdot|div|ast)(?![A-Za-z])|[×÷·]")
_ARITH_LAYOUT_RE = re.compile(r"\\(?:left|right|[dt]?frac|!|,|;|:)(?![A-Za-z])|\s")
_BINARY_OP_RE = re.compile(r"[\d.)}][-+*/][-+]?[\d.({]")
_SCIENTIFIC_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?\*)?10\^\{?[-+]?\d+\}?")


def _unevaluated_arithmetic(text: str) -> bool:
    """Is the (last side of the) answer numbers still combined by operators: ``12 + 18``,
    ``2 \\times 15``, ``x = 3+2``? Powers (``2^{10}``), scientific notation (``1.5 \\times 10^{3}``),
    fractions, mixed and signed numbers are final forms.

    Against a plain-number gold such an answer scores 0: it equals the gold only because the
    checker evaluates it, and a policy rewarded for it learns to restate the question
    (``What is 12 + 18?`` -> ``12 + 18``) instead of answering it -- measured on the demo,
    where held-out "accuracy" went to 100% that way.
    """
    side = EQ_SEP_RE.split(text)[-1]
    side = _ARITH_LAYOUT_RE.sub("", _ARITH_COMMAND_RE.sub("*", side))
    if not side or any(c not in "0123456789.,+-*/^(){}" for c in side):
        return False
    return _BINARY_OP_RE.search(side) is not None and not _SCIENTIFIC_RE.fullmatch(side)


def compare_parsed(gold: Parsed, pred: Parsed) -> tuple[bool, str]:
    if gold.key == pred.key:
        return True, "identical after normalisation"
    if gold.number is not None and pred.number is not None:
        equal = numbers_close(gold.number, pred.number)
        return equal, ("equal" if equal else "not equal") + " (numbers)"
    if gold.number is not None and _unevaluated_arithmetic(pred.text):
        return False, "not an answer: an unevaluated arithmetic expression for a number"
    if pred.expr is None:
        return False, f"prediction: {pred.note}"
    if _log10_size(pred.expr) > _MAX_DIGITS:
        return False, f"prediction too large to evaluate (over {_MAX_DIGITS} digits)"
    # Our exact checks first: where they have a verdict (numbers, equations, tuples, sets,
    # intervals, matrices, functions at random points) it is sound, and cheaper than
    # math-verify's simplify(). A False here is exactly where math-verify can be fooled.
    pred_expr = _same_symbols(gold.expr, pred.expr)
    own = _strict_check(gold.expr, pred_expr)
    if own is not None:
        return own, ("equal" if own else "not equal") + " (exact check)"
    if MV["verify"](gold.expr, pred_expr, timeout_seconds=None, allow_set_relation_comp=True):
        return True, "equal (math-verify)"
    return False, "not equal (math-verify)"
