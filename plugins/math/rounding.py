"""Plain numbers, compared exactly without sympy, and decimals read as roundings.

``-12``, ``1,000``, ``0.25``, ``\\frac{3}{4}``, ``3/4`` are read as Fractions (``plain_number``)
and compared by ``numbers_close``: integers and fractions exactly; a decimal as written
(``2.6667``) equals an exact value that it correctly rounds with 4+ significant digits and
within 1e-4 relative (``_decimal_rounds``), so ``3.1416`` is pi and ``3.14`` is not. The
comparison of sympy values uses the same rules for the decimals written in them.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

REL_TOL_FLOAT = 2e-6  # arithmetic on decimals, and 15+ digit floats (a written decimal: _decimal_rounds)

_PLAIN_DECIMAL_RE = re.compile(r"[-+]?(?:[1-9]\d{0,2}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")
_PLAIN_FRACTION_RE = re.compile(r"([-+]?)(?:\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|\\frac(\d)(\d)|(\d+)\s*/\s*(\d+))")


def _decimal_digits(text: str) -> tuple[int, int]:
    """(decimal places, significant digits) of a decimal as written: ``0.014286`` -> (6, 5),
    ``1,234.50`` -> (2, 6); trailing zeros count (they are written precision)."""
    digits = re.sub(r"[^\d.]", "", text)
    places = len(digits) - digits.index(".") - 1
    return places, len(digits.replace(".", "").lstrip("0"))


def plain_number(clean: str):
    """(Fraction, (places, significant digits) if written as a decimal else None) for answers like ``-12``, ``1,000``, ``0.25``, ``\\frac{3}{4}``, ``3/4``.

    Most GSM8K answers and many MATH ones are such numbers: they are compared exactly
    without sympy, which is where most of the checking time goes (the LaTeX parser).
    """
    if len(clean) > 200:
        return None
    if _PLAIN_DECIMAL_RE.fullmatch(clean):
        text = clean.replace(",", "")
        return Fraction(text), (_decimal_digits(text) if "." in text else None)
    m = _PLAIN_FRACTION_RE.fullmatch(clean)
    if m:
        numerator, denominator = [int(x) for x in m.groups()[1:] if x is not None]
        if denominator == 0:
            return None
        value = Fraction(numerator, denominator)
        return (-value if m.group(1) == "-" else value), None
    return None


# A decimal this long is a program's float, not a rounded answer: a double printed in full has
# 15-17 significant digits (11.999999999999998). Shorter ones are roundings (123456789.4 is not
# 123456789, nor 123456900.0, though within the 2e-6 relative tolerance such floats get).
MACHINE_FLOAT_DIGITS = 15
_MV_DEFAULT_PLACES = 6  # math-verify's default float_rounding
# A decimal written with this many significant digits may stand for a value it rounds; one with
# fewer is read as exact (0.1 is 1/10, 3.14 is not pi, 0.333 is not 1/3).
_MIN_ROUNDED_DIGITS = 4
# ... and then only within this relative error of that value: the tolerance of the graders most
# RL math pipelines use (Qwen2.5-Math and DeepSeek-Math evaluation/grader.py ``numeric_equal``:
# ``isclose(prediction, reference, rel_tol=1e-4)``; verl's prime_math ``math_equal`` the same).
_ROUNDED_REL_TOL = Fraction(1, 10_000)


def _decimal_rounds(decimal: Fraction, places: int, digits: int, value: Fraction, truncated: bool = True) -> bool:
    """Does a decimal written with ``places`` decimal places and ``digits`` significant digits
    stand for ``value`` (exact, or an irrational's 40-digit approximation)?

    Yes when it is ``value`` correctly rounded at its last written digit (half up or half
    even: a tie may go either way) and off by at most 1e-4 relative, with 4 significant digits
    or more: ``0.3333`` = 1/3 (error exactly 1e-4 relative; math-verify's own suite expects it),
    ``2.6667`` = 8/3, ``3.1416`` = pi, ``-3.141593`` = -pi. Not ``0.33``/``0.333`` (too coarse:
    read as exact, and 1e-3 off), ``3.14`` (too coarse), ``3.142`` for pi (1.3e-4 off),
    ``0.3334`` or ``2.6668`` (a wrong last digit: 2.6668 is within 1e-4 of 8/3 but claims
    +-0.00005 and is 0.00013 off), ``2.0001`` for 2 (an integer rounds to 2.0000).

    Or, if ``truncated``, within 2e-6 relative and one unit in the last place, when that is
    the value truncated (``0.666666`` = 2/3) or a last digit past the 6th place, where
    math-verify's default comparison (at 6 places) cannot see it either (``0.3333334`` = 1/3,
    ``12.0000001`` = 12). Never an integer's wrong last digit before that (``1234567.1`` and
    ``1234567.01`` are not 1234567, though within 2e-6)."""
    error = abs(value - decimal)
    unit = Fraction(1, 10**places) if places >= 0 else Fraction(10**-places)
    if digits >= _MIN_ROUNDED_DIGITS and error * 2 <= unit and error <= _ROUNDED_REL_TOL * abs(value):
        return True
    if not truncated or error > unit or error > Fraction(str(REL_TOL_FLOAT)) * max(abs(value), abs(decimal)):
        return False
    toward_zero = Fraction(math.floor(abs(value) / unit)) * unit * (1 if value >= 0 else -1)
    return decimal == toward_zero or places > _MV_DEFAULT_PLACES


def numbers_close(a: tuple, b: tuple) -> bool:
    """Two plain numbers, each (Fraction, (places, significant digits) or None when exact).

    Integers and fractions are exact. A decimal stands for what it rounds (see
    :func:`_decimal_rounds`), on either side: the gold may be the rounded one (``0.3333`` vs
    ``1/3``; Qwen's and math-verify's comparisons are symmetric too). Two decimals: the coarser
    must be the rounding of the finer (``1234567.5`` is not ``1234567.6`` nor ``1234567.44``;
    ``0.1`` is not ``0.1000004``: one digit is exact). A long decimal (15+ significant digits,
    a double printed by a program) keeps the plain relative tolerance (``11.999999999999998`` =
    12). Integers against decimals: the decimal must round the integer (``2.0001`` is not 2,
    ``1234567.5`` is not ``1234567``)."""
    (x, x_dec), (y, y_dec) = a, b
    if x == y:
        return True
    if x_dec is None and y_dec is None:
        return False
    scale = max(abs(x), abs(y))
    if any(d is not None and d[1] >= MACHINE_FLOAT_DIGITS for d in (x_dec, y_dec)):
        return abs(x - y) <= REL_TOL_FLOAT * scale
    # the decimal read as a rounding: the coarser one when both are decimals
    (d, (places, digits)), other = ((x, x_dec), y_dec) if y_dec is None or (x_dec is not None and x_dec[0] <= y_dec[0]) \
        else ((y, y_dec), x_dec)
    if other is not None and other[0] == places:
        return False  # the same number of places and different: neither rounds the other
    value = y if d is x else x
    # two decimals: only a correct rounding of the finer (a truncated rounding is off twice)
    return _decimal_rounds(d, places, digits, value, truncated=other is None)
