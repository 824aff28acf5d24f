"""Every run tells the truth about what its rewards could not score: a step that scored nothing
says so and, after ``trainer.max_unscored_steps`` of them, stops the run (exit 2, one line naming
the reward); ``when_unscored: skip`` trains on the rewards that did score; ``rlvr eval`` and
``rlvr score`` that scored nothing fail the same way."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from helpers import RLVR, run_rlvr
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

def down_on_rank1(prompts, completions, completion_ids):
    """Raises on the second rank of a torchrun launch only."""
    import os

    if os.environ.get("RANK") == "1":
        raise ConnectionError("the judge is down on rank 1")
    return [0.0] * len(completions)

def odd_only(prompts, completions, completion_ids):
    """Scores every other record."""
    return [1.0 if i % 2 else None for i in range(len(completions))]

@hookimpl
def rlvr_register_rewards(register):
    register("even_tokens", even_tokens)
    register("judge_down", judge_down)
    register("odd_only", odd_only)
    register("down_on_rank1", down_on_rank1)
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


def train_two_ranks(recipe, out, env, port: int, *sets: str) -> subprocess.CompletedProcess:
    env = {**env, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           "-m", "rlvr.cli", "train", str(recipe), "--output-dir", str(out)] + [a for kv in sets for a in ("--set", kv)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_ranks_decide_together_from_the_reduced_counts(tmp_path, tiny_model, plugin_env):
    """The ranks stop at the same step when none scored anything; a rank that scored nothing while
    another did is no reason to stop (it would leave the other waiting in a collective)."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(RECIPE.format(model=tiny_model).replace("micro_batch_size: 8", "micro_batch_size: 4"))
    stopped = train_two_ranks(recipe, tmp_path / "stopped", plugin_env, 29531)
    assert stopped.returncode != 0  # torchrun ends the other rank once one has exited
    assert "rlvr: error: no sample could be scored in 2 consecutive steps" in stopped.stderr, stopped.stderr[-4000:]
    rows = [json.loads(line) for line in (tmp_path / "stopped" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["unscorable"]) for r in rows] == [(1, 8), (2, 8)]

    recipe.write_text(recipe.read_text().replace("judge_down: 0.1", "down_on_rank1: 0.1"))
    one = train_two_ranks(recipe, tmp_path / "one", plugin_env, 29532, "trainer.steps=3")
    assert one.returncode == 0, one.stderr[-4000:]
    rows = [json.loads(line) for line in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["unscorable"]) for r in rows] == [(1, 4), (2, 4), (3, 4)]  # rank 1's 4 of 8


REDUCE = '''
import json, sys, torch.distributed as dist
from rlvr.models.distributed import reduce_sums
from rlvr.runs.metrics import reward_metrics
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank, world_size=2)
same = reduce_sums({"a": 1.0 + rank, "len_max": 3.0 * rank})
# rank 1 trained nothing: the figures of the micro-batches it did not run are missing there
mine = {"a": 1.0, "is_tokens": 5.0, "is_weight_max": 1.5} if rank == 0 else {"a": 2.0, "env/x": 4.0}
# a reward's own metrics (rlvr.rewards.runner.metric_sums): rank 0's records were no cache hits
judge = "reward_metric/judge/"
costs = {judge + "seconds_mean": 2.0, judge + "seconds_mean/n": 1.0, judge + "seconds_max": 2.0}
if rank == 1:
    costs = {judge + "seconds_mean": 7.0, judge + "seconds_mean/n": 2.0, judge + "seconds_max": 4.0,
             judge + "cache_hits": 4.0}
print(json.dumps([same, reduce_sums(mine), reward_metrics(reduce_sums(costs))]))
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_reduce_sums_matches_names_when_a_rank_lacks_some(tmp_path):
    """A rank that had nothing to train lacks its importance-sampling sums: the reduction must not
    abort (gloo: "Received data size doesn't match expected size"), and every rank gets the same."""
    script = tmp_path / "reduce.py"
    script.write_text(REDUCE)
    ranks = [subprocess.Popen([sys.executable, str(script), str(rank), "29533"], stdout=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0]
    assert outs[0] == outs[1] == [{"a": 3.0, "len_max": 3.0},
                                  {"a": 3.0, "env/x": 4.0, "is_tokens": 5.0, "is_weight_max": 1.5},
                                  {"reward/judge/cache_hits": 4.0, "reward/judge/seconds_max": 4.0,
                                   "reward/judge/seconds_mean": 3.0}]


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
