"""``pyfunc``: procedural Python function-writing problems in MBPP's format, offline.

Each problem is one of a few dozen templates with its own constants ("return the sum of the
elements of xs greater than 7"), a reference solution, and three ``assert`` tests computed by
running that reference on random inputs. Rows have MBPP's columns (``text``, ``code``,
``test_list``, ``test_setup_code``, plus ``tests``: the asserts one per line), so the ``code``
reward runs them in the sandbox exactly as it runs MBPP.

Use it to train code models where no hub is reachable (the HumanEval recipe's CPU profile
does), or as a warm-up before MBPP. Each problem (template + constants) belongs to one split by
a hash of its text, one in five to test (``tasks.held_out_draws``, as for ``arithmetic``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from rlvr import RlvrError, hookimpl

from .tasks import held_out_draws

_WORDS = ("apple banana cherry delta echo kiwi lemon mango night ocean piano queen river solar tiger "
          "umbra violet water xenon yellow zebra Alpha Bravo data Code level noon radar").split()


def _ordinal(n: int) -> str:
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _ints(rng: random.Random) -> list[int]:
    return [rng.randint(-20, 20) for _ in range(rng.randint(0, 8))]


def _posints(rng: random.Random) -> list[int]:
    return [rng.randint(1, 30) for _ in range(rng.randint(0, 8))]


def _nat(rng: random.Random) -> int:
    return rng.randint(0, 60)


def _big(rng: random.Random) -> int:
    return rng.randint(0, 10**6)


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 6)))


def _word(rng: random.Random) -> str:
    return rng.choice(_WORDS) + rng.choice(["", "s", "ing", "!"])


def _words(rng: random.Random) -> list[str]:
    return [rng.choice(_WORDS) for _ in range(rng.randint(0, 6))]


@dataclass(frozen=True)
class Template:
    name: str  # the function to write
    text: str  # the problem statement, str.format'ed with the constants
    code: str  # the reference solution, str.format'ed with the constants
    consts: Callable[[random.Random], dict[str, Any]]
    inputs: Callable[[random.Random], tuple]  # one call's arguments


TEMPLATES = [
    Template("sum_above", "Write a function sum_above(xs) that returns the sum of the elements of the list xs that are greater than {t}.",
             "def sum_above(xs):\n    return sum(x for x in xs if x > {t})\n",
             lambda r: {"t": r.randint(-5, 10)}, lambda r: (_ints(r),)),
    Template("count_multiples", "Write a function count_multiples(xs) that returns how many elements of the list xs are divisible by {d}.",
             "def count_multiples(xs):\n    return sum(1 for x in xs if x % {d} == 0)\n",
             lambda r: {"d": r.randint(2, 9)}, lambda r: (_ints(r),)),
    Template("affine", "Write a function affine(x) that returns {a} times x plus {b}.",
             "def affine(x):\n    return {a} * x + {b}\n",
             lambda r: {"a": r.randint(2, 9), "b": r.randint(-9, 9)}, lambda r: (r.randint(-50, 50),)),
    Template("power_sum", "Write a function power_sum(n) that returns the sum of i**{p} for i from 1 to n inclusive (0 when n < 1).",
             "def power_sum(n):\n    return sum(i ** {p} for i in range(1, n + 1))\n",
             lambda r: {"p": r.randint(1, 4)}, lambda r: (r.randint(-2, 25),)),
    Template("clamp", "Write a function clamp(x) that returns x limited to the range [{lo}, {hi}]: {lo} if x is smaller, {hi} if x is larger, else x.",
             "def clamp(x):\n    return max({lo}, min({hi}, x))\n",
             lambda r: (lambda lo: {"lo": lo, "hi": lo + r.randint(1, 30)})(r.randint(-20, 10)), lambda r: (r.randint(-40, 50),)),
    Template("count_letter", "Write a function count_letter(s) that returns how many times the letter '{c}' occurs in the string s, ignoring case.",
             "def count_letter(s):\n    return s.lower().count('{c}')\n",
             lambda r: {"c": r.choice("aeilnorst")}, lambda r: (_text(r),)),
    Template("repeat_join", "Write a function repeat_join(s) that returns the string s repeated {n} times, with '{sep}' between the copies.",
             "def repeat_join(s):\n    return '{sep}'.join([s] * {n})\n",
             lambda r: {"n": r.randint(2, 4), "sep": r.choice(["-", ", ", "+", "|", " "])}, lambda r: (_word(r),)),
    Template("every_kth", "Write a function every_kth(xs) that returns the list of every {kth} element of xs, starting with the element at index {start}.",
             "def every_kth(xs):\n    return xs[{start}::{k}]\n",
             lambda r: (lambda k: {"k": k, "kth": _ordinal(k), "start": r.randint(0, 2)})(r.randint(2, 4)), lambda r: (_ints(r),)),
    Template("rotate_left", "Write a function rotate_left(xs) that returns the list xs rotated left by {k} positions (wrapping around; an empty list stays empty).",
             "def rotate_left(xs):\n    if not xs:\n        return []\n    k = {k} % len(xs)\n    return xs[k:] + xs[:k]\n",
             lambda r: {"k": r.randint(1, 5)}, lambda r: (_ints(r),)),
    Template("digit_sum", "Write a function digit_sum(n) that returns the sum of the digits of the non-negative integer n written in base {b}.",
             "def digit_sum(n):\n    total = 0\n    while n:\n        total += n % {b}\n        n //= {b}\n    return total\n",
             lambda r: {"b": r.choice([2, 3, 5, 7, 8, 10, 16])}, lambda r: (_big(r),)),
    Template("fizz", "Write a function fizz(n) that returns a list of strings for the numbers 1 to n: '{w1}' for multiples of {a}, '{w2}' for multiples of {b}, '{w1}{w2}' for multiples of both, and the number itself as a string otherwise.",
             "def fizz(n):\n    out = []\n    for i in range(1, n + 1):\n        s = ('{w1}' if i % {a} == 0 else '') + ('{w2}' if i % {b} == 0 else '')\n        out.append(s or str(i))\n    return out\n",
             lambda r: {"a": r.choice([2, 3, 4]), "b": r.choice([5, 6, 7]), "w1": r.choice(["Fizz", "Ping", "Foo"]), "w2": r.choice(["Buzz", "Pong", "Bar"])},
             lambda r: (r.randint(0, 16),)),
    Template("caesar", "Write a function caesar(s) that shifts every lowercase letter of s forward by {k} places in the alphabet (wrapping from 'z' to 'a') and leaves all other characters unchanged.",
             "def caesar(s):\n    return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' else c for c in s)\n",
             lambda r: {"k": r.randint(1, 25)}, lambda r: (_text(r),)),
    Template("count_long_words", "Write a function count_long_words(s) that returns how many space-separated words of the string s have more than {n} characters.",
             "def count_long_words(s):\n    return sum(1 for w in s.split() if len(w) > {n})\n",
             lambda r: {"n": r.randint(3, 6)}, lambda r: (_text(r),)),
    Template("pair_count", "Write a function pair_count(xs) that returns the number of index pairs i < j with xs[i] + xs[j] == {t}.",
             "def pair_count(xs):\n    return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[i] + xs[j] == {t})\n",
             lambda r: {"t": r.randint(-5, 15)}, lambda r: ([r.randint(-5, 15) for _ in range(r.randint(0, 8))],)),
    Template("one_of", "Write a function one_of(n) that returns True when n is divisible by exactly one of {a} and {b}, and False otherwise.",
             "def one_of(n):\n    return (n % {a} == 0) != (n % {b} == 0)\n",
             lambda r: (lambda a: {"a": a, "b": r.choice([b for b in range(2, 12) if b != a])})(r.randint(2, 11)), lambda r: (r.randint(0, 200),)),
    Template("mask_vowels", "Write a function mask_vowels(s) that returns s with every vowel (a, e, i, o, u, either case) replaced by '{c}'.",
             "def mask_vowels(s):\n    return ''.join('{c}' if ch in 'aeiouAEIOU' else ch for ch in s)\n",
             lambda r: {"c": r.choice("*#_?")}, lambda r: (_text(r),)),
    Template("kth_largest", "Write a function kth_largest(xs) that returns the {kth} largest distinct value in the list xs, or None when xs has fewer than {k} distinct values.",
             "def kth_largest(xs):\n    values = sorted(set(xs), reverse=True)\n    return values[{k} - 1] if len(values) >= {k} else None\n",
             lambda r: (lambda k: {"k": k, "kth": _ordinal(k)})(r.randint(1, 3)), lambda r: (_ints(r),)),
    Template("chunk_sums", "Write a function chunk_sums(xs) that splits the list xs into consecutive chunks of {k} elements (the last chunk may be shorter) and returns the list of the chunks' sums.",
             "def chunk_sums(xs):\n    return [sum(xs[i:i + {k}]) for i in range(0, len(xs), {k})]\n",
             lambda r: {"k": r.randint(2, 4)}, lambda r: (_ints(r),)),
    Template("polygonal", "Write a function polygonal(n) that returns the n-th {s}-gonal number, ((s - 2) * n * n - (s - 4) * n) // 2 with s = {s}.",
             "def polygonal(n):\n    return (({s} - 2) * n * n - ({s} - 4) * n) // 2\n",
             lambda r: {"s": r.randint(3, 12)}, lambda r: (_nat(r),)),
    Template("first_unique", "Write a function first_unique(xs) that returns the first {k} distinct elements of the list xs in their order of first appearance (fewer if xs has fewer).",
             "def first_unique(xs):\n    out = []\n    for x in xs:\n        if x not in out:\n            out.append(x)\n    return out[:{k}]\n",
             lambda r: {"k": r.randint(1, 5)}, lambda r: ([r.randint(0, 5) for _ in range(r.randint(0, 9))],)),
    Template("count_overlapping", "Write a function count_overlapping(s) that returns how many times '{pat}' occurs in the string s, counting overlapping occurrences.",
             "def count_overlapping(s):\n    return sum(1 for i in range(len(s)) if s.startswith('{pat}', i))\n",
             lambda r: {"pat": r.choice(["aa", "ana", "oo", "ee", "ll", "an", "ra"])},
             lambda r: ("".join(r.choice("anoelr ") for _ in range(r.randint(0, 14))),)),
    Template("starts_with", "Write a function starts_with(words) that returns the words of the list words that start with '{c}' (either case), in their original order.",
             "def starts_with(words):\n    return [w for w in words if w[:1].lower() == '{c}']\n",
             lambda r: {"c": r.choice("abcdlnrtwz")}, lambda r: (_words(r),)),
    Template("gcd_with", "Write a function gcd_with(n) that returns the greatest common divisor of the non-negative integer n and {m}.",
             "def gcd_with(n):\n    a, b = n, {m}\n    while b:\n        a, b = b, a % b\n    return a\n",
             lambda r: {"m": r.choice([12, 18, 24, 30, 36, 42, 48, 60, 72, 84, 90, 96])}, lambda r: (_nat(r),)),
    Template("last_digits", "Write a function last_digits(n) that returns the number formed by the last {k} digits of the non-negative integer n.",
             "def last_digits(n):\n    return n % {m}\n",
             lambda r: (lambda k: {"k": k, "m": 10 ** k})(r.randint(1, 4)), lambda r: (_big(r),)),
    Template("running_total", "Write a function running_total(xs) that returns the list of running totals of xs, each multiplied by {a}.",
             "def running_total(xs):\n    out, total = [], 0\n    for x in xs:\n        total += x\n        out.append(total * {a})\n    return out\n",
             lambda r: {"a": r.randint(1, 5)}, lambda r: (_ints(r),)),
    Template("mean_rounded", "Write a function mean_rounded(xs) that returns the mean of the list of numbers xs rounded to {d} decimal places with round(), or 0.0 for an empty list.",
             "def mean_rounded(xs):\n    return round(sum(xs) / len(xs), {d}) if xs else 0.0\n",
             lambda r: {"d": r.randint(0, 3)}, lambda r: (_posints(r),)),
    Template("alternate_case", "Write a function alternate_case(s) that returns s with the characters at indexes divisible by {k} in upper case and all others in lower case.",
             "def alternate_case(s):\n    return ''.join(c.upper() if i % {k} == 0 else c.lower() for i, c in enumerate(s))\n",
             lambda r: {"k": r.randint(2, 4)}, lambda r: (_text(r),)),
    Template("bounded_product", "Write a function bounded_product(xs) that returns the product of the elements of xs that lie between {lo} and {hi} inclusive (1 if there are none).",
             "def bounded_product(xs):\n    out = 1\n    for x in xs:\n        if {lo} <= x <= {hi}:\n            out *= x\n    return out\n",
             lambda r: (lambda lo: {"lo": lo, "hi": lo + r.randint(2, 8)})(r.randint(-5, 5)), lambda r: (_ints(r),)),
]


def _run_reference(code: str, name: str) -> Callable:
    namespace: dict[str, Any] = {}
    exec(compile(code, f"<pyfunc {name}>", "exec"), namespace)  # noqa: S102 - our own reference code
    return namespace[name]


def make_problem(template: Template, consts: dict[str, Any], rng: random.Random, n_tests: int = 3) -> dict:
    """One problem: statement, reference code, and ``n_tests`` distinct asserts from the reference.

    Asserts with different expected values are preferred, so that no constant function (say,
    ``return []``) passes all of them when the reference can tell inputs apart.
    """
    text = template.text.format(**consts)
    code = template.code.format(**consts)
    fn = _run_reference(code, template.name)
    candidates: dict[str, str] = {}  # assert line -> repr of the expected value
    for _ in range(30 * n_tests):
        args = template.inputs(rng)
        expected = repr(fn(*args))
        candidates.setdefault(f"assert {template.name}({', '.join(repr(a) for a in args)}) == {expected}", expected)
    tests: list[str] = []
    for line, expected in candidates.items():  # first pass: one assert per distinct value
        if len(tests) < n_tests and expected not in {candidates[t] for t in tests}:
            tests.append(line)
    tests += [line for line in candidates if line not in tests][: n_tests - len(tests)]
    return {"text": text, "code": code, "test_list": tests, "test_setup_code": "", "tests": "\n".join(tests)}


def pyfunc(split: str, *, data_dir: Path, size: int = 2000, seed: int = 0, tests: int = 3) -> Iterator[dict]:
    """Procedural function-writing problems (train may repeat a problem with other tests; test never repeats)."""
    del data_dir  # generated, not read
    if split not in ("train", "test"):
        raise RlvrError(f"task 'pyfunc' has splits train and test, not {split!r}")
    if tests < 1:
        raise RlvrError("task 'pyfunc': tests must be >= 1")
    rng = random.Random(f"pyfunc/{seed}/{split}")

    def draw():
        template = rng.choice(TEMPLATES)
        consts = template.consts(rng)
        return template.text.format(**consts), lambda: make_problem(template, consts, rng, tests)

    for i, row in enumerate(held_out_draws(split, size, 200 * size, draw)):
        yield {"task_id": f"pyfunc/{split}/{i}", **row}


@hookimpl
def rlvr_register_tasks(register):
    register("pyfunc", pyfunc, columns=["task_id", "text", "code", "test_list", "test_setup_code", "tests"], splits=["train", "test"])
