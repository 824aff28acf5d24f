"""Calling rewards: failures become None for the records they spoil (counted), columns are
passed per record, options are checked, async works, weights combine."""

import asyncio
import logging

import pytest

from rlvr import RlvrError, Score
from rlvr.host.registry import RewardSpec, reward_signature
from rlvr.rewards.runner import BoundReward, Unscored, score_batch


def bound(fn, name, weight=1.0, **options):
    columns, optional, opts, any_, convention = reward_signature(fn)
    spec = RewardSpec(name, fn, "", "test", "0", columns, optional, opts, any_, convention=convention)
    return BoundReward(spec, weight, options)


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
    with caplog.at_level(logging.DEBUG, logger="rlvr.rewards"):
        out = run(bound(exact, "exact"), bound(boom, "boom"))
    assert out.values["boom"] == [None, None]
    assert out.total == [None, None]
    assert out.errors["boom"] == 2
    assert "kaboom" in out.infos["boom"][0]["error"]
    # a batch's detail is at debug level only: whoever scores batches reports them once (Unscored)
    assert [r.levelno for r in caplog.records] == [logging.DEBUG] and "reward 'boom' failed" in caplog.text
    assert out.unscored().line() == "reward 'boom' could not score 2 of 2 samples (RuntimeError: kaboom)"


def test_unscored_adds_batches_up_and_keeps_the_first_reason():
    """One line for a step of many batches: per reward, its count and first reason, shortened."""
    def long_boom(prompts, completions, completion_ids):
        raise ValueError("x" * 500)

    total = Unscored()
    for _ in range(3):
        total.add(run(bound(long_boom, "long", 0.1), bound(lambda p, c, i: [None, 1.0], "some")).unscored())
    assert total.records == 6 and total.unscorable == 6 and total.counts == {"long": 6, "some": 3}
    line = total.line()
    assert line.startswith("reward 'long' could not score 6 of 6 samples (ValueError: xxx")
    assert "...); reward 'some' could not score 3 of 6 samples (returned None)" in line
    assert len(line) < 300
    assert total.line(["some"]) == "reward 'some' could not score 3 of 6 samples (returned None)"
    why = run(bound(lambda p, c, i: [Score(None, {"why": "no gold answer"}), 1.0], "why")).unscored()
    assert why.line() == "reward 'why' could not score 1 of 2 samples (returned None: no gold answer)"


@pytest.mark.parametrize("mode, expected", [
    ("void", [None, None]),  # today's default: any weighted reward's None voids the sample
    ("skip", [1.0, 0.0]),  # TRL's nansum: the rewards that scored, each with its weight
    ("zero", [1.0, 0.0]),
])
def test_when_unscored_decides_the_total(mode, expected):
    shaping = bound(boom, "boom", 0.1)
    shaping.when_unscored = mode
    assert run(bound(exact, "exact"), shaping).total == expected


def test_when_unscored_skip_leaves_a_sample_none_scored_unscorable_and_zero_counts_it():
    half = bound(lambda p, c, i: [None, 0.5], "half", 2.0)
    for mode, expected in [("skip", [None, 1.0]), ("zero", [0.0, 1.0])]:
        a, b = bound(boom, "boom", 0.1), bound(lambda p, c, i: [None, 0.5], "half", 2.0)
        a.when_unscored = b.when_unscored = mode
        assert run(a, b).total == expected, mode
    mixed = bound(boom, "boom", 0.1)
    mixed.when_unscored = "skip"
    assert run(mixed, half).total == [None, 1.0]  # half is void: its None voids the first sample


def test_when_unscored_is_checked():
    with pytest.raises(RlvrError, match="when_unscored must be one of void, skip, zero"):
        BoundReward(bound(exact, "exact").spec, 1.0, {}, {}, False, "nansum")


def test_numpy_and_torch_scalars_are_numbers():
    import fractions
    from decimal import Decimal

    import numpy as np
    import torch

    values = [np.float32(0.5), np.float64(0.25), np.int64(2), np.bool_(True), np.array(1.5), torch.tensor(0.75),
              torch.tensor(True), fractions.Fraction(1, 4), Decimal("0.5"), np.float16(1.0)]
    out = score_batch([bound(lambda p, c, i: values, "np")], ["p"] * len(values), ["c"] * len(values),
                      [None] * len(values), [{}] * len(values))
    assert out.values["np"] == [0.5, 0.25, 2.0, 1.0, 1.5, 0.75, 1.0, 0.25, 0.5, 1.0]
    assert all(type(v) is float for v in out.values["np"]) and not out.errors


@pytest.mark.parametrize("bad, why", [
    ("np.array([1.0, 2.0])", "reward returned a ndarray of shape (2,), not one number"),
    ("torch.tensor([1.0])", "reward returned a Tensor of shape (1,), not one number"),
    ("np.float32('nan')", "reward returned nan, not a finite number"),
    ("torch.tensor(float('inf'))", "reward returned inf, not a finite number"),
    ("'0.5'", "reward returned str '0.5', not a number"),
    ("1j", "reward returned complex 1j, not a number"),
    ("np.array('a')", "reward returned a ndarray of shape (), not one number"),
])
def test_what_is_not_one_finite_number_is_refused_in_words_that_fit_it(bad, why):
    import numpy as np  # noqa: F401 - used by eval
    import torch  # noqa: F401

    value = eval(bad)
    out = run(bound(lambda p, c, i: [value, 1.0], "bad"))
    assert out.values["bad"] == [None, 1.0] and out.infos["bad"][0]["error"] == why


def test_values_beyond_max_abs_are_refused_and_totals_stay_finite():
    """A service answered 1e200 and rlvr train died in the advantages (OverflowError): a value
    beyond ±max_abs (default 1e6) is the reward's error, and a total that overflows is None."""
    from rlvr.recipe.spec import Recipe, RewardEntry
    from rlvr.rewards.runner import DEFAULT_MAX_ABS
    from rlvr.training.algo import rloo_advantages

    out = run(bound(lambda p, c, i: [1e200, -1e6], "huge"))
    assert out.values["huge"] == [None, -1e6] and out.total == [None, -1e6]
    assert out.infos["huge"][0]["error"] == "reward returned 1e+200, beyond ±1e+06 (its max_abs)"
    small = bound(lambda p, c, i: [3.0, 2.0], "small")
    small.max_abs = 2.5
    assert run(small).values["small"] == [None, 2.0]
    assert run(bound(lambda p, c, i: [1e6, 1e6], "big", 1e303)).total == [None, None]  # weight x value overflows
    assert rloo_advantages([1e6, -1e6, 1e6, -1e6], 2)[0] == [2e6, -2e6, 2e6, -2e6]
    with pytest.raises(ValueError, match="not finite"):
        rloo_advantages([float("inf"), 1.0], 2)
    # the recipe's setting and an entry's own
    recipe = Recipe(name="r", task={"name": "arithmetic"}, rewards={"math": 1.0, "format": {"max_abs": 5}})
    assert recipe.max_abs_reward == DEFAULT_MAX_ABS == 1e6 and recipe.rewards["format"].max_abs == 5.0
    for bad in ({"max_abs_reward": 0}, {"max_abs_reward": float("inf")}):
        with pytest.raises(ValueError):
            Recipe(name="r", task={"name": "arithmetic"}, rewards={"math": 1.0}, **bad)
    with pytest.raises(ValueError):
        RewardEntry(max_abs=-1)


def test_zero_weight_reward_does_not_poison_total():
    out = run(bound(exact, "exact"), bound(boom, "boom", 0.0))
    assert out.total == [1.0, 0.0]


def test_async_reward():
    assert run(bound(slow_async, "a")).total == [0.5, 0.5]


@pytest.mark.parametrize("bad", [[float("nan"), 1.0], ["x", 1.0], [Score(1.0, "not a mapping"), 1.0]])
def test_malformed_return_values_spoil_only_their_record(bad):
    out = run(bound(lambda p, c, i: bad, "bad"))
    assert out.values["bad"] == [None, 1.0]
    assert out.infos["bad"][0]["error"].startswith("reward returned")
    assert out.errors["bad"] == 1 and out.unscorable() == 1


def test_wrong_count_for_the_batch_is_retried_record_by_record():
    """Values that cannot be matched to the records: each record is scored alone."""
    def first_only(prompts, completions, completion_ids):
        return [len(completions[0])]

    out = run(bound(first_only, "first"))
    assert out.values["first"] == [1.0, 1.0] and out.errors["first"] == 0

    out = run(bound(lambda p, c, i: [], "none"))  # wrong alone too: None with the reason
    assert out.values["none"] == [None, None] and out.errors["none"] == 2
    assert out.infos["none"][1]["error"] == "ValueError: returned 0 values for 1 completions"


def costly(prompts, completions, completion_ids, *, answer):
    """Asks a service for each record it has not seen ("cached" for a repeated completion), and
    raises for a batch holding a record whose answer is "bad"."""
    if "bad" in answer and len(answer) > 1:
        raise ConnectionError("the batch failed")
    out, seen = [], set()
    for c in completions:
        if c in seen:
            out.append(Score(0.5, {}, {"cache_hits": 1}))
        else:
            seconds = len(c) / 10
            out.append(Score(1.0, {}, {"requests": 1, "tokens": 10 * len(c), "seconds_mean": seconds,
                                       "seconds_max": seconds, "flag": True}))
        seen.add(c)
    return out


def test_a_reward_s_metrics_are_summed_over_the_batch_by_name():
    """Sums of the records that reported each name; ``_max`` the largest; ``_mean`` counted too,
    so the step can divide by the records that reported it (rlvr.runs.metrics.reward_metrics)."""
    rows = [{"answer": "4"}] * 4
    out = score_batch([bound(costly, "svc"), bound(length, "len")], ["p"] * 4, ["ab", "ab", "abcd", "a"],
                      [None] * 4, rows)
    assert out.values["svc"] == [1.0, 0.5, 1.0, 1.0] and not out.infos["svc"][1]
    assert out.metrics == {  # the length reward reports none: no names of its own
        "reward_metric/svc/requests": 3.0, "reward_metric/svc/cache_hits": 1.0, "reward_metric/svc/tokens": 70.0,
        "reward_metric/svc/seconds_mean": pytest.approx(0.7), "reward_metric/svc/seconds_mean/n": 3.0,
        "reward_metric/svc/seconds_max": 0.4, "reward_metric/svc/flag": 3.0}
    # a batch that failed is scored record by record: every record's own metrics still count
    retried = score_batch([bound(costly, "svc")], ["p"] * 3, ["ab", "ab", "x"], [None] * 3,
                          [{"answer": "4"}, {"answer": "4"}, {"answer": "bad"}])
    assert retried.values["svc"] == [1.0, 1.0, 1.0] and retried.metrics["reward_metric/svc/requests"] == 3.0
    assert "reward_metric/svc/cache_hits" not in retried.metrics  # alone, each record asked for itself
    assert run(bound(exact, "exact")).metrics == {}


@pytest.mark.parametrize("metrics, said", [
    ({"ok": 1, "a/b": 2}, "metric name 'a/b' is not 1 to 64 letters, digits or _.-"),
    ({"ok": 1, "": 2}, "metric name '' is not 1 to 64 letters, digits or _.-"),
    ({"ok": 1, 7: 2}, "metric name 7 is not 1 to 64 letters, digits or _.-"),
    ({"ok": 1, "nan": float("nan")}, "metric 'nan' is nan, not a finite number"),
    ({"ok": 1, "text": "3"}, "metric 'text' is '3', not a finite number"),
    ([("ok", 1)], "its Score.metrics is a list, not a mapping of names to numbers"),
])
def test_a_metric_that_is_not_one_is_left_out_with_one_warning_and_the_score_stands(caplog, metrics, said):
    def reporting(prompts, completions, completion_ids):
        return [Score(1.0, {"why": "fine"}, metrics) for _ in completions]

    name = f"reporting{abs(hash(said))}"  # warned once per reward and reason, in this process
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards"):
        out = run(bound(reporting, name))
        again = run(bound(reporting, name))
    assert out.values[name] == [1.0, 1.0] and not out.errors and out.infos[name][0] == {"why": "fine"}
    assert [r.getMessage() for r in caplog.records] == [f"reward {name!r}: {said}: left out of the metrics"]
    expected = {} if isinstance(metrics, list) else {f"reward_metric/{name}/ok": 2.0}
    assert out.metrics == again.metrics == expected


def picky(prompts, completions, completion_ids, *, answer):
    """Raises for any batch holding a record whose answer is "bad"."""
    if "bad" in answer:
        raise ZeroDivisionError(f"cannot score {answer.index('bad')}")
    return [float(c == a) for c, a in zip(completions, answer)]


def test_one_raising_record_spoils_only_itself(caplog):
    rows = [{"answer": "bad" if i == 37 else str(i)} for i in range(256)]
    completions = [str(i) if i % 2 else "x" for i in range(256)]
    with caplog.at_level(logging.DEBUG, logger="rlvr.rewards"):
        out = score_batch([bound(picky, "picky")], ["p"] * 256, completions, [None] * 256, rows, first_record=1001)
    values = out.values["picky"]
    assert values[37] is None and out.infos["picky"][37] == {"error": "ZeroDivisionError: cannot score 0"}
    assert values[:37] + values[38:] == [float(i % 2) for i in range(256) if i != 37]
    assert out.errors["picky"] == 1 and out.unscorable() == 1
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1  # one line per batch, naming the record in the whole input
    assert "reward 'picky' failed on 1 of 256 records" in warnings[0] and "record 1038: ZeroDivisionError" in warnings[0]


def test_async_reward_is_retried_record_by_record():
    async def picky_async(prompts, completions, completion_ids, *, answer):
        await asyncio.sleep(0)
        return picky(prompts, completions, completion_ids, answer=answer)

    out = score_batch([bound(picky_async, "a")], ["p", "p"], ["1", "2"], [None, None], [{"answer": "1"}, {"answer": "bad"}])
    assert out.values["a"] == [1.0, None] and out.errors["a"] == 1


def seen(prompts, completions, completion_ids, *, setup=None, extra=None):
    """Echoes the optional columns it got, per record."""
    return [Score(1.0, {"setup": None if setup is None else setup[i], "extra_passed": extra is not None})
            for i in range(len(completions))]


def test_optional_columns_are_per_record():
    rows = [{"setup": "import math"}, {}, {"setup": ""}]
    out = score_batch([bound(seen, "seen")], ["p"] * 3, ["a", "b", "c"], [None] * 3, rows)
    assert [i["setup"] for i in out.infos["seen"]] == ["import math", None, ""]
    assert not any(i["extra_passed"] for i in out.infos["seen"])  # no record has it: not passed


def test_kwargs_reward_gets_every_column_any_record_has():
    def every(prompts, completions, completion_ids, *, answer, **columns):
        return [Score(1.0, {k: v[i] for k, v in sorted(columns.items())}) for i in range(len(completions))]

    rows = [{"answer": "1", "a": 1, "prompts": "a column named like an argument"}, {"answer": "2", "b": 2}]
    out = score_batch([bound(every, "every")], ["p", "p"], ["1", "2"], [None, None], rows)
    assert out.infos["every"] == [{"a": 1, "b": None}, {"a": None, "b": 2}]


def test_missing_column_names_the_record_in_the_whole_input():
    rows = [{"answer": "1"}, {"question": "?"}]
    with pytest.raises(RlvrError, match="^record 258: reward 'exact' needs column 'answer'$"):
        score_batch([bound(exact, "exact")], ["p", "p"], ["1", "2"], [None, None], rows, first_record=257)


def test_options_are_checked_when_bound():
    def opts(prompts, completions, completion_ids, *, factor: float = 1.0, strict: bool = False):
        return [factor] * len(completions)

    assert bound(opts, "o", factor=3).options == {"factor": 3.0}  # an int for a float: converted
    with pytest.raises(RlvrError, match="^reward 'o' option strict: 2 is not true or false$"):
        bound(opts, "o", strict=2)
    with pytest.raises(RlvrError, match="has no option 'facter' \\(did you mean 'factor'\\?\\)"):
        bound(opts, "o", facter=2.0)


def test_missing_column_is_a_user_error():
    with pytest.raises(RlvrError, match="^record 1: reward 'exact' needs column 'answer'$"):
        score_batch([bound(exact, "exact")], ["p"], ["4"], [None], [{"question": "?"}])


def test_options_are_passed():
    def scaled(prompts, completions, completion_ids, *, factor: float = 1.0):
        return [factor] * len(completions)

    assert run(bound(scaled, "s", factor=3.0)).total == [3.0, 3.0]


def test_completion_text_reads_strings_and_chat_messages():
    from rlvr.kit import completion_text

    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert completion_text(chat) == "a"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}]) == "xy"
    assert completion_text({"content": "z"}) == "z"
    assert completion_text([{"content": "m"}]) == "m"  # no role: the last message
    assert completion_text(None) == "" and completion_text("plain") == "plain"
