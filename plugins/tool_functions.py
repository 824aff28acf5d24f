"""Built-in tools (``rlvr tools``): functions a model calls with JSON arguments through the
``tools`` environment. Standard library only and nothing of rlvr, so that the sandbox, which
runs a tool from its module's source, can load this module as it is.

``calculator(expression)``: exact arithmetic on integers and decimals, ``+ - * / // % **`` and
parentheses, read with Python's parser and evaluated on the syntax tree (never ``eval``): exact
rationals throughout, so ``0.1 + 0.2`` is ``0.3`` and ``10 / 4`` is ``2.5``; a result that is not
a whole number comes back as a decimal rounded to 12 significant digits, or as a fraction when
asked. Powers are bounded (exponent at most 1000 and a result of at most 2000 digits), so no
expression can hold the worker for long.
"""

from __future__ import annotations

import ast
from fractions import Fraction

__all__ = ["calculator"]

MAX_DIGITS = 2000
MAX_EXPONENT = 1000
MAX_CHARS = 500


def calculator(expression: str, fraction: bool = False) -> int | float | str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: numbers with + - * / // % ** and parentheses, for example "(1234 + 56) * 789".
        fraction: give a result that is not a whole number as a fraction "p/q" instead of a decimal.

    Returns:
        the value: an integer when it is whole, else a decimal (or a fraction when asked).
    """
    if len(expression) > MAX_CHARS:
        raise ValueError(f"the expression is over {MAX_CHARS} characters")
    try:
        tree = ast.parse(expression.replace("^", "**").replace("×", "*").replace("÷", "/").strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    value = _value(tree.body)
    if value.denominator == 1:
        return int(value)
    if fraction:
        return f"{value.numerator}/{value.denominator}"
    return float(f"{float(value):.12g}")


_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: lambda a, b: a % b,
}


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        inner = _value(node.operand)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return _power(_value(node.left), _value(node.right))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ZeroDivisionError("division by zero")
        return _bounded(_BINARY[type(node.op)](left, right))
    raise ValueError(f"not allowed in an arithmetic expression: {ast.unparse(node)[:60]!r}")


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise ValueError("only whole-number exponents are exact")
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent over {MAX_EXPONENT}")
    if base == 0 and exponent < 0:
        raise ZeroDivisionError("0 to a negative power")
    digits = max(len(str(base.numerator)), len(str(base.denominator)))
    if digits * abs(int(exponent)) > MAX_DIGITS + 10:
        raise ValueError(f"the result would have over {MAX_DIGITS} digits")
    return _bounded(base ** int(exponent))


def _bounded(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_DIGITS * 3.33:
        raise ValueError(f"the result has over {MAX_DIGITS} digits")
    return value
