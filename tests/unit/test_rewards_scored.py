"""The one sample-and-score path (rlvr.rewards.scored) that training's rollouts and evaluation share:
K completions a prompt, scored in one batch, consumed group by group; an episode whose
environment failed left unscored; nothing sampled for no prompts."""

from __future__ import annotations

from rlvr.host.registry import RewardSpec
from rlvr.rewards.runner import BoundReward
from rlvr.rewards.scored import sample_and_score
from rlvr.sampling.prompts import Prompt
from rlvr.sampling.samplers import Completion


class Sampler:
    """Completion ``j`` of a prompt: its first id then ``j``, as text; records each call's options."""

    def __init__(self):
        self.calls = []

    def generate(self, prompt_ids, *, n, **options):
        self.calls.append((prompt_ids, n, options))
        return [[Completion(f"{p[0]}.{j}", [p[0], j], truncated=False) for j in range(n)] for p in prompt_ids]


def bound(fn, weight=1.0, columns=()):
    return BoundReward(RewardSpec(fn.__name__, fn, "", "test", "0", columns, (), {}, False), weight=weight)


def last_digit(prompts, completions, completion_ids):
    return [float(c[-1]) for c in completions]


def by_row(prompts, completions, completion_ids, answer):
    return [1.0 if c.startswith(a) else 0.0 for c, a in zip(completions, answer)]


def prompts(*firsts, prefix=""):
    return [Prompt([f, 100], f"prompt {f}", prefix=prefix) for f in firsts]


def test_groups_in_prompt_order_with_rows_prefix_and_options():
    sampler = Sampler()
    batch = sample_and_score(sampler, [bound(last_digit), bound(by_row, 0.5, ("answer",))], prompts(7, 8, prefix="A: "),
                             [{"answer": "A: 7"}, {"answer": "x"}], n=3, temperature=0.5, seed=11, logprobs=True)
    assert sampler.calls == [([[7, 100], [8, 100]], 3, {"temperature": 0.5, "seed": 11, "logprobs": True})]
    assert [c.text for c in batch.completions] == ["A: 7.0", "A: 7.1", "A: 7.2", "A: 8.0", "A: 8.1", "A: 8.2"]
    assert [c.token_ids for c in batch.completions][:2] == [[7, 0], [7, 1]]  # the prefix is prompt, not sampled
    assert batch.rows == [{"answer": "A: 7"}] * 3 + [{"answer": "x"}] * 3 and batch.episodes is None
    groups = list(batch.groups())
    assert [g.values["by_row"] for g in groups] == [[1.0] * 3, [0.0] * 3]
    assert groups[0].total == [0.5, 1.5, 2.5] and groups[1].total == [0.0, 1.0, 2.0]
    assert [c.text for c in groups[1].completions] == ["A: 8.0", "A: 8.1", "A: 8.2"]
    assert set(groups[0].infos) == {"last_digit", "by_row"} and batch.time_generate >= 0 and batch.time_score >= 0


class Episodes:
    """An episode runner whose environment fails on the rows marked ``fail``."""

    def sample(self, sampler, rows, prompt_ids, *, n, **options):
        outs = sampler.generate(prompt_ids, n=n, **options)
        flat = [{**row, "env_state": {"error": "boom"} if row.get("fail") else {}} for row in rows for _ in range(n)]
        return outs, flat, {"episodes": float(len(rows) * n), "time_env": 0.5}


def test_failed_episodes_lose_their_total_and_the_named_rewards():
    rewards = [bound(last_digit), bound(by_row, 0.0, ("answer",))]
    rows = [{"answer": "7"}, {"answer": "8", "fail": True}]
    training = sample_and_score(Sampler(), rewards, prompts(7, 8), rows, n=2, episodes=Episodes())
    assert training.scores.total == [0.0, 1.0, None, None] and training.episodes["episodes"] == 4.0
    assert training.scores.values["last_digit"] == [0.0, 1.0, 0.0, 1.0]  # training keeps the values
    evaluation = sample_and_score(Sampler(), rewards, prompts(7, 8), rows, n=2, episodes=Episodes(),
                                  unscore=["last_digit"])
    assert evaluation.scores.values["last_digit"] == [0.0, 1.0, None, None]
    assert evaluation.scores.values["by_row"] == [1.0, 1.0, 1.0, 1.0]
    assert evaluation.scores.unscored().env_failed == 2


def test_no_prompts_samples_and_scores_nothing():
    def never(prompts, completions, completion_ids):
        raise AssertionError("scored an empty batch")

    sampler = Sampler()
    plain = sample_and_score(sampler, [bound(never)], [], [], n=4)
    assert sampler.calls == [] and plain.completions == [] and list(plain.groups()) == []
    assert plain.scores.total == [] and plain.scores.values == {"never": []} and plain.episodes is None
    episodes = sample_and_score(sampler, [bound(never)], [], [], n=4, episodes=Episodes())
    assert sampler.calls == [] and episodes.episodes["episodes"] == 0.0  # every rank reports the same names
