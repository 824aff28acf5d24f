"""Calling rewards: failures become None (counted), async works, weights combine."""

import asyncio

import pytest

from rlvr import RlvrError, Score
from rlvr.plugins import RewardSpec, reward_signature
from rlvr.rewards import BoundReward, score_batch


def bound(fn, name, weight=1.0, **options):
    columns, optional, opts, any_ = reward_signature(fn)
    return BoundReward(RewardSpec(name, fn, "", "test", "0", columns, optional, opts, any_), weight, options)


def exact(prompts, completions, completion_ids, *, answer):
    return [Score(float(c == a), {"gold": a}) for c, a in zip(completions, answer)]


def length(prompts, completions, completion_ids):
    return [len(c) / 10 for c in completions]


def boom(prompts, completions, completion_ids):
    raise RuntimeError("kaboom")


async def slow_async(prompts, completions, completion_ids):
    await asyncio.sleep(0.01)
    return [0.5] * len(completions)


ROWS = [{"answer": "4"}, {"answer": "5"}]


def run(*rewards):
    return score_batch(list(rewards), ["p", "p"], ["4", "6"], [[1], [2]], ROWS)


def test_weighted_sum_and_infos():
    out = run(bound(exact, "exact", 2.0), bound(length, "len", 0.5))
    assert out.total == [2.0 + 0.05, 0.0 + 0.05]
    assert out.infos["exact"][0] == {"gold": "4"}


def test_raising_reward_gives_none_and_is_counted(caplog):
    out = run(bound(exact, "exact"), bound(boom, "boom"))
    assert out.values["boom"] == [None, None]
    assert out.total == [None, None]
    assert out.errors["boom"] == 2
    assert "kaboom" in out.infos["boom"][0]["error"]
    assert "reward 'boom' failed" in caplog.text


def test_zero_weight_reward_does_not_poison_total():
    out = run(bound(exact, "exact"), bound(boom, "boom", 0.0))
    assert out.total == [1.0, 0.0]


def test_async_reward():
    assert run(bound(slow_async, "a")).total == [0.5, 0.5]


@pytest.mark.parametrize("bad", [[1.0], [float("nan"), 1.0], ["x", 1.0]])
def test_malformed_return_values(bad):
    out = run(bound(lambda p, c, i: bad, "bad"))
    assert out.values["bad"][0] is None
    assert out.unscorable() >= 1


def test_missing_column_is_a_user_error():
    with pytest.raises(RlvrError, match="needs column 'answer'"):
        score_batch([bound(exact, "exact")], ["p"], ["4"], [None], [{"question": "?"}])


def test_options_are_passed():
    def scaled(prompts, completions, completion_ids, *, factor: float = 1.0):
        return [factor] * len(completions)

    assert run(bound(scaled, "s", factor=3.0)).total == [3.0, 3.0]


def test_completion_text_reads_strings_and_chat_messages():
    from rlvr.rewards import completion_text

    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert completion_text(chat) == "a"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}]) == "xy"
    assert completion_text({"content": "z"}) == "z"
    assert completion_text([{"content": "m"}]) == "m"  # no role: the last message
    assert completion_text(None) == "" and completion_text("plain") == "plain"
