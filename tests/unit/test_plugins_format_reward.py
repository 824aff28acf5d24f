"""Hand-checked cases for the format reward."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
try:
    from rlvr_plugins import format_reward as fr
except ImportError:  # not installed yet: use the source tree
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from plugins import format_reward as fr

from rlvr import RlvrError, Score  # noqa: E402


def score(completion, prompt=None, **options) -> Score:
    options.setdefault("think", True)
    (s,) = fr.format_reward([prompt], [completion], None, **options)
    return s


# (completion, expected value with think=True, boxed="one", trailing_text=True, partial=True)
DEFAULT_CASES = [
    ("<think>2+3 is 5</think>The answer is \\boxed{5}.", 1.0),
    ("  \n<think>reason</think>\n\\boxed{5}\n", 1.0),  # leading whitespace is fine
    ("The answer is \\boxed{5}.", 2 / 3),  # no thinking
    ("<think>r</think> \\boxed{5} and \\boxed{6}", 2 / 3),  # two boxes
    ("<think>r</think> \\boxed{5} because it is", 2 / 3),  # text after the answer
    ("<think>r</think> no box at all", 1 / 3),  # no box, nothing to end on
    ("<think></think>\\boxed{5}", 2 / 3),  # empty thinking
    ("<think>a</think><think>b</think>\\boxed{1}", 2 / 3),  # two think blocks
    ("<think>draft \\boxed{4}</think> final \\boxed{5}", 1.0),  # drafts in reasoning don't count
    ("<think>r</think>$\\boxed{5}$.", 1.0),
    ("<think>r</think>\\[\\boxed{\\frac{1}{2}}\\]", 1.0),
    ("<think>r</think>**\\boxed{5}**", 1.0),
    ("<think>r</think>\\boxed{\\{1, 2\\}}", 1.0),  # escaped braces inside
    ("<think>r</think>\\boxed{5", 1 / 3),  # unclosed box
    ("<think>r</think>\\boxed 5", 1.0),  # TeX allows \boxed 5
    ("<think>r</think>\\fbox{5}", 1.0),
    ("<think>r\\boxed{5}", 2 / 3),  # thinking never closed; the box still ends the text
    ("reasoning</think>\\boxed{5}", 2 / 3),  # closing tag only, and the prompt did not open it
]


@pytest.mark.parametrize("completion,expected", DEFAULT_CASES)
def test_default_checks(completion, expected):
    s = score(completion)
    assert s.value == pytest.approx(expected), s.info


def test_unclosed_think_details():
    s = score("<think>r\\boxed{5}")
    assert s.info["checks"] == {"think": False, "boxed": True, "trailing_text": True}
    assert "no </think>" in s.info["why"]


def test_info_lists_checks_and_reasons():
    s = score("<think>r</think> \\boxed{5} and \\boxed{6} done")
    assert s.info["checks"] == {"think": True, "boxed": False, "trailing_text": False}
    assert "found 2" in s.info["why"] and "done" in s.info["why"]
    json.dumps(s.info)
    assert score("<think>r</think>\\boxed{1}").info["why"] == "all checks passed"


def test_all_or_nothing():
    assert score("The answer is \\boxed{5}.", partial=False).value == 0.0
    assert score("<think>ok</think>\\boxed{5}", partial=False).value == 1.0


def test_answer_tag_checks():
    opts = dict(think=False, boxed="none", answer_tag=True)
    assert score("<answer>5</answer>", **opts).value == 1.0
    assert score("<answer>5</answer>\n", **opts).value == 1.0
    assert score("<answer>5</answer> as computed", **opts).value == 0.5
    assert score("<answer>  </answer>", **opts).value == 0.5  # empty answer, nothing after it
    assert score("<answer>1</answer><answer>2</answer>", **opts).value == 0.5
    assert score("</answer>5<answer>", **opts).value == 0.0
    assert score("just 5", **opts).value == 0.0
    # With thinking and a box inside the tag: four checks.
    full = dict(think=True, boxed="one", answer_tag=True)
    assert score("<think>t</think><answer>\\boxed{5}</answer>", **full).value == 1.0
    assert score("<think>t</think><answer>5</answer>", **full).value == 0.75


def test_box_inside_answer_tag_without_the_tag_check():
    assert score("<think>t</think><answer>\\boxed{5}</answer>").value == 1.0
    assert score("<think>t</think><answer>\\boxed{5}</answer> ok?").value == pytest.approx(2 / 3)


def test_boxed_any_and_none():
    two = "<think>t</think>\\boxed{1} or \\boxed{2}"
    assert score(two, boxed="any").value == 1.0
    assert score(two, boxed="one").value == pytest.approx(2 / 3)
    s = score("<think>t</think>5", boxed="none", trailing_text=False)
    assert s.value == 1.0 and s.info["checks"] == {"think": True}


def test_trailing_text_off():
    s = score("<think>t</think>\\boxed{5} and more words", trailing_text=False)
    assert s.value == 1.0 and "trailing_text" not in s.info["checks"]


def test_prefilled_think_in_prompt():
    prompt = "<|im_start|>assistant\n<think>\n"
    assert score("reasoning here</think>\\boxed{3}", prompt=prompt).value == 1.0
    # The closing tag is still required.
    assert score("reasoning here \\boxed{3}", prompt=prompt).value == pytest.approx(2 / 3)
    # A completion that repeats the opening tag is fine too.
    assert score("<think>r</think>\\boxed{3}", prompt=prompt).value == 1.0


def test_defaults_do_not_require_thinking():
    (s,) = fr.format_reward(["Solve it."], ["Step 1 ... so \\boxed{5}."], None)
    assert s.value == 1.0 and s.info["checks"] == {"boxed": True, "trailing_text": True}
    (s,) = fr.format_reward(["Solve it."], ["so \\boxed{5} is it"], None)
    assert s.value == 0.5


def test_chat_format_completion():
    completion = [{"role": "assistant", "content": "<think>t</think>\\boxed{7}"}]
    (s,) = fr.format_reward([[{"role": "user", "content": "q"}]], [completion], None, think=True)
    assert s.value == 1.0


def test_batch_and_missing_prompts():
    scores = fr.format_reward(None, ["<think>t</think>\\boxed{1}", "nothing"], None, think=True)
    assert [s.value for s in scores] == [1.0, 0.0]


def test_giant_completion_is_fast():
    import time

    text = "<think>" + "x" * 5_000_000 + "</think>" + "{" * 100_000 + " \\boxed{42}"
    t0 = time.monotonic()
    s = score(text)
    assert time.monotonic() - t0 < 2.0
    assert s.value == 1.0


def test_many_open_boxes_are_fast():
    """One pass over the braces however many boxes stay open (rescanning from each was quadratic:
    over a minute for this text)."""
    import time

    text = "<think>r</think>" + "\\boxed{" * 100_000
    t0 = time.monotonic()
    s = score(text)
    assert time.monotonic() - t0 < 2.0
    assert not s.info["checks"]["boxed"] and "unclosed" in s.info["why"]


def test_bad_options():
    with pytest.raises(RlvrError):
        score("x", boxed="two")
    with pytest.raises(RlvrError):
        score("x", think=False, boxed="none", answer_tag=False, trailing_text=False)


def test_registration():
    registered = {}
    fr.rlvr_register_rewards(lambda name, fn, description=None: registered.setdefault(name, (fn, description)))
    assert registered["format"][0] is fr.format_reward and registered["format"][1]
