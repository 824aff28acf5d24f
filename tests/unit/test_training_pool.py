"""The learnable-prompt pool (rlvr.training.pool.PromptPool, data.pool): retiring prompts whose
groups were all solved or all failed, revisiting them, the all-retired fallback, per-rank shards,
exact resume through the checkpoint's JSON; its place in the rollout and the metrics."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

from rlvr import RlvrError
from rlvr.host.registry import RewardSpec
from rlvr.recipe.spec import DataConfig, DynamicSamplingConfig, SamplingConfig
from rlvr.rewards.runner import BoundReward
from rlvr.runs.metrics import step_row
from rlvr.sampling.prompts import Prompt
from rlvr.sampling.samplers import Completion
from rlvr.training.checkpoint import RankState, decode_rank_state, encode_rank_state
from rlvr.training.pool import PromptPool, check_state, outcome, prompt_source
from rlvr.training.report import rollout_sums
from rlvr.training.rollout import PromptStream, RolloutProducer

SOLVED, FAILED, MIXED = [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]


def epochs(size: int, seed: int, count: int) -> list[list[int]]:
    """The plain stream's first ``count`` epochs (one rank)."""
    stream = PromptStream(size, seed)
    return [stream.take(size) for _ in range(count)]


# ---------------------------------------------------------------------------- classifying a group
def test_outcome_of_a_group():
    assert outcome(SOLVED, 1.0) == "solved" and outcome(FAILED, 1.0) == "failed" and outcome(MIXED, 1.0) == "mixed"
    assert outcome([0.5, 0.5], 1.0) == "failed" and outcome([0.5, 0.5], 0.5) == "solved"  # the threshold decides
    assert outcome([1.0, None, 1.0], 1.0) == "solved"  # unscorable samples are left out
    assert outcome([1.0, None], 1.0) is None and outcome([None, None], 1.0) is None  # no evidence


# ---------------------------------------------------------------------------- retiring and revisiting
def test_one_rank_with_nothing_retired_draws_the_plain_stream():
    pool = PromptPool(7, seed=3)
    assert pool.take(21) == PromptStream(7, seed=3).take(21) and pool.position == 21


@pytest.mark.parametrize("rewards, kind", [(SOLVED, "solved"), (FAILED, "failed")])
def test_a_prompt_all_solved_or_failed_is_skipped_for_revisit_after_epochs(rewards, kind):
    order = epochs(6, 0, 5)
    pool = PromptPool(6, seed=0, retire_after=1, revisit_after=2)
    assert pool.take(6) == order[0]
    gone = order[0][2]
    pool.record(gone, rewards)
    for other in order[0][:2] + order[0][3:]:
        pool.record(other, MIXED)
    figures = pool.figures()
    assert (figures["pool_active"], figures[f"pool_retired_{kind}"], figures["pool_prompts"]) == (5, 1, 6)
    # it sits out epochs 1 and 2 (the stream passes it by), is re-admitted, and drawn in epoch 3
    assert pool.take(5) == [i for i in order[1] if i != gone] and pool.figures()["pool_revisited"] == 0
    assert pool.take(5) == [i for i in order[2] if i != gone] and pool.figures()["pool_revisited"] == 1
    assert pool.figures()["pool_active"] == 6
    assert pool.take(6) == order[3]
    assert pool.position == 24  # skipped draws count: the next epoch starts where it should
    assert pool.take(6) == order[4]


def test_retire_after_counts_consecutive_groups_of_one_kind():
    pool = PromptPool(4, seed=0, retire_after=2, revisit_after=1)
    for rewards in (SOLVED, MIXED, SOLVED, FAILED):  # a mixed group, or one of the other kind, starts over
        pool.record(2, rewards)
    assert pool.streaks[2] == ("failed", 1) and not pool.retired
    pool.record(2, FAILED)
    assert pool.streaks[2] == ("failed", 2) and pool.retired == {2: 1}
    pool.record(3, [1.0, None])  # too few scorable samples: no evidence, nothing changes
    pool.record(2, [None, 0.0])
    assert 3 not in pool.streaks and pool.retired == {2: 1}


def test_a_revisit_that_is_again_all_solved_retires_at_once_and_a_mixed_one_keeps_it():
    order = epochs(3, 1, 6)
    pool = PromptPool(3, seed=1, retire_after=2, revisit_after=1)
    pool.record(0, SOLVED)
    pool.record(0, SOLVED)
    assert 0 in pool.retired
    assert pool.take(2) == [i for i in order[0] if i != 0]  # epoch 0: passed by once
    assert pool.take(3) == order[1] and 0 not in pool.retired  # epoch 1: revisited
    pool.record(0, SOLVED)  # the history is kept: one more solved group retires it again
    assert pool.retired == {0: 1}
    assert pool.take(2) == [i for i in order[2] if i != 0]
    assert pool.take(3) == order[3]
    pool.record(0, MIXED)  # learnable again: stays in
    assert pool.take(6) == order[4] + order[5]


def test_when_every_prompt_is_retired_the_oldest_retired_are_drawn():
    pool = PromptPool(3, seed=0, retire_after=1, revisit_after=None)  # None: never revisited on its own
    for index in (2, 0, 1):
        pool.record(index, FAILED if index else SOLVED)
    position = pool.position
    assert pool.take(2) == [2, 0]  # oldest-retired first, distinct within a call; no endless loop
    figures = pool.figures()
    assert figures["pool_readmitted"] == 2 and figures["pool_active"] == 0 and pool.position == position
    pool.record(2, SOLVED)  # still solved: retired again, now the newest
    assert pool.take(1) == [0] and pool.figures()["pool_readmitted"] == 1
    pool.record(0, MIXED)  # learnable again: back in the stream, drawn first; then the retired, oldest first
    assert pool.take(4) == [0, 1, 2, 0] and pool.figures()["pool_readmitted"] == 2  # only then a duplicate
    assert pool.take(1) == [0] and pool.figures()["pool_readmitted"] == 0


def test_too_few_prompts_left_for_a_step_are_topped_up_with_the_oldest_retired():
    order = epochs(5, 2, 3)
    pool = PromptPool(5, seed=2, retire_after=1, revisit_after=None)
    left = order[0][4]
    for index in order[0][:4]:
        pool.record(index, SOLVED)
    assert pool.take(3) == [left, *order[0][:2]]  # the one left, then the oldest-retired: no duplicates
    assert pool.figures()["pool_readmitted"] == 2 and pool.position == 5
    assert pool.take(1) == [left]  # a new call: the one left comes first again


def test_a_lent_prompt_without_evidence_goes_to_the_back_of_the_line():
    pool = PromptPool(3, seed=0, retire_after=1)
    for index in (1, 2, 0):
        pool.record(index, SOLVED)
    assert pool.take(1) == [1]
    pool.record(1, [None, None, 1.0])  # unscorable: no evidence; still retired, but not lent forever
    assert pool.take(3) == [2, 0, 1] and pool.retired == {2: 2, 0: 2, 1: 2}


def test_ranks_own_disjoint_shards_by_row():
    pools = [PromptPool(11, seed=4, rank=r, world=3) for r in range(3)]
    for rank, pool in enumerate(pools):
        first, second = pool.take(len(pool.shard)), pool.take(len(pool.shard))
        assert sorted(first) == sorted(second) == list(range(rank, 11, 3))  # an epoch of its own shard, each time
    with pytest.raises(ValueError, match="not in rank 1's shard"):
        pools[1].record(0, SOLVED)
    with pytest.raises(RlvrError, match="cannot give each of 3 ranks one"):
        PromptPool(2, seed=0, rank=0, world=3)


# ---------------------------------------------------------------------------- state and resume
def play(pool: PromptPool, steps: int, visits: dict, groups: int = 2) -> tuple[list[list[int]], dict]:
    """A deterministic stand-in for training: row i's n-th group is solved, failed or mixed by a
    rule of (i, n) that lets prompts retire, come back and change. (draws, summed figures)."""
    draws, totals = [], {"pool_revisited": 0, "pool_readmitted": 0, "retired_max": 0}
    for _ in range(steps):
        taken = pool.take(groups)
        for index in taken:
            n = visits[index] = visits.get(index, 0) + 1
            pool.record(index, [SOLVED, FAILED, MIXED][(index * 7 + n // 3) % 3] if n % 5 else MIXED)
        draws.append(taken)
        figures = pool.figures()
        totals = {"pool_revisited": totals["pool_revisited"] + figures["pool_revisited"],
                  "pool_readmitted": totals["pool_readmitted"] + figures["pool_readmitted"],
                  "retired_max": max(totals["retired_max"], len(pool.shard) - figures["pool_active"])}
    return draws, totals


@pytest.mark.parametrize("rank, world", [(0, 1), (1, 2)])
def test_resume_from_a_saved_state_draws_what_the_uninterrupted_pool_draws(rank, world):
    options = dict(retire_after=1, revisit_after=1, pass_threshold=1.0)
    straight, seen = PromptPool(13, 5, rank, world, **options), {}
    (before, _), (after, totals) = play(straight, 20, seen), play(straight, 40, seen)
    # not a trivial sequence: prompts were retired and came back
    assert totals["retired_max"] >= 2 and totals["pool_revisited"] >= 2
    first, seen_first = PromptPool(13, 5, rank, world, **options), {}
    assert play(first, 20, seen_first)[0] == before
    saved = json.loads(json.dumps(first.state()))  # through JSON, as the checkpoint keeps it
    resumed = PromptPool.from_state(saved, 13, 5, rank, world, **options)
    assert play(resumed, 40, seen_first)[0] == after
    assert resumed.state() == straight.state()


def test_state_is_checked_when_loaded():
    pool = PromptPool(6, seed=0, rank=1, world=2, retire_after=1)
    pool.take(3)
    pool.record(1, SOLVED)
    pool.record(3, MIXED)
    pool.record(5, FAILED)
    state = pool.state()
    assert state["streaks"] == [[1, "solved", 1], [5, "failed", 1]] and state["retired"] == [[1, 2], [5, 2]]
    with pytest.raises(ValueError, match="rank 1 of 2's pool over 6 prompts, not rank 1 of 2's over 8"):
        PromptPool.from_state(state, 8, 0, 1, 2)
    with pytest.raises(ValueError, match="not rank 0 of 2"):
        PromptPool.from_state(state, 6, 0, 0, 2)


BAD_STATES = {
    "version": lambda d: d.update(version=2),
    "not-a-dict": lambda d: d.clear(),
    "negative-position": lambda d: d.update(position=-1),
    "rank-out-of-world": lambda d: d.update(rank=2),
    "size-zero": lambda d: d.update(size=0),
    "other-ranks-row": lambda d: d["streaks"].append([2, "solved", 1]),
    "row-past-size": lambda d: d["streaks"].append([7, "solved", 1]),
    "unknown-kind": lambda d: d["streaks"].__setitem__(0, [1, "maybe", 1]),
    "zero-count": lambda d: d["streaks"].__setitem__(0, [1, "solved", 0]),
    "bool-count": lambda d: d["streaks"].__setitem__(0, [1, "solved", True]),
    "two-streaks": lambda d: d["streaks"].append([1, "failed", 1]),
    "retired-without-streak": lambda d: d["retired"].append([3, 1]),
    "retired-twice": lambda d: d["retired"].append([1, 0]),
    "negative-wait": lambda d: d["retired"].__setitem__(0, [1, -1]),
    "zero-wait": lambda d: d["retired"].__setitem__(0, [1, 0]),
    "retired-not-a-list": lambda d: d.update(retired={"1": 2}),
}


@pytest.mark.parametrize("change", BAD_STATES.values(), ids=BAD_STATES.keys())
def test_a_malformed_pool_state_is_refused(change):
    pool = PromptPool(6, seed=0, rank=1, world=2, retire_after=1)
    pool.record(1, SOLVED)
    pool.record(5, FAILED)
    good = pool.state()
    check_state(good)
    bad = json.loads(json.dumps(good))
    change(bad)
    with pytest.raises(ValueError, match="pool"):
        check_state(bad)
    state = RankState(3, good["position"], random.getstate(), [1, 2, 3], pool=bad)
    with pytest.raises(ValueError, match="pool"):
        decode_rank_state(json.loads(json.dumps(encode_rank_state(state))))


def test_the_rank_file_carries_the_pool_and_older_files_still_load():
    pool = PromptPool(5, seed=2, retire_after=1)
    pool.take(4)
    pool.record(0, SOLVED)
    state = RankState(2, pool.position, random.getstate(), [0, 255], pool=pool.state())
    data = json.loads(json.dumps(encode_rank_state(state)))
    assert decode_rank_state(data) == state
    del data["pool"]  # what a run without data.pool (and rlvr before it) writes
    assert decode_rank_state(data).pool is None
    assert "pool" not in encode_rank_state(RankState(2, 4, random.getstate(), []))
    data["pool"] = {**pool.state(), "position": 3}  # the pool must be where the stream position says
    with pytest.raises(ValueError, match="pool: position 3 is not data_position 4"):
        decode_rank_state(data)


def recipe(pool=None, pass_threshold=1.0, seed=0):
    return SimpleNamespace(data=DataConfig(pool=pool or {}, seed=seed),
                           eval=SimpleNamespace(pass_threshold=pass_threshold))


def test_prompt_source_follows_the_recipe_and_the_checkpoint():
    assert isinstance(prompt_source(recipe(), 10, 0, 1, 4), PromptStream)
    fresh = prompt_source(recipe({"enabled": True, "retire_after": 3}, pass_threshold=0.5), 10, 1, 2, 0)
    assert isinstance(fresh, PromptPool)
    assert (fresh.retire_after, fresh.revisit_after, fresh.pass_threshold) == (3, 2, 0.5)
    assert prompt_source(recipe({"enabled": True, "pass_threshold": 0.8}), 10, 0, 1, 0).pass_threshold == 0.8
    fresh.take(3)
    fresh.record(fresh.shard[0], SOLVED)
    back = prompt_source(recipe({"enabled": True, "retire_after": 3}), 10, 1, 2, 3, fresh.state())
    assert back.state() == fresh.state()
    with pytest.raises(RlvrError, match="--resume: the checkpoint's prompt pool does not fit this run"):
        prompt_source(recipe({"enabled": True}), 12, 1, 2, 3, fresh.state())


# ---------------------------------------------------------------------------- in the rollout
class EchoSampler:
    """Completion text = the prompt's first id (its row), so a reward can depend on the row."""

    def __init__(self):
        self.calls: list[list[int]] = []

    def generate(self, prompt_ids, *, n, temperature, top_p, max_tokens, seed=None, logprobs=False):
        self.calls.append([p[0] for p in prompt_ids])
        return [[Completion(str(p[0]), [p[0], j], truncated=False) for j in range(n)] for p in prompt_ids]

    def load_weights(self, weights, complete=True):
        pass

    def close(self):
        pass


def rows_below_4_solved(prompts, completions, completion_ids):
    """Rows 0-3: every sample 1.0 (solved, no signal); the others 0/1 by sample."""
    return [1.0 if int(c) < 4 else float(ids[1] % 2) for c, ids in zip(completions, completion_ids)]


def make_producer(stream, groups=2, dynamic=True):
    rows = 12
    prompts = SimpleNamespace(rows=[{"i": i} for i in range(rows)],
                              prompts=[Prompt([i, 100], f"prompt {i}") for i in range(rows)])
    spec = RewardSpec("r", rows_below_4_solved, "", "test", "0", (), (), {}, False)
    return RolloutProducer(EchoSampler(), [BoundReward(spec)], prompts, stream, groups=groups,
                           sampling=SamplingConfig(num_generations=4),
                           dynamic_sampling=DynamicSamplingConfig(enabled=dynamic, max_rounds=4), seed=0)


def test_the_pool_hears_every_group_sampled_and_stops_drawing_retired_prompts():
    pool = PromptPool(12, seed=0, retire_after=1, revisit_after=None)
    prod = make_producer(pool)
    out = prod.produce(0)
    sampled = [i for call in prod.sampler.calls for i in call]
    solved = {i for i in sampled if i < 4}
    assert solved and len(sampled) > 2  # dynamic sampling drew again for the solved groups...
    assert set(pool.retired) == solved  # ...and the pool heard those groups too
    assert out.pool == {"pool_prompts": 12, "pool_active": 12 - len(solved), "pool_retired_solved": len(solved),
                        "pool_retired_failed": 0, "pool_revisited": 0, "pool_readmitted": 0}
    assert out.pool_state == pool.state() and out.stream_position == pool.position
    for step in range(1, 12):
        prod.produce(step)
    later = [i for call in prod.sampler.calls for i in call][len(sampled):]
    assert not solved & set(later)  # retired: never drawn again
    assert set(pool.retired) == {0, 1, 2, 3} and {4, 5, 6, 7, 8, 9, 10, 11} <= set(later)


def test_pool_figures_in_the_step_row():
    pool = PromptPool(12, seed=0, retire_after=1)
    out = make_producer(pool, dynamic=False).produce(0)
    sums = rollout_sums(out)
    update = dict.fromkeys(("loss", "kl", "entropy", "clip_low", "clip_high", "tokens", "groups", "zero_variance",
                            "too_few_scorable", "unscorable"), 0.0)
    twice = {k: v * 2 if k.startswith("pool_") else v for k, v in sums.items()}  # two ranks' sums
    twice.update(pool_retired_solved=3, pool_retired_failed=1, pool_active=20, pool_revisited=2)
    row = step_row(0, {**twice, **update}, world=2, reward_names=["r"], times={"step": 1.0}, lr=1.0, grad_norm=0.0)
    assert (row["pool_size"], row["pool_revisited"], row["pool_readmitted"]) == (20, 2, 0)
    assert row["pool_retired_solved_frac"] == pytest.approx(3 / 24)
    assert row["pool_retired_failed_frac"] == pytest.approx(1 / 24)
    plain = make_producer(PromptStream(12, seed=0), dynamic=False).produce(0)
    assert plain.pool is None and "pool_size" not in step_row(0, {**rollout_sums(plain), **update}, world=1,
                                                               reward_names=["r"], times={}, lr=1.0, grad_norm=0.0)
