"""Reward functions written for TRL, unchanged: called by keyword as TRL's GRPOTrainer calls them,
with conversational or plain completions, and giving what they give under TRL on the same
inputs (trl.rewards' own functions, the ``trl_rewards`` fixture: `make test` installs TRL, and there
a missing TRL fails)."""

from __future__ import annotations

import textwrap

import pytest

from rlvr import RlvrError
from rlvr.host.registry import Registry, make_reward_spec, reward_signature
from rlvr.rewards.runner import BoundReward, score_batch

COMPLETIONS = [r"<think>2+2</think> The answer is \boxed{4}.", r"It is \boxed{\frac{1}{2}}", "no box at all",
               "<think>unclosed... \\boxed{4}"]
SOLUTIONS = ["4", r"\frac{1}{3}", "7", "$4$"]


def bound(fn, name="r", conversational=True, **options):
    return BoundReward(make_reward_spec(name, fn, plugin="test", version="0"), 1.0, options, {}, conversational)


def score(reward, rows, completions=COMPLETIONS, ids=None):
    ids = ids or [[1] * (3 * i + 1) for i in range(len(completions))]
    batch = score_batch([reward], ["Q?"] * len(completions), completions, ids, rows)
    return batch.values[reward.name], batch.infos[reward.name]


def conversational(texts):
    return [[{"role": "assistant", "content": t}] for t in texts]


def test_trl_builtins_score_as_under_trl(trl_rewards):
    rows = [{"solution": s, "question": "q"} for s in SOLUTIONS]
    got, _ = score(bound(trl_rewards.accuracy_reward), rows)
    assert got == trl_rewards.accuracy_reward(conversational(COMPLETIONS), SOLUTIONS) == [1.0, 0.0, 0.0, 1.0]
    got, _ = score(bound(trl_rewards.think_format_reward), rows)
    assert got == trl_rewards.think_format_reward(conversational(COMPLETIONS)) == [1.0, 0.0, 0.0, 0.0]
    overlong = trl_rewards.get_soft_overlong_punishment(max_completion_len=8, soft_punish_cache=4)
    ids = [[1] * n for n in (2, 5, 7, 12)]
    got, _ = score(bound(overlong), rows, ids=ids)
    assert got == overlong(completion_ids=ids) == [0.0, -0.25, -0.75, -1.0]


def test_the_convention_is_read_from_the_signature():
    def rlvr_style(prompts, completions, completion_ids, *, answer, strict: bool = True):
        return [1.0] * len(completions)

    def trl_style(completions, solution, log_extra=None, **kwargs):  # 3 positionals, TRL's names
        return [1.0] * len(completions)

    assert reward_signature(rlvr_style) == (("answer",), (), {"strict": True}, False, "rlvr")
    assert reward_signature(trl_style) == (("solution",), (), {}, True, "trl")  # log_extra: TRL's, not a column
    assert reward_signature(lambda completion_ids, **kw: [])[4] == "trl"
    assert reward_signature(lambda p, c, ids, *, gold: [])[4] == "rlvr"  # rlvr's, named otherwise
    assert reward_signature(lambda prompts, completions, ids, *, gold: [])[4] == "rlvr"
    with pytest.raises(TypeError, match="a reward takes"):
        reward_signature(lambda x: [])


def test_plain_completions_columns_and_options_by_keyword():
    seen = {}

    def reward_len(completions, answer, prompts=None, scale: float = 1.0, **kwargs):
        seen.update(kwargs, prompts=prompts)
        return [-scale * abs(20 - len(c)) for c in completions]

    rows = [{"answer": "4", "subject": "arith"}, {"answer": "5", "subject": "arith"}]
    got, _ = score(bound(reward_len, conversational=False, scale=0.5), rows, completions=["x" * 10, "y" * 25])
    assert got == [-5.0, -2.5]
    # TRL passes every other column and completion_ids by keyword; rlvr passes the same
    assert seen["subject"] == ["arith", "arith"] and seen["completion_ids"] == [[1], [1, 1, 1, 1]]
    assert seen["prompts"] == ["Q?", "Q?"] and "log_extra" not in seen


def test_a_raising_trl_reward_gives_none_for_its_records_only():
    def picky(completions, **kwargs):
        return [1.0 if c[0]["content"] != "no box at all" else 1 / 0 for c in completions]

    got, infos = score(bound(picky), [{}] * 4)
    assert got == [1.0, 1.0, None, 1.0] and "ZeroDivisionError" in infos[2]["error"]


def test_a_recipe_names_a_trl_reward_by_module_and_function(tmp_path, monkeypatch, trl_rewards):
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent('''
        from trl.rewards import get_soft_overlong_punishment

        overlong = get_soft_overlong_punishment(max_completion_len=8, soft_punish_cache=4)

        def exact(completions, answer, **kwargs):
            """1.0 when the completion is the answer."""
            return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer)]
    '''))
    monkeypatch.chdir(tmp_path)
    registry = Registry()
    spec = registry.reward("my_rewards:exact")
    assert (spec.convention, spec.columns, spec.plugin, spec.description) == \
        ("trl", ("answer",), "module my_rewards", "1.0 when the completion is the answer.")
    got, _ = score(BoundReward(spec, conversational=True), [{"answer": "4"}, {"answer": "5"}], completions=["4", "4 "])
    assert got == [1.0, 0.0]
    assert registry.reward("trl.rewards:think_format_reward").convention == "trl"
    assert registry.reward("my_rewards:overlong").convention == "trl"
    with pytest.raises(RlvrError, match="'my_rewards' has no function 'exakt' \\(did you mean 'exact'\\?\\)"):
        registry.reward("my_rewards:exakt")
    with pytest.raises(RlvrError, match="cannot import 'no_such_module'"):
        registry.reward("no_such_module:f")
