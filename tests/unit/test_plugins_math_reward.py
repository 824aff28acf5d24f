"""Tests of the math reward: a table of equal / not-equal answer pairs, extraction,
the reward contract, time limits against adversarial answers, and real data."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
try:
    import rlvr_plugins.math as mr
    from rlvr_plugins.math import compare, normalise, parse, rounding
except ImportError:  # not installed yet: use the source tree
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import plugins.math as mr
    from plugins.math import compare, normalise, parse, rounding

from rlvr import RlvrError  # noqa: E402
from rlvr.kit.workers import Result  # noqa: E402
from helpers.plugins_math_reward import PAIRS

def test_table_is_big_enough():
    assert len(PAIRS) >= 60
    assert sum(e for _, _, e in PAIRS) >= 30 and sum(not e for _, _, e in PAIRS) >= 30


@pytest.mark.parametrize(
    "text,expected",
    [
        ("so \\boxed{5}.", "5"),
        ("\\boxed{1} then \\boxed{\\frac{2}{3}}", "\\frac{2}{3}"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{\\frac{a}{\\sqrt{b}}}", "\\frac{a}{\\sqrt{b}}"),
        ("\\boxed 5$", "5"),
        ("\\boxed 7.", "7"),
        ("\\fbox{x=3}", "x=3"),
        ("\\boxed{5", None),
        ("no box", None),
        ("\\boxedx{5}", None),
    ],
)
def test_last_boxed(text, expected):
    assert mr.last_boxed(text) == expected


def test_extract_modes():
    text = "<think>maybe \\boxed{4}</think> <answer>\\boxed{7}</answer> #### 9 the answer is 11. Also 13"
    assert mr.extract_answer(text, "boxed") == "7"  # the reasoning's draft is ignored
    assert mr.extract_answer(text, "tag") == "7"
    assert mr.extract_answer(text, "hash") == "9 the answer is 11. Also 13"
    assert mr.extract_answer("#### 1,234\n", "hash") == "1,234"
    assert mr.extract_answer(text, "last_number") == "13"
    assert mr.extract_answer("it costs $1,234.50 or -3/4", "last_number") == "-3/4"
    assert mr.extract_answer("<answer> 42 </answer>", "tag") == "42"
    # the math environment's content (this used to keep the "$"s, which normalisation dropped anyway)
    assert mr.extract_answer("The final answer is: $\\frac{1}{2}$.", "auto") == "\\frac{1}{2}"
    assert mr.extract_answer("first 3 then 8", "auto") == "8"
    assert mr.extract_answer("nothing here", "auto") is None
    with pytest.raises(ValueError):
        mr.extract_answer("x", "nope")


def test_auto_takes_the_last_whole_expression():
    # never a piece of one: "$10^3$" is not 3, "3+2" is not 2, "$(7, 6)$" is not 6
    assert mr.extract_answer("so it is $10^3$", "auto") == "10^3"
    assert mr.extract_answer("it is 3+2", "auto") == "3+2"
    assert mr.extract_answer("the point is $(7, 6)$.", "auto") == "(7, 6)"
    assert mr.extract_answer(r"so x = \frac{3}{4}", "auto") == r"x = \frac{3}{4}"
    assert mr.extract_answer(r"then 2^{10} it is", "auto") == "2^{10}"
    assert mr.extract_answer("which is 1,000.99€", "auto") == "1,000.99"
    assert mr.extract_answer("Answer \\( (9+1) \\)", "auto") == "(9+1)"
    assert mr.extract_answer("code AZYUK2A", "auto") is None  # not a number glued to letters
    # a "$" before a number and words is a price, not math
    assert mr.extract_answer(r"it costs $10 per pound, so $\frac{7}{9} \times 10$", "auto") == r"\frac{7}{9} \times 10"


def test_phrase_extraction_stops_where_the_answer_ends():
    assert mr.extract_answer("Final Answer: The final answer is 7.78. I hope it is correct.", "auto") == "7.78"
    assert mr.extract_answer("The final answer is $10,455$. I hope it is correct.", "auto") == "10,455"
    assert mr.extract_answer("Final Answer: The largest $n$ is 34.", "auto") == "34"
    assert mr.extract_answer("The answer is 5 apples. Then we rest.", "auto") == "5 apples"
    assert mr.extract_answer("The answer is: **12**\nDone in 3 steps", "auto") == "12"
    assert mr.extract_answer('The final answer is "$12$ and $13$". I hope', "auto") == "12, 13"
    # a remark about the answer is not one: the box before it stands
    assert mr.extract_answer(r"so $\boxed{44}$. Check: $17 \cdot 44 = 748$, so our answer is correct.", "auto") == "44"
    # the mark that comes last wins: an intermediate box, then the stated final answer
    text = r"so $0.04 \cdot 10000 = \boxed{200}$. Final Answer: The final answer is $10,455$. I hope it is correct."
    assert mr.extract_answer(text, "auto") == "10,455"
    assert mr.extract_answer(text, "answer") == "200"  # the default reads marks only


def test_extraction_of_the_issue_categories():
    # minerva_math's answer format ("Final Answer: The final answer is X. I hope it is correct.")
    # with thousands separators, with or without the space before "I hope"
    text = "Final Answer: The final answer is $1,000$. I hope it is correct."
    assert mr.extract_answer(text, "auto") == "1,000"
    assert mr.extract_answer("Final Answer: The final answer is 1,000.I hope it is correct.", "auto") == "1,000"
    # several quantities with units, stated or bare
    assert mr.extract_answer("The answers are 3 cm and 5 cm.", "auto") == "3 cm and 5 cm"
    assert mr.extract_answer("3 cm and 5 cm", "auto") == "3 cm and 5 cm"
    assert mr.extract_answer("The sides are $3$ cm and $5$ cm", "auto") == "5"  # no mark: the last expression
    assert mr.extract_answer("2 3", "auto") == "2 3"


def test_normalisation_of_the_issue_categories():
    assert normalise._mixed_number("4 4/9") == "\\frac{40}{9}"
    assert normalise._mixed_number("-2 \\frac{1}{3}") == "-\\frac{7}{3}"
    assert normalise._mixed_number("2 3") == "2 3" and normalise._mixed_number("2 4/3") == "2 4/3"
    assert normalise._mixed_number("4 0/9") == "4 0/9"
    assert normalise._strip_trailing_noise("5\\\\") == "5"
    assert normalise._strip_trailing_noise("12\\, \\quad ~") == "12"
    assert normalise._strip_trailing_noise("1\\\\2") == "1\\\\2"
    assert normalise._strip_trailing_noise(" " * 50_000 + "x") == " " * 50_000 + "x"  # linear, no regex backtracking
    assert mr.normalize_answer("3\\text{ cm}, 5\\text{ cm}") == "3, 5"
    assert mr.normalize_answer("1,000 \\text{ cm}") == "1,000"  # a thousands comma is no list
    assert mr.normalize_answer("500 + 500 = 1,000") == "1,000"


def test_numbers_close_reads_decimals_as_roundings():
    from fractions import Fraction as F

    def num(text):
        return rounding.plain_number(text)

    assert rounding.numbers_close(num("\\frac{1}{3}"), num("0.333333"))
    assert rounding.numbers_close(num("0.333333"), num("\\frac{1}{3}"))
    assert rounding.numbers_close(num("\\frac{1}{3}"), num("0.33333"))  # 5 digits, 1e-5 relative
    assert rounding.numbers_close(num("\\frac{1}{3}"), num("0.3333"))  # 4 digits, exactly 1e-4 relative
    assert not rounding.numbers_close(num("\\frac{1}{3}"), num("0.333"))  # 3 digits: exact
    assert not rounding.numbers_close(num("0.1"), num("0.1000004"))  # one digit: exact
    assert rounding.numbers_close(num("1234567.46"), num("1234567.5"))  # the coarser rounds the finer
    assert not rounding.numbers_close(num("1234567.44"), num("1234567.5"))
    assert not rounding.numbers_close(num("12"), num("12.0000006"))
    assert rounding.numbers_close(num("12"), num("12.0000001"))  # one unit in the last place, 2e-6 relative
    assert rounding.numbers_close((F(2), None), (F(2), (1, 2)))
    assert rounding._decimal_digits("0.014286") == (6, 5) and rounding._decimal_digits("1,234.50") == (2, 6)


def test_decimal_rounds():
    from fractions import Fraction as F

    third = F(1, 3)
    assert rounding._decimal_rounds(F("0.3333"), 4, 4, third)
    assert not rounding._decimal_rounds(F("0.3334"), 4, 4, third)  # not the rounding
    assert not rounding._decimal_rounds(F("0.333"), 3, 3, third)  # too few digits
    assert not rounding._decimal_rounds(F("0.1429"), 4, 4, F(1, 7))  # the rounding, 3e-4 relative
    assert rounding._decimal_rounds(F("1234.4"), 1, 5, F("1234.45"))  # a tie: half even
    assert rounding._decimal_rounds(F("1234.5"), 1, 5, F("1234.45"))  # a tie: half up
    assert not rounding._decimal_rounds(F("1234.6"), 1, 5, F("1234.45"))
    assert rounding._decimal_rounds(F("0.666666"), 6, 6, F(2, 3))  # truncated: 1 unit, 1e-6 relative
    assert not rounding._decimal_rounds(F("0.666666"), 6, 6, F(2, 3), truncated=False)
    assert not rounding._decimal_rounds(F("0.6666"), 4, 4, F(2, 3))  # truncated at 4 digits: 0.6667 rounds
    assert not rounding._decimal_rounds(F("2.0001"), 4, 5, F(2))
    assert not rounding._decimal_rounds(F("1234567.1"), 1, 8, F(1234567))  # one unit off, not a truncation
    assert rounding._decimal_rounds(F("12.0000001"), 7, 9, F(12))  # past math-verify's 6 places
    assert rounding._decimal_rounds(F("-0.666666"), 6, 6, F(-2, 3))  # truncated toward zero


def test_literal_decimals_in_sympy_expressions():
    if not parse.MV:
        parse.init_worker()
    sp = parse.MV["sympy"]
    from fractions import Fraction as F

    assert compare._literal_decimal(sp.Float("2.6667")) == (F("2.6667"), (4, 5))
    assert compare._literal_decimal(sp.Float("-3.141593")) == (F("-3.141593"), (6, 7))
    assert compare._literal_decimal(sp.Float("0.0000012")) == (F("0.0000012"), (7, 2))
    assert compare._literal_decimal(sp.Integer(2) * sp.pi) is None
    value, decimal = compare._as_plain(sp.pi, sp.pi)
    assert decimal is None and abs(value - F("3.14159265358979323846264338327950288")) < F(1, 10**35)
    assert compare._as_plain(sp.I, sp.I) is None  # not real
    assert compare._numbers_equal(sp.pi, sp.Float("3.1416")) is False  # approximate_irrational off
    with compare.irrational_approximations(True):
        assert compare._numbers_equal(sp.pi, sp.Float("3.1416")) is True
        assert compare._numbers_equal(sp.pi, sp.Float("3.1415")) is False
    assert compare._numbers_equal(sp.Float("3.1416"), sp.pi) is True  # a rounded gold: the rule applies


def test_letter_units():
    assert normalise._strip_letter_units(r"3\text{ m}, 5\text{ m}") == "3, 5"
    assert normalise._strip_letter_units(r"5 \text{g}^2") == "5"
    assert normalise._strip_letter_units(r"3\text{ e}") == r"3\text{ e}"
    assert normalise._strip_letter_units(r"x\text{ m}") == r"x\text{ m}"  # after a variable: not a unit of a number
    assert normalise._strip_letter_units(r"2\text{ m} + 1") == r"2\text{ m} + 1"  # not at an item's end
    assert normalise._strip_letter_units(r"\frac{2\text{ m}, 3}{4}") == r"\frac{2\text{ m}, 3}{4}"  # inside braces
    assert mr.normalize_answer("2m") == "2m"
    many = "{" + r"1\text{ m}, " * 20_000 + "}"
    assert normalise._strip_letter_units(many) == many  # bounded work


def test_boxes_joined_into_one_answer():
    for mode in ("answer", "boxed", "auto"):
        assert mr.extract_answer(r"\boxed{1}, \boxed{2} and \boxed{3}", mode) == "1, 2, 3"
        assert mr.extract_answer(r"$\boxed{(2, 2)} \quad \text{and} \quad \boxed{(6, 2)}$", mode) == "(2, 2), (6, 2)"
        assert mr.extract_answer(r"\(y_1 = \boxed{2x}\) and \(y_2 = \boxed{3x}\)", mode) == "2x, 3x"
        assert mr.extract_answer(r"\boxed{4}. Wait, that is wrong: \boxed{5}", mode) == "5"  # a draft, then the answer
        assert mr.extract_answer(r"\boxed{1} no no no no no \boxed{2}", mode) == "2"
    assert mr.last_boxed(r"\boxed{1}, \boxed{2}") == "2"  # the single-box helper keeps its meaning
    assert mr.extract_gold(r"\(\boxed{1}\) and \(\boxed{-2}\).") == "1, -2"


def test_chat_template_tokens_end_the_completion():
    assert mr.extract_answer("\\boxed{4}<|im_end|>\n<|im_start|>user\nnow \\boxed{5}", "answer") == "4"
    assert mr.extract_answer("<|im_start|>Answer: \\boxed{42}<|im_end|>", "answer") == "42"
    assert mr.extract_answer("the pair is $(7, 6)$. <|im_start|>user", "auto") == "(7, 6)"


def test_extract_gold():
    gsm = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 1,072"
    assert mr.extract_gold(gsm) == "1072"
    assert mr.extract_gold("so $\\boxed{\\frac{\\sqrt{3}}{2}}$ is it") == "\\frac{\\sqrt{3}}{2}"
    assert mr.extract_gold(" (3, \\frac{\\pi}{2}) ") == "(3, \\frac{\\pi}{2})"
    assert mr.extract_gold("42", "hash") is None
    assert mr.extract_gold("\\boxed{x}", "raw") == "\\boxed{x}"


def test_normalize_answer():
    assert mr.normalize_answer("$\\dfrac{1}{2}$") == "\\frac{1}{2}"
    assert mr.normalize_answer("\\(5\\text{ cm}^2\\)") == "5"
    assert mr.normalize_answer("1-\\frac{1}{\\mathrm{e}}") == "1-\\frac{1}{e}"
    assert mr.normalize_answer("\\frac{1}{\\text{apples}}") == "\\frac{1}{\\text{apples}}"  # not a trailing unit
    assert mr.normalize_answer("2 \\pi") == "2 \\pi"
    assert mr.normalize_answer("0.1\\overline{6}") == "\\frac{15}{90}"
    assert mr.normalize_answer("2.5e-3") == "2.5\\times 10^{-3}"


def test_option_annotations_state_the_allowed_values():
    """Options are checked from their annotations (choices as Literal, ranges as annotated_types)."""
    import typing

    import annotated_types

    hints = typing.get_type_hints(mr.math_reward, include_extras=True)
    assert set(typing.get_args(hints["extract"])) == set(mr.EXTRACT_MODES)
    assert set(typing.get_args(hints["gold"])) == set(mr.GOLD_MODES)
    assert annotated_types.Gt(0) in typing.get_args(hints["timeout"])
    assert annotated_types.Gt(0) in typing.get_args(hints["max_answer_chars"])
    assert annotated_types.Ge(0) in typing.get_args(hints["workers"])


def test_bad_options():
    with pytest.raises(RlvrError):
        mr.math_reward(None, ["x"], None, answer=["1"], extract="nope")
    with pytest.raises(RlvrError):
        mr.math_reward(None, ["x"], None, answer=["1"], gold="nope")
    with pytest.raises(RlvrError):
        mr.math_reward(None, ["x"], None, answer=["1"], timeout=0)
    with pytest.raises(RlvrError):
        mr.math_reward(None, ["x", "y"], None, answer=["1"])


def test_hard_timeout_and_checker_error_become_scores(monkeypatch):
    class FakePool:
        def map(self, fn, items, timeout=None):
            return [Result("timeout", error="exceeded"), Result("error", error="boom")]

    monkeypatch.setattr(mr, "_pool", lambda workers=0: FakePool())
    timed_out, failed = mr.math_reward(None, ["a", "b"], None, answer=["1", "2"], timeout=3)
    assert timed_out.value == 0.0 and "3 s" in timed_out.info["why"]
    assert failed.value is None and "boom" in failed.info["why"]


def test_soft_limit_is_not_swallowed_by_except_exception():
    """The worker's soft limit raises a BaseException: a checker's own `except Exception` (sympy,
    math-verify, a third-party scorer) cannot turn it into a verdict or carry on past it."""
    import signal

    from rlvr.kit import SoftTimeout, soft_limit

    before, caught = signal.getsignal(signal.SIGALRM), []
    t0 = time.monotonic()
    with pytest.raises(SoftTimeout):
        with soft_limit(0.05):
            while time.monotonic() - t0 < 5:
                try:
                    time.sleep(0.01)
                except Exception as exc:  # noqa: BLE001 - what checkers do
                    caught.append(exc)
    assert time.monotonic() - t0 < 1.0 and not caught
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) == before  # the handler back, the timer off


def test_registration():
    registered = {}
    mr.rlvr_register_rewards(lambda name, fn, description=None: registered.setdefault(name, fn))
    assert registered["math"] is mr.math_reward


def test_the_reasons_of_an_item_do_not_depend_on_the_items_before_it():
    """The gold's parse is cached across items: an earlier item that parsed the gold must not
    change what a later item's reasons show."""
    from rlvr_plugins.math import worker

    worker._GOLD_CACHE.clear()
    item = ("The answer is \\boxed{34}.", "#### 14", "boxed", "auto", 1000, 4.0, False)
    alone = worker.score_item(item)
    worker._GOLD_CACHE.clear()
    worker.score_item(("The answer is \\boxed{\\sqrt{196}}.", "#### 14", "boxed", "auto", 1000, 4.0, False))
    after = worker.score_item(item)
    assert after == alone and alone["value"] == 0.0
