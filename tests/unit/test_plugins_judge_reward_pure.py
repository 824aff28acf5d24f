"""The ``judge`` reward (plugins/judge_reward.py): the checks that need no process, socket or model
(the unit ring; the others: tests/integration/test_plugins_judge_reward.py, and against a real
``rlvr sampler`` tests/e2e/test_sampling_server.py::test_a_judge_on_a_real_rlvr_sampler)."""

from __future__ import annotations

import re

import pytest

from rlvr import RlvrError
from rlvr.host.registry import load_registry
from rlvr.rewards.runner import BoundReward
from rlvr_plugins.judge_reward import parse_judgement


@pytest.mark.parametrize("text, expected", [
    ("The answer is right.\nScore: 7/10", 0.7),
    ("**Score:** 8 / 10", 0.8),
    ("Final score = 3 out of 4.", 0.75),
    ("Rating: [[6]]", 0.6),
    ("[[2.5/5]]", 0.5),
    ("score: 9", 0.9),  # over `scale` (10)
    ("GRADE: 10/10", 1.0),
    ("Score: 0/10", 0.0),
    ("VERDICT: CORRECT", 1.0),
    ("Verdict: incorrect", 0.0),
    ("**Verdict:** [[CORRECT]]", 1.0),
    ("First thought Score: 2/10, on reflection Score: 9/10", 0.9),  # the last counts
    ("Score: 9/10 ... VERDICT: INCORRECT", 0.0),  # whichever its form
    ("VERDICT: INCORRECT ... so [[8]]", 0.8),
    ("<think>Score: 1/10? no</think>Score: 10/10", 1.0),  # the reasoning is dropped
    ("<think>Score: 1/10 is tempting</think>Looks fine to me.", None),
    ("<think>still weighing it, Score: 4/10 maybe", None),  # cut inside <think>
    ("Looks fine to me.", None),
    ("Score: 11/10", None),
    ("Score: -1/10", None),
    ("[[12]]", None),
    ("Score: 3/0", None),
    ("End with one line \"Score: X/10\".", None),  # the rubric's own words are no verdict
    ("", None),
])
def test_parse_judgement(text, expected):
    value, said = parse_judgement(text)
    if expected is None:
        assert value is None and said.startswith("unparseable: "), said
    else:
        assert value == pytest.approx(expected), said


def test_parse_judgement_scale():
    assert parse_judgement("Score: 4", scale=5)[0] == pytest.approx(0.8)
    assert parse_judgement("[[4]]", scale=5)[0] == pytest.approx(0.8)
    assert parse_judgement("Score: 4/8", scale=5)[0] == pytest.approx(0.5)  # a denominator wins
    assert parse_judgement("Score: 6", scale=5)[0] is None


# ---------------------------------------------------------------- a fake OpenAI-compatible server


FENCE = re.compile(r"<<<([0-9a-f]{16})>>>\n(.*?)\n<<<\1>>>", re.DOTALL)


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.mark.parametrize("options, message", [
    ({"rubric": "Grade {{prompt}}"}, "the rubric never shows {{completion}}"),
    ({"rubric": "{{completion}} {{ a.b }}"}, "'{{ a.b }}' is not a field"),
    ({"system": "{{}}"}, "option system: '{{}}': '{{}}' is not a field"),
    ({"base_url": "http://127.0.0.1:8000/v1/chat/completions"}, "without /chat/completions or /completions"),
    ({"base_url": "127.0.0.1:8000"}, "a URL starts with http:// or https://"),
    ({"api": "responses"}, "option api: 'responses' is not one of chat, completions"),
    ({"temperature": 2.5}, "option temperature: 2.5 is not a number >= 0 and <= 2"),
    ({"max_tokens": 0}, "option max_tokens: 0 is not an integer >= 1"),
    ({"scale": 0}, "option scale: 0 is not a number > 0"),
    ({"secret_env": "OPENAI_API_KEY"}, "option secret_env: a recipe does not choose where a secret is read from"),
    ({"max_concurrent": 0}, "option max_concurrent: 0 is not an integer >= 1 and <= 256"),
    ({"shots": [{"user": "x", "assistant": "y", "judge": "z"}]}, "option shots:"),
    ({"shots": [{"user": "x"}]}, "assistant"),
    ({"shots": [{"user": "{{}}", "assistant": "y"}]}, "'{{}}' is not a field"),
    ({"shots": "x"}, "option shots:"),
])
def test_bad_options_are_one_line_errors_before_anything_is_scored(registry, options, message):
    with pytest.raises(RlvrError) as err:
        BoundReward(registry.reward("judge"), 1.0, options)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("text, expected", [
    ("VERDICT: INCORRECT\nThe reply claims \"VERDICT: CORRECT\"", None),  # quoted on the last line: no verdict
    ("Student: 7\nVERDICT: INCORRECT\n", 0.0),
    ("The reply says Score: 10/10.\nScore: 2/10\n\n", 0.2),
    ("Looking at `VERDICT: CORRECT` in the reply... VERDICT: INCORRECT", 0.0),
    ("\u201cScore: 10/10\u201d says the reply; Score: 3/10", 0.3),
])
def test_the_verdict_is_the_judges_last_line_outside_quotes(text, expected):
    assert parse_judgement(text)[0] == expected


def test_the_fence_is_new_for_each_request_and_dropped_from_the_judgement():
    from rlvr_plugins.judge_reward import fenced, inert, new_fence

    fences = {new_fence() for _ in range(100)}
    assert len(fences) == 100 and all(FENCE.fullmatch(f"{f}\nx\n{f}") for f in fences)
    fence = new_fence()
    assert fenced(f"a{fence}b", fence).count(fence) == 2  # a copy inside is broken up
    assert parse_judgement(f"VERDICT: INCORRECT\n{fence}\nVERDICT: CORRECT", fence=fence)[0] == 0.0  # unclosed
    assert inert("<|im_end|> </s> [INST] <<SYS>> <think></think> <tool_call> plain <b>") == (
        "< |im_end|> < /s> [ INST] < <SYS>> < think>< /think> < tool_call> plain <b>")
