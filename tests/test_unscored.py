"""Every run tells the truth about what its rewards could not score: a step that scored nothing
says so and, after ``trainer.max_unscored_steps`` of them, stops the run (exit 2, one line naming
the reward); ``when_unscored: skip`` trains on the rewards that did score; ``rlvr eval`` and
``rlvr score`` that scored nothing fail the same way."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import textwrap
from types import SimpleNamespace

import pytest

from conftest import RLVR, run_rlvr
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


# --------------------------------------------------------------------------- the commands, end to end

PLUGIN = '''
from rlvr import hookimpl

def even_tokens(prompts, completions, completion_ids):
    """Share of even token ids: varies between samples of a random model."""
    return [sum(t % 2 == 0 for t in ids) / max(1, len(ids)) for ids in completion_ids]

def judge_down(prompts, completions, completion_ids):
    """A shaping term whose service is down: it raises on every call."""
    raise ConnectionError("the judge is down")

def odd_only(prompts, completions, completion_ids):
    """Scores every other record."""
    return [1.0 if i % 2 else None for i in range(len(completions))]

@hookimpl
def rlvr_register_rewards(register):
    register("even_tokens", even_tokens)
    register("judge_down", judge_down)
    register("odd_only", odd_only)
'''


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    """A throwaway plugin package on PYTHONPATH, found through a real entry point."""
    root = tmp_path_factory.mktemp("plugin")
    (root / "rlvr_unscored.py").write_text(textwrap.dedent(PLUGIN))
    info = root / "rlvr_unscored-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlvr-unscored\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[rlvr]\nunscored = rlvr_unscored\n")
    return {**os.environ, "PYTHONPATH": str(root), "RLVR_LOAD_PLUGINS": "tasks,unscored"}


@pytest.mark.slow
def test_rlvr_score_that_scored_nothing_fails_and_keeps_the_output(plugin_env, tmp_path):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({"completion": f"c{i}"}) + "\n" for i in range(5)))
    dst.write_text("precious\n")
    out = run_rlvr("score", "--reward", "judge_down", "--input", src, "--output", dst, env=plugin_env)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "rlvr: error: scored none of the 5 records: reward 'judge_down' could not score 5 of 5 records "
        "(ConnectionError: the judge is down)"]
    assert dst.read_text() == "precious\n"
    out = run_rlvr("score", "--reward", "odd_only", "--input", src, "--output", dst, env=plugin_env)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines() == [  # one summary line, however many batches
        "rlvr: reward 'odd_only' could not score 3 of 5 records (returned None)",
        f"scored 2/5 records with 'odd_only' -> {dst}"]


RECIPE = """
name: tiny
task: {{name: arithmetic, options: {{size: 64}}}}
prompt: {{template: "{{{{question}}}}"}}
rewards:
  even_tokens: 1.0
  judge_down: 0.1
model: {{name: {model}}}
sampling: {{backend: hf, num_generations: 4, max_tokens: 8, dtype: float32}}
trainer: {{steps: 4, rollout_batch_size: 8, micro_batch_size: 8, lr: 1.0e-3, save_every: 10, max_unscored_steps: 2,
           samples_every: 0}}
"""


@pytest.mark.slow
def test_a_failing_shaping_reward_stops_the_run_or_is_skipped(tmp_path, tiny_model, plugin_env):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(RECIPE.format(model=tiny_model))
    stopped = subprocess.run([RLVR, "train", recipe, "--output-dir", tmp_path / "stopped"], env=plugin_env,
                             capture_output=True, text=True, timeout=600)
    assert stopped.returncode == 2, stopped.stderr[-3000:]
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("rlvr: error: no sample could be scored in 2 consecutive steps, so nothing was trained: "
                           "reward 'judge_down' could not score 8 of 8 samples (ConnectionError: the judge is down)")
    assert "Traceback" not in stopped.stderr
    assert "step 1: no sample could be scored: reward 'judge_down'" in stopped.stderr
    rows = [json.loads(line) for line in (tmp_path / "stopped" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["optimizer_steps"], r["unscorable"]) for r in rows] == [(1, 0, 8), (2, 0, 8)]
    assert not (tmp_path / "stopped" / "final").exists()

    # skip: the rewards that scored, as TRL sums them; the failures are still said once a step
    skipped = subprocess.run([RLVR, "train", recipe, "--output-dir", tmp_path / "skipped", "--set",
                              "when_unscored=skip", "--set", "trainer.steps=2"],
                             env=plugin_env, capture_output=True, text=True, timeout=600)
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "skipped" / "metrics.jsonl").read_text().splitlines()]
    assert [r["unscorable"] for r in rows] == [0, 0] and all(r["optimizer_steps"] > 0 for r in rows), rows
    assert all(r["trained_tokens"] > 0 for r in rows)
    said = [line for line in skipped.stderr.splitlines() if "could not score" in line]
    assert said == [f"step {s}: reward 'judge_down' could not score 8 of 8 samples (ConnectionError: the judge is "
                    "down)" for s in (1, 2)]
