"""Every run tells the truth about what its rewards could not score: a step that scored nothing
says so and, after ``trainer.max_unscored_steps`` of them, stops the run (exit 2, one line naming
the reward); ``when_unscored: skip`` trains on the rewards that did score; ``rlvr eval`` and
``rlvr score`` that scored nothing fail the same way."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from rlvr import RlvrError
from rlvr.host.registry import RewardSpec
from rlvr.runs.metrics import UnscoredSteps


def test_a_run_of_steps_that_scored_nothing_stops_the_run(caplog):
    steps = UnscoredSteps(limit=2)
    with caplog.at_level(logging.WARNING, logger="rlvr.training"):
        assert steps.update(1, 8, "", "") is None  # nothing failed: nothing said
        assert steps.update(2, 0, "reward 'b' could not score 8 of 8 samples (ValueError: down)",
                            "reward 'b' could not score 8 of 8 samples (ValueError: down)") == (
            "step 2: no sample could be scored: reward 'b' could not score 8 of 8 samples (ValueError: down)")
        steps.update(3, 4, "reward 'b' could not score 4 of 8 samples (x)", "")  # a step that scored resets
        steps.update(4, 0, "", "reward 'b' could not score 8 of 8 samples (x)")
        with pytest.raises(RlvrError, match=r"^no sample could be scored in 2 consecutive steps, so nothing was "
                                            r"trained: reward 'b' could not score 8 of 8 samples \(x\)\. Fix"):
            steps.update(5, 0, "", "reward 'b' could not score 8 of 8 samples (x)")
    assert [r.getMessage()[:7] for r in caplog.records] == ["step 2:", "step 3:", "step 4:", "step 5:"]
    never = UnscoredSteps(limit=0)
    for step in range(1, 20):
        never.update(step, 0, "", "")


def evaluation(reward, require_scores: bool):
    from rlvr.evaluation.evaluate import evaluate_with
    from rlvr.recipe.spec import Recipe
    from rlvr.rewards.runner import BoundReward
    from rlvr.sampling.prompts import Prompt

    class Echo:
        def generate(self, prompt_ids, *, n, **options):
            return [[SimpleNamespace(text="7", token_ids=[1]) for _ in range(n)] for _ in prompt_ids]

    rows = [{"question": "a"}, {"question": "b"}]
    prompts = [Prompt([i + 1], r["question"]) for i, r in enumerate(rows)]
    recipe = Recipe.model_validate({"name": "t", "task": "arithmetic", "prompt": {"template": "{{question}}"},
                                    "rewards": {reward.__name__: 1.0}, "eval": {"k": [2], "temperature": 1.0}})
    spec = RewardSpec(reward.__name__, reward, "", "test", "0", (), (), {}, False)
    return evaluate_with(recipe, [BoundReward(spec)], Echo(), SimpleNamespace(rows=rows, prompts=prompts, dropped=0),
                         require_scores=require_scores)


def judge_down(prompts, completions, completion_ids):
    raise ConnectionError("the judge is down")


def test_an_evaluation_that_scored_nothing_fails_naming_the_reward(caplog):
    with pytest.raises(RlvrError, match=r"^evaluation scored none of its 4 samples with 'judge_down': reward "
                                        r"'judge_down' could not score 4 of 4 samples \(ConnectionError: the judge is down\)$"):
        evaluation(judge_down, require_scores=True)
    assert not caplog.records  # the error says it all
    with caplog.at_level(logging.WARNING, logger="rlvr.evaluation"):  # during training: said, not fatal
        result, _ = evaluation(judge_down, require_scores=False)
    assert result["unscorable"] == 4 and result["accuracy"] == 0.0
    assert [r.getMessage() for r in caplog.records] == [
        "evaluation: reward 'judge_down' could not score 4 of 4 samples (ConnectionError: the judge is down)"]

    def half(prompts, completions, completion_ids):
        return [1.0, None] * (len(completions) // 2)

    assert evaluation(half, require_scores=True)[0]["unscorable"] == 2  # scored some: a result


def test_when_unscored_is_the_recipe_s_unless_a_reward_entry_sets_its_own():
    from rlvr.recipe.spec import Recipe
    from rlvr.rewards.runner import bind_rewards

    class Registry:
        def reward(self, name):
            return RewardSpec(name, judge_down, "", "test", "0", (), (), {}, False)

    recipe = Recipe.model_validate({"name": "t", "task": "arithmetic", "when_unscored": "zero", "rewards": {
        "a": 1.0, "b": {"weight": 0.1, "when_unscored": "skip"}}})
    bound = bind_rewards(recipe.rewards, Registry(), when_unscored=recipe.when_unscored)
    assert [(r.name, r.when_unscored) for r in bound] == [("a", "zero"), ("b", "skip")]
    assert [r.when_unscored for r in bind_rewards(recipe.rewards, Registry())] == ["void", "skip"]
    assert Recipe.model_validate({"name": "t", "task": "arithmetic", "rewards": {"a": 1.0}}).when_unscored == "void"
    with pytest.raises(Exception, match="when_unscored"):
        Recipe.model_validate({"name": "t", "task": "arithmetic", "rewards": {"a": {"when_unscored": "nansum"}}})


def test_steps_whose_environment_failed_name_it_and_its_reason():
    """Every episode's environment failed, no reward at fault: the step's line and the stop name
    the environment, its first reason and env_errors (they said 'every sample was left unscored'),
    and the values a failed episode's rewards lost are not blamed on them."""
    from rlvr.rewards.runner import BoundReward, Unscored, score_batch
    from rlvr.sampling.episodes import unscore_failed

    def ok(prompts, completions, completion_ids):
        return [1.0] * len(completions)

    def picky(prompts, completions, completion_ids):
        return [None if c == "c" else 1.0 for c in completions]

    rewards = [BoundReward(RewardSpec(f.__name__, f, "", "test", "0", (), (), {}, False)) for f in (ok, picky)]
    rows = [{"env_state": {"error": "RuntimeError: the tool crashed"}}, {"env_state": {"error": "OSError: gone"}}]
    scored = score_batch(rewards, ["p", "p"], ["a", "b"], [[1], [2]], rows)
    unscore_failed(scored, rows, ["ok"])  # as an evaluation does for its correctness reward
    unscored = Unscored().add(scored.unscored())
    said = "the environment failed in 2 of 2 samples (env_errors; the first: RuntimeError: the tool crashed)"
    assert unscored.line() == unscored.line(["picky"]) == said and not unscored.counts
    with pytest.raises(RlvrError, match=r"so nothing was trained: " + said.replace("(", r"\(").replace(")", r"\)")
                       + r"\. Fix the reward or environment that failed"):
        UnscoredSteps(limit=1).update(1, 0, unscored.line(), unscored.line(["ok", "picky"]))
    rows.append({"env_state": {}})  # a third episode whose environment was fine but a reward failed
    scored = score_batch(rewards, ["p"] * 3, ["a", "b", "c"], [[1], [2], [3]], rows)
    unscore_failed(scored, rows)
    assert scored.unscored().line() == ("the environment failed in 2 of 3 samples (env_errors; the first: "
                                        "RuntimeError: the tool crashed); reward 'picky' could not score 1 of 3 "
                                        "samples (returned None)")
